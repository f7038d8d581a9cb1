"""One-node descent and the relaxation's lower bounds: the ends of a frontier whose exact
optima are out of reach (brute force on small cyclic graphs)."""

import importlib
import itertools

import numpy as np
import pytest

from tensoropt_py.engine import CostGraph, evaluate, min_sum, track
from tensoropt_py.engine.random_graphs import random_cyclic_graph, random_repeated_blocks, random_small_dag
from tensoropt_py.engine import polish
from tensoropt_py.engine.polish import descend, descend_many, reoptimize_windows
from tensoropt_py.engine.screen import lower_bounds, relaxation_bounds, window_bound
from tensoropt_py.errors import InfeasibleError, InvalidInputError

LAMS = [0.0, 1e-9, 1.0, np.inf]


def _value(mem, tim, lam):
    """The objective as a tuple compared lexicographically (memory then time for lam = inf)."""
    return (float(mem), float(tim)) if np.isinf(lam) else (float(tim + lam * mem), 0.0)


def _beats(a, b, rtol=1e-9):
    if a[0] < b[0] - rtol * abs(b[0]):
        return True
    return a[0] <= b[0] + rtol * abs(b[0]) and a[1] < b[1] - rtol * abs(b[1])


def _best_with(cg, ch, ech, moved, lam):
    """The best objective with the nodes of ``moved`` (node -> config) moved, every other node
    and the options of the edges not at them as in ``(ch, ech)``: the options of the edges at
    them by brute force."""
    ch = ch.copy()
    for i, k in moved.items():
        ch[i] = k
    incident = [e for e, (u, v, *_r) in enumerate(cg._norm) if u in moved or v in moved]
    best = None
    for opts in itertools.product(*[range(cg.n_options(e)) for e in incident]):
        trial = ech.copy()
        trial[incident] = opts
        m, t = evaluate(cg, ch[None], trial[None])
        if not (np.isfinite(m[0]) and np.isfinite(t[0])):
            continue
        value = _value(m[0], t[0], lam)
        if best is None or _beats(value, best, rtol=0.0):
            best = value
    return best


def _optimum(cg, lam):
    """The exact optimum's objective (memory for lam = inf), None when every strategy is forbidden."""
    try:
        opt = min_sum(cg, lam)
    except InfeasibleError:
        return None
    return opt.memory if np.isinf(lam) else opt.value


def _graph(seed):
    return random_cyclic_graph(seed=seed, forbidden_prob=0.05) if seed % 2 else random_small_dag(seed=seed)


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("lam", LAMS)
def test_descent_never_worsens_and_ends_where_no_node_or_edge_move_improves(seed, lam):
    cg = _graph(seed)
    rng = np.random.default_rng(seed)
    start = np.zeros(cg.n_nodes, dtype=np.int64)  # config 0 is never forbidden
    start[:] = [rng.integers(0, k) for k in cg.n_configs]
    start_edges = np.zeros(cg.n_edges, dtype=np.int64)
    m0, t0 = evaluate(cg, start[None], start_edges[None])
    ch, ech = descend(cg, start, start_edges, lam)
    m, t = evaluate(cg, ch[None], ech[None])
    assert np.isfinite(m[0]) or not np.isfinite(m0[0])
    if np.isfinite(m0[0]) and np.isfinite(t0[0]):
        assert not _beats(_value(m0[0], t0[0], lam), _value(m[0], t[0], lam))
    if not (np.isfinite(m[0]) and np.isfinite(t[0])):
        return
    reached = _value(m[0], t[0], lam)
    for i in range(cg.n_nodes):
        for k in range(cg.n_configs[i]):
            moved = _best_with(cg, ch, ech, {i: k}, lam)
            assert moved is None or not _beats(moved, reached), (i, k, moved, reached)
    for u, v in {(min(u, v), max(u, v)) for u, v, *_r in cg._norm if u != v}:  # nor does moving both ends of an edge
        for ku, kv in itertools.product(range(cg.n_configs[u]), range(cg.n_configs[v])):
            moved = _best_with(cg, ch, ech, {u: ku, v: kv}, lam)
            assert moved is None or not _beats(moved, reached), (u, v, ku, kv, moved, reached)


@pytest.mark.parametrize("seed", range(20))
def test_lower_bounds_never_pass_the_exact_optima(seed):
    cg = _graph(seed)
    rb = relaxation_bounds(cg, [0.0, 1e-9, 1.0])
    bound = lower_bounds(rb)
    for row, lam in enumerate([0.0, 1e-9, 1.0, np.inf]):
        value = _optimum(cg, lam)
        if value is None:  # every strategy forbidden: nothing to bound
            return
        assert bound[row] <= value * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("seed", range(12))
def test_ends_out_of_exact_reach_are_descended_and_their_gap_is_reported(seed, monkeypatch):
    from tensoropt_py.engine import scalar

    cg = random_cyclic_graph(n_nodes=7, max_k=4, edge_prob=0.5, seed=seed)
    plain = track(cg, epsilon=0.05, max_merged_configs=2, anchors=False)
    monkeypatch.setattr(scalar, "MAX_FACTOR_ENTRIES", 1)  # every exact optimum is refused
    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "_ANCHORS_IN_PROCESS", False)
    fr = track(cg, epsilon=0.05, max_merged_configs=2)
    assert "lam=0" in fr.stats["anchors_skipped"] and "lam=inf" in fr.stats["anchors_skipped"]
    assert fr.stats["anchors"].startswith("skipped")
    # the descended ends, and the points best for any weight, are never worse than the tracked
    # ones, and every point is achievable
    assert fr.time.min() <= plain.time.min() and fr.memory.min() <= plain.memory.min()
    for lam in np.geomspace(1e-9, 1e3, 13):
        assert (fr.time + lam * fr.memory).min() <= (plain.time + lam * plain.memory).min() * (1 + 1e-12)
    assert fr.stats.get("descent_gain", 0.0) >= 0.0
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)
    # the gaps are measured against a true lower bound, at least the relaxation's: at least the
    # gap to the exact optimum, at most the gap to the relaxation's bound
    monkeypatch.undo()
    bound = lower_bounds(relaxation_bounds(cg, [0.0]))
    gaps = fr.stats["end_gaps"]
    assert gaps["fastest"] <= fr.time.min() / bound[0] - 1 + 1e-12
    assert gaps["smallest"] <= fr.memory.min() / bound[-1] - 1 + 1e-12
    assert gaps["fastest"] >= fr.time.min() / min_sum(cg, 0.0).value - 1 - 1e-9
    assert gaps["smallest"] >= fr.memory.min() / min_sum(cg, np.inf).memory - 1 - 1e-9


def test_descend_rejects_bad_input():
    cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    for lam in (-1.0, np.nan):
        with pytest.raises(InvalidInputError, match="lam must be"):
            descend(cg, [0, 0], [0], lam)
    with pytest.raises(InvalidInputError, match="max_sweeps"):
        descend(cg, [0, 0], [0], 0.0, max_sweeps=0)
    with pytest.raises(InvalidInputError, match="2 and 1 entries"):
        descend(cg, [0], [0], 0.0)
    with pytest.raises(InvalidInputError, match="configs of their nodes"):
        descend(cg, [0, 2], [0], 0.0)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("batch_bytes", [None, 1])
def test_descending_many_at_once_equals_one_by_one(seed, batch_bytes, monkeypatch):
    """Strategies that descend in lockstep (several weights, shared tables, in one batch or one
    strategy per batch) reach what each reaches alone."""
    if batch_bytes is not None:
        monkeypatch.setattr(polish, "_DESCENT_BATCH_BYTES", batch_bytes)
    cg = random_repeated_blocks(4, k=3, side=True, seed=seed) if seed % 3 == 2 else _graph(seed)
    rng = np.random.default_rng(seed)
    lams = [0.0, np.inf, 1e-9, 1.0, np.inf, 0.3, 0.0][: 3 + seed % 5]
    starts = np.array([[rng.integers(0, k) for k in cg.n_configs] for _ in lams], dtype=np.int64).reshape(len(lams), -1)
    start_edges = np.zeros((len(lams), cg.n_edges), dtype=np.int64)
    ch, ech = descend_many(cg, starts, start_edges, lams)
    assert ch.shape == starts.shape and ech.shape == start_edges.shape
    for r, lam in enumerate(lams):
        one, one_edges = descend(cg, starts[r], start_edges[r], lam)
        np.testing.assert_array_equal(ch[r], one)
        np.testing.assert_array_equal(ech[r], one_edges)


def test_descend_many_rejects_bad_input():
    cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    with pytest.raises(InvalidInputError, match="S weights"):
        descend_many(cg, [[0, 0]], [[0]], [0.0, 1.0])
    with pytest.raises(InvalidInputError, match="S weights"):
        descend_many(cg, [[0, 0]], [[0]], 0.0)
    with pytest.raises(InvalidInputError, match="S weights"):
        descend_many(cg, [0, 0], [0], [0.0])
    with pytest.raises(InvalidInputError, match="rectangular"):
        descend_many(cg, [[0, 0], [0]], [[0], [0]], [0.0, 0.0])
    with pytest.raises(InvalidInputError, match="lam must be"):
        descend_many(cg, [[0, 0]], [[0]], ["fast"])
    with pytest.raises(InvalidInputError, match="configs of their nodes"):
        descend_many(cg, [[0, 0], [0, 2]], [[0], [0]], [0.0, 0.0])


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("lam", LAMS)
def test_windows_never_worsen_and_one_window_of_every_node_is_the_exact_optimum(seed, lam):
    cg = _graph(seed)
    exact = _optimum(cg, lam)
    if exact is None:
        return
    start = np.zeros(cg.n_nodes, dtype=np.int64)  # config 0 is never forbidden (but may meet a forbidden edge)
    m0, t0 = evaluate(cg, start[None], np.zeros((1, cg.n_edges), dtype=np.int64))
    for window in (1, 2, 3, cg.n_nodes):
        ch, ech, solved = reoptimize_windows(cg, start, np.zeros(cg.n_edges, dtype=np.int64), lam, window=window)
        m, t = evaluate(cg, ch[None], ech[None])
        assert solved >= 1
        if np.isfinite(m0[0]) and np.isfinite(t0[0]):
            assert not _beats(_value(m0[0], t0[0], lam), _value(m[0], t[0], lam))
    # the last run solved the whole graph as one window: the exact optimum
    assert _value(m[0], t[0], lam)[0] == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("lam", LAMS)
def test_best_options_of_edges_sharing_tables_match_edge_by_edge(seed, lam):
    # the options are set table by table; edge by edge (the rule itself) gives the same, from
    # options in range, out of range and at forbidden entries
    from tensoropt_py.engine.polish import _argbest, _best_options, _better, _objective

    rng = np.random.default_rng(seed)
    if seed % 3 == 0:  # options within and just past rounding of one another (the rule's tolerance)
        near = 1.0 + np.array([0.0, -1e-12, 1e-12, -1e-6, 1e-6])
        tab = rng.uniform(1, 10, size=(2, 2, 1, 2)) * near[rng.integers(0, 5, size=(2, 2, 5, 2))]
        cg = CostGraph([rng.uniform(1, 10, size=(2, 2))] * 3, [(0, 1, tab), (1, 2, tab), (0, 2, tab)])
    elif seed % 3 == 1:
        cg = random_repeated_blocks(4, seed=seed)
    else:
        cg = random_cyclic_graph(seed=seed, forbidden_prob=0.1, max_options=3)
    ch = np.array([rng.integers(0, k) for k in cg.n_configs], dtype=np.int64)
    start = np.array([rng.integers(-1, cg.n_options(e) + 1) for e in range(cg.n_edges)], dtype=np.int64)
    expected = start.copy()
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        rows = tab[smap[ch[u]], dmap[ch[v]]]
        cost = _objective(rows[:, 0], rows[:, 1], lam)
        best = int(_argbest(cost, axis=0))
        if not 0 <= expected[e] < cost.shape[0] or _better(cost[best], cost[expected[e]]):
            expected[e] = best
    got = start.copy()
    _best_options(cg, ch, got, lam)
    assert got.tolist() == expected.tolist()
    # an option beaten by less than rounding stays; one beaten by more gives way
    tab = np.array([[1.0, 1.0 - 1e-12], [1.0, 1.0 + 1e-12], [1.0, 1.0 + 1e-6]])[None, None]
    two = CostGraph([np.ones((1, 2))] * 2, [(0, 1, tab)])
    for now, best in ((1, 1), (2, 0), (-1, 0)):
        ech = np.array([now])
        _best_options(two, np.zeros(2, dtype=np.int64), ech, lam)
        assert ech.tolist() == [best]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [0.0, 0.3, np.inf])
def test_repeated_windows_are_solved_once_and_change_nothing(seed, lam, monkeypatch):
    # windows of identical content (repeated blocks, the rest alike) share one exact solve;
    # without that memo (every window its own key) the results are the same
    import tensoropt_py.engine.polish as polish
    import tensoropt_py.engine.screen as screen

    solve = polish._min_sum_within  # what both solve each window with
    cg = random_repeated_blocks(8, seed=seed)
    start = np.zeros(cg.n_nodes, dtype=np.int64)
    no_ech = np.zeros(cg.n_edges, dtype=np.int64)
    results = []
    for memo in (True, False):
        solves = []
        for module in (polish, screen):
            monkeypatch.setattr(module, "_min_sum_within", lambda *a, _f=solve, **k: solves.append(1) or _f(*a, **k))
            if not memo:
                keys = itertools.count()
                monkeypatch.setattr(module, "content_digest", lambda sub, tables: next(keys))
        ch, ech, solved = reoptimize_windows(cg, start, no_ech, lam, window=6)
        bound = window_bound(cg, lam, window=3)
        results.append((ch.tolist(), ech.tolist(), solved, bound, len(solves)))
    (ch, ech, solved, bound, n_memo), (ch0, ech0, solved0, bound0, n_all) = results
    assert (ch, ech, solved, bound) == (ch0, ech0, solved0, bound0)
    assert n_memo < n_all


def test_windows_leave_a_window_too_wide_as_it_is():
    cg = random_cyclic_graph(n_nodes=6, max_k=4, edge_prob=0.9, seed=3)
    start = np.zeros(cg.n_nodes, dtype=np.int64)
    ch, _, solved = reoptimize_windows(cg, start, np.zeros(cg.n_edges, dtype=np.int64), 0.0, window=6, max_entries=1)
    assert solved == 0 and ch.tolist() == start.tolist()


def test_windows_reject_bad_input():
    cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    for kwargs, match in [(dict(window=0), "window"), (dict(max_entries=0), "max_entries"),
                          (dict(max_work=0), "max_work"), (dict(max_work="many"), "max_work")]:
        with pytest.raises(InvalidInputError, match=match):
            reoptimize_windows(cg, [0, 0], [0], 0.0, **kwargs)
    with pytest.raises(InvalidInputError, match="lam must be"):
        reoptimize_windows(cg, [0, 0], [0], -1.0)


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("lam", LAMS)
def test_window_bounds_never_pass_the_exact_optimum_and_one_window_is_it(seed, lam):
    cg = _graph(seed)
    exact = _optimum(cg, lam)
    if exact is None:
        return
    for window in range(1, cg.n_nodes):
        assert window_bound(cg, lam, window=window) <= exact * (1 + 1e-9) + 1e-12
    assert window_bound(cg, lam, window=cg.n_nodes) == pytest.approx(exact, rel=1e-9)


def test_window_bound_is_none_when_a_window_is_too_wide_and_rejects_bad_input():
    cg = random_cyclic_graph(n_nodes=6, max_k=4, edge_prob=0.9, seed=3)
    assert window_bound(cg, 0.0, window=6, max_entries=1) is None
    for kwargs, match in [(dict(window=0), "window"), (dict(max_entries=0), "max_entries"), (dict(max_work=0), "max_work"), (dict(max_work="many"), "max_work")]:
        with pytest.raises(InvalidInputError, match=match):
            window_bound(cg, 0.0, **kwargs)
    with pytest.raises(InvalidInputError, match="lam must be"):
        window_bound(cg, np.nan)
