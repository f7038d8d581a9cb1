"""track never grows past max_memory: it degrades to a larger epsilon or raises MemoryLimitError."""

import numpy as np
import pytest

from tensoropt_py.engine import evaluate, track
from tensoropt_py.engine.random_graphs import random_chain
from tensoropt_py.errors import InvalidInputError, MemoryLimitError


def _graph():
    return random_chain(30, 20, layouts=4, seed=0)


def test_raise_names_the_limit():
    from tensoropt_py.engine.track import leaf_bytes

    cg = _graph()
    limit = leaf_bytes(cg) + 1000
    with pytest.raises(MemoryLimitError, match=r"more than the limit of [\d.]+ [KMG]iB \(max_memory\)") as info:
        track(cg, exact=True, max_memory=limit, on_memory_limit="raise")
    assert info.value.limit_bytes == limit and info.value.used_bytes > limit


def test_degrades_to_a_bounded_epsilon():
    cg = _graph()
    full = track(cg, exact=True)
    peak = full.stats["peak_table_bytes"]
    assert full.epsilon == 0 and "memory_limit_retries" not in full.stats
    fr = track(cg, exact=True, max_memory=peak // 3)
    assert fr.epsilon > 0 and fr.stats["memory_limit_retries"][0][0] == 0.0
    assert fr.stats["peak_table_bytes"] <= peak // 3
    m, t = evaluate(cg, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory, rtol=1e-12)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)
    # the epsilon guarantee holds against the exact frontier
    bound = fr.memory_bound_factor
    for mm, tt in zip(full.memory, full.time):
        assert np.any((fr.time <= tt * (1 + 1e-12)) & (fr.memory <= mm * bound * (1 + 1e-12)))


def test_gives_up_after_the_largest_epsilon():
    from tensoropt_py.engine.track import leaf_bytes

    cg = _graph()
    with pytest.raises(MemoryLimitError, match="frontier tracking stopped") as info:
        track(cg, exact=True, max_memory=leaf_bytes(cg) + 100)
    assert info.value.used_bytes > leaf_bytes(cg) + 100


@pytest.mark.parametrize("bad", [0, -5, "1GB", True])
def test_bad_max_memory(bad):
    with pytest.raises(InvalidInputError, match="max_memory must be a positive number of bytes"):
        track(_graph(), max_memory=bad)


def test_bad_on_memory_limit():
    with pytest.raises(InvalidInputError, match="on_memory_limit must be"):
        track(_graph(), on_memory_limit="swap")


def test_leaf_tables_over_the_limit_are_refused_before_allocating():
    from tensoropt_py.engine.track import leaf_bytes

    cg = _graph()
    need = leaf_bytes(cg)
    assert need > 0
    with pytest.raises(MemoryLimitError, match=r"the leaf tables of this cost graph alone need"):
        track(cg, max_memory=need - 1)


def test_edges_sharing_a_table_share_their_leaf():
    from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier
    from tensoropt_py.engine.track import leaf_bytes

    rng = np.random.default_rng(0)
    tab = rng.integers(0, 5, (3, 3, 2, 2)).astype(float)
    tab.flags.writeable = False
    le = LayoutEdge([0, 1, 2], [0, 1, 2], tab)
    nodes = [rng.integers(0, 9, (3, 2)).astype(float) for _ in range(5)]
    shared = CostGraph(nodes, [(i, i + 1, le) for i in range(4)] + [(0, 4, le)])
    copied = CostGraph(nodes, [(i, i + 1, LayoutEdge([0, 1, 2], [0, 1, 2], np.array(tab))) for i in range(4)])
    assert leaf_bytes(shared) < leaf_bytes(copied)
    fr = track(shared, exact=True)
    bf = brute_force_frontier(shared)
    assert np.array_equal(fr.memory, bf.memory) and np.array_equal(fr.time, bf.time)
    m, t = evaluate(shared, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(m, fr.memory)


def test_memo_of_combines_gives_way_before_the_limit():
    # the memo of combine results counts toward max_memory, but is emptied (oldest first)
    # before the limit is declared reached: only the live tables themselves can raise
    from tensoropt_py.elimination.table import Context

    rng = np.random.default_rng(0)
    ctx = Context(max_bytes=1 << 40)
    a = ctx.node_leaf(0, rng.random((300, 2)))
    b = ctx.node_leaf(1, rng.random((300, 2)))
    pairs = np.array([(i, j) for i in range(300) for j in range(0, 300, 30)], dtype=np.int64)
    term_off = np.arange(0, len(pairs) + 1, 10, dtype=np.int64)  # 10 terms per output cell
    first = ctx.combine([a, b], term_off, pairs)
    assert ctx._memo_bytes > 0 and ctx.stats["memo_hits"] == 0
    again = ctx.combine([a, b], term_off, pairs)  # same content: served by the memo
    assert ctx.stats["memo_hits"] == 1
    np.testing.assert_array_equal(again.mem, first.mem)
    np.testing.assert_array_equal(again.time, first.time)
    ctx.max_bytes = ctx.held_bytes + ctx._memo_bytes // 2  # live tables fit, tables + memo do not
    ctx.node_leaf(2, rng.random((3, 2)))
    assert ctx._memo_bytes == 0 and not ctx._memo
    ctx.max_bytes = ctx.held_bytes  # now the next live table itself is over
    with pytest.raises(MemoryLimitError):
        ctx.node_leaf(3, rng.random((3, 2)))


def test_the_memo_counts_an_entry_kept_twice_once():
    # two slots of one kernel call can key the same cover bitsets: the second replaces the first
    from tensoropt_py.elimination.table import Context

    ctx = Context()
    ctx.remember("key", (np.zeros(10), np.zeros(5)))
    ctx.remember("key", (np.zeros(10), np.zeros(5)))
    assert len(ctx._memo) == 1 and ctx._memo_bytes == 120
    assert ctx.recall("key")[0].shape == (10,)
    ctx._drop_oldest_memo()
    assert ctx._memo_bytes == 0 and ctx.recall("key") is None


def test_a_run_past_its_auto_epsilon_retries_with_ten_times_it(monkeypatch):
    import importlib

    from tensoropt_py.engine.track import AUTO_EPSILON

    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "AUTO_EPSILON_CELL_POINTS", 1)
    cg = _graph()
    auto = track(cg, anchors=False)
    assert auto.epsilon == AUTO_EPSILON
    fr = track(cg, anchors=False, max_memory=auto.stats["peak_table_bytes"] // 2)
    retries = fr.stats["memory_limit_retries"]
    assert retries[0][0] == AUTO_EPSILON  # the epsilon the stopped run had switched to
    assert fr.epsilon >= 10 * AUTO_EPSILON and fr.stats["peak_table_bytes"] <= auto.stats["peak_table_bytes"] // 2


def _big_product(rng, n=200, cells=40):
    """Two tables of ``cells`` frontiers of ``n`` points: their cell-by-cell products (one term
    per output cell) hold up to n * n points each, far more than their inputs."""
    def table():
        off = np.arange(cells + 1, dtype=np.int64) * n
        m = np.sort(rng.random((cells, n)), axis=1).ravel()
        t = np.sort(rng.random((cells, n)), axis=1)[:, ::-1].ravel()
        return off, m, t
    return table(), table()


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_refuses_to_pass_its_byte_budget(threads):
    from tensoropt_py.elimination.kernels import KernelBudgetExceeded, run_kernel

    rng = np.random.default_rng(1)
    (o1, m1, t1), (o2, m2, t2) = _big_product(rng)
    cells = np.column_stack([np.arange(40), np.arange(40)]).astype(np.int64)
    term_off = np.arange(41, dtype=np.int64)
    args = ([o1, o2], [m1, m2], [t1, t2], term_off, cells, 0.0, threads)
    off, m, t, prov = run_kernel(*args)
    out_bytes = m.nbytes + t.nbytes + prov.nbytes
    with pytest.raises(KernelBudgetExceeded):
        run_kernel(*args, max_bytes=out_bytes // 4)
    # a budget that holds the buffers changes nothing
    off2, m2_, t2_, prov2 = run_kernel(*args, max_bytes=64 * out_bytes + (1 << 20))
    np.testing.assert_array_equal(off2, off)
    np.testing.assert_array_equal(m2_, m)
    np.testing.assert_array_equal(prov2, prov)


def test_a_combine_that_would_not_fit_raises_before_taking_the_memory():
    # one product whose output is far larger than its inputs: the limit is checked inside the
    # kernel, before the memory is taken, not only after the step (when it could be too late)
    from tensoropt_py.elimination.table import Context, FTable

    rng = np.random.default_rng(2)
    tables = _big_product(rng)
    ctx = Context()
    a, b = (ctx.register(FTable(o, m, t)) for o, m, t in tables)
    cells = np.column_stack([np.arange(40), np.arange(40)]).astype(np.int64)
    out = ctx.combine([a, b], np.arange(41), cells)
    need = out.nbytes()
    ctx.max_bytes = ctx.held_bytes + need // 4
    with pytest.raises(MemoryLimitError, match=r"one combine step would need [\d.]+ [KMG]iB with the tables held, more than the limit") as info:
        ctx.combine([a, b], np.arange(41), cells[::-1].copy())
    assert info.value.limit_bytes == ctx.max_bytes
    assert ctx.held_bytes <= ctx.max_bytes
    assert info.value.used_bytes > info.value.limit_bytes


def test_a_refused_step_that_fills_the_memo_again_still_raises(monkeypatch):
    # a refused kernel call whose cover bitsets go to the memo before the refusal: emptying
    # the memo and trying again must happen once, not until the memo stays empty
    import tensoropt_py.elimination.table as table
    from tensoropt_py.engine.random_graphs import random_layered_dag

    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) > 100:
            raise RuntimeError("the refused step is tried again and again")
        return run_kernel(*args, **kwargs)

    run_kernel = table.run_kernel
    monkeypatch.setattr(table, "run_kernel", counted)
    cg = random_layered_dag(4, 1, 4, options=2, seed=210786354, integer_costs=False)
    with pytest.raises(MemoryLimitError, match="one combine step would need"):
        track(cg, exact=True, epsilon=1e-3, method="elimination", threads=1, max_memory=45785,
              on_memory_limit="raise", anchors=False)
    fr = track(cg, exact=True, epsilon=1e-3, method="elimination", threads=1, max_memory=45785, anchors=False)
    assert fr.stats["memory_limit_retries"] and fr.memory_bound_factor > 1.001


def test_a_staged_product_stops_before_writing_out_its_terms(monkeypatch):
    # a node elimination's terms come as sums (row + col); when its product is staged, the
    # staged terms are built batch by batch, so a staged step past the limit stops after a
    # batch, not after writing out millions of terms outside the kernel's byte budget
    import tracemalloc

    import tensoropt_py.elimination.table as table
    from tensoropt_py.elimination.table import Context, FTable

    monkeypatch.setattr(table, "_STAGE_FACTOR", 0.0)
    monkeypatch.setattr(table, "_MAX_TERMS_PER_BATCH", 1 << 15)
    n, U = 3000, 1000
    off = np.arange(0, 2 * n + 1, 2, dtype=np.int64)  # n cells of two points each
    mem = np.tile([1.0, 2.0], n)
    tim = np.tile([2.0, 1.0], n)
    limit = 16 << 20
    ctx = Context(max_bytes=limit)
    parents = [ctx.register(FTable(off, mem, tim)) for _ in range(3)]
    row = np.stack([np.arange(n), np.arange(n)[::-1], np.zeros(n, dtype=np.int64)])
    col = np.stack([np.zeros(U, dtype=np.int64), np.zeros(U, dtype=np.int64), np.arange(U)])
    term_off = np.arange(n + 1, dtype=np.int64) * U
    tracemalloc.start()
    try:
        with pytest.raises(MemoryLimitError, match="more than the limit"):
            ctx._combine_outer(parents, term_off, row, col, thin=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # written out at once, the 3e6 staged terms alone take 48 MB (twice that while summed)
    assert peak < 3 * limit
