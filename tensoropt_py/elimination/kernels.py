"""Validating Python entry points of the compiled kernels of the engine.

:func:`combine_ragged` (batched product + union + reduce of ragged frontier tables,
with provenance) and :func:`reduce_ragged` (Alg. 1 on many sets at once) run the
compiled ``_kernels.combine_kernel`` (nogil, parallel over output cells with a thread
pool); :func:`combine_outer` runs ``_kernels.sweep_kernel`` instead where its terms have
the sweep's form (:func:`_sweep_plan`). Their pure NumPy twins are in
:mod:`tensoropt_py.elimination.reference`.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, get_args

import numpy as np

from ..errors import InvalidInputError
from ..units import parse_count
from . import _kernels
from ._kernels import KernelBudgetExceeded

__all__ = ["combine_ragged", "combine_outer", "reduce_ragged", "outer_skip_mask", "resolve_threads", "check_epsilon",
           "MAX_SLOTS"]

MAX_SLOTS = int(_kernels.MAX_SLOTS)

Merge = Literal["auto", "heap", "staircase"]
_STAIR_LIMITS = {"auto": int(_kernels.STAIR_LIMIT), "heap": 0, "staircase": -1}
SkipCovered = Literal["auto", "always", "never"]
_SKIP_COVERED = get_args(SkipCovered)
Sweep = Literal["auto", "always", "never"]
_SWEEP = get_args(Sweep)

_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_EXEC_LOCK = threading.Lock()

def resolve_threads(threads):
    """Validate a ``threads`` argument; ``None`` means every core. Returns an int >= 1.

    Examples
    --------
    >>> resolve_threads(2)
    2
    """
    if threads is None:
        return max(1, os.cpu_count() or 1)
    parse_count(threads, "threads", allow_none=True)
    return int(threads)


def _executor(threads):
    if threads <= 1:
        return None
    with _EXEC_LOCK:
        ex = _EXECUTORS.get(threads)
        if ex is None:
            ex = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tensoropt-frontier")
            _EXECUTORS[threads] = ex
        return ex



def check_epsilon(epsilon):
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise InvalidInputError(f"epsilon must be a finite float >= 0, got {epsilon!r}") from None
    if isinstance(epsilon, bool) or not np.isfinite(eps) or eps < 0:
        raise InvalidInputError(f"epsilon must be a finite float >= 0, got {epsilon!r}")
    return eps


def _chunk_bounds(term_off, n_out, threads, work_per_term=1.0, per_thread=4):
    """Split output cells into chunks of about equal number of terms for the thread pool
    (``per_thread`` chunks per thread, which balance the cells' uneven work).

    Small jobs (estimated ``n_terms * work_per_term`` below a threshold) run as one chunk:
    dispatch would cost more than it saves. Chunking never changes the result.
    """
    if threads <= 1 or n_out < 2:
        return [0, n_out]
    n_terms = int(term_off[-1])
    if n_terms * max(work_per_term, 1.0) < 20000:
        return [0, n_out]
    n_chunks = min(n_out, per_thread * threads)
    targets = np.linspace(0, n_terms, n_chunks + 1)[1:-1]
    cuts = np.searchsorted(term_off, targets, side="left")
    return sorted(set([0, *cuts.tolist(), n_out]))


def combine_ragged(tables, term_off, term_cells, epsilon=0.0, threads=1, validate=True, merge: Merge = "auto"):
    """Batched product + union + reduce of ragged frontier tables (compiled).

    A *table* is a ragged set of frontiers, one per cell, in CSR form
    ``(offsets, memory, time)``: cell ``c`` holds points ``offsets[c]:offsets[c+1]``,
    memory ascending and time strictly descending. Output cell ``c`` is::

        reduce( union_{terms t of c}  product_{slots s}  tables[s][term_cells[t, s]] )

    (a slot with cell ``-1`` is absent from that term), optionally epsilon-thinned.

    Parameters
    ----------
    tables : list of (offsets, memory, time)
        ``S`` parent tables, ``1 <= S <= MAX_SLOTS``.
    term_off : array_like of int, shape (n_out + 1,)
        CSR offsets of the terms of each output cell.
    term_cells : array_like of int, shape (n_terms, S)
    epsilon : float
        0 for the exact reduce; > 0 thins every output cell (see :func:`thin`).
    threads : int or None
        Output cells are processed in parallel chunks; the result does not depend on it.
    validate : bool
        Check shapes, ranges and that every parent cell is a frontier.
    merge : {"auto", "heap", "staircase"}
        How a cell's shifted frontiers are reduced: ``"staircase"`` merges them one by one
        into the cell's frontier (linear in its size, fast while it is short), ``"heap"`` by
        a k-way heap merge, ``"auto"`` the first while the cell's frontier stays within
        ``_kernels.STAIR_LIMIT`` points and its work within ``_kernels.HEAP_WORK_FACTOR``
        times the heap's estimate, else the second. The result does not depend on it.

    Returns
    -------
    offsets : ndarray of int64, shape (n_out + 1,)
    memory, time : ndarray of float64
    prov : ndarray of int64, shape (n_points, S)
        Global index, in each parent table, of the point it came from (``-1`` if absent).

    Examples
    --------
    >>> t1 = ([0, 2], [1.0, 2.0], [2.0, 1.0])
    >>> t2 = ([0, 1, 2], [0.5, 3.0], [0.5, 0.0])
    >>> off, m, t, p = combine_ragged([t1, t2], [0, 2], [[0, 0], [0, 1]])
    >>> off.tolist(), m.tolist(), t.tolist()
    ([0, 3], [1.5, 2.5, 5.0], [2.5, 1.5, 1.0])
    >>> p.tolist()
    [[0, 0], [1, 0], [1, 1]]
    """
    S = len(tables)
    offs, mems, tims = _parse_tables(tables, validate, "combine_ragged")
    term_off = np.ascontiguousarray(term_off, dtype=np.int64)
    term_cells = np.ascontiguousarray(term_cells, dtype=np.int64)
    if term_cells.ndim == 1 and term_cells.size == 0:
        term_cells = term_cells.reshape(0, S)
    eps, threads, stair_limit = _parse_options(epsilon, threads, merge)
    if validate:
        if term_off.ndim != 1 or term_off.shape[0] < 1 or term_off[0] != 0 or np.any(np.diff(term_off) < 0):
            raise InvalidInputError("term_off must be non-decreasing CSR offsets starting at 0")
        if term_cells.ndim != 2 or term_cells.shape != (int(term_off[-1]), S):
            raise InvalidInputError(
                f"term_cells must have shape ({int(term_off[-1])}, {S}), got {term_cells.shape}"
            )
        for s in range(S):
            col = term_cells[:, s]
            n_cells = offs[s].shape[0] - 1
            if col.size and (col.max() >= n_cells or col.min() < -1):
                raise InvalidInputError(f"term_cells[:, {s}] must be in [-1, {n_cells}), got values outside")
    return run_kernel(offs, mems, tims, term_off, term_cells, eps, threads, stair_limit)


def combine_outer(tables, row, col, epsilon=0.0, threads=1, validate=True, merge: Merge = "auto",
                  skip_covered: SkipCovered = "auto", sweep: Sweep = "auto", skip_dominated: SkipCovered = "auto"):
    """:func:`combine_ragged` for terms that are sums: output cell ``c`` has ``U`` terms, and
    term ``u`` takes cell ``row[s, c] + col[s, u]`` of table ``s`` (compiled; the terms are
    never written out).

    Node eliminations have terms of this form: a layout class of each neighbour (the row)
    and a config of the node eliminated (the column). Same result as :func:`combine_ragged`
    on the written-out terms ``term_off = U * arange(n_out + 1)``, ``term_cells[c * U + u, s]
    = row[s, c] + col[s, u]``.

    Parameters
    ----------
    tables : list of (offsets, memory, time)
        ``S`` parent tables, ``1 <= S <= MAX_SLOTS`` (see :func:`combine_ragged`).
    row : array_like of int, shape (S, n_out)
    col : array_like of int, shape (S, U)
        Every sum ``row[s, c] + col[s, u]`` must be a cell of table ``s``.
    epsilon, threads, validate, merge
        As for :func:`combine_ragged`.
    skip_covered : {"auto", "always", "never"}
        Skip the terms :func:`outer_skip_mask` proves contribute nothing: where checking
        their cells pays (``"auto"``), always, or never. The result does not depend on it.
    sweep : {"auto", "always", "never"}
        Where every slot but the first (or but the last) holds single points whose memory
        depends on the term only (a node's own cost, an edge of one memory), the cells that
        share a row of that slot are reduced together by one sweep over its points in memory
        order:
        where the groups are large enough to pay (``"auto"``), wherever the terms have that
        form, or never. The result does not depend on it.
    skip_dominated : {"auto", "always", "never"}
        Skip the terms another term strictly dominates (see :func:`outer_skip_mask` with
        ``dominated=True``): where a term's candidate points are many against the pairs of terms
        compared (``"auto"``), always, or never. The result does not depend on it.

    Returns
    -------
    offsets, memory, time, prov
        As for :func:`combine_ragged`.

    Examples
    --------
    >>> t1 = ([0, 2, 3], [1.0, 2.0, 0.5], [2.0, 1.0, 3.0])
    >>> off, m, t, p = combine_outer([t1, t1], [[0], [0]], [[0, 1], [1, 0]])
    >>> off.tolist(), m.tolist(), t.tolist()
    ([0, 2], [1.5, 2.5], [5.0, 4.0])
    """
    offs, mems, tims = _parse_tables(tables, validate, "combine_outer")
    eps, threads, stair_limit = _parse_options(epsilon, threads, merge)
    row, col = _parse_outer(offs, row, col, validate)
    n_out, U = row.shape[1], col.shape[1]
    if skip_covered not in _SKIP_COVERED:
        raise InvalidInputError(f"skip_covered must be one of {_SKIP_COVERED}, got {skip_covered!r}")
    if sweep not in _SWEEP:
        raise InvalidInputError(f"sweep must be one of {_SWEEP}, got {sweep!r}")
    if skip_dominated not in _SKIP_COVERED:
        raise InvalidInputError(f"skip_dominated must be one of {_SKIP_COVERED}, got {skip_dominated!r}")
    term_off = np.arange(n_out + 1, dtype=np.int64) * U
    return run_kernel(offs, mems, tims, term_off, None, eps, threads, stair_limit, (row, col), skip_covered=skip_covered,
                      sweep=sweep, skip_dominated=skip_dominated)


def outer_skip_mask(tables, row, col, threads=1, validate=True, dominated=False):
    """The terms of :func:`combine_outer` that contribute nothing, proven from their cells
    (compiled): ``(n_out, U)`` bool, ``True`` where the kernel skips the term.

    Term ``v`` of output cell ``c`` is skipped when a term ``u < v`` of the same cell has the
    same *base* slot (its largest cell, first on ties: the slot whose points the kernel adds
    last) and, in every slot, a cell *covering* ``v``'s: every point of ``v``'s cell weakly
    dominated by a point of ``u``'s. Every point of term ``v`` is then weakly dominated by a
    point of term ``u`` as the kernel sums them (the same slots in the same order, and
    rounding is monotone), and ``u``'s points come first on ties, so the output, provenance
    included, is the same without ``v``. In node eliminations many are: another config of
    the eliminated node does at least as well towards every neighbour (42% of the terms of
    the costliest combine of the default Transformer@16 run).

    With ``dominated``, term ``v`` is also skipped when another term ``u`` (before or after
    it) of the same base slot *strictly dominates* it: in each slot ``s``, every point of
    ``v``'s cell is weakly dominated by a point of ``u``'s delayed by ``d_s`` in time, where
    the least such delays sum below ``-2**-44`` times the magnitudes of the cells' times (the
    first and last point of each), a margin far above the rounding of any sum the kernel
    forms. Every point of ``v`` is then beaten in time at no more memory, so it is on no
    frontier and ties no point that is; the configs of a node eliminated often differ by a
    delay in one slot that another slot more than makes up for (57 to 72% of the terms, against
    30 to 46% covered, in the costliest join of the frontier so far with a layer in the
    Transformer@16 run at epsilon 1e-3).

    Parameters
    ----------
    tables, row, col, threads, validate
        As for :func:`combine_outer` (``U <= 512``).
    dominated : bool
        Include the terms another one strictly dominates.

    Returns
    -------
    ndarray of bool, shape (n_out, U)

    Examples
    --------
    >>> t = ([0, 1, 2, 4], [1.0, 2.0, 0.5, 3.0], [1.0, 2.0, 3.0, 0.5])
    >>> outer_skip_mask([t], [[0]], [[0, 1, 2]]).tolist()   # cell 1 is covered by cell 0, cell 2 is not
    [[False, True, False]]
    >>> t1 = ([0, 1, 2], [1.0, 1.0], [1.5, 2.0])
    >>> t2 = ([0, 1, 2], [0.0, 0.0], [3.0, 1.0])
    >>> # against term 0, term 1 is 0.5 s slower in slot 0 and 2 s faster in slot 1
    >>> outer_skip_mask([t1, t2], [[0], [0]], [[0, 1], [0, 1]]).tolist()
    [[False, False]]
    >>> outer_skip_mask([t1, t2], [[0], [0]], [[0, 1], [0, 1]], dominated=True).tolist()
    [[True, False]]
    """
    if not isinstance(dominated, (bool, np.bool_)):
        raise InvalidInputError(f"dominated must be True or False, got {dominated!r}")
    offs, mems, tims = _parse_tables(tables, validate, "outer_skip_mask")
    row, col = _parse_outer(offs, row, col, validate)
    if col.shape[1] > _MAX_COVER_TERMS:
        raise InvalidInputError(f"outer_skip_mask takes at most {_MAX_COVER_TERMS} terms per cell, got {col.shape[1]}")
    if row.shape[1] == 0 or col.shape[1] == 0:
        return np.zeros((row.shape[1], col.shape[1]), dtype=bool)
    classes = _row_classes(row)
    covers = _cover_tables(offs, mems, tims, classes, col, resolve_threads(threads), always=True)
    slack = _delay_classes(offs, classes, col.shape[1], 1, None)[0] if dominated else None
    return _kernels.outer_skip_mask(offs, mems, tims, row, col, covers, slack)


def _parse_outer(offs, row, col, validate):
    """``row`` and ``col`` of outer terms as contiguous int64, checked (with ``validate``: every
    sum a cell of its table)."""
    S = len(offs)
    row = np.ascontiguousarray(row, dtype=np.int64)
    col = np.ascontiguousarray(col, dtype=np.int64)
    if row.ndim != 2 or col.ndim != 2 or row.shape[0] != S or col.shape[0] != S:
        raise InvalidInputError(f"row and col must have shapes ({S}, n_out) and ({S}, U), got {row.shape} and {col.shape}")
    if validate and row.shape[1] and col.shape[1]:
        for s in range(S):
            n_cells = offs[s].shape[0] - 1
            lo, hi = row[s].min() + col[s].min(), row[s].max() + col[s].max()
            if lo < 0 or hi >= n_cells:
                raise InvalidInputError(f"row[{s}] + col[{s}] must be cells of tables[{s}], in [0, {n_cells}), got {lo} .. {hi}")
    return row, col


def run_kernel(offs, mems, tims, term_off, term_cells, eps, threads, stair_limit=_STAIR_LIMITS["auto"], outer=None,
               max_bytes=None, prov32=False, skip_covered: SkipCovered = "auto", sweep: Sweep = "auto", cover_memo=None,
               table_keys=None, skip_dominated: SkipCovered = "auto"):
    """The compiled kernel on checked, contiguous inputs, its output cells split into chunks of
    about equal work for ``threads`` threads (internal: :func:`combine_ragged`,
    :func:`combine_outer` and the engine's tables call it). ``max_bytes``: most bytes its
    buffers may hold (None: no limit); past it, :class:`KernelBudgetExceeded` is raised
    before the memory is taken. ``prov32``: provenance as int32 (every parent has fewer
    than 2**31 points). ``skip_covered``: whether outer terms that :func:`outer_skip_mask`
    proves covered are skipped (``"auto"``: where checking their cells pays; the result is
    the same). ``sweep``: whether outer terms of the form :func:`_sweep_plan` recognises are
    combined by the sweep kernel (``"auto"``: where its groups are large enough to pay; the
    result is the same). ``cover_memo`` (an object with ``recall(key)`` and ``remember(key,
    arrays)``, such as the engine's :class:`~tensoropt_py.elimination.table.Context`) keeps the
    cover bitsets of a slot for a later call on a table of the same content, which
    ``table_keys`` tells: per slot, a callable returning a hashable key of the table's content
    (called only where the bitsets are wanted). ``skip_dominated``: whether outer terms another
    one strictly dominates are skipped too (``"auto"``: where :func:`_skip_dominated` expects it
    to pay, with one chunk of output cells per thread, so that each worker walks the delays
    between a pair of cells once; the result is the same)."""
    if outer is not None and sweep != "never":
        plan = _sweep_plan(offs, mems, *outer, threads, always=sweep == "always")
        if plan is not None:
            multi, cells, group_off, group_bounds = plan
            return _kernels.sweep_kernel(offs, mems, tims, *outer, multi, cells, group_off, eps, group_bounds,
                                         _executor(threads),
                                         -1 if max_bytes is None else max(int(max_bytes), 0), bool(prov32))
    work = max(_mean_points(o) for o in offs)
    dominated = outer is not None and _skip_dominated(offs, outer, skip_dominated)
    # with the delays kept, a worker walks each pair of terms once: one chunk per thread
    bounds = _chunk_bounds(term_off, term_off.shape[0] - 1, threads, work, per_thread=1 if dominated else 4)
    covered = outer is not None and skip_covered != "never" and _comparable_terms(outer)
    classes = _row_classes(outer[0]) if covered or dominated else None
    covers = None
    if covered:
        covers = _cover_tables(offs, mems, tims, classes, outer[1], threads, always=skip_covered == "always",
                               max_bytes=max_bytes, memo=cover_memo, table_keys=table_keys)
    slack = None
    if dominated:
        slack, kept = _delay_classes(offs, classes, outer[1].shape[1], len(bounds) - 1, max_bytes)
        if max_bytes is not None:
            max_bytes -= kept  # the workers' buffers get what the delays they keep leave
    return _kernels.combine_kernel(offs, mems, tims, term_off, term_cells, eps, bounds, _executor(threads), stair_limit,
                                   outer, -1 if max_bytes is None else max(int(max_bytes), 0), bool(prov32), covers,
                                   slack)


def _mean_points(offsets):
    """Mean points per cell of a table with CSR ``offsets`` (0 for a table of no cells)."""
    return float(offsets[-1]) / max(offsets.shape[0] - 1, 1)


#: Candidate points per term (the product of the slots' mean cell sizes) per comparison it takes
#: (one per other term and slot) from which looking for terms another one strictly dominates
#: pays (``skip_dominated="auto"``): a comparison costs about as much as a few candidate points
#: (the Transformer@16 run's node eliminations of fewer lose, its joins with each layer gain).
_DOMINATED_POINTS_PER_CHECK = 4.0


def _skip_dominated(offs, outer, mode):
    """Whether the kernel looks for outer terms another one strictly dominates (``slack``)."""
    if mode == "never" or not _comparable_terms(outer):
        return False
    points = float(np.prod([_mean_points(o) for o in offs]))
    return mode == "always" or points >= _DOMINATED_POINTS_PER_CHECK * outer[1].shape[1] * len(offs)


def _comparable_terms(outer):
    """Whether the kernel can compare outer terms ``(row, col)`` with one another (cover
    bitsets, strict dominance): 2 to ``_MAX_COVER_TERMS`` terms per cell, and some output cell."""
    row, col = outer
    return 2 <= col.shape[1] <= _MAX_COVER_TERMS and row.shape[1] > 0


#: Most bytes the delays kept by the kernel's workers may take together in one call
#: (:func:`_delay_classes`; a quarter of a call's ``max_bytes`` where less, which its buffers
#: then do not get).
_DELAY_MAX_BYTES = 2**26


def _row_classes(row):
    """Per slot of outer terms' ``row`` (S, n_out): its distinct rows and each output cell's
    rank among them (its row class), both contiguous int64: the cover bitsets are computed per
    class (:func:`_cover_tables`), and the kernel keeps delays per class (:func:`_delay_classes`)."""
    classes = []
    for r in row:
        values, inverse = np.unique(r, return_inverse=True)
        classes.append((np.ascontiguousarray(values, dtype=np.int64),
                        np.ascontiguousarray(inverse.reshape(-1), dtype=np.int64)))
    return classes


def _delay_classes(offs, classes, U, workers, max_bytes):
    """The kernel's ``slack`` and the bytes its workers keep for it: per slot, each output
    cell's row class (``classes``: :func:`_row_classes`), for the slots whose delays between
    the terms' cells are kept (``classes * U * U`` doubles and flags per worker), None for the
    others: the slots of most points per cell first, while the ``workers`` together keep at
    most ``_DELAY_MAX_BYTES``."""
    limit = _DELAY_MAX_BYTES if max_bytes is None else min(_DELAY_MAX_BYTES, max_bytes / 4)
    room = limit / max(workers, 1)
    slack, kept = [None] * len(offs), 0.0
    for s in sorted(range(len(offs)), key=lambda s: -_mean_points(offs[s])):
        if _mean_points(offs[s]) <= 1.0:
            break  # cells of one point: walked at once
        values, inverse = classes[s]
        need = values.size * U * U * 9.0
        if need <= room:
            slack[s] = inverse
            room -= need
            kept += need * max(workers, 1)
    return slack, int(kept)


#: Least mean cells per group for which the sweep pays (``sweep="auto"``): one pass over a
#: group's points serves its cells together, where the general kernel merges each cell's lists.
_SWEEP_MIN_GROUP = 2.0


def _sweep_plan(offs, mems, row, col, threads, always=False):
    """How :func:`_kernels.sweep_kernel` combines outer terms ``row + col``, or None where their
    form is not its own: ``(multi, cells, group_off, group_bounds)``, the slot of many points
    per cell, the output cells ordered by their row of that slot (a group per value), the
    groups' offsets among them, and chunks of groups of about equal work for ``threads``
    threads.

    The form: every slot but the first (or but the last) has cells of at most one point, and
    either its row is the same for every output cell (the node's own cost: the cell depends
    on the term only) or all its points have one memory. A term's summed memory then does
    not depend on the output cell, so the cells of a group see one sequence of points,
    shifted in time only. Unless ``always``, None too where the groups average fewer than
    ``_SWEEP_MIN_GROUP`` cells."""
    S, n_out = row.shape
    U = col.shape[1]
    if S < 2 or n_out == 0 or U == 0:
        return None

    def single(s):  # single points whose memory depends on the term only
        o = offs[s]
        if o.shape[0] > 1 and int((o[1:] - o[:-1]).max()) > 1:
            return False
        return row[s].min() == row[s].max() or not mems[s].size or mems[s].min() == mems[s].max()

    if not all(single(s) for s in range(1, S - 1)):
        return None
    if single(S - 1):
        multi = 0
    elif single(0):
        multi = S - 1
    else:
        return None
    values, counts = np.unique(row[multi], return_counts=True)
    if not always and n_out < _SWEEP_MIN_GROUP * values.size:
        return None
    cells = np.argsort(row[multi], kind="stable").astype(np.int64)
    group_off = np.zeros(values.size + 1, dtype=np.int64)
    np.cumsum(counts, out=group_off[1:])
    if threads <= 1 or values.size < 2:
        return multi, cells, group_off, [0, values.size]
    sizes = np.diff(offs[multi])
    work = np.cumsum(sizes[values[:, None] + col[multi][None, :]].sum(axis=1) * counts, dtype=np.float64)
    n_chunks = min(values.size, 4 * threads, 64)
    cuts = np.searchsorted(work, np.linspace(0, work[-1], n_chunks + 1)[1:-1], side="left")
    return multi, cells, group_off, sorted({0, *(int(c) + 1 for c in cuts), values.size})


#: Cover checks per candidate point of the terms below which checking a call's cells pays
#: (:func:`_cover_tables`): a pair of cells is compared in a few nanoseconds (most fail on
#: their corners), a term's candidate point costs the merge about as much.
_COVER_CHECKS_PER_POINT = 0.125
_MAX_COVER_TERMS = int(_kernels.MAX_COVER_TERMS)  # the kernel's per-cell bitsets hold at most this many terms
_COVER_MAX_BYTES = 2**28  # most bytes of cover bitsets (a quarter of a call's max_bytes where less)


def _cover_tables(offs, mems, tims, classes, col, threads, always=False, max_bytes=None, memo=None, table_keys=None):
    """The kernel's ``covers``: per slot, the cover bitsets of its distinct row values
    (``classes``: :func:`_row_classes`; the rows split among ``threads`` threads) and each
    output cell's index among them. None
    (unless ``always``) where comparing every pair of terms' cells, per slot and distinct row,
    would cost more than the terms' candidate points (each slot's mean cell size, multiplied)
    could save, or where the bitsets would take more than their bytes' share. With ``memo``
    and ``table_keys`` (see :func:`run_kernel`), a slot's bitsets are looked up by its table's
    key, row values and columns first, and kept there once computed: a repeated layer's table
    joined with each new frontier of the model so far has the same ones every time."""
    S, n_out = len(classes), classes[0][1].shape[0]
    U = col.shape[1]
    rows = sum(values.size for values, _ in classes)
    if not always:
        points = float(np.prod([_mean_points(o) for o in offs]))
        limit = _COVER_MAX_BYTES if max_bytes is None else min(_COVER_MAX_BYTES, max_bytes / 4)
        checks, saved = rows * float(U) * U, _COVER_CHECKS_PER_POINT * n_out * U * points
        if checks > saved or rows * U * ((U + 63) // 64) * 8 > limit:
            return None
    cols = [np.ascontiguousarray(col[s], dtype=np.int64) for s in range(S)]
    keys = [None] * S
    bitsets = [None] * S
    jobs = []  # (slot, row values): each slot's rows split into one piece per thread
    for s, (values, _) in enumerate(classes):
        if memo is not None and table_keys is not None:
            keys[s] = ("cover bitsets", table_keys[s](), values.tobytes(), cols[s].tobytes())
            hit = memo.recall(keys[s])
            if hit is not None:
                bitsets[s] = hit[0]
                continue
        jobs += [(s, piece) for piece in np.array_split(values, min(threads, values.size))]
    executor = _executor(threads)

    def bits(job):
        s, piece = job
        return _kernels.cover_bitsets(offs[s], mems[s], tims[s], piece, cols[s])

    pieces = list(map(bits, jobs) if executor is None else executor.map(bits, jobs))
    for slot in {s for s, _ in jobs}:
        bitsets[slot] = np.concatenate([p for (s, _), p in zip(jobs, pieces) if s == slot])
        if keys[slot] is not None:
            memo.remember(keys[slot], (bitsets[slot],))
    return bitsets, [inverse for _, inverse in classes]


def _parse_tables(tables, validate, who):
    """Offsets, memory and time arrays of every table, contiguous (checked with ``validate``)."""
    S = len(tables)
    if not 1 <= S <= MAX_SLOTS:
        raise InvalidInputError(f"{who} takes 1..{MAX_SLOTS} tables, got {S}")
    offs, mems, tims = [], [], []
    for s, tab in enumerate(tables):
        o, m, t = tab
        o = np.ascontiguousarray(o, dtype=np.int64)
        m = np.ascontiguousarray(m, dtype=np.float64)
        t = np.ascontiguousarray(t, dtype=np.float64)
        if validate:
            _check_table(o, m, t, s)
        offs.append(o)
        mems.append(m)
        tims.append(t)
    return offs, mems, tims


def _parse_options(epsilon, threads, merge):
    """``(epsilon, threads, stair_limit)`` of the kernel from the public options."""
    if merge not in _STAIR_LIMITS:
        raise InvalidInputError(f"merge must be one of {sorted(_STAIR_LIMITS)}, got {merge!r}")
    return check_epsilon(epsilon), resolve_threads(threads), _STAIR_LIMITS[merge]


def _check_table(o, m, t, s):
    if o.ndim != 1 or o.shape[0] < 1 or o[0] != 0 or np.any(np.diff(o) < 0):
        raise InvalidInputError(f"tables[{s}] offsets must be non-decreasing CSR offsets starting at 0")
    if m.shape != t.shape or m.ndim != 1 or m.shape[0] != o[-1]:
        raise InvalidInputError(f"tables[{s}]: memory/time must be 1-d of length offsets[-1]={o[-1]}")
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(t))):
        raise InvalidInputError(f"tables[{s}] holds non-finite costs")
    if m.size > 1:
        same = np.ones(m.size - 1, dtype=bool)
        starts = o[1:-1]
        starts = starts[(starts > 0) & (starts < m.size)]
        same[starts - 1] = False
        if np.any(same & ((np.diff(m) <= 0) | (np.diff(t) >= 0))):
            raise InvalidInputError(
                f"tables[{s}]: every cell must be a frontier (memory ascending, time strictly descending)"
            )


def reduce_ragged(offsets, memory, time, threads=1):
    """Reduce many unsorted point sets at once (compiled): Alg. 1 per CSR cell.

    Parameters
    ----------
    offsets : array_like of int, shape (n + 1,)
    memory, time : array_like of float, shape (offsets[-1],)

    Returns
    -------
    offsets, memory, time : ndarray
        The frontier of each cell.
    index : ndarray of int64
        Global input index of each kept point (first of identical points).

    Examples
    --------
    >>> off, m, t, idx = reduce_ragged([0, 3, 4], [2.0, 1.0, 3.0, 5.0], [1.0, 2.0, 1.0, 5.0])
    >>> off.tolist(), idx.tolist()
    ([0, 2, 3], [1, 0, 3])
    """
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    memory = np.ascontiguousarray(memory, dtype=np.float64)
    time = np.ascontiguousarray(time, dtype=np.float64)
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise InvalidInputError("offsets must be non-decreasing CSR offsets starting at 0")
    if memory.shape != time.shape or memory.ndim != 1 or memory.shape[0] != offsets[-1]:
        raise InvalidInputError(f"memory/time must be 1-d of length offsets[-1]={offsets[-1]}")
    if not (np.all(np.isfinite(memory)) and np.all(np.isfinite(time))):
        raise InvalidInputError("memory/time must be finite")
    n = memory.shape[0]
    pt_off = np.arange(n + 1, dtype=np.int64)
    cells = np.arange(n, dtype=np.int64).reshape(n, 1)
    off, m, t, prov = combine_ragged(
        [(pt_off, memory, time)], offsets, cells, threads=threads, validate=False
    )
    return off, m, t, prov[:, 0].copy()
