"""Config screening (engine/screen.py) and ``track(candidates=...)`` against brute force."""

import itertools

import numpy as np
import pytest

from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier, evaluate, min_sum, track
from tensoropt_py.engine.random_graphs import random_chain, random_cyclic_graph, random_small_dag
from tensoropt_py.engine.screen import (improving_moves, lam_grid, relaxation_bounds, restrict, screen_out,
                                        top_configs)
from tensoropt_py.errors import InvalidInputError

LAMS = np.array([0.0, 1e-3, 0.1, 1.0, 10.0])


def _graph(seed):
    if seed % 3 == 0:
        return random_small_dag(seed=seed)
    if seed % 3 == 1:
        return random_cyclic_graph(seed=seed, forbidden_prob=0.05)
    return random_chain(5, 3, options=2, seed=seed)


def _all_strategies(cg):
    """Every (configs, edge options) strategy of a small graph with its costs."""
    ranges = [range(k) for k in cg.n_configs] + [range(cg.n_options(e)) for e in range(cg.n_edges)]
    rows = np.array(list(itertools.product(*ranges)), dtype=np.int64)
    ch, ech = rows[:, :cg.n_nodes], rows[:, cg.n_nodes:]
    mem, tim = evaluate(cg, ch, ech)
    return ch, ech, mem, tim


@pytest.mark.parametrize("seed", range(24))
def test_bounds_are_lower_bounds_of_min_marginals(seed):
    cg = _graph(seed)
    ch, _, mem, tim = _all_strategies(cg)
    rb = relaxation_bounds(cg, LAMS)
    ok = np.isfinite(mem) & np.isfinite(tim)
    for i, b in enumerate(rb.bounds):
        assert b.shape == (LAMS.size + 1, cg.n_configs[i])
        for k in range(cg.n_configs[i]):
            sel = ok & (ch[:, i] == k)
            for row, lam in enumerate(LAMS):
                exact = (tim[sel] + lam * mem[sel]).min() if sel.any() else np.inf
                assert b[row, k] <= exact * (1 + 1e-12) + 1e-12
            exact_mem = mem[sel].min() if sel.any() else np.inf
            assert b[-1, k] <= exact_mem * (1 + 1e-12) + 1e-12


@pytest.mark.parametrize("seed", range(12))
def test_bounds_are_exact_on_trees(seed):
    cg = random_chain(6, 3, options=2, seed=seed)  # a chain is its own spanning tree
    ch, _, mem, tim = _all_strategies(cg)
    rb = relaxation_bounds(cg, LAMS)
    assert rb.tree_edges.all()
    ok = np.isfinite(mem) & np.isfinite(tim)
    for i, b in enumerate(rb.bounds):
        for k in range(cg.n_configs[i]):
            sel = ok & (ch[:, i] == k)
            for row, lam in enumerate(LAMS):
                assert b[row, k] == pytest.approx((tim[sel] + lam * mem[sel]).min(), rel=1e-9)


@pytest.mark.parametrize("seed", range(30))
def test_screening_keeps_the_exact_frontier(seed):
    cg = _graph(seed)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        return
    rng = np.random.default_rng(seed)
    # achievable points: a few random strategies and a few exact single-objective optima
    ch = np.stack([rng.integers(0, k, size=8) for k in cg.n_configs], axis=1)
    mem, tim = evaluate(cg, ch)
    opts = [min_sum(cg, lam) for lam in (0.0, 0.5, np.inf)]
    mem = np.concatenate([mem, [o.memory for o in opts]])
    tim = np.concatenate([tim, [o.time for o in opts]])
    fin = np.isfinite(mem) & np.isfinite(tim)
    mem, tim = mem[fin], tim[fin]
    drop = screen_out(relaxation_bounds(cg, lam_grid(cg, 6)), mem, tim)
    keep = [np.nonzero(~d)[0] for d in drop]
    if any(k.size == 0 for k in keep):  # every strategy is dominated by the given points
        sub_m, sub_t = np.array([]), np.array([])
    else:
        sub = brute_force_frontier(restrict(cg, keep))
        sub_m, sub_t = sub.memory, sub.time
    m = np.concatenate([sub_m, mem])
    t = np.concatenate([sub_t, tim])
    order = np.lexsort((t, m))
    m, t = m[order], t[order]
    front = t < np.minimum.accumulate(np.concatenate([[np.inf], t[:-1]]))
    np.testing.assert_allclose(m[front], bf.memory, rtol=1e-12)
    np.testing.assert_allclose(t[front], bf.time, rtol=1e-12)


@pytest.mark.parametrize("seed", range(12))
def test_no_move_improves_the_exact_frontier(seed):
    cg = _graph(seed)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        return
    moves = improving_moves(cg, bf.choices, bf.edge_choices, bf.memory, bf.time, bf.memory, bf.time)
    assert all(m.size == 0 for m in moves)


@pytest.mark.parametrize("seed", range(12))
def test_moves_are_the_one_node_moves_that_leave_the_dominated_region(seed):
    # strategies of a small graph, moved one node at a time by brute force: the node to each
    # of its configs, its edges to their fastest option (the first of equal ones), the move
    # evaluated whole and kept where it beats half of the exact frontier
    cg = _graph(seed)
    ch, ech, mem, tim = _all_strategies(cg)
    ok = np.flatnonzero(np.isfinite(mem) & np.isfinite(tim))
    if ok.size == 0:
        return
    rng = np.random.default_rng(seed)
    start = rng.choice(ok, size=min(5, ok.size), replace=False)
    bf = brute_force_frontier(cg)  # half of the exact frontier: some moves beat it, most do not
    half = np.sort(rng.choice(len(bf), size=max(1, len(bf) // 2), replace=False))
    fm, ft = bf.memory[half], bf.time[half]
    moves = improving_moves(cg, ch[start], ech[start], mem[start], tim[start], fm, ft)
    tol = 1e-9  # the function's tolerance for sums taken in another order
    expected = [set() for _ in range(cg.n_nodes)]
    for p in start:
        for i in range(cg.n_nodes):
            for k in range(cg.n_configs[i]):
                c2, e2 = ch[p].copy(), ech[p].copy()
                c2[i] = k
                for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
                    if i in (u, v):
                        e2[e] = int(np.argmin(tab[smap[c2[u]], dmap[c2[v]], :, 1]))
                (m2,), (t2,) = evaluate(cg, c2[None], e2[None])
                reach = ft[fm <= m2 * (1 + tol)]
                bound = reach.min() if reach.size else np.inf
                if np.isfinite(t2) and t2 < bound * (1 - tol):
                    expected[i].add(k)
    assert [sorted(m.tolist()) for m in moves] == [sorted(x) for x in expected]


def test_moves_find_a_better_config():
    # node 1's config 1 is better in both costs; the frontier of config 0 alone is beaten
    cg = CostGraph([np.array([[1.0, 1.0]]), np.array([[2.0, 2.0], [1.0, 1.0]])], [(0, 1, np.zeros((1, 2, 2)))])
    ch = np.array([[0, 0]])
    m, t = evaluate(cg, ch)
    moves = improving_moves(cg, ch, np.zeros((1, 1), dtype=np.int64), m, t, m, t)
    assert moves[0].tolist() == [] and moves[1].tolist() == [1]


def test_top_configs_and_restrict():
    cg = random_chain(4, 5, seed=3)
    keep = top_configs(relaxation_bounds(cg, [0.0, 1.0]), 1)
    assert all(1 <= k.size <= 3 for k in keep)  # at most one per row (time, time + memory, memory)
    sub = restrict(cg, keep)
    assert tuple(sub.n_configs) == tuple(k.size for k in keep)
    ch = np.zeros((1, cg.n_nodes), dtype=np.int64)
    full = np.array([[k[0] for k in keep]])
    assert evaluate(sub, ch) == pytest.approx(evaluate(cg, full))


def test_restrict_keeps_a_shared_table_shared():
    # edges given one table keep sharing its compacted copy (kept as it is by their LayoutEdges
    # and validated once by the CostGraph), while an edge of other classes gets its own
    rng = np.random.default_rng(0)
    shared = LayoutEdge(np.arange(4) % 2, np.arange(4) % 2, rng.uniform(size=(2, 2, 2)))
    cg = CostGraph([rng.uniform(size=(4, 2)) for _ in range(4)], [(u, u + 1, shared) for u in range(3)])
    keep = [np.arange(4), np.arange(4), np.arange(4), np.array([0, 2])]
    sub = restrict(cg, keep)
    tables = [e.table for _, _, e in sub.edges]
    assert tables[0] is tables[1] and tables[2] is not tables[0]
    ch = rng.integers(0, 2, size=(8, 4))
    full = np.array([[k[c] for k, c in zip(keep, row)] for row in ch])
    np.testing.assert_allclose(evaluate(sub, ch), evaluate(cg, full))


@pytest.mark.parametrize("seed", range(16))
def test_track_with_candidates(seed):
    cg = _graph(seed)
    bf = brute_force_frontier(cg)
    if len(bf) == 0:
        return
    fr = track(cg, exact=True, candidates=1)
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-9)
    np.testing.assert_allclose(t, fr.time, rtol=1e-9)
    assert np.all(np.diff(fr.memory) > 0) and np.all(np.diff(fr.time) < 0)
    # both ends are exact (the optima for lam = 0 and inf are in the candidates), the fastest
    # the least memory of the fastest strategies
    assert "anchor_ties" not in fr.stats
    assert (fr.time[-1], fr.memory[-1]) == (pytest.approx(bf.time[-1], rel=1e-12), pytest.approx(bf.memory[-1], rel=1e-12))
    assert fr.memory.min() == pytest.approx(bf.memory.min(), rel=1e-12)
    # every point is weakly dominated by the exact frontier
    for mm, tt in zip(fr.memory, fr.time):
        assert (bf.time[bf.memory <= mm * (1 + 1e-12)] <= tt * (1 + 1e-12)).any()
    if fr.stats["unproven_configs"] == 0:  # proven: the exact frontier itself
        np.testing.assert_allclose(fr.memory, bf.memory, rtol=1e-12)
        np.testing.assert_allclose(fr.time, bf.time, rtol=1e-12)
    # enough candidates for every config: the exact frontier
    full = track(cg, exact=True, candidates=max(cg.n_configs))
    np.testing.assert_allclose(full.memory, bf.memory, rtol=1e-12)
    np.testing.assert_allclose(full.time, bf.time, rtol=1e-12)
    assert full.stats["unproven_configs"] == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_bad_candidates(bad):
    with pytest.raises(InvalidInputError, match="candidates"):
        track(random_chain(3, 2, seed=0), candidates=bad)


def test_bad_lams():
    cg = random_chain(3, 2, seed=0)
    for lams in ([1.0], [], [0.0, -1.0], [0.0, np.inf]):
        with pytest.raises(InvalidInputError, match="lams"):
            relaxation_bounds(cg, lams)


def test_bounds_and_candidates_respect_a_memory_limit():
    from tensoropt_py.errors import MemoryLimitError

    cg = random_chain(4, 5, seed=1)
    with pytest.raises(MemoryLimitError, match="max_bytes"):
        relaxation_bounds(cg, [0.0, 1.0], max_bytes=64)
    with pytest.raises(MemoryLimitError):
        track(cg, candidates=2, max_memory=64, on_memory_limit="raise")


@pytest.mark.parametrize("seed", range(6))
def test_rows_of_shared_tables_are_cached_and_change_nothing(seed, monkeypatch):
    # repeated layers share edge tables, whose weighted rows are computed once; a cache that
    # holds a single edge's rows must give the same bounds
    from tensoropt_py.engine import screen

    rng = np.random.default_rng(seed)
    # three edge costs, each given for several edges, as the cost builder shares the tables of
    # repeated layers; chords close cycles (relaxed edges)
    kinds = [LayoutEdge(rng.permutation(3)[:2], rng.permutation(3)[:2], rng.uniform(0, 5, size=(3, 3, 2, 2)))
             for _ in range(3)]
    pairs = [(i, i + 1) for i in range(9)] + [(i, i + 3) for i in range(0, 7, 2)]
    cg = CostGraph([rng.uniform(1, 10, size=(2, 2)) for _ in range(10)],
                   [(u, v, kinds[int(k)]) for (u, v), k in zip(pairs, rng.integers(0, 3, size=len(pairs)))])
    lams = [0.0, 1e-3, 1.0]
    computed = []
    edge_rows = screen._edge_rows
    monkeypatch.setattr(screen, "_edge_rows", lambda *a: computed.append(1) or edge_rows(*a))
    shared_rows = relaxation_bounds(cg, lams)
    assert len(computed) <= len(kinds)  # each shared table's rows once
    monkeypatch.setattr(screen, "_ROW_CACHE_BYTES", 0)
    one_edge_cached = relaxation_bounds(cg, lams)
    # without the cache: every edge's rows computed for it
    monkeypatch.setattr(screen._RowCache, "rows", lambda self, tab, ua, ub: list(screen._edge_rows(tab, ua, ub, self.lams)))
    expect = relaxation_bounds(cg, lams)
    for rb in (shared_rows, one_edge_cached):
        for a, b in zip(rb.bounds, expect.bounds):
            np.testing.assert_array_equal(a, b)
