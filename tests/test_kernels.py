"""Compiled kernels == their pure NumPy references (provenance and tie-breaking included)."""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensoropt_py.elimination import MAX_SLOTS, _kernels, combine_outer, combine_ragged, reduce_ragged
from tensoropt_py.elimination.kernels import outer_skip_mask
from tensoropt_py.elimination.reference import (
    combine_reference,
    outer_skip_reference,
    reduce_ragged_reference,
    thin_reference,
)
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.engine import reduce


def random_table(rng, n_cells, max_pts, integer):
    offs, ms, ts = [0], [], []
    for _ in range(n_cells):
        p = int(rng.integers(1, max_pts + 1))
        if integer:
            pts = rng.integers(0, 15, size=(p, 2)).astype(float)
        else:
            pts = np.stack([10 ** rng.uniform(6, 9, p), 10 ** rng.uniform(-4, -1, p)], axis=1)
        f = reduce(pts)
        ms.extend(f[:, 0])
        ts.extend(f[:, 1])
        offs.append(len(ms))
    return np.array(offs), np.array(ms), np.array(ts)


def rounding_table(rng, n_cells, max_pts):
    """Frontiers one or a few ulps apart (memory 1 + k ulp, time 1 + (8 - k) ulp) or single
    points of 0, 0.5, 1 or 2: their sums round together (within a list and across lists)."""
    offs, ms, ts = [0], [], []
    for _ in range(n_cells):
        p = int(rng.integers(1, max_pts + 1))
        if p == 1 and rng.random() < 0.5:
            ms.append(float(rng.choice([0.0, 0.5, 1.0, 2.0])))
            ts.append(float(rng.choice([0.0, 0.5, 1.0, 2.0])))
        else:
            k = np.sort(rng.choice(8, size=min(p, 8), replace=False))
            ms.extend(1.0 + k * 2.0**-52)
            ts.extend(1.0 + (8 - k) * 2.0**-52)
        offs.append(len(ms))
    return np.array(offs), np.array(ms), np.array(ts)


def random_job(seed, integer, rounding=False):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(1, 5))
    if rounding:
        tables = [rounding_table(rng, int(rng.integers(1, 6)), int(rng.integers(1, 7))) for _ in range(S)]
    else:
        tables = [random_table(rng, int(rng.integers(1, 6)), int(rng.integers(1, 7)), integer) for _ in range(S)]
    n_out = int(rng.integers(1, 6))
    n_terms = rng.integers(0, 6, size=n_out)
    term_off = np.concatenate([[0], np.cumsum(n_terms)])
    cells = np.zeros((term_off[-1], S), dtype=np.int64)
    for s in range(S):
        lo = -1 if s > 0 else 0  # slot 0 always present; others sometimes absent
        cells[:, s] = rng.integers(lo, len(tables[s][0]) - 1, size=term_off[-1])
    return tables, term_off, cells


@settings(max_examples=150)
@given(st.integers(0, 10**6), st.booleans(), st.sampled_from([0.0, 0.0, 0.01, 0.2]),
       st.sampled_from(["auto", "heap", "staircase"]))
def test_combine_matches_reference(seed, integer, eps, merge):
    tables, term_off, cells = random_job(seed, integer)
    got = combine_ragged(tables, term_off, cells, epsilon=eps, threads=1, merge=merge)
    exp = combine_reference(tables, term_off, cells, epsilon=eps)
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


@pytest.mark.parametrize("seed", range(300))
def test_sums_that_round_together_match_the_reference(seed):
    # shifted memories and times that round to one value, within a list and across lists: every
    # merge path (and a tiny staircase limit that hands over to the heap) keeps the reference's
    # points with the reference's provenance
    tables, term_off, cells = random_job(seed, False, rounding=True)
    exp = combine_reference(tables, term_off, cells)
    for merge in ("auto", "heap", "staircase"):
        got = combine_ragged(tables, term_off, cells, threads=1, merge=merge)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e), merge
    offs, mems, tims = (list(x) for x in zip(*(tuple(np.ascontiguousarray(a) for a in t) for t in tables)))
    offs = [o.astype(np.int64) for o in offs]
    got = _kernels.combine_kernel(offs, mems, tims, np.ascontiguousarray(term_off, dtype=np.int64),
                                  np.ascontiguousarray(cells, dtype=np.int64), 0.0, [0, term_off.shape[0] - 1], None, 2)
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


@settings(max_examples=60)
@given(st.integers(0, 10**6), st.booleans(), st.integers(1, 4))
def test_staircase_gives_way_to_the_heap_midway(seed, integer, limit):
    # a tiny staircase limit: many cells start one by one, pass it and are merged again by
    # the heap; the result must not show it
    tables, term_off, cells = random_job(seed, integer)
    offs, mems, tims = (list(x) for x in zip(*(tuple(np.ascontiguousarray(a) for a in t) for t in tables)))
    offs = [o.astype(np.int64) for o in offs]
    term_off = np.ascontiguousarray(term_off, dtype=np.int64)
    cells = np.ascontiguousarray(cells, dtype=np.int64).reshape(-1, len(tables))
    got = _kernels.combine_kernel(offs, mems, tims, term_off, cells, 0.0, [0, term_off.shape[0] - 1], None, limit)
    exp = combine_reference(tables, term_off, cells, epsilon=0.0)
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


def test_long_frontiers_take_the_heap_and_agree():
    # a product of two 260-point frontiers whose 67,600 sums are all Pareto-optimal (more than
    # STAIR_LIMIT: "auto" turns to the heap), again from an equal cell (exact ties that only
    # provenance tells apart), and a shifted copy
    n = 260
    i = np.arange(float(n))
    coarse = (np.array([0, n]), i * 1000, (n - i) * 1000)
    fine = (np.array([0, n, 2 * n, 3 * n]), np.concatenate([i, i + 0.5, i]), np.concatenate([n - i, n + 0.5 - i, n - i]))
    term_off = np.array([0, 3])
    cells = np.array([[0, 2], [0, 0], [0, 1]])
    exp = combine_reference([coarse, fine], term_off, cells)
    assert np.diff(exp[0]).max() > int(_kernels.STAIR_LIMIT)
    for merge in ("auto", "heap", "staircase"):
        got = combine_ragged([coarse, fine], term_off, cells, merge=merge)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e)


@pytest.mark.parametrize("seed", range(3))
def test_many_lists_that_all_survive(seed):
    # 600 single points of one anti-diagonal (all Pareto-optimal), in random order, with ties:
    # merging them one by one costs more than the heap, so "auto" gives way to it midway
    rng = np.random.default_rng(seed)
    x = rng.permutation(np.repeat(np.arange(300.0), 2))
    tab = (np.arange(x.size + 1), x, 1000.0 - x)
    term_off = np.array([0, x.size])
    cells = np.arange(x.size).reshape(-1, 1)
    exp = combine_reference([tab], term_off, cells)
    assert exp[0][-1] == 300
    for merge in ("auto", "heap", "staircase"):
        got = combine_ragged([tab], term_off, cells, merge=merge)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e)


@pytest.mark.parametrize("seed", range(6))
def test_lists_searched_on_from_the_last_one_agree(seed):
    # a long staircase first, then terms of many shifted copies of long frontiers, starting at
    # rising memories (the search gallops on from the last list's) and now and then adding
    # points (a merge leaves the last search's count a lower bound)
    rng = np.random.default_rng(seed)

    def curve(n, lift):
        m = np.cumsum(rng.uniform(0.5, 1.5, n))
        return m, 1000.0 / m + lift * rng.uniform(0.0, 1.0, n).cumsum()[::-1] / n

    curves = [curve(int(rng.integers(100, 300)), lift) for lift in (0.0, 0.5, 1.0, 3.0)]
    frontiers = [reduce(np.stack(c, axis=1)) for c in curves]
    long_tab = (np.concatenate([[0], np.cumsum([f.shape[0] for f in frontiers])]),
                np.concatenate([f[:, 0] for f in frontiers]), np.concatenate([f[:, 1] for f in frontiers]))
    shifts = reduce(np.stack([np.sort(rng.uniform(0, 40, 40)), np.sort(rng.uniform(0, 0.5, 40))[::-1]], axis=1))
    shift_tab = (np.array([0, 1, 1 + shifts.shape[0]]), np.concatenate([[0.0], shifts[:, 0]]),
                 np.concatenate([[0.0], shifts[:, 1]]))
    # three cells: each starts a staircase of its own (the last search of the cell before
    # says nothing about it)
    term_off = np.array([0, 5, 7, 9])
    cells = np.array([[0, 0], [1, 1], [2, 1], [3, 1], [1, 0], [3, 0], [0, 1], [1, 1], [0, 0]])
    exp = combine_reference([long_tab, shift_tab], term_off, cells)
    for merge in ("auto", "heap", "staircase"):
        got = combine_ragged([long_tab, shift_tab], term_off, cells, merge=merge)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e)


@contextlib.contextmanager
def simd(on):
    """The kernels testing points one by one (``on`` False) or four at a time (AVX2, where the
    CPU has it: yields whether they do); the default is restored afterwards."""
    from tensoropt_py.elimination import _kernels

    default = _kernels._use_simd(True)
    try:
        yield _kernels._use_simd(on)
    finally:
        _kernels._use_simd(default)


@pytest.fixture(params=[False, True], ids=["one_by_one", "four_at_a_time"])
def filter_simd(request):
    """The kernel's dominance filter testing list points one by one, then four at a time (AVX2;
    skipped on a CPU without it)."""
    with simd(request.param) as on:
        if on != request.param:
            pytest.skip("this CPU has no AVX2")
        yield on


@settings(max_examples=200)
@given(st.integers(0, 10**6), st.booleans())
def test_the_filter_finds_the_first_point_below_the_buckets(seed, integer):
    """The dominance filter of a list against a bucket table (one by one, and four at a time
    where the CPU can) finds the first point faster than its bucket's time, as written out in
    NumPy: long runs of filtered points (galloped over past the one-by-one stretch), points at
    or beyond either end of the buckets, ties (integer costs)."""
    from tensoropt_py.elimination import _kernels

    rng = np.random.default_rng(seed)
    n, nb = int(rng.integers(0, 300)), int(_kernels.FILTER_BUCKETS)
    mem = np.sort(rng.uniform(-10.0, 110.0, n))
    tim = np.sort(rng.uniform(0.0, 100.0, n))[::-1].copy()
    if integer:
        mem, tim = np.round(mem), np.round(tim)
    sm, st_ = float(rng.uniform(-5, 5)), float(rng.choice([0.0, rng.uniform(-30, 30)]))
    lo, inv = 0.0, nb / 100.0
    j = int(rng.integers(0, n + 1))
    end = int(rng.integers(j, n + 1))
    x = (mem + sm - lo) * inv
    bucket = np.where(x <= 0, 0, np.where(x >= nb - 1, nb - 1, np.trunc(np.clip(x, 0, nb - 1)))).astype(np.int64)
    if rng.random() < 0.5:
        below = np.sort(rng.uniform(0.0, 120.0, nb))[::-1].copy()
    else:  # a staircase just below the list up to a point p, just above it from there
        p = int(rng.integers(j, n + 1))
        delta = float(rng.choice([0.0, 1e-9, 0.5]))
        below = np.full(nb, np.inf)
        for i in range(n):
            below[bucket[i]:] = tim[i] + st_ + (delta if i >= p else -delta)
        below = np.minimum.accumulate(below)  # a staircase's times fall: so do its buckets'
    if integer:
        below = np.round(below)
    below[: int(rng.integers(0, 20))] = np.inf  # buckets below the staircase's first point
    hits = np.flatnonzero(below[bucket[j:end]] > tim[j:end] + st_)
    expected = j + int(hits[0]) if hits.size else end
    for on in (False, True):
        with simd(on):
            assert _kernels._first_unfiltered_of(mem, tim, sm, st_, j, end, below, lo, inv) == expected, on


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("points", [(15, 30), (50, 120)], ids=["short", "long"])
def test_cells_of_many_close_terms_agree(seed, integer, points, filter_simd):
    # the costly cells of a node elimination: dozens of terms per cell, each a frontier of
    # 15-30 (or 50-120: runs of filtered points past the filter's one-by-one stretch) points
    # times one of 5-10, their sums running close to one another and crossing (the kernel
    # filters such cells by memory buckets of their staircase); integer costs tie often
    rng = np.random.default_rng(seed)

    def table(n_cells, lo, hi, spread):
        offs, ms, ts = [0], [], []
        for _ in range(n_cells):
            n = int(rng.integers(lo, hi + 1))
            # curves of several slopes: a list may start dominated and win further on
            m = np.cumsum(rng.uniform(0.5, 1.5, n)) + rng.uniform(0, spread)
            t = rng.uniform(60.0, 140.0) / m + rng.uniform(0, 0.02 * spread)
            if integer:
                m, t = np.round(m * 4), np.round(t * 40)
            f = reduce(np.stack([m, t], axis=1))
            ms.extend(f[:, 0])
            ts.extend(f[:, 1])
            offs.append(len(ms))
        return np.array(offs), np.array(ms), np.array(ts)

    U, n_out = 48, 5
    tables = [table(n_out * U, *points, 3.0), table(U, 1, 1, 1.0), table(U * 2, 5, 10, 2.0)]
    row = np.stack([np.arange(n_out) * U, np.zeros(n_out, dtype=np.int64), np.arange(n_out) % 2])
    col = np.stack([np.arange(U), np.arange(U), np.arange(U) * 2])
    term_off = np.arange(n_out + 1) * U
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, 3)
    exp = combine_reference(tables, term_off, cells)
    assert min(np.diff(exp[0])) > 5  # the cells' frontiers come from many terms
    for merge in ("auto", "staircase"):
        for got in (combine_outer(tables, row, col, merge=merge), combine_ragged(tables, term_off, cells, merge=merge)):
            for g, e in zip(got, exp):
                assert np.array_equal(g, e)
    # a cell whose staircase passes the limit goes on with the heap merge, without the lists
    # the filter dropped before
    from tensoropt_py.elimination.kernels import run_kernel

    got = run_kernel(*(list(t) for t in zip(*tables)), term_off, None, 0.0, 1, stair_limit=int(np.median(np.diff(exp[0]))),
                     outer=(row, col))
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


def test_shifted_memories_that_round_together_keep_the_faster_point():
    # 1 + (1 + 2**-52) rounds to 2.0: the shifted frontier has two points of equal memory
    base = (np.array([0, 2]), np.array([1.0, 1.0 + 2.0**-52]), np.array([2.0, 1.0]))
    shift = (np.array([0, 1, 2]), np.array([1.0, 0.25]), np.array([0.0, 5.0]))
    term_off = np.array([0, 2])
    cells = np.array([[0, 1], [0, 0]])
    exp = combine_reference([base, shift], term_off, cells)
    assert exp[1][-1] == 2.0 and exp[2][-1] == 1.0 and np.count_nonzero(exp[1] == 2.0) == 1
    for merge in ("auto", "heap", "staircase"):
        got = combine_ragged([base, shift], term_off, cells, merge=merge)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e)


@settings(max_examples=100)
@given(st.integers(0, 10**6), st.booleans(), st.sampled_from([0.0, 0.01]), st.sampled_from(["auto", "heap", "staircase"]))
def test_outer_terms_match_the_reference_on_written_out_terms(seed, integer, eps, merge):
    rng = np.random.default_rng(seed)
    S = int(rng.integers(1, 5))
    tables = [random_table(rng, int(rng.integers(1, 8)), int(rng.integers(1, 7)), integer) for _ in range(S)]
    n_out, U = int(rng.integers(0, 6)), int(rng.integers(1, 6))
    row, col = np.zeros((S, n_out), dtype=np.int64), np.zeros((S, U), dtype=np.int64)
    for s in range(S):
        n_cells = len(tables[s][0]) - 1
        split = int(rng.integers(1, n_cells + 1))  # row part below split, column part below the rest
        row[s] = rng.integers(0, split, size=n_out)
        col[s] = rng.integers(0, n_cells - split + 1, size=U)
    term_off = np.arange(n_out + 1) * U
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, S)
    got = combine_outer(tables, row, col, epsilon=eps, threads=int(rng.integers(1, 3)), merge=merge)
    exp = combine_reference(tables, term_off, cells, epsilon=eps)
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


def outer_job(rng, integer, rounding):
    """Tables whose cells often cover one another (few, small, integer or ulp-apart points) and
    outer terms over them: row part below a split of each table's cells, column part above."""
    S = int(rng.integers(1, 5))
    make = (lambda: rounding_table(rng, int(rng.integers(2, 9)), int(rng.integers(1, 4)))) if rounding else (
        lambda: random_table(rng, int(rng.integers(2, 9)), int(rng.integers(1, 4)), integer))
    tables = [make() for _ in range(S)]
    n_out, U = int(rng.integers(1, 6)), int(rng.integers(2, 9))
    row, col = np.zeros((S, n_out), dtype=np.int64), np.zeros((S, U), dtype=np.int64)
    for s in range(S):
        n_cells = len(tables[s][0]) - 1
        split = int(rng.integers(1, n_cells + 1))
        row[s] = rng.integers(0, split, size=n_out)
        col[s] = rng.integers(0, n_cells - split + 1, size=U)
    return tables, row, col


@settings(max_examples=150)
@given(st.integers(0, 10**6), st.booleans(), st.booleans(), st.sampled_from([0.0, 0.01]),
       st.sampled_from(["auto", "heap", "staircase"]))
def test_skipped_covered_terms_leave_the_result_unchanged(seed, integer, rounding, eps, merge):
    """The terms the kernel skips are the reference's, and skipping them changes nothing,
    provenance included, also where sums round together (ulp-apart frontiers)."""
    rng = np.random.default_rng(seed)
    tables, row, col = outer_job(rng, integer, rounding)
    S, (n_out, U) = len(tables), (row.shape[1], col.shape[1])
    mask = outer_skip_mask(tables, row, col, threads=int(rng.integers(1, 3)))
    assert np.array_equal(mask, outer_skip_reference(tables, row, col))
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, S)
    exp = combine_reference(tables, np.arange(n_out + 1) * U, cells, epsilon=eps)
    for skip in ("always", "never"):
        got = combine_outer(tables, row, col, epsilon=eps, threads=int(rng.integers(1, 3)), merge=merge, skip_covered=skip)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e), skip


def shifted_job(rng, integer):
    """Outer terms over tables whose cells are one frontier per table delayed by different times
    (and a few others): terms often beat one another by delays in one slot that another slot
    more than makes up for, or tie."""
    S = int(rng.integers(1, 4))
    tables = []
    for _ in range(S):
        n_cells = int(rng.integers(2, 9))
        p = int(rng.integers(1, 6))
        pts = rng.integers(0, 15, size=(p, 2)).astype(float) if integer else np.stack(
            [10 ** rng.uniform(6, 9, p), 10 ** rng.uniform(-4, -1, p)], axis=1)
        base = reduce(pts)
        offs, ms, ts = [0], [], []
        for _ in range(n_cells):
            if rng.random() < 0.2:
                f = reduce(rng.integers(0, 15, size=(int(rng.integers(1, 4)), 2)).astype(float))
            else:
                f = base + [0.0, float(rng.integers(0, 4)) * (1.0 if integer else 1e-3)]
            ms.extend(f[:, 0])
            ts.extend(f[:, 1])
            offs.append(len(ms))
        tables.append((np.array(offs), np.array(ms), np.array(ts)))
    n_out, U = int(rng.integers(1, 5)), int(rng.integers(2, 9))
    row = np.zeros((S, n_out), dtype=np.int64)
    col = np.stack([rng.integers(0, len(t[0]) - 1, size=U) for t in tables]).astype(np.int64)
    return tables, row, col


@settings(max_examples=150)
@given(st.integers(0, 10**6), st.booleans(), st.sampled_from([0.0, 0.01]),
       st.sampled_from(["auto", "heap", "staircase"]))
def test_terms_another_strictly_dominates_are_the_references_and_skipping_them_changes_nothing(
        seed, integer, eps, merge):
    """The terms the kernel skips as strictly dominated, with the delays of each slot kept per
    row class or walked for every cell, are the reference's; skipping them changes nothing,
    provenance included."""
    from tensoropt_py.elimination.kernels import _delay_classes, _row_classes

    rng = np.random.default_rng(seed)
    tables, row, col = shifted_job(rng, integer) if rng.random() < 0.6 else outer_job(rng, integer, False)
    S, (n_out, U) = len(tables), (row.shape[1], col.shape[1])
    exp_mask = outer_skip_reference(tables, row, col, dominated=True)
    assert np.array_equal(outer_skip_mask(tables, row, col, dominated=True), exp_mask)
    offs, mems, tims = ([np.ascontiguousarray(t[i], dtype=float if i else np.int64) for t in tables] for i in range(3))
    covered = outer_skip_reference(tables, row, col)
    for slack in ([None] * S, _delay_classes(offs, _row_classes(row), U, 1, None)[0]):  # without cover bitsets
        got = _kernels.outer_skip_mask(offs, mems, tims, row, col, None, slack)
        assert np.array_equal(got | covered, exp_mask)
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, S)
    exp = combine_reference(tables, np.arange(n_out + 1) * U, cells, epsilon=eps)
    for skip in ("always", "never"):
        got = combine_outer(tables, row, col, epsilon=eps, threads=int(rng.integers(1, 3)), merge=merge,
                            skip_dominated=skip, skip_covered=str(rng.choice(["always", "never"])))
        for g, e in zip(got, exp):
            assert np.array_equal(g, e), skip


def test_the_delays_kept_fit_their_bytes_and_leave_the_rest_to_the_buffers():
    """Per worker, a slot's delays take classes x U x U doubles and flags: the slots of most
    points per cell are kept first while all workers' fit a quarter of ``max_bytes``, and the
    bytes they take are reported (the kernel's buffers get the rest); one-point slots never."""
    from tensoropt_py.elimination.kernels import _delay_classes, _row_classes

    big = np.arange(0, 4 * 10 + 1, 4, dtype=np.int64)  # 10 cells of 4 points
    mid = np.arange(0, 2 * 20 + 1, 2, dtype=np.int64)  # 20 cells of 2 points
    one = np.arange(0, 10 + 1, dtype=np.int64)  # 10 cells of 1 point
    row = np.array([[0, 0, 5, 5], [0, 10, 10, 10], [0, 1, 2, 3]], dtype=np.int64)  # 2, 2 and 4 classes
    U = 5
    per_class = U * U * 9
    for workers, max_bytes in ((1, None), (2, 8 * 4 * per_class), (1, 4 * 3 * per_class), (1, 4 * per_class)):
        slack, kept = _delay_classes([mid, big, one], _row_classes(row), U, workers, max_bytes)
        assert slack[2] is None
        assert kept <= (2**26 if max_bytes is None else max_bytes / 4)
        assert kept == workers * per_class * sum(2 for s in (0, 1) if slack[s] is not None)
        if slack[0] is not None:
            assert slack[1] is not None  # the slot of more points per cell comes first
            assert slack[0].tolist() == [0, 0, 1, 1]
    assert _delay_classes([mid, big, one], _row_classes(row), U, 1, 4 * per_class) == ([None, None, None], 0)
    assert [x is not None for x in _delay_classes([mid, big, one], _row_classes(row), U, 1, 4 * 3 * per_class)[0]] == [
        False, True, False]


def test_a_term_is_skipped_as_dominated_only_behind_a_sum_of_delays_below_zero():
    """Single points: slot 0 of times 1.5 / 2 / 2.5, slot 1 of times 3 / 1 / 1.5 (memory 0)."""
    t0 = (np.array([0, 1, 2, 3]), np.array([1.0, 1.0, 1.0]), np.array([1.5, 2.0, 2.5]))
    t1 = (np.array([0, 1, 2, 3]), np.array([0.0, 0.0, 0.0]), np.array([3.0, 1.0, 1.5]))
    row = np.zeros((2, 1), dtype=np.int64)

    def both(col):
        got = outer_skip_mask([t0, t1], row, np.array(col), dominated=True).tolist()
        assert got == outer_skip_reference([t0, t1], row, col, dominated=True).tolist()
        return got

    # term 1 is 0.5 s slower in slot 0 and 2 s faster in slot 1: term 0 goes, before or after it
    assert both([[0, 1], [0, 1]]) == [[True, False]]
    assert both([[1, 0], [1, 0]]) == [[False, True]]
    # 0.5 s slower in slot 0 and 0.5 s faster in slot 1: a tie, which only a cover could skip
    assert both([[0, 1], [2, 1]]) == [[False, False]]
    assert both([[0, 0, 1], [0, 2, 1]]) == [[True, False, False]]  # the two of 3 s beat the one of 4.5 s
    # delays trade time only: a term of more memory in a slot is not beaten, however slow
    t2 = (np.array([0, 1, 2]), np.array([1.0, 0.0]), np.array([0.0, 9.0]))
    assert outer_skip_mask([t0, t2], row, np.array([[0, 1], [1, 0]]), dominated=True).tolist() == [[False, False]]
    with pytest.raises(InvalidInputError, match="dominated must be True or False, got 'yes'"):
        outer_skip_mask([t0, t1], row, np.array([[0, 1], [0, 1]]), dominated="yes")
    with pytest.raises(InvalidInputError, match="skip_dominated must be one of"):
        combine_outer([t0], np.zeros((1, 1), dtype=np.int64), np.zeros((1, 2), dtype=np.int64), skip_dominated="yes")


class RecordingMemo:
    """A memo of the kind ``run_kernel`` keeps cover bitsets in, counting what it is asked."""

    def __init__(self):
        self.kept, self.hits, self.misses = {}, 0, 0

    def recall(self, key):
        hit = self.kept.get(key)
        self.hits += hit is not None
        self.misses += hit is None
        return hit

    def remember(self, key, arrays):
        self.kept[key] = arrays


@settings(max_examples=60)
@given(st.integers(0, 10**6), st.booleans(), st.sampled_from([0.0, 0.01]))
def test_kept_cover_bitsets_serve_a_table_of_the_same_content(seed, rounding, eps):
    """Cover bitsets kept for one call serve a later call on copies of its tables (same content
    keys): every slot is a hit, nothing new is kept, and both results are the reference's."""
    from tensoropt_py.elimination.kernels import run_kernel

    rng = np.random.default_rng(seed)
    tables, row, col = outer_job(rng, False, rounding)
    S, (n_out, U) = len(tables), (row.shape[1], col.shape[1])
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, S)
    term_off = np.arange(n_out + 1, dtype=np.int64) * U
    exp = combine_reference(tables, term_off, cells, epsilon=eps)
    memo = RecordingMemo()
    keys = [lambda s=s: ("table", s) for s in range(S)]
    for copy in (False, True):
        offs, mems, tims = ([np.array(t[i], dtype=float if i else np.int64) for t in tables] for i in range(3))
        got = run_kernel(offs, mems, tims, term_off, None, eps, int(rng.integers(1, 3)), outer=(row, col),
                         skip_covered="always", sweep="never", cover_memo=memo, table_keys=keys)
        for g, e in zip(got, exp):
            assert np.array_equal(g, e), copy
        if not copy:
            assert (memo.hits, memo.misses, len(memo.kept)) == (0, S, S)
    assert (memo.hits, memo.misses, len(memo.kept)) == (S, S, S)


def test_a_covered_term_is_skipped_only_behind_one_of_the_same_base():
    """Slot 0: cell 0 covers cell 1. Slot 1: cell 1 (three points) covers cell 0 (one)."""
    t0 = (np.array([0, 2, 3]), np.array([1.0, 2.0, 2.0]), np.array([2.0, 1.0, 2.0]))
    t1 = (np.array([0, 1, 4]), np.array([2.0, 0.0, 1.0, 2.0]), np.array([2.0, 2.0, 1.0, 0.0]))
    row = np.zeros((2, 1), dtype=np.int64)

    def both(col):
        got = outer_skip_mask([t0, t1], row, np.array(col)).tolist()
        assert got == outer_skip_reference([t0, t1], row, col).tolist()
        return got

    # behind term 0 (base slot 0 for both), the covered term and an identical one are skipped
    assert both([[0, 1, 0], [0, 0, 0]]) == [[False, True, True]]
    # a covered term before the term covering it is not (a tie keeps the earlier term's point)
    assert both([[1, 0], [0, 0]]) == [[False, False]]
    # covered in both slots, but term 0's base is slot 1 (its three points) and term 1's slot 0:
    # the kernel sums them in other orders, which may round apart, so term 1 is kept
    assert both([[0, 1], [1, 0]]) == [[False, False]]
    assert both([[0, 1], [0, 0]]) == [[False, True]]
    with pytest.raises(InvalidInputError, match="at most 512 terms"):
        outer_skip_mask([t0], np.zeros((1, 1), dtype=np.int64), np.zeros((1, 513), dtype=np.int64))
    with pytest.raises(InvalidInputError, match="skip_covered must be one of"):
        combine_outer([t0], np.zeros((1, 1), dtype=np.int64), np.zeros((1, 2), dtype=np.int64), skip_covered="yes")


def sweep_job(rng, rounding, multi_last):
    """Outer terms of the sweep's form: the multi-point slot first (or last), the others single
    points, either the node's own (a row the same for every output cell) or an edge of one
    memory; cells output by a grid of (row of the first slot, row of the last) as a node
    elimination's are, shuffled, with some empty single cells (forbidden pairs)."""
    A, D, U = int(rng.integers(1, 5)), int(rng.integers(1, 7)), int(rng.integers(1, 9))
    max_pts = int(rng.choice([1, 3, 8]))

    def multi(n_cells):
        return rounding_table(rng, n_cells, max_pts) if rounding else random_table(rng, n_cells, max_pts, False)

    def single(n_cells, memory):
        tab = rounding_table(rng, n_cells, 1) if rounding else random_table(rng, n_cells, 1, False)
        keep = rng.random(n_cells) > 0.15
        counts = np.diff(tab[0]) * keep
        pts = np.repeat(keep, np.diff(tab[0]))
        mem = np.full(int(counts.sum()), memory) if memory is not None else tab[1][pts]
        return np.concatenate([[0], np.cumsum(counts)]), mem, tab[2][pts]

    memory = float(rng.choice([0.0, 0.5, 1e8]))
    first = single(A * U, memory) if multi_last else multi(A * U)
    last = multi(U * D) if multi_last else single(U * D, memory)
    c = np.arange(A * D)
    tables, rows, cols = [first], [(c // D) * U], [np.arange(U)]
    if rng.random() < 0.7:  # the node's own cost: a row the same for every output cell
        tables.append(single(U, None))
        rows.append(np.zeros(c.size, dtype=np.int64))
        cols.append(np.arange(U))
    tables.append(last)
    rows.append(c % D)
    cols.append(np.arange(U) * D)
    row = np.ascontiguousarray(np.array(rows)[:, rng.permutation(c.size)])
    return tables, row, np.array(cols)


@settings(max_examples=150)
@given(st.integers(0, 10**6), st.booleans(), st.booleans(), st.sampled_from([0.0, 0.0, 0.01, 0.2]))
def test_the_sweep_matches_the_reference(seed, rounding, multi_last, eps):
    """Terms of one multi-point slot (first or last) and single points of one memory: the
    sweep gives the reference's points and provenance, also where sums round together."""
    from tensoropt_py.elimination.kernels import _parse_tables, _sweep_plan

    rng = np.random.default_rng(seed)
    tables, row, col = sweep_job(rng, rounding, multi_last)
    S, (n_out, U) = len(tables), (row.shape[1], col.shape[1])
    offs, mems, _ = _parse_tables(tables, True, "test")
    plan = _sweep_plan(offs, mems, row, col, 2, always=True)
    assert plan is not None and plan[0] in (0, S - 1)
    cells = (row.T[:, None, :] + col.T[None, :, :]).reshape(n_out * U, S)
    exp = combine_reference(tables, np.arange(n_out + 1) * U, cells, epsilon=eps)
    for threads, on in ((1, False), (2, False), (1, True), (2, True)):  # each cell, or four at a time
        with simd(on):
            got = combine_outer(tables, row, col, epsilon=eps, threads=threads, sweep="always")
        for g, e in zip(got, exp):
            assert np.array_equal(g, e), (threads, on)


def test_the_sweep_takes_only_its_form():
    """A single-point slot of two memories whose row varies is not the sweep's form; told it is,
    the compiled sweep refuses instead of reducing in a wrong order; a bad option is named."""
    from tensoropt_py.elimination.kernels import _sweep_plan

    multi = (np.array([0, 2, 4]), np.array([1.0, 2.0, 1.0, 3.0]), np.array([2.0, 1.0, 3.0, 0.5]))
    edge = (np.array([0, 1, 2]), np.array([0.0, 1.0]), np.array([1.0, 2.0]))
    row = np.array([[0, 0], [0, 1]], dtype=np.int64)
    col = np.array([[0, 1], [0, 0]], dtype=np.int64)
    offs, mems, tims = [t[0] for t in (multi, edge)], [t[1] for t in (multi, edge)], [t[2] for t in (multi, edge)]
    assert _sweep_plan(offs, mems, row, col, 1, always=True) is None
    with pytest.raises(ValueError, match="different memory across its group"):
        _kernels.sweep_kernel(offs, mems, tims, row, col, 0, np.array([0, 1]), np.array([0, 2]), 0.0, [0, 1])
    with pytest.raises(InvalidInputError, match="sweep must be one of"):
        combine_outer([multi, edge], row, col, sweep="sometimes")
    # one memory in the edge: the sweep's form, and the general kernel's result
    same = (edge[0], np.array([1.0, 1.0]), edge[2])
    assert _sweep_plan(offs, [mems[0], same[1]], row, col, 1, always=True)[0] == 0
    for g, e in zip(combine_outer([multi, same], row, col, sweep="always"),
                    combine_outer([multi, same], row, col, sweep="never")):
        assert np.array_equal(g, e)


def test_outer_terms_out_of_range_are_named():
    tab = (np.array([0, 1, 2]), np.array([1.0, 2.0]), np.array([1.0, 0.5]))
    with pytest.raises(InvalidInputError, match=r"row\[0\] \+ col\[0\] must be cells of tables\[0\]"):
        combine_outer([tab], [[1]], [[0, 1]])
    with pytest.raises(InvalidInputError, match="row and col must have shapes"):
        combine_outer([tab], [[0]], [0, 1])


def test_the_compiled_kernel_refuses_arrays_it_would_misread():
    # it reads raw pointers: a strided or other-dtype array is refused, not misread
    from tensoropt_py.elimination.kernels import run_kernel

    o, m, t = np.array([0, 1, 2]), np.array([1.0, 2.0]), np.array([1.0, 0.5])
    term_off = np.arange(3, dtype=np.int64)
    row = np.asfortranarray(np.zeros((2, 2), dtype=np.int64))  # (S, n_out) in column order
    col = np.zeros((2, 1), dtype=np.int64)
    with pytest.raises(ValueError, match="outer terms must be a C-contiguous int64 ndarray"):
        run_kernel([o, o], [m, m], [t, t], term_off, None, 0.0, 1, outer=(row, col))
    with pytest.raises(ValueError, match="memory must be a C-contiguous float64"):
        run_kernel([o], [m.astype(np.float32)], [t], term_off, np.zeros((2, 1), dtype=np.int64), 0.0, 1)
    off, *_ = run_kernel([o, o], [m, m], [t, t], term_off, None, 0.0, 1, outer=(np.ascontiguousarray(row), col))
    assert off.tolist() == [0, 1, 2]


@pytest.mark.parametrize("threads", [1, 2])
def test_int32_provenance_is_the_int64_one(threads):
    from tensoropt_py.elimination.kernels import run_kernel

    rng = np.random.default_rng(3)
    tabs = [random_table(rng, 60, 6, False) for _ in range(3)]
    offs, mems, tims = ([np.ascontiguousarray(t[i], dtype=float if i else np.int64) for t in tabs] for i in range(3))
    row = np.stack([rng.integers(0, 30, 25), rng.integers(0, 30, 25), np.zeros(25, dtype=np.int64)])
    col = np.stack([rng.integers(0, 30, 7), rng.integers(0, 30, 7), rng.integers(0, 60, 7)])
    term_off = np.arange(26, dtype=np.int64) * 7
    wide = run_kernel(offs, mems, tims, term_off, None, 1e-3, threads, outer=(row, col))
    narrow = run_kernel(offs, mems, tims, term_off, None, 1e-3, threads, outer=(row, col), prov32=True)
    assert wide[3].dtype == np.int64 and narrow[3].dtype == np.int32
    for a, b in zip(wide, narrow):
        np.testing.assert_array_equal(a, b)


def test_combine_rejects_unknown_merge():
    tab = (np.array([0, 1]), np.array([1.0]), np.array([1.0]))
    with pytest.raises(InvalidInputError, match="merge must be one of"):
        combine_ragged([tab], [0, 1], [[0]], merge="quick")


@settings(max_examples=40)
@given(st.integers(0, 10**6))
def test_combine_threads_identical(seed):
    rng = np.random.default_rng(seed)
    # big enough that the work is really split into chunks
    tables = [random_table(rng, 40, 60, False) for _ in range(2)]
    n_out = 64
    term_off = np.arange(n_out + 1) * 40
    cells = np.stack([rng.integers(0, 40, size=term_off[-1]) for _ in range(2)], axis=1)
    one = combine_ragged(tables, term_off, cells, epsilon=0.001, threads=1)
    two = combine_ragged(tables, term_off, cells, epsilon=0.001, threads=2)
    three = combine_ragged(tables, term_off, cells, epsilon=0.001, threads=3)
    for a, b, c in zip(one, two, three):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_combine_provenance_recomputes_costs():
    tables, term_off, cells = random_job(11, False)
    off, m, t, prov = combine_ragged(tables, term_off, cells)
    mm = np.zeros_like(m)
    tt = np.zeros_like(t)
    for s, (o, tm, ti) in enumerate(tables):
        ok = prov[:, s] >= 0
        mm[ok] += tm[prov[ok, s]]
        tt[ok] += ti[prov[ok, s]]
    assert np.allclose(mm, m, rtol=1e-12) and np.allclose(tt, t, rtol=1e-12)


@settings(max_examples=80)
@given(st.lists(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), max_size=12), min_size=1, max_size=6))
def test_reduce_ragged_matches_reference(groups):
    counts = [len(g) for g in groups]
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pts = np.array([p for g in groups for p in g], dtype=float).reshape(-1, 2)
    got = reduce_ragged(offs, pts[:, 0], pts[:, 1])
    exp = reduce_ragged_reference(offs, pts[:, 0], pts[:, 1])
    for g, e in zip(got, exp):
        assert np.array_equal(g, e)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.floats(1, 100), st.floats(0, 100)), min_size=1, max_size=30),
       st.sampled_from([0.01, 0.1, 1.0]))
def test_kernel_thinning_matches_reference(raw, eps):
    f = reduce(np.array(raw))
    off, m, t, prov = combine_ragged([(np.array([0, len(f)]), f[:, 0], f[:, 1])], [0, 1], [[0]], epsilon=eps)
    kept = prov[:, 0].tolist()
    assert kept == thin_reference(f[:, 0].tolist(), f[:, 1].tolist(), eps)
    assert kept[0] == 0 and kept[-1] == len(f) - 1  # both ends stay
    # every point dropped has a faster kept one within epsilon of its memory
    for m_i, t_i in f:
        assert any(f[k, 1] <= t_i and f[k, 0] <= (1 + eps) * m_i * (1 + 1e-12) for k in kept)


def test_combine_validation_errors():
    tab = (np.array([0, 2]), np.array([1.0, 2.0]), np.array([2.0, 1.0]))
    with pytest.raises(InvalidInputError, match="frontier"):
        combine_ragged([(np.array([0, 2]), np.array([1.0, 2.0]), np.array([1.0, 2.0]))], [0, 1], [[0]])
    with pytest.raises(InvalidInputError, match="term_cells"):
        combine_ragged([tab], [0, 1], [[3]])
    with pytest.raises(InvalidInputError, match="shape"):
        combine_ragged([tab], [0, 2], [[0]])
    with pytest.raises(InvalidInputError, match="tables"):
        combine_ragged([tab] * (MAX_SLOTS + 1), [0, 1], [[0] * (MAX_SLOTS + 1)])
    with pytest.raises(InvalidInputError, match="threads"):
        combine_ragged([tab], [0, 1], [[0]], threads=0)
