"""Pure NumPy/Python references of the compiled kernels (slow; used by tests and benchmarks).

Each function here computes exactly what its compiled twin in ``_kernels.pyx`` computes,
provenance and tie-breaking included:

* :func:`combine_reference` <-> ``_kernels.combine_kernel`` (through
  :func:`tensoropt_py.elimination.kernels.combine_ragged`);
* :func:`reduce_ragged_reference` <-> :func:`tensoropt_py.elimination.kernels.reduce_ragged`;
* :func:`thin_reference` <-> the epsilon thinning inside the kernel;
* :func:`outer_skip_reference` <-> :func:`tensoropt_py.elimination.kernels.outer_skip_mask`
  (the outer terms the kernel skips as covered, and with ``dominated=True`` as strictly
  dominated).

Tie-breaking rule shared by both: candidate points are enumerated term by term; inside a
term, the largest parent cell (first one on ties) is the *base* and the other slots are
enumerated odometer-style (lowest slot fastest), the base point varying fastest of all.
Combos of a term whose summed (memory, time) shift is weakly dominated by another combo's
(sorted by (memory, time, enumeration index), Alg. 1) are skipped: their whole shifted
copy of the base cell is dominated. Among candidates with identical (memory, time), the
first in enumeration order is kept.
"""

import itertools

import numpy as np

__all__ = ["combine_reference", "reduce_ragged_reference", "thin_reference", "reduce_reference",
           "outer_skip_reference"]


def reduce_reference(memory, time):
    """Algorithm 1 in plain Python: indices of the kept points, in memory-ascending order.

    Examples
    --------
    >>> reduce_reference([3.0, 1.0, 2.0], [1.0, 3.0, 3.0])
    [1, 0]
    """
    order = sorted(range(len(memory)), key=lambda i: (memory[i], time[i], i))
    kept, best = [], float("inf")
    for i in order:
        if time[i] < best:
            kept.append(i)
            best = time[i]
    return kept


def thin_reference(memory, time, epsilon):
    """Epsilon thinning of a frontier (memory ascending, time strictly descending).

    Scans from the minimum-time end and drops a point when the last kept point (lower
    time) has memory at most ``(1 + epsilon)`` times its memory; both ends stay. Returns
    kept indices.

    Examples
    --------
    >>> thin_reference([1.0, 1.05, 1.1, 2.0], [3.0, 2.5, 2.0, 1.0], 0.1)
    [0, 2, 3]
    """
    n = len(memory)
    if n == 0 or epsilon <= 0:
        return list(range(n))
    kept = [n - 1]
    for i in range(n - 2, -1, -1):
        if memory[kept[-1]] > (1.0 + epsilon) * memory[i] or i == 0:
            kept.append(i)
    return kept[::-1]


def combine_reference(tables, term_off, term_cells, epsilon=0.0):
    """Reference of the combine kernel.

    Parameters
    ----------
    tables : list of (offsets, memory, time)
        The ``S`` parent frontier tables (each cell a frontier).
    term_off : array of int, shape (n_out + 1,)
    term_cells : array of int, shape (n_terms, S); ``-1`` = slot absent from the term.
    epsilon : float

    Returns
    -------
    offsets, memory, time, prov : ndarray
        As the compiled kernel: ``prov[q, s]`` is the global index of the parent point of
        slot ``s`` (``-1`` when absent).

    Examples
    --------
    >>> t = ([0, 2], [1.0, 2.0], [2.0, 1.0])
    >>> off, m, tm, p = combine_reference([t, t], [0, 1], [[0, 0]])
    >>> m.tolist(), tm.tolist(), p.tolist()
    ([2.0, 3.0, 4.0], [4.0, 3.0, 2.0], [[0, 0], [1, 0], [1, 1]])
    """
    S = len(tables)
    term_off = np.asarray(term_off, dtype=np.int64)
    term_cells = np.asarray(term_cells, dtype=np.int64).reshape(-1, S)
    offs = [np.asarray(t[0], dtype=np.int64) for t in tables]
    mems = [np.asarray(t[1], dtype=np.float64) for t in tables]
    tims = [np.asarray(t[2], dtype=np.float64) for t in tables]
    out_m, out_t, out_p, counts = [], [], [], []
    for c in range(len(term_off) - 1):
        cand_m, cand_t, cand_p = [], [], []
        for t in range(term_off[c], term_off[c + 1]):
            cells = term_cells[t]
            ranges = []
            for s in range(S):
                if cells[s] < 0:
                    ranges.append(None)
                else:
                    ranges.append(range(offs[s][cells[s]], offs[s][cells[s] + 1]))
            present = [s for s in range(S) if ranges[s] is not None]
            if not present or any(len(ranges[s]) == 0 for s in present):
                continue
            base = max(present, key=lambda s: (len(ranges[s]), -s))
            others = [s for s in present if s != base]
            # odometer with the lowest slot fastest == itertools.product over reversed slots
            combos = []
            for combo in itertools.product(*[ranges[s] for s in reversed(others)]):
                fixed = dict(zip(reversed(others), combo))
                sm = 0.0
                st = 0.0
                for s in range(S):  # same summation order as the kernel
                    if s in fixed:
                        sm = sm + mems[s][fixed[s]]
                        st = st + tims[s][fixed[s]]
                combos.append((fixed, sm, st))
            # a combo whose shift is weakly dominated by another's only yields dominated
            # copies of the same base cell: drop it (first in enumeration order wins ties)
            kept_combos = set(reduce_reference([c[1] for c in combos], [c[2] for c in combos]))
            for ci, (fixed, sm, st) in enumerate(combos):
                if ci not in kept_combos:
                    continue
                for g in ranges[base]:
                    cand_m.append(mems[base][g] + sm)
                    cand_t.append(tims[base][g] + st)
                    cand_p.append([g if s == base else fixed.get(s, -1) for s in range(S)])
        kept = reduce_reference(cand_m, cand_t)
        km = [cand_m[i] for i in kept]
        kt = [cand_t[i] for i in kept]
        kp = [cand_p[i] for i in kept]
        th = thin_reference(km, kt, epsilon)
        out_m.extend(km[i] for i in th)
        out_t.extend(kt[i] for i in th)
        out_p.extend(kp[i] for i in th)
        counts.append(len(th))
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    return (
        offsets,
        np.asarray(out_m, dtype=np.float64),
        np.asarray(out_t, dtype=np.float64),
        np.asarray(out_p, dtype=np.int64).reshape(-1, S),
    )


def reduce_ragged_reference(offsets, memory, time):
    """Reference of :func:`~tensoropt_py.engine.algebra.reduce_ragged`.

    Examples
    --------
    >>> off, m, t, idx = reduce_ragged_reference([0, 3], [2.0, 1.0, 3.0], [1.0, 2.0, 1.0])
    >>> idx.tolist()
    [1, 0]
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    memory = np.asarray(memory, dtype=np.float64)
    time = np.asarray(time, dtype=np.float64)
    idx, counts = [], []
    for c in range(len(offsets) - 1):
        lo, hi = offsets[c], offsets[c + 1]
        kept = reduce_reference(memory[lo:hi].tolist(), time[lo:hi].tolist())
        idx.extend(lo + k for k in kept)
        counts.append(len(kept))
    idx = np.asarray(idx, dtype=np.int64)
    out_off = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
    return out_off, memory[idx], time[idx], idx


def outer_skip_reference(tables, row, col, dominated=False):
    """Reference of the outer terms the combine kernel skips: ``(n_out, U)`` bool.

    Term ``v`` of output cell ``c`` (cells ``row[s, c] + col[s, v]``) is skipped when a term
    ``u < v`` of the same cell has the same base slot (the largest cell, first on ties) and,
    in every slot, a cell covering ``v``'s: every point of ``v``'s cell weakly dominated by a
    point of ``u``'s (an empty cell is covered by any; an empty cell covers only an empty one).
    With ``dominated``, also when any other term ``u`` of the same base slot, no cell of either
    empty, strictly dominates it: the delays of each slot (the most, over the points of ``v``'s
    cell, that the fastest point of ``u``'s cell within its memory is slower; infinite where
    none is within it) sum below ``-2**-44`` times the sum, over both terms' cells, of the
    magnitudes of their first and last points' times.

    Examples
    --------
    >>> t = ([0, 1, 2], [1.0, 2.0], [1.0, 2.0])        # cell 1 is dominated by cell 0
    >>> outer_skip_reference([t], [[0]], [[1, 0]]).tolist()   # term 1 takes cell 0: not before term 0
    [[False, False]]
    >>> outer_skip_reference([t], [[0]], [[0, 1]]).tolist()
    [[False, True]]
    >>> outer_skip_reference([t], [[0]], [[1, 0]], dominated=True).tolist()  # term 0 is 1 s slower
    [[True, False]]
    """
    S = len(tables)
    offs = [np.asarray(t[0], dtype=np.int64) for t in tables]
    mems = [np.asarray(t[1], dtype=np.float64) for t in tables]
    tims = [np.asarray(t[2], dtype=np.float64) for t in tables]
    row = np.asarray(row, dtype=np.int64).reshape(S, -1)
    col = np.asarray(col, dtype=np.int64).reshape(S, -1)
    n_out, U = row.shape[1], col.shape[1]

    def points(s, cell):
        return [(mems[s][g], tims[s][g]) for g in range(offs[s][cell], offs[s][cell + 1])]

    def covers(s, a, b):
        pa = points(s, a)
        return all(any(m <= qm and t <= qt for m, t in pa) for qm, qt in points(s, b))

    def delay(s, a, b):  # of cell b behind cell a
        pa = points(s, a)
        return max(min((t for m, t in pa if m <= qm), default=np.inf) - qt for qm, qt in points(s, b))

    def beats(cu, cv):
        if any(not points(s, cu[s]) or not points(s, cv[s]) for s in range(S)):
            return False
        margin = sum(abs(p[i][1]) for s in range(S) for p in (points(s, cu[s]), points(s, cv[s])) for i in (0, -1))
        return sum(delay(s, cu[s], cv[s]) for s in range(S)) < -(2.0**-44) * margin

    out = np.zeros((n_out, U), dtype=bool)
    for c in range(n_out):
        cells = [[int(row[s, c] + col[s, u]) for s in range(S)] for u in range(U)]
        base = [max(range(S), key=lambda s: (len(points(s, cells[u][s])), -s)) for u in range(U)]
        for v in range(U):
            out[c, v] = any(base[u] == base[v] and all(covers(s, cells[u][s], cells[v][s]) for s in range(S))
                            for u in range(v))
            if dominated and not out[c, v]:
                out[c, v] = any(u != v and base[u] == base[v] and beats(cells[u], cells[v]) for u in range(U))
    return out
