"""Single-objective optimum of a CostGraph: ``min over strategies of time + lam * memory``.

An independent check of :func:`~tensoropt_py.engine.track`: every point of the exact
frontier is a strategy, and the frontier contains a minimiser of any non-negative
weighting of its two costs, so ``min(fr.time + lam * fr.memory)`` must equal
:func:`min_sum` for every ``lam >= 0`` (``lam = inf`` gives the least memory; ``lam = 0`` the
least time, and of the strategies that reach it the one of least memory, as ``inf`` the least
time of those of least memory).

The solver is plain variable elimination (bucket elimination) over scalar factors: a
unary factor per node, a pairwise factor per edge (its options reduced by ``min``; a
:class:`LayoutEdge` stays a table over layout classes, and every factor built later is a
table over the classes of configs its inputs can tell apart), and the
node whose elimination builds the smallest factor (ties: smaller degree, then index) goes first.
It shares no code with the frontier tracking (no frontier tables, none of their kernels; its
min-plus step, the least over the node eliminated of its factors' sum, has a compiled kernel of
its own, :func:`min_of_sums`, checked against :func:`min_of_sums_reference`, and for two
components compared in order (``lam = inf``, and the ties of ``lam = 0``)
:func:`lex_min_of_sums` against :func:`lex_min_of_sums_reference`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from ..elimination.table import table_key, unique_rows
from . import _minplus
from ..errors import InfeasibleError, InvalidInputError
from ..units import parse_positive
from .cost_graph import CostGraph, evaluate

__all__ = ["ScalarOptimum", "min_sum", "min_of_sums", "min_of_sums_reference", "lex_min_of_sums",
           "lex_min_of_sums_reference", "MAX_FACTOR_ENTRIES"]

MAX_FACTOR_ENTRIES = 50_000_000
"""Largest factor (entries) :func:`min_sum` builds before refusing; an elimination may scan
up to ``64 * MAX_FACTOR_ENTRIES`` sums (in slabs of about 4 million)."""
_WORK_PER_ENTRY = 64
_SLAB_ENTRIES = 1 << 22
_MEMO_BYTES = 1 << 28  # reduced factors kept for repeated eliminations (identical layers)


class _TooWide(InvalidInputError):
    """:func:`min_sum`'s refusal of a graph too wide (or too much work) for its limits.
    ``entries``: the least ``max_entries`` that would let the refused step pass (the elimination
    order does not depend on it), inf where ``max_work`` refused the whole."""

    def __init__(self, message, entries):
        super().__init__(message)
        self.entries = entries


@dataclass(frozen=True, slots=True, eq=False)
class ScalarOptimum:
    """The optimum of ``time + lam * memory`` and a strategy reaching it.

    Attributes
    ----------
    value : float
        ``time + lam * memory`` of the strategy (``memory`` alone when ``lam`` is inf).
    memory, time : float
        The strategy's costs (re-evaluated from the CostGraph).
    choices : ndarray of int64, shape (n_nodes,)
    edge_choices : ndarray of int64, shape (n_edges,)
    lam : float
    """

    value: float
    memory: float
    time: float
    choices: np.ndarray
    edge_choices: np.ndarray
    lam: float


def _weigh(mem, tim, lam, time_first=False):
    """Cost of (memory, time) arrays with a trailing axis: ``(..., 1)`` holding
    ``time + lam * memory``, or ``(..., 2)`` holding two components compared lexicographically:
    for ``lam = inf`` (memory, time), least memory first, then least time; with ``time_first``
    (lam 0) (time, memory). +inf where either is +inf."""
    bad = ~(np.isfinite(mem) & np.isfinite(tim))
    if math.isinf(lam):
        out = np.stack([mem, tim], axis=-1).astype(np.float64)
    elif time_first:
        out = np.stack([tim, mem], axis=-1).astype(np.float64)
    else:
        with np.errstate(invalid="ignore"):  # 0 * inf: forbidden entries are set below
            out = (tim + lam * mem)[..., None]
    out[bad] = np.inf
    return out


_LEX_RTOL = 1e-12  # first components (sums) that differ only by rounding count as equal


def _ties(values, first, axis):
    """Where ``values`` (of a first component) equal their minimum ``first`` along ``axis``
    (within ``_LEX_RTOL``)."""
    with np.errstate(invalid="ignore"):
        return values <= np.expand_dims(first + _LEX_RTOL * np.abs(first), axis)


def _best(comps, axis):
    """Min over ``axis`` of costs given as one array per component (:func:`_weigh`'s trailing
    axis split): lexicographic for two (the first, then the second). Returns the components
    of the minimum."""
    first = comps[0].min(axis=axis)
    if len(comps) == 1:
        return [first]
    return [first, np.minimum.reduce(comps[1], axis=axis, where=_ties(comps[0], first, axis), initial=np.inf)]


def _argbest(a, axis):
    """Index of the :func:`_best` entry along ``axis`` of costs with a trailing axis."""
    if a.shape[-1] == 1:
        return a[..., 0].argmin(axis=axis)
    first = a[..., 0].min(axis=axis)
    return np.where(_ties(a[..., 0], first, axis), a[..., 1], np.inf).argmin(axis=axis)


def _checked_factors(factors, shape, who, what="factors"):
    """``factors`` as float64 arrays the kernel can walk, and the shape of their sum, checked
    for :func:`min_of_sums` and :func:`lex_min_of_sums` (``who``, ``what``: for the errors)."""
    try:
        arrays = [np.asarray(f, dtype=np.float64) for f in factors]
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{who}: {what} must be arrays of numbers ({exc})") from None
    if not arrays:
        raise InvalidInputError(f"{who}: {what} must hold at least one array, got none")
    ndim = arrays[0].ndim
    if ndim < 1 or any(a.ndim != ndim for a in arrays):
        raise InvalidInputError(f"{who}: every one of {what} must have one number of dimensions (>= 1), got "
                                f"{[a.ndim for a in arrays]}")
    try:
        full = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        raise InvalidInputError(f"{who}: the shapes of {what} {[a.shape for a in arrays]} do not "
                                f"broadcast") from None
    shape = full if shape is None else tuple(int(n) for n in shape)
    if len(shape) != ndim or any(n != m and n != 1 for a in arrays for n, m in zip(a.shape, shape)):
        raise InvalidInputError(f"{who}: the shapes of {what} {[a.shape for a in arrays]} do not broadcast to "
                                f"shape {shape}")
    if min(shape) < 1:
        raise InvalidInputError(f"{who}: shape {shape} has an empty axis")
    for k, a in enumerate(arrays):
        if np.isnan(a).any():
            raise InvalidInputError(f"{who}: {what}[{k}] holds NaN")
    # views are read in place where their strides are whole float64s (the kernel walks any such)
    return [a if all(s % 8 == 0 for s in a.strides) else np.ascontiguousarray(a) for a in arrays], shape


def min_of_sums(factors, shape=None):
    """The least over the first axis of a sum of broadcast factors (the min-plus step of
    :func:`min_sum`), compiled.

    Parameters
    ----------
    factors : sequence of array_like of float
        Arrays of one number of dimensions, each of size ``shape[d]`` or 1 along axis ``d``;
        no NaN (+inf is allowed). They are added left to right, as NumPy's ``+`` does.
    shape : sequence of int or None
        The shape of their sum (None: the broadcast of their shapes).

    Returns
    -------
    ndarray of float64, shape ``shape[1:]``
        ``min over i of (factors[0] + factors[1] + ...)[i, ...]``, equal bit for bit to
        :func:`min_of_sums_reference`.

    Raises
    ------
    InvalidInputError
        For no factor, a factor of another number of dimensions or of a size that does not
        broadcast to ``shape``, an empty axis, or a NaN.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1.0], [4.0]])  # (2, 1): a cost per config of the node eliminated
    >>> b = np.array([[5.0, 0.0], [1.0, 3.0]])  # (2, 2): a cost per pair with a neighbour's config
    >>> min_of_sums([a, b]).tolist()
    [5.0, 1.0]
    """
    arrays, shape = _checked_factors(factors, shape, "min_of_sums")
    return _minplus.min_of_sums_kernel(arrays, tuple(shape), np.empty(shape[1:]))


def _sum_reference(factors):
    """The factors' sum in NumPy, added left to right."""
    arrays = [np.asarray(f, dtype=np.float64) for f in factors]
    total = arrays[0]
    for a in arrays[1:]:
        total = total + a
    return total


def min_of_sums_reference(factors, shape=None):
    """:func:`min_of_sums` in NumPy: the whole sum, then its minimum over the first axis."""
    total = _sum_reference(factors)
    return np.broadcast_to(total, total.shape if shape is None else tuple(shape)).min(axis=0)


def lex_min_of_sums(first, second, shape=None, rtol=0.0):
    """The lexicographic least over the first axis of two sums of broadcast factors (the
    min-plus step of :func:`min_sum` with two cost components compared in order), compiled.

    Parameters
    ----------
    first : sequence of array_like of float
        The factors of the first component, as in :func:`min_of_sums`, each entry >= 0
        (+inf allowed).
    second : sequence of array_like of float
        The factors of the second component, of the same shape of sum, each entry >= 0.
    shape : sequence of int or None
        The shape of the sums (None: the broadcast of the first component's shapes).
    rtol : float >= 0
        First sums within this relative distance of the least count as equal to it.

    Returns
    -------
    (ndarray, ndarray) of float64, each of shape ``shape[1:]``
        ``min over i`` of the first sum, and the least second sum over the ``i`` whose first
        sum is at most that minimum plus ``rtol`` times its magnitude (+inf where the minimum
        is +inf); equal bit for bit to :func:`lex_min_of_sums_reference`.

    Raises
    ------
    InvalidInputError
        For what :func:`min_of_sums` refuses, in either list; a negative entry; sums of
        different shapes; a negative or non-finite ``rtol``.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.array([[1.0], [1.0], [2.0]])  # time of 3 configs: two tie for the least
    >>> m = np.array([[5.0], [3.0], [1.0]])  # their memory: the second of the tie is smaller
    >>> [a.tolist() for a in lex_min_of_sums([t], [m])]
    [[1.0], [3.0]]
    """
    a, shape = _checked_factors(first, shape, "lex_min_of_sums", "first")
    b, _ = _checked_factors(second, shape, "lex_min_of_sums", "second")
    for what, arrays in (("first", a), ("second", b)):
        for k, x in enumerate(arrays):
            if (x < 0).any():  # costs: a tie is then within rtol of a value >= 0
                raise InvalidInputError(f"lex_min_of_sums: {what}[{k}] holds a negative value, "
                                        f"{float(x[x < 0].flat[0])}; costs must be >= 0")
    try:
        rtol = float(rtol)
    except (TypeError, ValueError):
        raise InvalidInputError(f"lex_min_of_sums: rtol must be a finite float >= 0, got {rtol!r}") from None
    if not (math.isfinite(rtol) and rtol >= 0):
        raise InvalidInputError(f"lex_min_of_sums: rtol must be a finite float >= 0, got {rtol!r}")
    out, out2 = np.empty(shape[1:]), np.empty(shape[1:])
    _minplus.min_of_sums_kernel(a, tuple(shape), out, b, out2, rtol)
    return out, out2


def lex_min_of_sums_reference(first, second, shape=None, rtol=0.0):
    """:func:`lex_min_of_sums` in NumPy: both sums whole, the least first one, then the least
    second one where the first ties with it."""
    sums = [_sum_reference(first), _sum_reference(second)]
    if shape is None:
        shape = sums[0].shape
    t1, t2 = (np.broadcast_to(x, tuple(shape)) for x in sums)
    least = t1.min(axis=0)
    with np.errstate(invalid="ignore"):
        ties = t1 <= least + rtol * np.abs(least)
    second_least = np.minimum.reduce(t2, axis=0, where=ties, initial=np.inf)
    return least, np.where(np.isinf(least), np.inf, second_least)


def _reduce_slabs(subs, shape, width):
    """:func:`_best` over axis 0 of the sum of broadcastable factors ``subs`` (the factors
    around the node eliminated, each a list of ``width`` contiguous arrays, one per cost
    component; full ``shape``). Compiled, :func:`min_of_sums` for one component (a finite lam;
    the Transformer@16's fastest strategy on its screened configs, ``benchmarks/bench_scale.py
    --cases transformer16_min_sum``: 0.50 to 0.60 s against 0.67 to 0.79 s with NumPy's
    reductions), :func:`lex_min_of_sums` for two compared in order. Past the kernel's limits on
    dimensions and factors: in NumPy, in slabs along the largest other axis, so that the
    whole sum is never held at once; components summed apart, as a trailing axis of 2 would
    make every broadcast addition an inner loop of length 2 (8x slower)."""
    red = np.empty(list(shape[1:]) + [width])
    if len(shape) <= _minplus.MAX_DIMS and len(subs) <= _minplus.MAX_FACTORS:
        # no sum held: the same numbers (the factors are added in the same order, and the
        # ties are those of _best)
        if width == 1:
            _minplus.min_of_sums_kernel([comps[0] for comps in subs], tuple(shape), red.reshape(shape[1:]))
        else:
            first, second = np.empty(shape[1:]), np.empty(shape[1:])
            _minplus.min_of_sums_kernel([comps[0] for comps in subs], tuple(shape), first,
                                        [comps[1] for comps in subs], second, _LEX_RTOL)
            red[..., 0], red[..., 1] = first, second
        return red
    q = 1 + int(np.argmax(shape[1:])) if len(shape) > 1 else 0
    step = max(1, _SLAB_ENTRIES // max(1, math.prod(shape) // max(shape[q], 1))) if q else 1
    for lo in range(0, shape[q] if q else 1, step):
        hi = lo + step
        acc = [None] * width
        owned = [False] * width  # acc[c] is a sum made here (else a factor's own array: read only)
        for comps in subs:
            for c, sub in enumerate(comps):
                if q and sub.shape[q] > 1:
                    sub = sub[(slice(None),) * q + (slice(lo, hi),)]
                if acc[c] is None:
                    acc[c] = sub
                elif owned[c] and np.broadcast_shapes(acc[c].shape, sub.shape) == acc[c].shape:
                    np.add(acc[c], sub, out=acc[c])
                else:
                    acc[c] = acc[c] + sub
                    owned[c] = True
        # x's own unary factor spans axis 0 and every other axis has a factor: acc is full
        out = red[(slice(None),) * (q - 1) + (slice(lo, hi),) if q else ()]
        for c, best in enumerate(_best(acc, 0)):
            out[..., c] = best
    return red


class _ReductionMemo:
    """Reduced factors by the content of what was summed: model graphs repeat identical
    layers, whose interior eliminations sum identical factors (other nodes, same tables),
    so each distinct reduction is computed once. A reduction is named by a digest of the
    digests of its factors' tables and of how each is indexed (:func:`_content_digest` for a
    given table, and for one built here the name of the reduction that built it), so a
    repeat is recognised without gathering or reading its factors. Holds at most
    ``_MEMO_BYTES``."""

    def __init__(self):
        self._red = {}
        self._bytes = 0

    def reduce(self, key, gather, shape, width):
        """The reduction named ``key``: ``_reduce_slabs(gather(), shape, width)``, from memory
        where it was computed before."""
        red = self._red.get(key)
        if red is None:
            red = _reduce_slabs(gather(), shape, width)
            if self._bytes + red.nbytes <= _MEMO_BYTES:
                red.flags.writeable = False
                self._red[key] = red
                self._bytes += red.nbytes
        return red


def _content_digest(*parts):
    """A digest of arrays (shape, dtype and values) and of small values by their ``repr``
    (digests, ints, tuples of them), in order, each part self-delimited: equal digests, equal
    content."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            h.update(f"a{part.shape}{part.dtype.str};".encode())
            h.update(np.ascontiguousarray(part).data)
        else:
            text = repr(part).encode()
            h.update(b"r%d;" % len(text) + text)
    return h.digest()


def min_sum(cg, lam, max_entries=MAX_FACTOR_ENTRIES, max_work=None):
    """The minimum of ``time + lam * memory`` over all strategies of ``cg`` (exact).

    Parameters
    ----------
    cg : CostGraph
    lam : float >= 0 or inf
        Weight of memory (seconds per byte). ``inf`` minimises memory first and then
        time: the fastest of the strategies of least memory (memory sums within a relative
        1e-12 of each other count as equal, so that summation order does not decide). ``0``
        minimises time first and then memory: the smallest of the fastest strategies (times
        within a relative 1e-12 count as equal).
    max_entries : int
        Refuse (``InvalidInputError``) when an intermediate factor would have more
        entries than this (the graph is too wide for exact variable elimination).
    max_work : float or None
        Refuse (``InvalidInputError``) when the eliminations would sum more terms than this
        in all (counted before any numeric work, repeated layers included; about 2.5e-9 s
        per term on one core). None: no limit but ``max_entries``.

    Returns
    -------
    ScalarOptimum

    Raises
    ------
    InvalidInputError
        For a bad ``lam`` or ``max_work``, or a graph too wide for ``max_entries`` (or too
        much work for ``max_work``).
    InfeasibleError
        When every strategy uses a forbidden cost.

    Examples
    --------
    >>> import numpy as np
    >>> cg = CostGraph([np.array([[1.0, 4.0], [4.0, 1.0]])] * 2, [(0, 1, np.zeros((2, 2, 2)))])
    >>> opt = min_sum(cg, 0.5)
    >>> opt.value, opt.choices.tolist()
    (6.0, [1, 1])
    """
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    try:
        lam = float(lam)
    except (TypeError, ValueError):
        raise InvalidInputError(f"lam must be a float >= 0 or inf, got {lam!r}") from None
    if not lam >= 0:
        raise InvalidInputError(f"lam must be a float >= 0 or inf, got {lam!r}")
    parse_positive(max_work, "max_work", allowed="a positive number of terms or None", allow_none=True)
    return _min_sum_within(cg, lam, max_entries, max_entries, max_work, tie_work=math.inf)[0]


def _plan_within(cg, lam, max_entries, plan_entries, max_work):
    """``(work, plan)`` of :func:`_eliminate` for ``cg``, its steps chosen as if ``max_entries``
    were ``plan_entries`` (>= it), or :class:`_TooWide` before any numeric work: past
    ``max_work`` terms, or where a step needs more than ``max_entries`` (the refusal then says
    whether ``plan_entries`` would let it through)."""
    # the elimination order and every factor's shape follow from the layout maps alone:
    # a run without values first refuses a graph that is too wide (or too much work)
    work, plan = _eliminate(cg, lam, plan_entries, numeric=False)
    if max_work is not None and work > max_work:
        raise _TooWide(f"min_sum: the eliminations would sum {work:.3g} terms, more than max_work={max_work:.3g} "
                       f"allows", math.inf)
    need = _needed_entries(plan)
    if need > max_entries:
        raise _TooWide(f"min_sum: its largest elimination needs max_entries={need}, more than {max_entries}", need)
    return work, plan


def _min_sum_within(cg, lam, max_entries, plan_entries, max_work, tie_work=0.0):
    """:func:`min_sum` on checked input, planned by :func:`_plan_within`. For lam 0, where the
    least time ties (:func:`_eliminate`) and the eliminations sum at most ``tie_work`` terms,
    the same steps are replayed with ``time_first`` for the smallest of the fastest strategies.
    Returns ``(ScalarOptimum, tied, work)``: ``tied``, a tie left unsolved; ``work``, the
    terms the eliminations summed."""
    work, plan = _plan_within(cg, lam, max_entries, plan_entries, max_work)
    opt, tied = _eliminate(cg, lam, max_entries, numeric=True, plan=plan)
    if tied and work <= tie_work:
        opt, tied = _eliminate(cg, lam, max_entries, numeric=True, plan=plan, time_first=True)
    return opt, tied, work


_TIE_WEIGHT = 1e-5
"""Weight of memory against time in :func:`_smallest_of_fastest`'s weighted solve, relative to
the fastest strategy's own (time / memory): small enough that a strategy slower by more than
rounding seldom wins (the Transformer@16's fastest holds at 1e-3 too), large enough that the
rounding of its sums hides at most about 1e-7 of that memory."""


def _smallest_of_fastest(cg, fastest, max_entries, lex_work, max_work):
    """The smallest of the fastest strategies of ``cg``, a :class:`ScalarOptimum` for lam 0, or
    None where it was not proven; ``fastest``: a strategy of least time (of this graph's costs,
    maybe found on a larger graph of the same costs).

    Where the eliminations sum at most ``lex_work`` terms, (time, memory) are compared in order
    (exact, at two to four times the work of one component). Past that, one component:
    ``time + w * memory`` with ``w = _TIE_WEIGHT * time / memory`` of ``fastest``. Its optimum
    ``x`` is accepted where its time is the least (within ``_LEX_RTOL``); then every fastest
    strategy ``s`` has ``w * memory(s) >= w * memory(x)`` up to the rounding of the sums and
    the tie, ``memory(s) >= memory(x) * (1 - 1e-7)`` or so. Where a slower strategy of less
    memory wins instead, None. A least time of 0 has no scale of its own: then ``w * memory``
    of ``fastest`` is half the graph's least positive time cost, below the time of any slower
    strategy (a sum of non-negative costs, one of them positive), so ``x`` takes no time and
    is exact. :class:`_TooWide` past ``max_work`` terms or ``max_entries``."""
    work, plan = _plan_within(cg, 0.0, max_entries, max_entries, max_work)
    if work <= lex_work:
        return _eliminate(cg, 0.0, max_entries, numeric=True, plan=plan, time_first=True)[0]
    if not fastest.memory > 0:  # no memory to save: nothing to prove it with
        return None
    scale = _TIE_WEIGHT * fastest.time if fastest.time > 0 else 0.5 * _least_positive_time(cg)
    weight = scale / fastest.memory
    opt, _ = _eliminate(cg, weight, max_entries, numeric=True, plan=plan)
    if not opt.time <= fastest.time + _LEX_RTOL * abs(fastest.time):
        return None
    return ScalarOptimum(opt.time, opt.memory, opt.time, opt.choices, opt.edge_choices, 0.0)


def _least_positive_time(cg):
    """The least positive finite time of any config or edge option of ``cg`` (1.0 where every
    time is 0: then any weight of memory orders the strategies by memory alone)."""
    times = [c[:, 1] for c in cg.node_costs] + [tab[..., 1] for *_, tab in cg._norm]
    least = math.inf
    for t in times:
        positive = t[(t > 0) & np.isfinite(t)]
        if positive.size:
            least = min(least, float(positive.min()))
    return least if math.isfinite(least) else 1.0


def _step_entries(shape):
    """The least ``max_entries`` with which an elimination over classes ``shape`` (the node
    eliminated first) passes: its factor's entries, and its sums over ``_WORK_PER_ENTRY``."""
    out_size = math.prod(shape[1:])
    return max(out_size, -(-out_size * shape[0] // _WORK_PER_ENTRY))


def _needed_entries(plan):
    """The least ``max_entries`` with which every step of a plan of :func:`_eliminate` passes."""
    need = 0
    for _, classes in plan:
        if classes is not None:
            scope, _, rep, _ = classes
            need = max(need, _step_entries([rep[z].shape[0] for z in scope]))
    return need


def _eliminate(cg, lam, max_entries, numeric, plan=None, time_first=False):
    """Variable elimination of :func:`min_sum`. ``numeric=False``: the same steps on
    value-less factors (zero-stride placeholders of the right shape), which raises exactly
    where the real run would and returns the number of terms the eliminations sum and the
    plan of the steps: per step, the node eliminated and the classes of its factors' nodes,
    which depend on the layout maps alone. ``plan``: replay those steps with values instead of
    choosing them again.

    Returns ``(ScalarOptimum, tied)`` when ``numeric``. ``tied`` (lam 0 without
    ``time_first`` only) says whether the strategy decoded may not be the smallest of the
    fastest: it is the only fastest strategy (up to configs that no factor tells apart) unless
    some decoding step finds more than one config of least time (given the configs decoded
    before it, every fastest strategy that agrees with them reaches that step's least).
    ``time_first`` compares (time, memory) lexicographically, at two to four times the work."""
    width = 2 if math.isinf(lam) or time_first else 1

    def placeholder(shape):
        return np.broadcast_to(np.zeros(width), tuple(shape) + (width,))

    n = cg.n_nodes
    K = cg.n_configs
    # a factor is (vars, maps, table, digest): its value at configs (k_z) is
    # table[maps[0][k_z0], ...]; layout edges keep their layout classes as maps, so factors stay
    # small. digest names the table's content (None without values): the memo's keys
    factors: dict[int, tuple] = {}
    of_var: list[set] = [set() for _ in range(n)]
    edge_opt = []  # per edge: (u, v, argmin option (A, B), smap, dmap)
    for i, c in enumerate(cg.node_costs):
        if numeric:
            tab = _weigh(c[:, 0], c[:, 1], lam, time_first)
            factors[i] = ((i,), (np.arange(K[i]),), tab, _content_digest(tab))
        else:
            factors[i] = ((i,), (np.arange(K[i]),), placeholder((K[i],)), None)
        of_var[i].add(i)
    reduced = {}  # table_key of a cost table -> its options reduced: once per table that edges share
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        if numeric:
            key = table_key(tab)
            if key not in reduced:
                w = _weigh(tab[..., 0], tab[..., 1], lam, time_first)  # (A, B, R, width)
                # for lam 0, an option of least time and, of those, least memory: options
                # are independent given the configs of their edge's ends, so no tie of
                # options can make the strategy's memory more than it must be
                best = _argbest(_weigh(tab[..., 0], tab[..., 1], 0.0, True) if lam == 0 and width == 1 else w, 2)
                wmin = np.take_along_axis(w, best[..., None, None], axis=2)[:, :, 0]
                reduced[key] = (best, wmin, _content_digest(wmin))
            best, wmin, digest = reduced[key]
            edge_opt.append((u, v, best, smap, dmap))
        else:
            wmin, digest = placeholder(tab.shape[:2]), None
        fid = n + e
        factors[fid] = ((u, v), (smap, dmap), wmin, digest)
        of_var[u].add(fid)
        of_var[v].add(fid)
    nbrs = [set() for _ in range(n)]
    for u, v, _ in cg.edges:
        nbrs[u].add(v)
        nbrs[v].add(u)

    total = np.zeros(width)
    work = 0
    memo = _ReductionMemo()

    def n_classes(fid, z):
        fv, maps, tab, _ = factors[fid]
        return tab.shape[fv.index(z)]

    def est_size(x):
        size = K[x]
        for y in nbrs[x]:
            c = 1
            for fid in of_var[x] & of_var[y]:
                c *= n_classes(fid, y)
            size *= min(c, K[y])
        return size

    import heapq

    alive = set(range(n))
    # lazily updated priority queue: only the neighbours of an eliminated node change key
    key = {y: (est_size(y), len(nbrs[y]), y) for y in range(n)} if plan is None else {}
    heap = list(key.values())
    heapq.heapify(heap)
    steps = [] if plan is None else None  # the plan this run makes
    replay = iter(() if plan is None else plan)

    def refresh(ys):
        if plan is not None:
            return
        for y in ys:
            if y in alive:
                key[y] = (est_size(y), len(nbrs[y]), y)
                heapq.heappush(heap, key[y])

    trace = []  # (x, factors it removed, representative configs of x) in elimination order
    next_id = n + cg.n_edges
    while alive:
        if plan is None:
            while True:
                item = heapq.heappop(heap)
                x = item[2]
                if x in alive and key[x] == item:
                    break
            classes = None
        else:
            x, classes = next(replay)
        fids = sorted(of_var[x])
        if K[x] == 1:
            # a constant: restrict every factor to its only config, coupling nothing
            popped = [factors[f] for f in fids]
            for f in fids:
                fv, maps, tab, digest = factors.pop(f)
                a = fv.index(x)
                sub = tab[(slice(None),) * a + (int(maps[a][0]),)]
                rest = tuple(z for z in fv if z != x)
                if rest:
                    if numeric:
                        digest = _content_digest(digest, a, int(maps[a][0]))
                    factors[next_id] = (rest, tuple(m for b, m in enumerate(maps) if b != a), sub, digest)
                    for z in rest:
                        of_var[z].discard(f)
                        of_var[z].add(next_id)
                    next_id += 1
                else:
                    total = total + sub
            trace.append((x, popped, np.zeros(1, dtype=np.int64)))
            if steps is not None:
                steps.append((x, None))
            touched = set(nbrs[x])
            for z in nbrs[x]:
                nbrs[z].discard(x)
            alive.discard(x)
            refresh(touched)
            nbrs[x] = set()
            of_var[x] = set()
            continue
        if classes is None:
            scope = [x] + sorted({z for f in fids for z in factors[f][0]} - {x})
            inv, rep = {}, {}
            for z in scope:
                cols = np.stack([factors[f][1][factors[f][0].index(z)] for f in fids if z in factors[f][0]], axis=1)
                rep[z], inv[z] = unique_rows(cols)
            # a node of one class in these factors (all its configs alike to them) does not shape
            # the new factor and is left out of it: NumPy broadcasts at most 32 dimensions, and a
            # wide fan-out screened down to a few configs can couple more nodes than that
            apart = [z for z in scope[1:] if rep[z].shape[0] == 1]
            scope = [z for z in scope if z == x or rep[z].shape[0] > 1]
            if steps is not None:
                steps.append((x, (scope, apart, rep, inv)))
        else:
            scope, apart, rep, inv = classes
        shape = [rep[z].shape[0] for z in scope]
        out_size = math.prod(shape[1:])
        work += out_size * shape[0]
        if out_size > max_entries or out_size * shape[0] > _WORK_PER_ENTRY * max_entries:
            raise _TooWide(
                f"min_sum: eliminating node {x} needs a factor over nodes {tuple(scope)} (classes "
                f"{tuple(shape)}) with {out_size * shape[0]} entries, more than max_entries={max_entries} allows "
                f"(the graph is too wide for exact elimination)",
                _step_entries(shape),
            )
        popped = [factors.pop(f) for f in fids]
        for f, (fv, *_) in zip(fids, popped):
            for z in fv:
                if z != x:
                    of_var[z].discard(f)
        digest = None
        if numeric:
            # what each factor contributes: its table at the classes' representatives, its axes
            # placed at their scope positions (a one-class axis, -1, dropped)
            terms = [(tab, [maps[a][rep[z]] for a, z in enumerate(fv)],
                      tuple(scope.index(z) if z in scope else -1 for z in fv)) for fv, maps, tab, _ in popped]

            def gather(terms=terms, shape=shape):
                subs = []
                for tab, index, pos in terms:
                    sub = tab[np.ix_(*index)]
                    kept = [q for q in pos if q >= 0]
                    sub = sub.reshape([shape[q] for q in kept] + [width])  # without the one-class axes
                    sub = sub.transpose(list(np.argsort(kept)) + [len(kept)])
                    sub = sub.reshape([shape[q] if q in kept else 1 for q in range(len(shape))] + [width])
                    subs.append([np.ascontiguousarray(sub[..., c]) for c in range(width)])
                return subs

            digest = _content_digest(tuple(shape), width,
                                     *[part for (*_, d), (_, index, pos) in zip(popped, terms) for part in (d, pos, *index)])
            red = memo.reduce(digest, gather, shape, width)
        else:
            red = placeholder(shape[1:])
        others = tuple(scope[1:])
        trace.append((x, popped, rep[x]))  # decoded later from the factors themselves
        if others:
            factors[next_id] = (others, tuple(inv[z] for z in others), red, digest)
            for z in others:
                of_var[z].add(next_id)
                nbrs[z].discard(x)
                nbrs[z].update(w for w in others if w != z)
            next_id += 1
        else:
            total = total + red
        for z in apart:
            nbrs[z].discard(x)
        alive.discard(x)
        refresh(others + tuple(apart))
        nbrs[x] = set()
        of_var[x] = set()
    if not numeric:
        return work, steps
    if not np.isfinite(total).all():
        raise InfeasibleError("every strategy of this cost graph uses a forbidden cost (>= FORBIDDEN_COST or +inf)")
    choices = np.zeros(n, dtype=np.int64)
    check_ties = lam == 0 and not time_first
    tie = _LEX_RTOL * abs(float(total[0]))  # strategies' times this close count as equal
    tied = False
    for x, popped, rep in reversed(trace):
        # every other node of these factors is decoded already: minimise over x alone
        val = np.zeros((rep.shape[0], width))
        for fv, maps, tab, _ in popped:
            val = val + tab[tuple(maps[a][rep] if z == x else maps[a][choices[z]] for a, z in enumerate(fv))]
        best = int(_argbest(val, 0))
        if check_ties and not tied and rep.shape[0] > 1:
            # another config of x may complete a strategy of least time too, of less memory
            tied = bool(np.count_nonzero(val[:, 0] <= val[best, 0] + tie) > 1)
        choices[x] = int(rep[best])
    edge_choices = np.zeros(cg.n_edges, dtype=np.int64)
    for e, (u, v, best, smap, dmap) in enumerate(edge_opt):
        edge_choices[e] = int(best[smap[choices[u]], dmap[choices[v]]])
    mem, tim = evaluate(cg, choices, edge_choices)
    return ScalarOptimum(
        value=float(mem[0]) if math.isinf(lam) else float(tim[0] + lam * mem[0]),
        memory=float(mem[0]),
        time=float(tim[0]),
        choices=choices,
        edge_choices=edge_choices,
        lam=lam,
    ), tied
