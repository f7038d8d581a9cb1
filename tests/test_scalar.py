"""min_sum (exact optimum of time + lam * memory) against brute force and the exact frontier."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensoropt_py as to
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier, evaluate, min_sum, track
from tensoropt_py.engine.random_graphs import (random_chain, random_cyclic_graph, random_layered_dag, random_repeated_blocks,
                                               random_small_dag)
from tensoropt_py.errors import InfeasibleError, InvalidInputError
from tensoropt_py.graph import zoo

LAMS = [0.0, 1e-12, 1e-9, 1e-6, 1e-3, 1.0, np.inf]


def _frontier_min(fr, lam):
    return float(fr.memory.min()) if np.isinf(lam) else float((fr.time + lam * fr.memory).min())


def _check(cg, opt, lam):
    m, t = evaluate(cg, opt.choices, opt.edge_choices)
    assert m[0] == pytest.approx(opt.memory, rel=1e-12) and t[0] == pytest.approx(opt.time, rel=1e-12)
    assert opt.lam == lam


@pytest.mark.parametrize("seed", range(30))
def test_min_sum_equals_brute_force(seed):
    if seed % 3 == 0:
        cg = random_small_dag(seed=seed)
    elif seed % 3 == 1:
        cg = random_cyclic_graph(seed=seed, forbidden_prob=0.05)
    else:
        cg = random_cyclic_graph(n_nodes=6, max_k=4, edge_prob=0.6, seed=seed)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        with pytest.raises(InfeasibleError):
            min_sum(cg, 1.0)
        return
    for lam in LAMS:
        opt = min_sum(cg, lam)
        _check(cg, opt, lam)
        assert opt.value == pytest.approx(_frontier_min(bf, lam), rel=1e-12)


@pytest.mark.parametrize("method", ["ldp", "elimination"])
@pytest.mark.parametrize("seed", range(6))
def test_min_sum_equals_exact_frontier_min(method, seed):
    cg = random_layered_dag(5, 2, 4, layouts=2, options=2, seed=seed) if seed % 2 else random_chain(8, 5, layouts=3, seed=seed)
    fr = track(cg, method=method, exact=True)
    for lam in LAMS:
        assert min_sum(cg, lam).value == pytest.approx(_frontier_min(fr, lam), rel=1e-9)


def _fastest_of_brute_force(cg):
    """(time, memory) of the smallest of the fastest strategies, by enumeration."""
    bf = brute_force_frontier(cg)
    i = int(np.argmin(bf.time))  # a frontier holds one point of least time: the least memory of those
    return float(bf.time[i]), float(bf.memory[i])


def _tied_graph(seed):
    """Integer costs (two of three seeds): many strategies share the least time, with other
    memories (and edge options of equal time and other memories)."""
    if seed % 3 == 0:
        return random_chain(6, 4, layouts=2 if seed % 2 else None, options=2, seed=seed, integer_costs=True)
    if seed % 3 == 1:
        return random_cyclic_graph(n_nodes=6, max_k=4, edge_prob=0.6, seed=seed)
    return random_layered_dag(3, 2, 3, layouts=2, options=2, seed=seed, integer_costs=True)


@pytest.mark.parametrize("seed", range(30))
def test_the_fastest_optimum_is_the_smallest_of_the_fastest_strategies(seed):
    # the strategies that share the least time differ in memory, which the least time alone
    # does not tell apart
    cg = _tied_graph(seed)
    opt = min_sum(cg, 0.0)
    _check(cg, opt, 0.0)
    assert (opt.time, opt.memory) == _fastest_of_brute_force(cg)


@pytest.mark.parametrize("seed", range(30))
def test_the_weighted_solve_of_the_smallest_of_the_fastest_equals_brute_force(seed, monkeypatch):
    # past the lexicographic solve's work, one solve of time + a tiny weight of memory: its
    # strategy, accepted where it is as fast as the fastest found, must hold brute force's
    # least memory among the fastest strategies
    import importlib

    scalar_mod = importlib.import_module("tensoropt_py.engine.scalar")
    cg = _tied_graph(seed)
    fastest, _, _ = scalar_mod._min_sum_within(cg, 0.0, 10**6, 10**6, None)
    lexicographic = scalar_mod._smallest_of_fastest(cg, fastest, 10**6, np.inf, None)
    weighted = scalar_mod._smallest_of_fastest(cg, fastest, 10**6, 0.0, None)
    for opt in (lexicographic, weighted):
        _check(cg, opt, 0.0)
        assert (opt.time, opt.memory) == _fastest_of_brute_force(cg)
    # memory weighed far above time: a slower strategy of less memory wins, and nothing is proven
    monkeypatch.setattr(scalar_mod, "_TIE_WEIGHT", 1e3)
    heavy = scalar_mod._smallest_of_fastest(cg, fastest, 10**6, 0.0, None)
    bf = brute_force_frontier(cg)
    if bf.time[0] > bf.time[-1]:  # the least memory costs time
        assert heavy is None
    else:
        assert (heavy.time, heavy.memory) == _fastest_of_brute_force(cg)


def test_ties_of_the_least_time_are_found_and_only_where_they_are():
    import importlib

    scalar_mod = importlib.import_module("tensoropt_py.engine.scalar")
    found = []
    for seed in range(12):
        for integer_costs in (False, True):
            cg = random_chain(6, 4, layouts=2, options=2, seed=seed, integer_costs=integer_costs)
            opt, tied, _ = scalar_mod._min_sum_within(cg, 0.0, 10**6, 10**6, None)
            if not integer_costs:  # costs drawn from a continuum: one fastest strategy
                assert not tied
            elif not tied:  # then no other strategy is as fast with less memory
                assert (opt.time, opt.memory) == _fastest_of_brute_force(cg)
            found.append(tied)
    assert any(found)


@pytest.mark.parametrize("model", ["mlp", "small_transformer"])
def test_min_sum_equals_frontier_on_zoo_model(model):
    g = getattr(zoo, model)()
    cg = build_cost_graph(g, to.Cluster.preset("v100-2x8"), 4).cost_graph
    fr = track(cg, exact=True)
    # lam in seconds per byte: from "memory is free" to "memory dominates"
    for lam in [0.0, 1e-13, 1e-11, 1e-10, 1e-9, np.inf]:
        opt = min_sum(cg, lam)
        _check(cg, opt, lam)
        assert opt.value == pytest.approx(_frontier_min(fr, lam), rel=1e-9)


def test_min_sum_bad_input_and_too_wide():
    cg = random_chain(3, 2, seed=0)
    for bad in (-1.0, float("nan"), "x"):
        with pytest.raises(InvalidInputError, match="lam must be a float >= 0"):
            min_sum(cg, bad)
    with pytest.raises(InvalidInputError, match="CostGraph"):
        min_sum("graph", 0.0)
    # a 4-clique of 10-config nodes needs a 1000-entry factor
    n = [np.ones((10, 2))] * 4
    edges = [(a, b, np.zeros((10, 10, 2))) for a in range(4) for b in range(a + 1, 4)]
    with pytest.raises(InvalidInputError, match="too wide"):
        min_sum(CostGraph(n, edges), 0.0, max_entries=50)
    assert min_sum(CostGraph(n, edges), 0.0).value == pytest.approx(4.0)
    # its eliminations sum 10 terms for each entry of the factors they build: 10 * (1000 + 100 + 10 + 1)
    with pytest.raises(InvalidInputError, match="more than max_work"):
        min_sum(CostGraph(n, edges), 0.0, max_work=11109)
    assert min_sum(CostGraph(n, edges), 0.0, max_work=11110).value == pytest.approx(4.0)
    for bad in (0, -1.0, "many", True):
        with pytest.raises(InvalidInputError, match="max_work must be"):
            min_sum(cg, 0.0, max_work=bad)


@pytest.mark.parametrize("seed", range(6))
def test_default_track_contains_both_ends(seed):
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    fast, small = min_sum(cg, 0.0), min_sum(cg, np.inf)
    fr = track(cg, max_merged_configs=4, epsilon=0.05)
    assert fr.n_heuristic > 0 or fr.epsilon > 0
    assert fr.time.min() == pytest.approx(fast.time, rel=1e-12)
    assert fr.memory.min() == pytest.approx(small.memory, rel=1e-12)
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)
    off = track(cg, max_merged_configs=4, epsilon=0.05, anchors=False)
    assert off.stats["anchors"] == "off"
    assert off.time.min() >= fast.time * (1 - 1e-12)
    with pytest.raises(InvalidInputError, match="anchors must be"):
        track(cg, anchors="yes")


def _wait_until_solving(beside):
    """Wait (at most 60 s) until an anchors' process has greeted: it has its graph and solves."""
    import select

    select.select([beside._child.stdout], [], [], 60)


def _after_each_start(monkeypatch, track_mod, then):
    """Hand each anchors' process started for a run to ``then`` as soon as it starts. Tests
    that need the child's answers pass ``_wait_until_solving``: these graphs track in less time
    than an interpreter takes to start, and a child not solving yet when first asked is ended
    (the run would solve its anchors after it)."""
    start = track_mod._AnchorsProcess.__init__

    def start_then(self, *args):
        start(self, *args)
        then(self)

    monkeypatch.setattr(track_mod._AnchorsProcess, "__init__", start_then)


@pytest.mark.parametrize("beside_in", ["thread", "process", "default"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("epsilon", [0.05, 0.0])
def test_anchors_solved_beside_the_run_are_the_exact_ends(seed, epsilon, beside_in, monkeypatch):
    # with two threads the anchors are solved beside the run while it goes on (epsilon > 0:
    # from the start; epsilon 0: from the first heuristic elimination), the smallest once the
    # first heuristic run has its least memory: the same ends, exact. By default a graph this
    # small solves them after the run (an interpreter would take longer to start)
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", beside_in != "thread")
    if beside_in == "process":
        monkeypatch.setattr(track_mod, "_PROCESS_MIN_LEAF_BYTES", 0)
        _after_each_start(monkeypatch, track_mod, _wait_until_solving)
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    fast, small = min_sum(cg, 0.0), min_sum(cg, np.inf)
    fr = track(cg, max_merged_configs=4, epsilon=epsilon, threads=2)
    if beside_in == "default" or (fr.n_heuristic == 0 and fr.epsilon == 0):
        assert "anchors_beside" not in fr.stats
    else:
        assert fr.stats["anchors_beside_in"] == beside_in
        assert fr.stats["anchors_beside"] == (("fastest", "smallest") if fr.stats.get("heuristic_runs") == 2 else ("fastest",))
        assert fr.stats["anchor_background_seconds"] > 0
    if fr.n_heuristic == 0 and fr.epsilon == 0:
        return
    assert fr.time.min() == pytest.approx(fast.time, rel=1e-12)
    assert fr.memory.min() == pytest.approx(small.memory, rel=1e-12)
    assert fr.time[np.argmin(fr.memory)] == pytest.approx(small.time, rel=1e-12)
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)
    monkeypatch.setattr(track_mod, "_BACKGROUND_ANCHORS", False)
    after = track(cg, max_merged_configs=4, epsilon=epsilon, threads=2)
    assert "anchors_beside" not in after.stats
    np.testing.assert_allclose(after.memory, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(after.time, fr.time, rtol=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_the_relaxations_own_strategies_join_where_the_optima_are_out_of_reach(seed, monkeypatch):
    # every exact optimum refused and the descents switched off: the ends must still be at
    # least as good as the relaxation's own best strategies (each node at its config of least
    # bound), which join the frontier
    import importlib

    from tensoropt_py.engine.screen import relaxation_bounds

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_OPTIMUM_MAX_WORK", 1)

    def no_descent(cg, mem, tim, ch, ech, ends, bound, background=None):
        at = [track_mod._end(mem, tim, lam) for lam in ends]
        return ch[at], ech[at], []

    monkeypatch.setattr(track_mod, "_descents", no_descent)
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    fr = track(cg, max_merged_configs=2, epsilon=0.05, threads=1)
    assert "relaxation_points" in fr.stats and fr.stats["anchors"].startswith("skipped")
    rb = relaxation_bounds(cg, [0.0])
    for row, lam in ((0, 0.0), (-1, np.inf)):
        choices = np.array([int(np.argmin(b[row])) for b in rb.bounds])
        # each edge at its best option for lam given its ends' configs
        edge_choices = np.zeros(cg.n_edges, dtype=np.int64)
        for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
            options = tab[smap[choices[u]], dmap[choices[v]]]
            edge_choices[e] = np.lexsort((options[:, 0], options[:, 1]) if lam == 0 else (options[:, 1], options[:, 0]))[0]
        m, t = evaluate(cg, choices, edge_choices)
        if lam == 0:
            assert fr.time.min() <= t[0] * (1 + 1e-12)
        else:
            assert fr.memory.min() <= m[0] * (1 + 1e-12)
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)


@pytest.mark.parametrize("beside_in", ["thread", "process"])
@pytest.mark.parametrize("seed", range(16))
def test_optima_solved_beside_a_run_equal_the_whole_graph_optima(seed, beside_in):
    # screened without a frontier (the fastest: by the relaxation's own best strategy; the
    # smallest: by achievable memories handed over), both must be the whole graph's optima,
    # on the run's thread and in a process of their own
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    cg = random_cyclic_graph(seed=seed, forbidden_prob=0.05) if seed % 2 else random_layered_dag(
        4, 3, 3, layouts=2, options=2, skip_prob=0.5, seed=seed)
    scale = [1e6, 1.0] if seed % 4 < 2 else [1.0, 1.0]  # memory in bytes and time in seconds, or alike
    cg = CostGraph([c * scale for c in cg.node_costs],
                   [(u, v, LayoutEdge(sm, dm, tab * scale)) for u, v, sm, dm, tab in cg._norm])
    try:
        fast, small = min_sum(cg, 0.0), min_sum(cg, np.inf)
    except InfeasibleError:
        return
    rng = np.random.default_rng(seed)
    ch = np.stack([rng.integers(0, k, size=40) for k in cg.n_configs], axis=1)
    mem, _ = evaluate(cg, ch, np.zeros((40, cg.n_edges), dtype=np.int64))
    solver = track_mod._BackgroundOptima if beside_in == "thread" else track_mod._AnchorsProcess
    beside = solver(cg, 1 << 30, threads=2, entries_after=track_mod._entries(1 << 30))
    if beside_in == "process":
        _wait_until_solving(beside)
    try:
        beside.smallest_below(np.append(mem[np.isfinite(mem)], small.memory))
        fastest = beside.optimum(0.0)
        m, t = evaluate(cg, fastest.choices, fastest.edge_choices)
        assert (m[0], t[0]) == (pytest.approx(fast.memory, rel=1e-12), pytest.approx(fast.time, rel=1e-12))
        m, t = evaluate(cg, *beside.optimum(np.inf)[:2])
        assert (m[0], t[0]) == (pytest.approx(small.memory, rel=1e-12), pytest.approx(small.time, rel=1e-12))
        assert beside.used == ["fastest", "smallest"]
    finally:
        beside.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU priorities per thread are Linux's")
def test_the_anchors_thread_yields_to_the_run_and_only_it():
    # the anchors' thread runs at the least priority; the run (this thread) keeps its own
    import importlib
    import os
    import threading

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    beside = track_mod._BackgroundOptima(random_chain(4, 3, seed=0), 1 << 30, threads=2,
                                         entries_after=track_mod._entries(1 << 30))
    try:
        theirs = beside._pool.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
    finally:
        beside.close(wait=True)
    assert theirs == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours < 19


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the child's priority in /proc")
def test_the_anchors_process_runs_at_the_least_priority_and_ends_with_close():
    import importlib
    import os
    import signal

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    beside = track_mod._AnchorsProcess(random_chain(4, 3, seed=0), 1 << 30, threads=2,
                                       entries_after=track_mod._entries(1 << 30))
    _wait_until_solving(beside)
    try:
        assert beside.bounds() is not None and beside.bounds() is beside.bounds()  # one object: _optima compares
        with open(f"/proc/{beside._child.pid}/stat") as f:
            nice = int(f.read().rsplit(")", 1)[1].split()[16])  # field 19 of stat
        assert nice == 19
        with pytest.raises(AttributeError, match="no_such_job"):  # the child's errors reach the caller
            beside._ask("no_such_job")
        assert beside.optimum(0.0) is not None
        os.kill(beside._child.pid, signal.SIGSTOP)  # starved from here on: a call gets no answer
        assert beside.optimum(0.0) is None and "no answer: starved" in beside.ended
    finally:
        beside.close()
    assert beside._child.returncode is not None  # ended, and reaped
    assert beside.optimum(0.0) is None and beside.refusal(0.0) is None and beside.window_bound(0.0) == (False, None)
    assert beside.used == ["fastest"] and beside.seconds > 0  # as last reported


@pytest.mark.parametrize("child", ["answers", "ends at once", "not solving yet", "stopped"])
@pytest.mark.parametrize("seed", range(4))
def test_a_frontier_is_the_same_whether_its_anchors_run_in_a_process_or_not(seed, child, monkeypatch, tmp_path):
    # the anchors beside the run in a process (here for any size of graph), against on the
    # run's thread; a child that ends before answering, is not solving yet when the run asks
    # (here a `sys.executable` that is not Python, which never greets) or is starved once
    # solving (here stopped) has solved nothing: the run solves its anchors after it, and the
    # frontier is the same again
    import importlib
    import shutil

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    kwargs = dict(max_merged_configs=2, epsilon=0.05, threads=2)
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)
    on_thread = track(cg, **kwargs)
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", True)
    monkeypatch.setattr(track_mod, "_PROCESS_MIN_LEAF_BYTES", 0)
    if child == "answers":
        _after_each_start(monkeypatch, track_mod, _wait_until_solving)
    elif child == "ends at once":
        if shutil.which("true") is None:
            pytest.skip("no `true` program to stand for a child that ends")
        monkeypatch.setattr(sys, "executable", shutil.which("true"))
        _after_each_start(monkeypatch, track_mod, lambda beside: beside._child.wait())
    elif child == "not solving yet":
        if shutil.which("sleep") is None or sys.platform.startswith("win"):
            pytest.skip("no `sleep` program to stand for a child that never greets")
        program = tmp_path / "not-python"
        program.write_text("#!/bin/sh\nexec sleep 600\n")
        program.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(program))
    elif child == "stopped":
        if not sys.platform.startswith("linux"):
            pytest.skip("starvation is read from /proc")
        import os
        import signal

        def solving_then_stopped(beside):
            _wait_until_solving(beside)
            os.kill(beside._child.pid, signal.SIGSTOP)  # gets no CPU from here on

        _after_each_start(monkeypatch, track_mod, solving_then_stopped)
    in_process = track(cg, **kwargs)
    np.testing.assert_array_equal(in_process.memory, on_thread.memory)
    np.testing.assert_array_equal(in_process.time, on_thread.time)
    assert in_process.stats.get("end_gaps") == on_thread.stats.get("end_gaps")
    assert (on_thread.stats["anchors_beside_in"], in_process.stats["anchors_beside_in"]) == ("thread", "process")
    if child == "answers":
        assert in_process.stats["anchors_beside"] == on_thread.stats["anchors_beside"] != ()
        assert "anchors_beside_ended" not in in_process.stats
    else:
        assert in_process.stats["anchors_beside"] == ()
        assert "ended early" in in_process.stats["anchors_beside_ended"]
        why = {"ends at once": "its interpreter did not start", "not solving yet": "not solving yet when first asked",
               "stopped": "no answer: starved"}[child]
        assert why in in_process.stats["anchors_beside_ended"]


def _asleep(job, woken):
    """The anchors' ``job`` once ``woken`` is set: it takes no CPU until then (at most 30 s, so
    that a test whose starvation check fails fails instead of hanging)."""

    def asleep(self):
        woken.wait(30)
        return job(self)

    return asleep


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starvation is read from /proc")
def test_a_starved_anchors_thread_is_given_up_and_its_share_counted_held(monkeypatch):
    # a job that gets no CPU (here waiting for an event) is waited for in checks and given up:
    # the calls answer what a thread that solved nothing answers, without waiting for the job
    # again, and its share is counted held
    import importlib
    import threading

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_ANCHORS_CHECK_SECONDS", 0.1)
    woken = threading.Event()
    monkeypatch.setattr(track_mod._BackgroundOptima, "_relaxation",
                        _asleep(track_mod._BackgroundOptima._relaxation, woken))
    beside = track_mod._BackgroundOptima(random_chain(4, 3, seed=0), 1 << 20, threads=2,
                                         entries_after=track_mod._entries(1 << 30))
    try:
        assert beside.held_bytes == 0
        assert beside.bounds() is None and "no answer: starved" in beside.ended
        assert beside.held_bytes == 1 << 20
        assert beside.optimum(0.0) is None and beside.refusal(0.0) is None
        assert beside.window_bound(0.0) == (False, None)
        assert not beside._bounds.done()  # still asleep: none of them waited for it
    finally:
        woken.set()
        beside.close(wait=True)
    assert beside.used == []
    # unwatched (in an anchors' process, whose parent watches it), the same job is waited for
    beside = track_mod._BackgroundOptima(random_chain(4, 3, seed=0), 1 << 20, threads=2,
                                         entries_after=track_mod._entries(1 << 30), watch=False)
    try:
        assert beside.bounds() is not None and beside.ended is None
    finally:
        beside.close(wait=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="starvation is read from /proc")
@pytest.mark.parametrize("seed", range(4))
def test_a_frontier_is_the_same_where_its_anchors_thread_is_starved(seed, monkeypatch):
    # the anchors' thread asleep (no CPU) once its bounds are solved: the run gives it up and
    # solves the fastest and smallest itself, within max_memory less the share the thread
    # may still hold, and the frontier is the one its answers give
    import importlib
    import threading

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    kwargs = dict(max_merged_configs=2, epsilon=0.05, threads=2)
    answered = track(cg, **kwargs)
    assert "anchors_beside_ended" not in answered.stats and answered.stats["anchors_beside"] != ()
    monkeypatch.setattr(track_mod, "_ANCHORS_CHECK_SECONDS", 0.1)
    woken = threading.Event()
    monkeypatch.setattr(track_mod._BackgroundOptima, "_fastest", _asleep(track_mod._BackgroundOptima._fastest, woken))
    entries = []
    screened = track_mod._screened_optimum

    def recorded(cg, rb, lam, limit, n_entries, *args):
        entries.append(n_entries)
        return screened(cg, rb, lam, limit, n_entries, *args)

    monkeypatch.setattr(track_mod, "_screened_optimum", recorded)
    max_memory = 1 << 28
    try:
        starved = track(cg, max_memory=max_memory, **kwargs)
    finally:
        woken.set()
    np.testing.assert_array_equal(starved.memory, answered.memory)
    np.testing.assert_array_equal(starved.time, answered.time)
    assert starved.stats.get("end_gaps") == answered.stats.get("end_gaps")
    assert starved.stats["anchors_beside"] == ()
    assert "no answer: starved" in starved.stats["anchors_beside_ended"]
    # the run's solves leave out the share the thread may still hold (the thread's own, 1 << 25
    # bytes, are within it)
    room = track_mod._entries(max_memory - max_memory // track_mod._BACKGROUND_SHARE)
    assert room in entries and max(entries) == room


def test_the_anchors_are_left_to_after_the_run_where_a_process_would_not_fit_their_share(monkeypatch):
    # a share too small for an interpreter, or a graph too small to gain from one: none beside
    # the run (not on a thread, which the run would share its lock with); on a thread only
    # where _ANCHORS_IN_PROCESS says so
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    cg = random_chain(4, 3, seed=0)
    monkeypatch.setattr(track_mod, "_PROCESS_MIN_LEAF_BYTES", 0)
    assert track_mod._anchors_beside(cg, 64 << 20, 2, track_mod._entries(1 << 30)) is None
    beside = track_mod._anchors_beside(cg, 1 << 30, 2, track_mod._entries(1 << 30))
    beside.close()
    assert type(beside) is track_mod._AnchorsProcess
    monkeypatch.setattr(track_mod, "_PROCESS_MIN_LEAF_BYTES", track_mod.leaf_bytes(cg) + 1)  # too small a graph
    assert track_mod._anchors_beside(cg, 1 << 30, 2, track_mod._entries(1 << 30)) is None
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)
    for budget in (64 << 20, 1 << 30):
        beside = track_mod._anchors_beside(cg, budget, 2, track_mod._entries(1 << 30))
        beside.close()
        assert type(beside) is track_mod._BackgroundOptima


def test_anchors_beside_the_run_left_to_the_end_where_their_share_is_too_small(monkeypatch):
    # a share of max_memory too small for the bounds: the thread solves nothing, the ends are
    # solved after the run, exact all the same
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)  # a process would not start in that share
    monkeypatch.setattr(track_mod, "_BACKGROUND_SHARE", 1 << 40)
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=1)
    fr = track(cg, max_merged_configs=4, epsilon=0.05, threads=2)
    assert fr.stats["anchors_beside"] == ()
    assert fr.time.min() == pytest.approx(min_sum(cg, 0.0).time, rel=1e-12)
    assert fr.memory.min() == pytest.approx(min_sum(cg, np.inf).memory, rel=1e-12)


@given(st.integers(0, 10**6), st.integers(1, 6), st.integers(1, 6), st.booleans())
@settings(max_examples=200, deadline=None)
def test_the_compiled_min_of_sums_equals_its_reference_bit_for_bit(seed, ndim, n_factors, views):
    # random shapes, broadcast axes, +inf entries, magnitudes from 1e-3 to 1e9 (so that the order
    # of the sums shows), and strided views as well as contiguous arrays
    from tensoropt_py.engine.scalar import min_of_sums, min_of_sums_reference

    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 7, size=ndim))
    factors = []
    for _ in range(n_factors):
        own = tuple(n if rng.random() < 0.6 else 1 for n in shape)
        a = rng.random(own) * 10.0 ** rng.integers(-3, 10)
        a[rng.random(own) < 0.05] = np.inf
        if views:  # the same values: every other element, backwards, of an array twice as long
            wide = np.zeros(own[:-1] + (2 * own[-1],))
            wide[..., ::2] = a[..., ::-1]
            a = wide[..., -2::-2]
        factors.append(a)
    got = min_of_sums(factors, shape)
    assert got.shape == shape[1:]
    np.testing.assert_array_equal(got, min_of_sums_reference(factors, shape))


@given(st.integers(0, 10**6), st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.booleans(),
       st.sampled_from([0.0, 1e-12, 1e-3]))
@settings(max_examples=200, deadline=None)
def test_the_compiled_lex_min_of_sums_equals_its_reference_bit_for_bit(seed, ndim, n_first, n_second, views, rtol):
    # the first component in few distinct values, so that ties (exact and within rtol) are
    # common and both of the kernel's ways through them are taken; +inf entries; strided views
    from tensoropt_py.engine.scalar import lex_min_of_sums, lex_min_of_sums_reference

    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 9, size=ndim))

    def factor(levels):
        own = tuple(n if rng.random() < 0.6 else 1 for n in shape)
        a = rng.integers(0, levels, size=own) * (1.0 + rng.random(own) * 1e-3 * (rng.random() < 0.3))
        a[rng.random(own) < 0.05] = np.inf
        if views:
            wide = np.zeros(own[:-1] + (2 * own[-1],))
            wide[..., ::2] = a[..., ::-1]
            a = wide[..., -2::-2]
        return a

    levels = int(rng.choice([2, 5, 1000]))
    first = [factor(levels) for _ in range(n_first)]
    second = [factor(10**6) for _ in range(n_second)]
    got = lex_min_of_sums(first, second, shape, rtol)
    ref = lex_min_of_sums_reference(first, second, shape, rtol)
    for g, r in zip(got, ref):
        assert g.shape == shape[1:]
        np.testing.assert_array_equal(g, r)


def test_lex_min_of_sums_says_what_is_wrong_with_its_input():
    from tensoropt_py.engine.scalar import lex_min_of_sums

    ok = np.zeros((2, 3))
    for first, second, rtol, words in (
        ([ok], [], 0.0, "second must hold at least one"),
        ([ok], [np.zeros((2, 4))], 0.0, "second .* do not broadcast to shape"),
        ([ok], [np.full((2, 1), np.nan)], 0.0, r"second\[0\] holds NaN"),
        ([ok, np.full((2, 1), -np.inf)], [ok], 0.0, r"first\[1\] holds a negative value, -inf"),
        ([ok], [ok], -1.0, "rtol must be a finite float >= 0"),
        ([ok], [ok], np.nan, "rtol must be a finite float >= 0"),
        ([ok], [ok], "x", "rtol must be a finite float >= 0"),
    ):
        with pytest.raises(InvalidInputError, match=words):
            lex_min_of_sums(first, second, rtol=rtol)


def test_min_of_sums_says_what_is_wrong_with_its_input():
    from tensoropt_py.engine.scalar import min_of_sums

    ok = np.zeros((2, 3))
    for factors, shape, words in (
        ([], None, "at least one"),
        ([ok, np.zeros(3)], None, "number of dimensions"),
        ([ok, np.zeros((2, 4))], None, "do not broadcast"),
        ([ok], (2, 4), "do not broadcast to shape"),
        ([np.zeros((0, 3))], None, "empty axis"),
        ([ok, np.full((2, 1), np.nan)], None, r"factors\[1\] holds NaN"),
        ([["a"]], None, "arrays of numbers"),
    ):
        with pytest.raises(InvalidInputError, match=words):
            min_of_sums(factors, shape)


@pytest.mark.parametrize("seed", range(8))
def test_min_sum_is_the_same_with_the_compiled_reductions_as_with_numpys(seed, monkeypatch):
    # the compiled min-plus step adds the factors in NumPy's order: the optimum, its value and
    # its strategy must be the same bit for bit
    import importlib

    scalar_mod = importlib.import_module("tensoropt_py.engine.scalar")
    cg = random_cyclic_graph(seed=seed, integer_costs=seed % 4 < 2) if seed % 2 else random_layered_dag(
        5, 3, 4, layouts=3, options=2, seed=seed, integer_costs=seed % 4 < 2)
    lams = (0.0, 1e-3, 0.7, np.inf)  # inf: memory, then time (the compiled lexicographic step)
    try:
        compiled = [min_sum(cg, lam) for lam in lams]
    except InfeasibleError:
        return
    monkeypatch.setattr(scalar_mod._minplus, "MAX_FACTORS", 0)  # every reduction in NumPy's slabs
    for lam, opt in zip(lams, compiled):
        ref = min_sum(cg, lam)
        assert (opt.value, opt.memory, opt.time) == (ref.value, ref.memory, ref.time)
        np.testing.assert_array_equal(opt.choices, ref.choices)
        np.testing.assert_array_equal(opt.edge_choices, ref.edge_choices)


@pytest.mark.parametrize("seed", range(12))
def test_a_refusal_names_the_least_max_entries_that_lets_min_sum_through(seed):
    # steps chosen as if max_entries were plan_entries: the refusal's entries must be exactly
    # the least max_entries with which min_sum solves the graph (the same optimum)
    from tensoropt_py.engine.scalar import _min_sum_within, _TooWide

    cg = random_cyclic_graph(seed=seed) if seed % 2 else random_layered_dag(4, 3, 4, layouts=3, options=2, seed=seed)
    for lam in (0.0, 0.5, np.inf):
        try:
            whole = min_sum(cg, lam)
        except InfeasibleError:
            return
        with pytest.raises(_TooWide) as refused:
            _min_sum_within(cg, lam, 1, 10**9, None)
        need = refused.value.entries
        assert 1 < need < 10**9
        assert min_sum(cg, lam, max_entries=need).value == whole.value
        with pytest.raises(InvalidInputError):
            min_sum(cg, lam, max_entries=need - 1)
        with pytest.raises(_TooWide) as refused:  # more work than allowed: no max_entries helps
            _min_sum_within(cg, lam, 10**9, 10**9, 1)
        assert refused.value.entries == np.inf


class _Refused:
    """A stand-in for the thread of the anchors: the ends refused there, with these refusals."""

    held_bytes = 0

    def __init__(self, rb, refusals):
        self.rb = rb
        self.refusals = refusals

    def bounds(self):
        return self.rb

    def optimum(self, lam):
        return None

    def refusal(self, lam):
        return self.refusals.get(lam)


def test_an_end_refused_beside_the_run_is_tried_again_only_where_it_could_pass(monkeypatch):
    # refused on a graph within the one after the run: not tried again where the refused step
    # needs more entries than the whole max_memory gives, else solved on that smaller graph
    import importlib

    from tensoropt_py.engine.screen import relaxation_bounds

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    cg = random_layered_dag(5, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=3)
    rb = relaxation_bounds(cg, [0.0])
    fast = min_sum(cg, 0.0)
    entries = track_mod._entries(1 << 30)
    tried = []
    solve = track_mod._screened_optimum

    def screened(cg_, rb_, lam, limit, entries_, plan_entries=None):
        tried.append((lam, limit))
        return solve(cg_, rb_, lam, limit, entries_, plan_entries)

    monkeypatch.setattr(track_mod, "_screened_optimum", screened)
    mem, tim = np.array([fast.memory * 2]), np.array([fast.time * 2])  # an achievable point, far from the optimum
    too_wide = track_mod._Refusal("lam=0: too wide", entries + 1, fast.time * 1.5)
    ch, _, skipped, _, _ = track_mod._optima(cg, (0.0,), 1 << 30, mem, tim, background=_Refused(rb, {0.0: too_wide}))
    assert ch is None and skipped == [(0.0, "lam=0: too wide")] and tried == []
    # the refusal's graph was screened by a weaker limit than the run's: tried again, on the run's
    weaker = track_mod._Refusal("lam=0: too wide", entries + 1, fast.time * 3)
    ch, ech, skipped, _, _ = track_mod._optima(cg, (0.0,), 1 << 30, mem, tim, background=_Refused(rb, {0.0: weaker}))
    assert tried == [(0.0, fast.time * 2)] and not skipped
    tried.clear()
    room = track_mod._Refusal("lam=0: too wide for the thread", entries, fast.time * 1.5)
    ch, ech, skipped, _, _ = track_mod._optima(cg, (0.0,), 1 << 30, mem, tim, background=_Refused(rb, {0.0: room}))
    assert tried == [(0.0, fast.time * 1.5)] and not skipped
    assert evaluate(cg, ch, ech)[1][0] == pytest.approx(fast.time, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_ends_refused_beside_the_run_leave_the_frontier_as_after_it(seed, monkeypatch):
    # every exact optimum refused (too much work): the ends refused on the thread are not tried
    # again, and the windows' bound computed there next; the frontier and the gaps of its ends
    # must be those of the run whose anchors all come after it
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    monkeypatch.setattr(track_mod, "_OPTIMUM_MAX_WORK", 1)
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)  # a process would not see the patch
    cg = random_layered_dag(6, 3, 4, layouts=2, options=2, skip_prob=0.5, seed=seed)
    fr = track(cg, max_merged_configs=2, epsilon=0.05, threads=2)
    assert fr.stats["anchors"].startswith("skipped") and "fastest" not in fr.stats["anchors_beside"]
    assert "fastest_bound" in fr.stats["anchors_beside"]  # the cheap bound proves none of these ends
    monkeypatch.setattr(track_mod, "_BACKGROUND_ANCHORS", False)
    after = track(cg, max_merged_configs=2, epsilon=0.05, threads=2)
    np.testing.assert_array_equal(after.memory, fr.memory)
    np.testing.assert_array_equal(after.time, fr.time)
    assert after.stats["end_gaps"] == fr.stats["end_gaps"]


@pytest.mark.parametrize("seed", range(24))
def test_ends_solved_on_screened_configs_equal_the_whole_graph_optima(seed):
    # the anchors of track are solved on the configs the relaxation bounds leave possible,
    # given achievable points; from any such points (here random strategies, mostly far from
    # the frontier) they must be the optima of the whole graph, ties of least memory included
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    cg = random_cyclic_graph(seed=seed, forbidden_prob=0.05) if seed % 2 else random_layered_dag(
        3, 2, 3, layouts=2, options=2, skip_prob=0.5, seed=seed, integer_costs=bool(seed % 4 == 2))
    # memory in much larger units than time, as bytes and seconds are
    cg = CostGraph([c * [1e6, 1.0] for c in cg.node_costs],
                   [(u, v, LayoutEdge(sm, dm, tab * [1e6, 1.0])) for u, v, sm, dm, tab in cg._norm])
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        return
    rng = np.random.default_rng(seed)
    ch = np.stack([rng.integers(0, k, size=40) for k in cg.n_configs], axis=1)
    ech = np.zeros((40, cg.n_edges), dtype=np.int64)
    mem, tim = evaluate(cg, ch, ech)
    ok = np.isfinite(mem) & np.isfinite(tim)
    # from random strategies (loose bounds) and from the exact frontier (the tightest screening)
    lams = (0.0, np.inf, 1e-7, 1e-6)
    for mem, tim in ((np.append(mem[ok], bf.memory[-1]), np.append(tim[ok], bf.time[-1])), (bf.memory, bf.time)):
        ach, aech, skipped, _, ties = track_mod._optima(cg, lams, 1 << 30, mem, tim)
        assert not skipped and not ties
        # solved four at once (memory for all of them): the same strategies
        pch, pech, pskipped, _, _ = track_mod._optima(cg, lams, 1 << 40, mem, tim, threads=4)
        assert not pskipped and np.array_equal(pch, ach) and np.array_equal(pech, aech)
        am, at = evaluate(cg, ach, aech)
        # the fastest: of least memory among the fastest strategies (the frontier's last point)
        assert (am[0], at[0]) == (pytest.approx(bf.memory[-1], rel=1e-12), pytest.approx(bf.time[-1], rel=1e-12))
        assert (am[1], at[1]) == (pytest.approx(bf.memory[0], rel=1e-12), pytest.approx(bf.time[0], rel=1e-12))
        for lam, m, t in zip(lams[2:], am[2:], at[2:]):
            assert t + lam * m == pytest.approx(_frontier_min(bf, lam), rel=1e-12)


@pytest.mark.parametrize("seed", range(11, 21))
def test_the_fastest_end_of_an_approximate_frontier_is_the_exact_frontiers(seed):
    # integer costs: the fastest strategies tie in time and differ in memory. The fastest
    # anchor must be the smallest of them, wherever it is solved (beside the run on two
    # threads, after it on one), so that the frontier's fastest point is not dominated
    cg = random_chain(8 + seed, 6 + seed % 4, layouts=2 if seed % 2 else None, options=1 + seed % 2, seed=seed,
                      integer_costs=True)
    exact = track(cg, exact=True)
    fastest = int(np.argmin(exact.time))
    runs = [track(cg, threads=threads, max_merged_configs=10000, max_step_work=1e3, epsilon=0.01) for threads in (1, 2)]
    for fr in runs:
        assert not fr.exact and "anchor_ties" not in fr.stats
        end = int(np.argmin(fr.time))
        assert (fr.time[end], fr.memory[end]) == (exact.time[fastest], exact.memory[fastest])
    np.testing.assert_array_equal(runs[0].memory, runs[1].memory)
    np.testing.assert_array_equal(runs[0].time, runs[1].time)



def _zero_time_graph(seed):
    """Random integer costs where two configs of every node and the pairs between them take no
    time (so the least time is 0, shared by many strategies of other memories), and the other
    configs and pairs take time but often less memory."""
    rng = np.random.default_rng(seed)
    n, k = 5, 4
    nodes = []
    for _ in range(n):
        c = np.stack([rng.integers(1, 20, k), rng.integers(1, 4, k)], axis=1).astype(float)
        c[:2, 1] = 0.0
        nodes.append(c)
    edges = []
    for v in range(1, n):
        for u in rng.choice(v, size=min(v, 2), replace=False):
            e = np.stack([rng.integers(0, 9, (k, k)), rng.integers(1, 4, (k, k))], axis=2).astype(float)
            e[:2, :2, 1] = 0.0
            edges.append((int(u), v, e))
    return CostGraph(nodes, edges)


@pytest.mark.parametrize("seed", range(20))
def test_the_weighted_solve_of_a_least_time_of_zero_equals_brute_force(seed):
    # a least time of 0 gives the weight of memory no scale of its own: the weighted solve must
    # still find the least memory among the strategies that take no time, not report a tie
    import importlib

    scalar_mod = importlib.import_module("tensoropt_py.engine.scalar")
    cg = _zero_time_graph(seed)
    fastest, _, _ = scalar_mod._min_sum_within(cg, 0.0, 10**6, 10**6, None)
    assert fastest.time == 0
    weighted = scalar_mod._smallest_of_fastest(cg, fastest, 10**6, 0.0, None)
    _check(cg, weighted, 0.0)
    assert (weighted.time, weighted.memory) == _fastest_of_brute_force(cg)

def test_ties_of_the_fastest_too_costly_to_resolve_are_reported(monkeypatch):
    # the smallest of the fastest strategies sums more terms than the lexicographic solve may:
    # the weighted solve finds it. Where that cannot prove it either (memory weighed so much
    # that a slower strategy wins), the anchor is a fastest strategy all the same, and the
    # frontier says that its memory may not be the least
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    scalar_mod = importlib.import_module("tensoropt_py.engine.scalar")
    cg = random_chain(12, 8, options=2, seed=3, integer_costs=True)
    kwargs = dict(max_merged_configs=10000, max_step_work=1e3, epsilon=0.01, threads=1)
    exact = track(cg, exact=True)
    fastest = int(np.argmin(exact.time))
    monkeypatch.setattr(track_mod, "_TIE_MAX_WORK", 0)
    fr = track(cg, **kwargs)
    assert "anchor_ties" not in fr.stats
    end = int(np.argmin(fr.time))
    assert (fr.time[end], fr.memory[end]) == (exact.time[fastest], exact.memory[fastest])
    monkeypatch.setattr(scalar_mod, "_TIE_WEIGHT", 1e3)
    fr = track(cg, **kwargs)
    assert "a slower strategy of less memory won the weighted solve" in fr.stats["anchor_ties"]
    assert fr.time.min() == exact.time.min()
    monkeypatch.undo()
    assert "anchor_ties" not in track(cg, **kwargs).stats


def test_an_anchor_too_wide_is_skipped_alone(monkeypatch):
    # a 4-clique of 10-config nodes is too wide for a 50-entry factor; the bounds leave one
    # config per node that can be as fast as the frontier's fastest point (the fastest anchor
    # is found), but every config is as small as the smallest (that anchor stays too wide)
    import importlib

    from tensoropt_py.engine import scalar

    monkeypatch.setattr(scalar, "MAX_FACTOR_ENTRIES", 50)
    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "_ANCHORS_IN_PROCESS", False)
    node = np.array([[1.0, 1.0]] + [[1.0, 100.0 + k] for k in range(1, 10)])
    edges = [(a, b, np.zeros((10, 10, 2))) for a in range(4) for b in range(a + 1, 4)]
    cg = CostGraph([node] * 4, edges)
    fr = track(cg, epsilon=0.01)
    # the tracked frontier holds the fastest strategy already: the anchor adds no point
    assert fr.stats["anchors"] == 0 and "lam=inf" in fr.stats["anchors_skipped"]
    assert "lam=0" not in fr.stats["anchors_skipped"]
    assert fr.time.min() == 4.0
    with pytest.raises(InvalidInputError, match="too wide"):
        track(cg, epsilon=0.01, anchors=True)


@pytest.mark.parametrize("seed", range(20))
def test_least_memory_optimum_is_the_fastest_of_least_memory(seed):
    cg = random_cyclic_graph(seed=seed, forbidden_prob=0.05) if seed % 2 else random_small_dag(seed=seed)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        return
    opt = min_sum(cg, np.inf)
    # the exact frontier's first point is the fastest strategy of least memory
    assert opt.memory == pytest.approx(bf.memory[0], rel=1e-12)
    assert opt.time == pytest.approx(bf.time[0], rel=1e-12)
    assert opt.value == opt.memory


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("lam", [0.0, np.inf])
def test_the_value_less_pass_refuses_exactly_where_the_real_one_would(seed, lam):
    """min_sum first runs its elimination without values to refuse a too-wide graph cheaply:
    for every budget, that pass must raise the same error as the numeric run, or neither."""
    from tensoropt_py.engine.scalar import _eliminate

    cg = random_cyclic_graph(n_nodes=8, max_k=4, edge_prob=0.5, seed=seed)
    for max_entries in (4, 16, 64, 256, 10**6):
        errors = []
        for numeric in (False, True):
            try:
                _eliminate(cg, lam, max_entries, numeric)
                errors.append(None)
            except InvalidInputError as exc:
                errors.append(str(exc))
        assert errors[0] == errors[1]
    work, plan = _eliminate(cg, lam, 10**6, numeric=False)  # the terms summed: what max_work limits
    assert isinstance(work, int) and work >= cg.n_nodes  # one term at least per node eliminated
    assert sorted(x for x, _ in plan) == list(range(cg.n_nodes))  # every node once
    # replaying the plan with values is the run that chooses its steps again
    try:
        chosen = _eliminate(cg, lam, 10**6, numeric=True)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            _eliminate(cg, lam, 10**6, numeric=True, plan=plan)
        return
    replayed, replayed_tied = _eliminate(cg, lam, 10**6, numeric=True, plan=plan)
    chosen, tied = chosen
    assert np.array_equal(replayed.choices, chosen.choices) and np.array_equal(replayed.edge_choices, chosen.edge_choices)
    assert replayed.value == chosen.value and replayed_tied == tied


@pytest.mark.parametrize("seed", range(4))
def test_repeated_reductions_are_reused_and_change_nothing(seed, monkeypatch):
    from tensoropt_py.engine import scalar

    cg = random_repeated_blocks(3, side=True, seed=seed)
    bf = brute_force_frontier(cg)
    calls = []
    reduce_slabs = scalar._reduce_slabs
    monkeypatch.setattr(scalar, "_reduce_slabs", lambda *a: calls.append(1) or reduce_slabs(*a))
    for lam in LAMS:
        calls.clear()
        opt = min_sum(cg, lam)
        with_memo = len(calls)
        monkeypatch.setattr(scalar, "_MEMO_BYTES", 0)
        calls.clear()
        ref = min_sum(cg, lam)
        monkeypatch.setattr(scalar, "_MEMO_BYTES", 1 << 28)
        assert with_memo < len(calls)
        assert (opt.value, opt.memory, opt.time) == (ref.value, ref.memory, ref.time)
        assert opt.value == pytest.approx(_frontier_min(bf, lam), rel=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.5, np.inf])
def test_a_node_coupling_more_than_numpy_dimensions_is_eliminated_exactly(lam):
    # a hub whose 40 edges see only its configs (one layout class on the spoke side): its
    # elimination couples all 40 spokes, far more axes than NumPy broadcasts; each spoke has
    # one class there, so the factor left behind need not span them. Given the hub's config
    # the spokes are independent, which gives the optimum to compare with
    rng = np.random.default_rng(7)
    n = 40
    nodes = [rng.random((3, 2))] + [rng.random((2, 2)) for _ in range(n)]
    tables = [rng.random((3, 1, 2)) for _ in range(n)]
    cg = CostGraph(nodes, [(0, i + 1, LayoutEdge([0, 1, 2], [0, 0], tables[i])) for i in range(n)])
    opt = min_sum(cg, lam)
    _check(cg, opt, lam)

    def weigh(c):
        return c[..., 0] if np.isinf(lam) else c[..., 1] + lam * c[..., 0]

    best = min(weigh(nodes[0][h]) + sum(weigh(nodes[i + 1]).min() + weigh(tables[i][h, 0]) for i in range(n))
               for h in range(3))
    got = opt.memory if np.isinf(lam) else opt.value
    assert got == pytest.approx(best, rel=1e-12)
