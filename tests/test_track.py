"""track(): exact frontier vs brute force, achievability, epsilon guarantee, threads, errors."""

import importlib

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tensoropt_py.errors import CostGraphError, InvalidInputError
from tensoropt_py.engine import (
    CostGraph,
    LayoutEdge,
    TrackedFrontier,
    brute_force_frontier,
    evaluate,
    track,
)
from tensoropt_py.engine.random_graphs import random_chain, random_layered_dag, random_small_dag
from tensoropt_py.engine.screen import restrict
from tensoropt_py.engine.track import AUTO_EPSILON, parse_epsilon

METHODS = ["ldp", "elimination"]


@st.composite
def small_dags(draw):
    cg = random_small_dag(
        n_nodes=draw(st.integers(1, 8)),
        max_k=draw(st.integers(1, 4)),
        edge_prob=draw(st.sampled_from([0.2, 0.35, 0.5, 0.7])),
        multi_edge_prob=draw(st.sampled_from([0.0, 0.2, 0.4])),
        layout_prob=draw(st.sampled_from([0.0, 0.3, 0.7])),
        max_options=draw(st.integers(1, 3)),
        inf_prob=draw(st.sampled_from([0.0, 0.3])),
        seed=draw(st.integers(0, 2**32 - 1)),
        integer_costs=True,
    )
    assume(cg.n_strategies() <= 100_000)
    return cg


def assert_achievable(cg, fr):
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-9)
    np.testing.assert_allclose(t, fr.time, rtol=1e-9)
    assert np.all(np.diff(fr.memory) > 0) and np.all(np.diff(fr.time) < 0)
    assert fr.choices.shape == (len(fr), cg.n_nodes) and fr.choices.dtype == np.int64
    assert fr.edge_choices.shape == (len(fr), cg.n_edges) and fr.edge_choices.dtype == np.int64


def assert_same_frontier(a, b):
    assert len(a) == len(b), (a.points(), b.points())
    np.testing.assert_allclose(a.memory, b.memory, rtol=1e-9)
    np.testing.assert_allclose(a.time, b.time, rtol=1e-9)


def assert_exact_by_both_methods(cg, threads=1):
    """Exact tracking equals brute force with either method, every point achievable; returns
    the frontiers (one per method) for further checks."""
    bf = brute_force_frontier(cg)
    frs = []
    for method in METHODS:
        fr = track(cg, method=method, exact=True, threads=threads)
        assert_same_frontier(fr, bf)
        assert_achievable(cg, fr)
        frs.append(fr)
    return frs


@settings(max_examples=150)
@given(small_dags())
def test_exact_equals_brute_force(cg):
    for fr in assert_exact_by_both_methods(cg):
        assert fr.n_heuristic == 0


@pytest.mark.parametrize("seed", range(40))
def test_dense_small_dags_equal_brute_force(seed):
    """Deterministic sweep of the hardest small cases: 7-8 nodes, many edges (branch elimination)."""
    cg = random_small_dag(n_nodes=7 + seed % 2, max_k=3, edge_prob=0.5, multi_edge_prob=0.2,
                          layout_prob=0.4, max_options=1 + (seed % 3 == 0), seed=seed)
    if cg.n_strategies() > 300_000:
        pytest.skip("too many strategies for the oracle")
    assert_exact_by_both_methods(cg, threads=2)


@settings(max_examples=60)
@given(small_dags(), st.sampled_from([0.01, 0.1, 0.5]))
def test_epsilon_guarantee_against_brute_force(cg, eps):
    bf = brute_force_frontier(cg)
    for method in METHODS:
        fr = track(cg, method=method, exact=True, epsilon=eps, threads=1)
        assert_achievable(cg, fr)
        bound = fr.memory_bound_factor
        assert bound == (1 + eps) ** fr.epsilon_depth
        for m, t in zip(bf.memory, bf.time):
            ok = (fr.time <= t * (1 + 1e-12)) & (fr.memory <= bound * m * (1 + 1e-12))
            assert ok.any(), (m, t, fr.points())
        # the min-time strategy is never lost, nor the least memory
        assert fr.time[-1] == pytest.approx(bf.time[-1], rel=1e-12)
        assert fr.memory[0] == pytest.approx(bf.memory[0], rel=1e-12)


def with_memory_offset(cg, offset):
    """``cg`` with ``offset`` more memory in every config of every node."""
    nodes = [c + np.array([offset, 0.0]) for c in cg.node_costs]
    return CostGraph(nodes, list(cg.edges))


@settings(max_examples=60)
@given(small_dags(), st.sampled_from([0.01, 0.1]), st.sampled_from([10.0, 1000.0]))
def test_epsilon_guarantee_with_large_memory_offsets(cg, eps, offset):
    # each node's configs share a large memory offset (weights, optimizer state): points of a
    # table differ by a small share of their memory, and thinning drops many of them
    cg = with_memory_offset(cg, offset)
    bf = brute_force_frontier(cg)
    for method in METHODS:
        fr = track(cg, method=method, exact=True, epsilon=eps, threads=1)
        assert_achievable(cg, fr)
        bound = fr.memory_bound_factor
        for m, t in zip(bf.memory, bf.time):
            assert np.any((fr.time <= t * (1 + 1e-12)) & (fr.memory <= bound * m * (1 + 1e-12))), (m, t, fr.points())
        assert fr.time[-1] == pytest.approx(bf.time[-1], rel=1e-12)
        assert fr.memory[0] == pytest.approx(bf.memory[0], rel=1e-12)


@settings(max_examples=80)
@given(small_dags(), st.integers(1, 4), st.sampled_from([1.0, 20.0, 400.0, float("inf")]))
def test_heuristic_results_are_achievable_and_dominated_by_truth(cg, max_merged_configs, max_step_work):
    bf = brute_force_frontier(cg)
    for method in METHODS:
        fr = track(cg, method=method, exact=False, max_merged_configs=max_merged_configs,
                   max_step_work=max_step_work, threads=1)
        assert_achievable(cg, fr)
        assert fr.n_heuristic >= fr.stats.get("work_capped", 0)
        # nothing better than the true frontier
        for m, t in zip(fr.memory, fr.time):
            assert np.any((bf.memory <= m * (1 + 1e-12)) & (bf.time <= t * (1 + 1e-12)))


@pytest.mark.parametrize("method", METHODS)
def test_work_cap_fixes_costly_nodes_unless_exact(method):
    cg = random_layered_dag(4, 3, 3, skip_prob=0.3, seed=0)
    bf = brute_force_frontier(cg)
    free = track(cg, method=method, exact=False, max_step_work=float("inf"), threads=1)
    assert free.n_heuristic == 0 and "work_capped" not in free.stats
    assert_same_frontier(free, bf)
    capped = track(cg, method=method, exact=False, max_step_work=1.0, threads=1)
    assert capped.stats["work_capped"] > 0 and capped.n_heuristic >= capped.stats["work_capped"]
    assert_achievable(cg, capped)
    exact = track(cg, method=method, exact=True, max_step_work=1.0, threads=1)
    assert exact.n_heuristic == 0 and "work_capped" not in exact.stats
    assert_same_frontier(exact, bf)


def test_work_cap_applies_to_ldp_steps():
    cg = random_chain(6, 3, seed=1)  # FT-LDP marks the whole chain: every step is an LDP fold
    bf = brute_force_frontier(cg)
    free = track(cg, method="ldp", exact=False, max_step_work=float("inf"), threads=1)
    assert free.stats["ldp_steps"] == 5 and "work_capped" not in free.stats
    assert_same_frontier(free, bf)
    capped = track(cg, method="ldp", exact=False, max_step_work=1.0, threads=1)
    assert capped.stats["work_capped"] > 0 and capped.n_heuristic >= capped.stats["work_capped"]
    assert_achievable(cg, capped)
    for m, t in zip(capped.memory, capped.time):
        assert np.any((bf.memory <= m * (1 + 1e-12)) & (bf.time <= t * (1 + 1e-12)))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", range(3))
def test_work_cap_restriction_is_exact_on_the_configs_it_keeps(method, seed, monkeypatch):
    """A step just over the cap keeps a share of its node's configs (no config fixed): the
    result is then exactly the frontier of the strategies using only the kept configs."""
    heur = importlib.import_module("tensoropt_py.elimination.heuristic_elimination")
    cg = random_chain(7, 6, seed=seed, integer_costs=True)
    real = heur.restrict_node
    for cap in np.geomspace(1e6, 1.0, 60):
        kept = {i: np.arange(k) for i, k in enumerate(cg.n_configs)}  # original configs left per node

        def logged(g, i, keep, kept=kept):
            kept[i] = kept[i][np.sort(keep)]
            real(g, i, keep)

        monkeypatch.setattr(heur, "restrict_node", logged)
        fr = track(cg, method=method, exact=False, epsilon=0.0, anchors=False, max_step_work=cap, threads=1)
        if fr.stats.get("work_restricted", 0) and fr.stats["work_restricted"] == fr.stats["work_capped"]:
            break
    else:
        pytest.fail("no cap restricts without fixing")
    assert fr.n_heuristic == fr.stats["work_restricted"]
    assert sum(k.size for k in kept.values()) < sum(cg.n_configs)
    assert_achievable(cg, fr)
    assert_same_frontier(fr, brute_force_frontier(restrict(cg, list(kept.values()))))


def test_heuristic_is_used_and_counted():
    cg = random_layered_dag(6, 3, 4, skip_prob=0.5, seed=2)
    fr = track(cg, exact=False, max_merged_configs=4, threads=1)
    assert fr.n_heuristic > 0
    assert fr.stats["heuristic_runs"] == 2
    assert_achievable(cg, fr)
    for h in ("min_memory", "weighted"):
        one = track(cg, exact=False, max_merged_configs=4, heuristic=h, threads=1)
        assert_achievable(cg, one)
        # "auto" keeps the reduced union of both: it weakly dominates each
        for m, t in zip(one.memory, one.time):
            assert np.any((fr.memory <= m) & (fr.time <= t))


def _union_of_runs(a, b):
    mem = np.concatenate([a.memory, b.memory])
    tim = np.concatenate([a.time, b.time])
    order = np.lexsort((np.arange(mem.size), tim, mem))
    ts = tim[order]
    keep = order[ts < np.minimum.accumulate(np.concatenate([[np.inf], ts[:-1]]))]
    return mem[keep], tim[keep], np.concatenate([a.choices, b.choices])[keep]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed,layouts,eps", [(2, None, 0.0), (3, 4, 0.0), (11, 4, 0.01), (5, None, 1e-3)])
def test_auto_fork_equals_two_full_runs(method, seed, layouts, eps):
    # "auto" resumes a snapshot taken just before the first heuristic elimination instead
    # of re-running everything: it must give exactly the reduced union of the two runs
    cg = random_layered_dag(10, 3, 5, layouts=layouts, options=2, skip_prob=0.4, seed=seed)
    kw = dict(method=method, exact=False, epsilon=eps, max_merged_configs=8, threads=1)
    fr = track(cg, heuristic="auto", **kw)
    a = track(cg, heuristic="min_memory", **kw)
    b = track(cg, heuristic="weighted", **kw)
    assert fr.n_heuristic == a.n_heuristic > 0
    assert fr.stats["heuristic_runs"] == 2
    mem, tim, ch = _union_of_runs(a, b)
    np.testing.assert_array_equal(fr.memory, mem)
    np.testing.assert_array_equal(fr.time, tim)
    np.testing.assert_array_equal(fr.choices, ch)
    assert fr.epsilon_depth == max(a.epsilon_depth, b.epsilon_depth)
    assert_achievable(cg, fr)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("layouts", [None, 4])
def test_large_layered_dags_are_achievable(method, layouts):
    # realistic float costs: exact frontiers of partial strategies get huge, so thin them
    cg = random_layered_dag(14, 3, 6, layouts=layouts, options=2, skip_prob=0.3, seed=11)
    fr = track(cg, method=method, exact=False, epsilon=0.01, max_merged_configs=64)
    assert len(fr) > 1 and fr.n_heuristic > 0
    assert_achievable(cg, fr)
    # integer costs keep exact frontiers small: epsilon = 0
    cgi = random_layered_dag(14, 3, 6, layouts=layouts, options=2, skip_prob=0.3, seed=12, integer_costs=True)
    fr = track(cgi, method=method, exact=False, max_merged_configs=64)
    assert len(fr) > 1
    assert_achievable(cgi, fr)


@pytest.mark.parametrize("layouts", [None, 8])
def test_long_chains_with_epsilon_are_achievable(layouts):
    cg = random_chain(120, 16, layouts=layouts, options=2, seed=5)
    fr = track(cg, epsilon=1e-3)
    assert fr.n_heuristic == 0 and fr.epsilon_depth > 0 and len(fr) > 10
    assert_achievable(cg, fr)


@pytest.mark.parametrize("layouts", [None, 8])
def test_epsilon_bound_on_long_chains(layouts):
    cg = random_chain(60, 16, layouts=layouts, options=2, seed=6, integer_costs=True)
    exact = track(cg, exact=True)
    assert_achievable(cg, exact)
    for eps in (1e-3, 0.05):
        fr = track(cg, exact=True, epsilon=eps)
        assert_achievable(cg, fr)
        bound = fr.memory_bound_factor
        for m, t in zip(exact.memory, exact.time):
            assert np.any((fr.time <= t) & (fr.memory <= bound * m * (1 + 1e-12)))


def test_chain_ldp_equals_elimination_exactly():
    cg = random_chain(12, 6, layouts=3, options=2, seed=9, integer_costs=True)
    a = track(cg, method="ldp", exact=True)
    b = track(cg, method="elimination", exact=True)
    assert_same_frontier(a, b)
    assert a.stats["ldp_steps"] == 11 and b.stats["node"] > 0


@pytest.mark.parametrize("method", METHODS)
def test_threads_give_identical_results(method):
    cg = random_layered_dag(10, 3, 12, layouts=4, options=2, skip_prob=0.3, seed=4)
    a = track(cg, method=method, epsilon=1e-3, max_merged_configs=128, threads=1)
    b = track(cg, method=method, epsilon=1e-3, max_merged_configs=128, threads=2)
    for f in ("memory", "time", "choices", "edge_choices"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
    c1 = random_chain(60, 48, layouts=6, seed=1)
    a = track(c1, method="ldp", epsilon=1e-4, threads=1)
    b = track(c1, method="ldp", epsilon=1e-4, threads=2)
    assert np.array_equal(a.memory, b.memory) and np.array_equal(a.choices, b.choices)


def test_components_isolated_nodes_k1_and_multi_edges():
    nodes = [np.array([[1.0, 3.0], [3.0, 1.0]]), np.array([[0.0, 1.0]]), np.array([[2.0, 2.0], [1.0, 4.0]]),
             np.array([[5.0, 0.0]])]
    cost = np.zeros((2, 1, 2, 2))
    cost[:, :, 1] = [1.0, -0.0]
    cost[:, :, 0] = [0.0, 1.0]
    edges = [(0, 1, cost), (0, 1, LayoutEdge([0, 0], [0], np.ones((1, 1, 2))))]
    cg = CostGraph(nodes, edges)
    assert_exact_by_both_methods(cg, threads=None)


@pytest.mark.parametrize("seed", range(4))
def test_the_product_of_components_thins_and_keeps_the_bound(seed):
    # disjoint chains are tracked apart and multiplied at the end: a product of two frontiers
    # may keep up to p * q points, so it thins like any other reduce, pairwise (depth log2)
    parts = [random_chain(3, 4, seed=100 * seed + c, integer_costs=False) for c in range(5)]
    nodes, edges, base = [], [], 0
    for part in parts:
        nodes += list(part.node_costs)
        edges += [(u + base, v + base, cost) for u, v, cost in part.edges]
        base += part.n_nodes
    cg = CostGraph(nodes, edges)
    exact = track(cg, exact=True, threads=1)
    eps = 0.02
    fr = track(cg, exact=True, epsilon=eps, threads=1, anchors=False)
    assert_achievable(cg, fr)
    # thinned: consecutive points differ by more than (1 + eps) in memory, but for the least
    # memory, which every thinning step keeps: it is exact
    assert np.all(fr.memory[2:] > (1 + eps) * fr.memory[1:-1])
    assert fr.memory[0] == pytest.approx(exact.memory[0], rel=1e-12)
    assert len(fr) < len(exact)
    bound = fr.memory_bound_factor
    for m, t in zip(exact.memory, exact.time):
        assert np.any((fr.time <= t * (1 + 1e-12)) & (fr.memory <= bound * m * (1 + 1e-12)))
    assert fr.time[-1] == exact.time[-1]


def test_single_node_graph():
    cg = CostGraph([np.array([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [2.0, 5.0]])], [])
    fr = track(cg, exact=True)
    assert fr.memory.tolist() == [1.0, 2.0, 3.0] and fr.choices[:, 0].tolist() == [1, 2, 0]
    assert fr.edge_choices.shape == (3, 0)


def test_tracked_frontier_is_frozen_and_prints():
    fr = track(random_chain(3, 2, seed=0), exact=True)
    assert isinstance(fr, TrackedFrontier)
    with pytest.raises(AttributeError):
        fr.memory = None
    assert str(fr).startswith("TrackedFrontier(points=")
    assert fr.method == "ldp" and fr.exact and fr.epsilon == 0.0 and fr.seconds >= 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "dp"}, r"method must be one of \('ldp', 'elimination'\), got 'dp'"),
        ({"epsilon": -1.0}, "epsilon must be a finite float >= 0, got -1.0"),
        ({"epsilon": float("inf")}, "epsilon must be a finite float >= 0"),
        ({"threads": 0}, "threads must be None or an integer >= 1, got 0"),
        ({"threads": 1.5}, "threads must be None or an integer >= 1"),
        ({"max_merged_configs": 0}, "max_merged_configs must be an integer >= 1, got 0"),
        ({"max_step_work": 0}, r"max_step_work must be a number > 0 \(inf: no limit\) or None, got 0"),
        ({"max_step_work": float("nan")}, "max_step_work must be a number > 0 .*got nan"),
        ({"max_step_work": "1e10"}, "max_step_work must be a number > 0 .*got '1e10'"),
        ({"heuristic": "best"}, "heuristic must be one of"),
        ({"exact": "yes"}, "exact must be a bool"),
    ],
)
def test_bad_arguments(kwargs, match):
    cg = random_chain(3, 2, seed=0)
    with pytest.raises(InvalidInputError, match=match):
        track(cg, **kwargs)


def test_track_rejects_non_cost_graph():
    with pytest.raises(InvalidInputError, match="cg must be a CostGraph"):
        track([np.zeros((2, 2))])


# ---- memo of identical combines (repeated layers) -------------------------------------


def repeated_blocks(n_blocks, k=6, layouts=False, seed=0):
    """A chain of identical residual diamonds s -> a -> t, s -> b -> t, s -> t (t = next s)."""
    rng = np.random.default_rng(seed)
    node = [rng.uniform(0, 10, size=(k, 2)) for _ in range(3)]  # s/t, a, b

    def edge():
        if layouts:
            return LayoutEdge(np.arange(k) % 3, np.arange(k) % 4, rng.uniform(0, 5, size=(3, 4, 2)))
        return rng.uniform(0, 5, size=(k, k, 2))

    tabs = [edge() for _ in range(5)]  # s-a, s-b, a-t, b-t, s-t
    nodes, edges = [node[0]], []
    for _ in range(n_blocks):
        s = len(nodes) - 1
        nodes += [node[1], node[2], node[0]]
        a, b, t = s + 1, s + 2, s + 3
        edges += [(s, a, tabs[0]), (s, b, tabs[1]), (a, t, tabs[2]), (b, t, tabs[3]), (s, t, tabs[4])]
    return CostGraph(nodes, edges)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("layouts", [False, True])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_memo_of_repeated_layers_changes_nothing(method, layouts, eps, monkeypatch):
    from tensoropt_py.elimination import table

    cg = repeated_blocks(5, layouts=layouts)
    monkeypatch.setattr(table, "_MEMO_MIN_TERMS", 1)
    fr = track(cg, method=method, exact=True, epsilon=eps, threads=1)
    assert fr.stats["memo_hits"] > 0
    assert fr.stats["memo_terms_skipped"] > 0  # node eliminations found by what generates their terms
    monkeypatch.setattr(table, "_MEMO_MIN_TERMS", 1 << 62)
    ref = track(cg, method=method, exact=True, epsilon=eps, threads=1)
    assert ref.stats["memo_hits"] == 0
    np.testing.assert_array_equal(fr.memory, ref.memory)
    np.testing.assert_array_equal(fr.time, ref.time)
    np.testing.assert_array_equal(fr.choices, ref.choices)
    np.testing.assert_array_equal(fr.edge_choices, ref.edge_choices)
    assert fr.epsilon_depth == ref.epsilon_depth
    assert_achievable(cg, fr)


@settings(max_examples=60, deadline=None)
@given(small_dags())
def test_exact_equals_brute_force_with_memo_everywhere(cg):
    # integer costs repeat a lot: with every combine memoised, many results are reused
    from tensoropt_py.elimination import table

    old = table._MEMO_MIN_TERMS
    table._MEMO_MIN_TERMS = 1
    try:
        assert_exact_by_both_methods(cg)
    finally:
        table._MEMO_MIN_TERMS = old


def test_exact_on_repeated_blocks_equals_brute_force(monkeypatch):
    from tensoropt_py.elimination import table

    monkeypatch.setattr(table, "_MEMO_MIN_TERMS", 1)
    cg = repeated_blocks(2, k=3)
    for fr in assert_exact_by_both_methods(cg):
        assert fr.stats["memo_hits"] > 0


def test_progress_reports_move_and_end():
    from tensoropt_py.engine.random_graphs import random_layered_dag
    from tensoropt_py.errors import InvalidInputError

    cg = random_layered_dag(6, 3, 4, layouts=2, seed=0)
    seen = []
    fr = track(cg, progress=seen.append, max_merged_configs=4)
    assert seen and seen[0]["stage"] == "eliminate" and seen[0]["nodes"] == cg.n_nodes
    assert any(r["stage"] == "finish" and r["nodes_left"] <= seen[0]["nodes_left"] for r in seen)
    assert all(r["elapsed_s"] >= 0 for r in seen)
    assert len(fr) > 0
    with pytest.raises(InvalidInputError, match="progress must be a callable"):
        track(cg, progress=3)


# ---- epsilon="auto" ----------------------------------------------------------------------

def _track_module():
    return importlib.import_module("tensoropt_py.engine.track")  # the package re-exports the function under that name


def test_auto_epsilon_is_exact_while_frontiers_stay_small():
    cg = random_chain(12, 6, layouts=3, options=2, seed=9, integer_costs=True)
    fr = track(cg)
    assert fr.epsilon == 0.0 and fr.epsilon_depth == 0 and "epsilon_from_combine" not in fr.stats
    assert_same_frontier(fr, track(cg, exact=True, epsilon=0.0))


@pytest.mark.parametrize("layouts", [None, 8])
def test_auto_epsilon_turns_on_past_the_cell_limit_and_keeps_the_bound(monkeypatch, layouts):
    monkeypatch.setattr(_track_module(), "AUTO_EPSILON_CELL_POINTS", 4)
    monkeypatch.setattr(_track_module(), "AUTO_EPSILON", 0.05)  # coarse enough to drop points of these costs
    cg = random_chain(60, 16, layouts=layouts, options=2, seed=6, integer_costs=True)
    exact = track(cg, exact=True)
    fr = track(cg, anchors=False)
    assert fr.n_heuristic == 0
    assert fr.epsilon == 0.05 and fr.epsilon_depth > 0 and fr.stats["epsilon_from_combine"] >= 1
    assert len(fr) < len(exact)
    assert_achievable(cg, fr)
    bound = fr.memory_bound_factor
    for m, t in zip(exact.memory, exact.time):
        assert np.any((fr.time <= t) & (fr.memory <= bound * m * (1 + 1e-12)))


def test_auto_epsilon_never_turns_on_when_exact_or_explicit(monkeypatch):
    monkeypatch.setattr(_track_module(), "AUTO_EPSILON_CELL_POINTS", 1)
    cg = random_chain(20, 8, layouts=4, options=2, seed=3, integer_costs=True)
    ref = track(cg, exact=True, epsilon=0.0)
    for fr in (track(cg, exact=True), track(cg, epsilon=0.0)):
        assert fr.epsilon == 0.0 and "epsilon_from_combine" not in fr.stats
        assert_same_frontier(fr, ref)
    assert track(cg).epsilon == AUTO_EPSILON


@pytest.mark.parametrize("layouts", [False, True])
def test_auto_epsilon_past_its_exact_budget_starts_over_thinned(monkeypatch, layouts):
    # repeated layers whose exact steps pass AUTO_EXACT_TERMS before any cell is large: the
    # run starts over with AUTO_EPSILON from its first step, which is the explicit thinned run
    monkeypatch.setattr(_track_module(), "AUTO_EXACT_TERMS", 50)
    monkeypatch.setattr(_track_module(), "AUTO_EPSILON", 0.05)
    cg = repeated_blocks(8, k=8, layouts=layouts, seed=2)
    assert _track_module().edges_per_table(cg) == 8.0  # 5 tables for 40 edges
    fr = track(cg, anchors=False)
    attempt = fr.stats["auto_exact_attempt"]
    assert attempt["terms"] > 50 and attempt["combines"] >= 1 and "epsilon_from_combine" not in fr.stats
    ref = track(cg, anchors=False, epsilon=0.05)
    assert fr.epsilon == 0.05 and fr.epsilon_depth == ref.epsilon_depth > 0
    assert_same_frontier(fr, ref)
    # a budget that the exact run never reaches changes nothing
    monkeypatch.setattr(_track_module(), "AUTO_EXACT_TERMS", 10**12)
    exact = track(cg, anchors=False)
    assert "auto_exact_attempt" not in exact.stats and exact.epsilon == 0.0


def test_auto_epsilon_never_starts_over_without_repeated_layers(monkeypatch):
    # no two edges share a table: the exact start is not thrown away, however long
    monkeypatch.setattr(_track_module(), "AUTO_EXACT_TERMS", 1)
    cg = random_chain(40, 10, layouts=8, options=2, seed=4, integer_costs=True)
    assert _track_module().edges_per_table(cg) == 1.0
    fr = track(cg, anchors=False)
    assert "auto_exact_attempt" not in fr.stats and fr.epsilon == 0.0
    assert_same_frontier(fr, track(cg, exact=True, epsilon=0.0, anchors=False))


def test_a_cost_array_given_for_several_edges_is_stored_once():
    tab = np.ones((3, 3, 2))
    cg = CostGraph([np.ones((3, 2))] * 4, [(0, 1, tab), (1, 2, tab), (2, 3, tab.copy())])
    assert cg.edges[0][2] is cg.edges[1][2] and cg.edges[2][2] is not cg.edges[0][2]
    assert _track_module().edges_per_table(cg) == 1.5
    with pytest.raises(CostGraphError, match=r"edge 1 \(1->2\): cost must have shape \(3, 2, 2\)"):
        CostGraph([np.ones((3, 2))] * 2 + [np.ones((2, 2))], [(0, 1, tab), (1, 2, tab)])


@pytest.mark.parametrize("forbidden", [False, True])
def test_a_layout_table_given_for_several_edges_is_stored_once(forbidden):
    # a table with absent options (+inf, or the 1e18 sentinel) is stored with them as +inf:
    # that copy is made once for every edge given the table, so the edges still share it
    tab = np.ones((2, 2, 2, 2))
    if forbidden:
        tab[0, 1, 1] = 1e18
    layout = np.array([0, 1, 1])
    shared = LayoutEdge(layout, layout, tab)
    edges = [(u, u + 1, shared) for u in range(3)]
    cg = CostGraph([np.ones((3, 2))] * 4, edges + [(0, 3, LayoutEdge(layout, layout, tab))])
    assert cg.edges[0][2].table is cg.edges[1][2].table is cg.edges[2][2].table
    assert cg.edges[3][2].table is not cg.edges[0][2].table
    assert _track_module().edges_per_table(cg) == 2.0
    assert cg.n_forbidden == (4 if forbidden else 0)
    assert np.isinf(cg.edges[0][2].table[0, 1, 1]).all() == forbidden


@pytest.mark.parametrize("bad", ["fast", "", -1, float("nan"), True, None])
def test_parse_epsilon_names_the_bad_value(bad):
    with pytest.raises(InvalidInputError, match=r"epsilon must be .*got"):
        parse_epsilon(bad)
    with pytest.raises(InvalidInputError, match="epsilon must be"):
        track(random_chain(3, 2, seed=0), epsilon=bad)


def test_parse_epsilon_accepts_auto_and_numbers():
    assert parse_epsilon("auto") == "auto"
    assert parse_epsilon("0.01") == 0.01 and parse_epsilon(0) == 0.0 and parse_epsilon(np.float32(0.5)) == 0.5


def _collect_often(monkeypatch, every):
    """Garbage-collect provenance after every ``every``-th table registered (the engine does so
    only near its memory limit); returns the list of bytes freed by each collection."""
    from tensoropt_py.elimination import table

    freed = []
    register = table.Context.register

    def register_then_collect(self, tab, count=True):
        out = register(self, tab, count)
        if tab.id % every == 0:
            freed.append(self.collect())
        return out

    monkeypatch.setattr(table.Context, "register", register_then_collect)
    return freed


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed,layouts,eps", [(3, 4, 0.0), (11, 4, 0.01), (5, None, 1e-3)])
def test_collected_provenance_unrolls_to_the_same_strategies(method, seed, layouts, eps, monkeypatch):
    # heuristic eliminations (the "auto" fork and its snapshot) and batched combines (pieces),
    # with the provenance no table in use reaches dropped along the way
    from tensoropt_py.elimination import table

    cg = random_layered_dag(8, 3, 5, layouts=layouts, options=2, skip_prob=0.4, seed=seed)
    kw = dict(method=method, exact=False, epsilon=eps, max_merged_configs=8, threads=1)
    monkeypatch.setattr(table, "_MEMO_MIN_TERMS", 1)
    monkeypatch.setattr(table, "_MAX_TERMS_PER_BATCH", 256)
    ref = track(cg, **kw)
    freed = _collect_often(monkeypatch, 3)
    fr = track(cg, **kw)
    assert sum(freed) > 0 and fr.stats["collected_bytes"] > 0
    assert fr.stats["heuristic_runs"] == 2
    np.testing.assert_array_equal(fr.memory, ref.memory)
    np.testing.assert_array_equal(fr.time, ref.time)
    np.testing.assert_array_equal(fr.choices, ref.choices)
    np.testing.assert_array_equal(fr.edge_choices, ref.edge_choices)
    assert fr.stats["stored_points"] < ref.stats["stored_points"]
    assert_achievable(cg, fr)


@pytest.mark.parametrize("method", METHODS)
def test_collected_provenance_with_memo_hits(method, monkeypatch):
    # repeated layers: memo hits share arrays with earlier tables; collection copies, never
    # writes into them
    from tensoropt_py.elimination import table

    cg = repeated_blocks(5, layouts=True)
    monkeypatch.setattr(table, "_MEMO_MIN_TERMS", 1)
    ref = track(cg, method=method, exact=True, epsilon=1e-3, threads=1)
    freed = _collect_often(monkeypatch, 2)
    fr = track(cg, method=method, exact=True, epsilon=1e-3, threads=1)
    assert sum(freed) > 0 and fr.stats["memo_hits"] > 0
    np.testing.assert_array_equal(fr.memory, ref.memory)
    np.testing.assert_array_equal(fr.choices, ref.choices)
    np.testing.assert_array_equal(fr.edge_choices, ref.edge_choices)
    assert_achievable(cg, fr)


@settings(max_examples=40, deadline=None)
@given(small_dags())
def test_exact_equals_brute_force_with_collection_everywhere(cg):
    from tensoropt_py.elimination import table

    register = table.Context.register

    def register_then_collect(self, tab, count=True):
        out = register(self, tab, count)
        self.collect()
        return out

    table.Context.register = register_then_collect
    try:
        assert_exact_by_both_methods(cg)
    finally:
        table.Context.register = register


def test_memory_limit_collects_before_it_gives_up():
    # a limit the released provenance alone would pass: collected, the run fits and gives
    # the same frontier and strategies
    cg = random_chain(200, 12, layouts=4, options=2, seed=1)
    ref = track(cg, epsilon=0.01, threads=1)
    limit = ref.stats["peak_table_bytes"] // 2
    fr = track(cg, epsilon=0.01, threads=1, max_memory=limit, on_memory_limit="raise")
    assert "collected_bytes" not in ref.stats
    assert fr.stats["collected_bytes"] > 0 and fr.stats["peak_table_bytes"] <= limit
    np.testing.assert_array_equal(fr.memory, ref.memory)
    np.testing.assert_array_equal(fr.time, ref.time)
    np.testing.assert_array_equal(fr.choices, ref.choices)


def test_skipping_dominated_terms_leaves_a_zoo_frontier_as_it_was(monkeypatch):
    """A two-layer Transformer on 8 devices, tracked on 2 threads with the kernel looking for
    terms another strictly dominates in every node elimination it can (and in none): the same
    frontier and strategies, bit for bit."""
    import tensoropt_py as to
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.graph import zoo

    cg = build_cost_graph(zoo.transformer(layers=2), to.Cluster.preset("v100-2x8"), 8).cost_graph
    a, looked = _track_forcing(monkeypatch, cg, skip_dominated="always")
    b, _ = _track_forcing(monkeypatch, cg, skip_dominated="never")
    assert looked >= 10
    _assert_same_run(a, b)


def _track_forcing(monkeypatch, cg, **options):
    """Default ``track`` of ``cg`` on 2 threads with the kernel's ``options`` forced in every
    call, and how many of its calls had outer terms to compare (two or more per cell)."""
    import tensoropt_py.elimination.table as table

    run_kernel = table.run_kernel
    comparable = []

    def forced(*args, **kw):
        outer = kw.get("outer")
        comparable.append(outer is not None and outer[1].shape[1] >= 2)
        return run_kernel(*args, **{**kw, **options})

    monkeypatch.setattr(table, "run_kernel", forced)
    try:
        return track(cg, threads=2), sum(comparable)
    finally:
        monkeypatch.setattr(table, "run_kernel", run_kernel)


def _assert_same_run(a, b):
    for name in ("memory", "time", "choices", "edge_choices"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("seed", range(8))
def test_every_kernel_shortcut_leaves_the_run_as_it_was(monkeypatch, seed):
    """Whole runs (default settings, 2 threads) on random graphs of repeated blocks with a
    side node each, with the kernel's shortcuts all forced on (covered and strictly dominated
    terms skipped, the sweep, four points at a time) and all off: the same frontier and
    strategies, bit for bit."""
    import tensoropt_py.elimination._kernels as compiled
    from tensoropt_py.engine.random_graphs import random_repeated_blocks

    rng = np.random.default_rng(seed)
    cg = random_repeated_blocks(int(rng.integers(6, 10)), k=int(rng.integers(8, 14)), side=True, seed=seed)
    default_simd = compiled._use_simd(True)
    try:
        a, compared = _track_forcing(monkeypatch, cg, skip_covered="always", skip_dominated="always", sweep="always")
        compiled._use_simd(False)
        b, _ = _track_forcing(monkeypatch, cg, skip_covered="never", skip_dominated="never", sweep="never")
    finally:
        compiled._use_simd(default_simd)
    assert compared >= 5
    _assert_same_run(a, b)
