"""Tensor rescheduling: the cheapest sequence of collectives between two layouts.

TensorOpt §4.2 "Flexible tensor splitting": when an operator writes a tensor in layout
``A`` and its consumer reads it in layout ``B``, the tensor is rescheduled by a sequence
of collectives found as a shortest path in a graph whose nodes are layouts
(:class:`~tensoropt_py.space.layout.Layout`) and whose edges are single collectives along a
group of fine mesh axes, weighted by :meth:`CommModel.collective_time
<tensoropt_py.cost.comm.CommModel.collective_time>`.

Moves (``G`` = the fine axes of the collective; the concurrent device groups are the
devices that differ only along ``G``, :func:`~tensoropt_py.space.mesh.fine_groups`):

================ ============================================ ==============================
kind             placements along G                           nbytes given to the model
================ ============================================ ==============================
slice            one axis: R -> S(j)                          0 (local, free)
all_gather       S(j_a) -> R (innermost shards of any dims)   gathered local block
all_reduce       P -> R (any non-empty subset of P axes)      local block
reduce_scatter   P -> S(j) (subset of P axes, one dim j)      local block before scatter
all_to_all       S(i) -> S(j) (innermost axes of dim i)       local block
================ ============================================ ==============================

Sharding stays block-nested (the lower fine axis is the outer factor of a dimension), so a
dimension may only gain a shard on an axis *after* (inner to) all axes already sharding it,
and lose the innermost ones; every split must divide the dimension exactly. Slices are
single-axis (several free slices compose). All dimensions of the tensor may be used as
intermediate shards (e.g. reduce-scatter + all-gather of a partial sum over a dimension
neither side shards, a hierarchical all-reduce). Layouts over different fine-axis grids
(meshes of a device count with several prime factors) are connected by free
re-expressions of the same placement.

Backward
--------
The backward pass moves the *gradient* from the consumer back to the producer: from
``B_grad`` (the consumer's input layout with a partial sum on every axis splitting a loop
dimension the input does not index) to ``A_grad`` (the producer's output layout with its
partial axes replicated: every contributor of a partial sum needs the whole gradient). It
is an independent shortest path on the same graph (:meth:`Rescheduler.backward`). The
typical correspondences: a forward all-gather (S -> R) costs a reduce-scatter (P -> S)
in backward when the consumer's gradient is partial along those axes, and a free slice
when the consumer computed redundantly there (its gradient is replicated); a forward slice
(R -> S) costs an all-gather of the gradient (S -> R); a forward all-reduce of a partial
output (P -> R) costs nothing in backward when the consumer replicates (R -> R) and a
reduce (``all_reduce``) when it is partial; an all-to-all's transpose is an all-to-all.

Implementation
--------------
For one ``(shape, itemsize, fine sizes)`` the moves form a fixed graph. :class:`Rescheduler`
enumerates it once into CSR arrays (compiled, over placements numbered by integer codes;
:func:`_place_moves` is the reference and fallback) and runs a compiled single-source
Dijkstra per source layout (``_reschedule.pyx``; :func:`dijkstra_py` is its pure-Python
reference and fallback), batched over every request of :meth:`Rescheduler.matrices`; the
searches of a batch run on several threads where they are large enough to pay for it
(``threads``; a 64-device model's move graphs have 15,625 placements and 441,000 moves). It
breaks ties exactly like
:class:`ReferenceRescheduler` (the original lazy ``heapq`` search over :class:`Layout`
objects, kept for the tests), so times, matrices and paths are identical.

Examples
--------
>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.cost.comm import CommModel
>>> from tensoropt_py.space.layout import Layout
>>> rs = Rescheduler(CommModel(Cluster.preset("v100-2x8")))
>>> p = rs.path((64, 1024), "float32", Layout((2, 2), (0, 0)), Layout((2, 2), (-1, -1)))
>>> [(s.kind, s.fine_axes, s.groups, s.nbytes) for s in p.steps]
[('all_gather', (0, 1), ((0, 1, 2, 3),), 262144)]
>>> str(rs.path((64, 1024), "float32", Layout((2, 2), (-2, -1)), Layout((2, 2), (-1, 1))))
'slice[1] -> all_reduce[0]'
>>> rs.path((64, 1024), "float32", Layout((2, 2), (0, 1)), Layout((2, 2), (0, 1))).time
0.0
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..elimination.kernels import resolve_threads
from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES
from ..space.layout import PARTIAL, REPLICATE, Layout
from ..space.mesh import fine_groups

__all__ = ["RescheduleStep", "ReschedulePath", "Rescheduler", "ReferenceRescheduler", "moves", "dijkstra_py"]


@dataclass(frozen=True, slots=True)
class RescheduleStep:
    """One collective of a rescheduling path.

    Attributes
    ----------
    kind : str
        ``"slice" | "all_gather" | "all_reduce" | "reduce_scatter" | "all_to_all"``.
    fine_axes : tuple of int
        Fine axes of the collective (of ``before.sizes``).
    groups : tuple of tuple of int
        Concurrent device groups.
    nbytes : int
        Size argument given to the communication model (see the module table).
    time : float
        Seconds.
    before, after : Layout
    """

    kind: str
    fine_axes: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    nbytes: int
    time: float
    before: Layout
    after: Layout

    def to_dict(self) -> dict:
        return {"kind": self.kind, "fine_axes": list(self.fine_axes), "groups": [list(g) for g in self.groups],
                "nbytes": self.nbytes, "time": self.time, "before": str(self.before), "after": str(self.after)}


@dataclass(frozen=True, slots=True)
class ReschedulePath:
    """The cheapest rescheduling from ``src`` to ``dst``: ``steps`` and their total ``time``."""

    src: Layout
    dst: Layout
    steps: tuple[RescheduleStep, ...]
    time: float

    def __str__(self):
        if not self.steps:
            return "identity"
        return " -> ".join(f"{s.kind}{list(s.fine_axes)}" for s in self.steps)


def _itemsize(dtype) -> int:
    if isinstance(dtype, int):
        return dtype
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise InvalidInputError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}") from None


def moves(shape, itemsize: int, layout: Layout):
    """Every single-collective move from ``layout`` (see the module table).

    Yields ``(kind, fine_axes, after, nbytes)``; ``fine_axes`` index ``layout.sizes``.

    >>> sorted(k for k, *_ in moves((4, 4), 4, Layout((2,), (-2,))))
    ['all_reduce', 'reduce_scatter', 'reduce_scatter']
    """
    sizes, place = layout.sizes, layout.place
    r = len(shape)
    axes_of = [[] for _ in range(r)]
    for a, p in enumerate(place):
        if p >= 0:
            axes_of[p].append(a)
    split = [math.prod(sizes[a] for a in ax) for ax in axes_of]
    last = [ax[-1] if ax else -1 for ax in axes_of]
    local_bytes = (math.prod(shape) // math.prod(split)) * itemsize
    rep = [a for a, p in enumerate(place) if p == REPLICATE]
    par = [a for a, p in enumerate(place) if p == PARTIAL]

    def with_(axes, value):
        pl = list(place)
        for a in axes:
            pl[a] = value
        return Layout(sizes, tuple(pl))

    # slice: R -> S(j) on one axis (free)
    for a in rep:
        for j in range(r):
            if a > last[j] and shape[j] % (split[j] * sizes[a]) == 0:
                yield "slice", (a,), with_((a,), j), 0
    # all-gather: innermost shards of any dims -> R
    sharded = [j for j in range(r) if axes_of[j]]
    if sharded:
        for ks in itertools.product(*[range(len(axes_of[j]) + 1) for j in sharded]):
            if not any(ks):
                continue
            g = tuple(sorted(a for j, k in zip(sharded, ks) if k for a in axes_of[j][len(axes_of[j]) - k:]))
            grow = math.prod(sizes[a] for a in g)
            yield "all_gather", g, with_(g, REPLICATE), local_bytes * grow
    # all-reduce and reduce-scatter of partial axes
    for k in range(1, len(par) + 1):
        for g in itertools.combinations(par, k):
            yield "all_reduce", g, with_(g, REPLICATE), local_bytes
            grow = math.prod(sizes[a] for a in g)
            for j in range(r):
                if g[0] > last[j] and shape[j] % (split[j] * grow) == 0:
                    yield "reduce_scatter", g, with_(g, j), local_bytes
    # all-to-all: innermost axes of dim i -> shards of dim j
    for i in sharded:
        ax = axes_of[i]
        for k in range(1, len(ax) + 1):
            g = tuple(ax[len(ax) - k:])
            grow = math.prod(sizes[a] for a in g)
            for j in range(r):
                if j != i and g[0] > last[j] and shape[j] % (split[j] * grow) == 0:
                    yield "all_to_all", g, with_(g, j), local_bytes


def _place_moves(shape, itemsize: int, sizes, place):
    """:func:`moves` on raw placement tuples: ``[(kind, fine_axes, after_place, nbytes)]``.

    Same moves in the same order as :func:`moves` (checked by the tests), without building
    :class:`Layout` objects (the hot loop of the move-graph construction).
    """
    r = len(shape)
    axes_of = [[] for _ in range(r)]
    rep, par = [], []
    for a, p in enumerate(place):
        if p >= 0:
            axes_of[p].append(a)
        elif p == REPLICATE:
            rep.append(a)
        else:
            par.append(a)
    split = [math.prod([sizes[a] for a in ax]) for ax in axes_of]
    last = [ax[-1] if ax else -1 for ax in axes_of]
    local_bytes = (math.prod(shape) // math.prod(split)) * itemsize
    out = []
    append = out.append

    def with_(axes, value):
        pl = list(place)
        for a in axes:
            pl[a] = value
        return tuple(pl)

    for a in rep:
        sa = sizes[a]
        for j in range(r):
            if a > last[j] and shape[j] % (split[j] * sa) == 0:
                pl = list(place)
                pl[a] = j
                append(("slice", (a,), tuple(pl), 0))
    sharded = [j for j in range(r) if axes_of[j]]
    if sharded:
        # per sharded dimension, its innermost k axes for k = 0, 1, ...; the first product is all k = 0
        suffixes = [[axes_of[j][len(axes_of[j]) - k:] for k in range(len(axes_of[j]) + 1)] for j in sharded]
        combos = itertools.product(*suffixes)
        next(combos)
        for combo in combos:
            g = sorted([a for part in combo for a in part])
            grow = 1
            pl = list(place)
            for a in g:
                grow *= sizes[a]
                pl[a] = REPLICATE
            append(("all_gather", tuple(g), tuple(pl), local_bytes * grow))
    for k in range(1, len(par) + 1):
        for g in itertools.combinations(par, k):
            append(("all_reduce", g, with_(g, REPLICATE), local_bytes))
            grow = math.prod([sizes[a] for a in g])
            for j in range(r):
                if g[0] > last[j] and shape[j] % (split[j] * grow) == 0:
                    append(("reduce_scatter", g, with_(g, j), local_bytes))
    for i in sharded:
        ax = axes_of[i]
        for k in range(1, len(ax) + 1):
            g = tuple(ax[len(ax) - k:])
            grow = math.prod([sizes[a] for a in g])
            for j in range(r):
                if j != i and g[0] > last[j] and shape[j] % (split[j] * grow) == 0:
                    append(("all_to_all", g, with_(g, j), local_bytes))
    return out


class _Search:
    """A resumable single-source Dijkstra over layouts."""

    __slots__ = ("dist", "prev", "heap", "done", "counter")

    def __init__(self, src):
        self.dist = {src: 0.0}
        self.prev = {src: None}
        self.heap = [(0.0, 0, src)]
        self.done = set()
        self.counter = itertools.count(1)


class ReferenceRescheduler:
    """Shortest-path rescheduling with a cache: the original pure-Python search (reference).

    Kept verbatim as the reference :class:`Rescheduler` is checked against (same results,
    same paths); it searches lazily over :class:`Layout` objects with ``heapq``.

    Parameters
    ----------
    comm : CommModel
        Anything with ``collective_time(kind, nbytes, groups)``.
    slice_time : float, default 0.0
        Seconds charged per local slice.

    Notes
    -----
    Searches are cached per ``(shape, itemsize, src, grids)`` and resumed for new targets,
    so asking for many targets from one source costs one Dijkstra.
    """

    def __init__(self, comm, *, slice_time: float = 0.0):
        if not hasattr(comm, "collective_time"):
            raise InvalidInputError(f"Rescheduler needs a communication model with collective_time, got {comm!r}")
        if not slice_time >= 0:
            raise InvalidInputError(f"slice_time must be >= 0, got {slice_time!r}")
        self.comm = comm
        self.slice_time = float(slice_time)
        self._searches: dict = {}
        self._paths: dict = {}
        self._ctime: dict = {}
        self._adj: dict = {}
        self._matrices: dict = {}

    # -- costs ---------------------------------------------------------------------------------
    def step_time(self, kind: str, nbytes: int, sizes, axes) -> float:
        """Seconds of one move (cached)."""
        if kind == "slice":
            return self.slice_time
        key = (kind, nbytes, sizes, axes)
        t = self._ctime.get(key)
        if t is None:
            t = self._ctime[key] = float(self.comm.collective_time(kind, nbytes, fine_groups(sizes, axes)))
        return t

    # -- search --------------------------------------------------------------------------------
    def _check(self, shape, src, dst):
        shape = tuple(int(s) for s in shape)
        for lay, what in ((src, "source"), (dst, "target")):
            if not isinstance(lay, Layout):
                raise InvalidInputError(f"{what} layout must be a Layout, got {lay!r}")
            if not lay.fits(shape):
                raise InvalidInputError(f"{what} {lay} does not divide a tensor of shape {list(shape)}")
        if src.num_devices != dst.num_devices:
            raise InvalidInputError(f"layouts {src} and {dst} are over different device counts")
        if dst.is_partial and not src.is_partial:
            raise InvalidInputError(f"cannot reschedule {src} into a partial-sum layout {dst}")
        return shape

    def time(self, shape, dtype, src: Layout, dst: Layout) -> float:
        """Seconds of the cheapest rescheduling (0 when ``src == dst``; inf if unreachable)."""
        if src == dst:
            return 0.0
        return self._solve(self._check(shape, src, dst), _itemsize(dtype), src, dst)[0]

    def matrix(self, shape, dtype, sources, targets) -> np.ndarray:
        """``(len(sources), len(targets))`` seconds of every rescheduling (cached per argument tuple)."""
        shape = tuple(int(s) for s in shape)
        itemsize = _itemsize(dtype)
        sources, targets = tuple(sources), tuple(targets)
        key = (shape, itemsize, sources, targets)
        hit = self._matrices.get(key)
        if hit is None:
            hit = np.stack([self.times(shape, itemsize, a, targets) for a in sources]) if sources else np.zeros((0, len(targets)))
            hit.setflags(write=False)
            self._matrices[key] = hit
        return hit

    def matrices(self, requests) -> list:
        """:meth:`matrix` of each ``(shape, dtype, sources, targets)`` of ``requests``."""
        return [self.matrix(*q) for q in requests]

    def times(self, shape, dtype, src: Layout, targets) -> np.ndarray:
        """Seconds from ``src`` to each of ``targets`` (one search; inf where unreachable)."""
        shape = tuple(int(s) for s in shape)
        itemsize = _itemsize(dtype)
        out = np.empty(len(targets))
        search = self._searches.get((shape, itemsize, src.sizes, src.place))
        for i, dst in enumerate(targets):
            if search is not None and dst.sizes == src.sizes and dst.place in search.done:
                out[i] = search.dist[dst.place]
                continue
            self._check(shape, src, dst)
            out[i] = 0.0 if src == dst else self._solve(shape, itemsize, src, dst)[0]
            search = self._searches.get((shape, itemsize, src.sizes, src.place))
        return out

    def _lookup(self, shape, dtype, src: Layout, dst: Layout):
        """``(shape, itemsize, cache key, cached path or None)``; ``src == dst`` is the empty path."""
        shape = self._check(shape, src, dst)
        itemsize = _itemsize(dtype)
        key = (shape, itemsize, src.sizes, src.place, dst.sizes, dst.place)
        hit = self._paths.get(key)
        if hit is None and src == dst:
            hit = self._paths[key] = ReschedulePath(src, dst, (), 0.0)
        return shape, itemsize, key, hit

    def _store(self, key, src: Layout, dst: Layout, steps: list) -> ReschedulePath:
        """Cache and return the path of ``steps`` (in order) from ``src`` to ``dst``."""
        if steps:  # the last state may be an equal-key re-expression: report dst itself
            last = steps[-1]
            steps[-1] = RescheduleStep(last.kind, last.fine_axes, last.groups, last.nbytes, last.time,
                                       last.before, dst if last.after.sizes == dst.sizes else last.after)
        p = self._paths[key] = ReschedulePath(src, dst, tuple(steps), float(sum(s.time for s in steps)))
        return p

    def path(self, shape, dtype, src: Layout, dst: Layout) -> ReschedulePath:
        """The cheapest sequence of collectives turning ``src`` into ``dst``."""
        shape, itemsize, key, hit = self._lookup(shape, dtype, src, dst)
        if hit is not None:
            return hit
        t, search, node = self._solve(shape, itemsize, src, dst)
        if not math.isfinite(t):
            raise InvalidInputError(f"no rescheduling from {src} to {dst} for shape {list(shape)}")
        steps = []
        tuple_states = isinstance(next(iter(search.prev)), tuple)
        sizes = node.sizes
        if tuple_states:
            node = Layout(sizes, node.place)
        while search.prev[node.place if tuple_states else node] is not None:
            before, kind, axes, nbytes = search.prev[node.place if tuple_states else node]
            if tuple_states:
                before = Layout(sizes, before)
            steps.append(RescheduleStep(kind, axes, fine_groups(before.sizes, axes) if kind != "slice" else (),
                                        nbytes, self.step_time(kind, nbytes, before.sizes, axes), before, node))
            node = before
        steps.reverse()
        return self._store(key, src, dst, steps)

    def backward(self, shape, dtype, src: Layout, dst: Layout, dst_grad: Layout | None = None) -> ReschedulePath:
        """Path of the gradient of a ``src -> dst`` rescheduling.

        ``dst_grad`` is the layout the consumer produces the gradient in (default: ``dst``);
        the producer needs it in ``src.without_partial()``.
        """
        return self.path(shape, dtype, dst if dst_grad is None else dst_grad, src.without_partial())

    def _adjacency(self, shape, itemsize, sizes):
        key = (shape, itemsize, sizes)
        adj = self._adj.get(key)
        if adj is None:
            adj = self._adj[key] = {}
        return adj

    def _neighbours(self, adj, shape, itemsize, sizes, place):
        out = adj.get(place)
        if out is None:
            lay = Layout(sizes, place)
            out = adj[place] = [
                (self.step_time(kind, nbytes, sizes, axes), v.place, kind, axes, nbytes)
                for kind, axes, v, nbytes in moves(shape, itemsize, lay)
            ]
        return out

    def _solve(self, shape, itemsize, src, dst):
        if src.sizes != dst.sizes:
            dst2 = dst.reexpress(src.sizes)
            if dst2 is None:
                return self._solve_general(shape, itemsize, src, dst)
            dst = dst2
        sizes = src.sizes
        skey = (shape, itemsize, sizes, src.place)
        search = self._searches.get(skey)
        if search is None:
            search = self._searches[skey] = _Search(src.place)
        target = dst.place
        if target in search.done:
            return search.dist[target], search, dst
        adj = self._adjacency(shape, itemsize, sizes)
        heap, dist, prev, done = search.heap, search.dist, search.prev, search.done
        push, pop = heapq.heappush, heapq.heappop
        while heap:
            d, _, u = pop(heap)
            if u in done:
                continue
            done.add(u)
            for t, v, kind, axes, nbytes in self._neighbours(adj, shape, itemsize, sizes, u):
                if v in done:
                    continue
                nd = d + t
                if nd < dist.get(v, math.inf):
                    dist[v] = nd
                    prev[v] = (u, kind, axes, nbytes)
                    push(heap, (nd, next(search.counter), v))
            if u == target:
                return d, search, dst
        return math.inf, search, None

    def _solve_general(self, shape, itemsize, src, dst):
        """Dijkstra over layouts of several fine-axis grids (free re-expressions between them)."""
        grids = tuple(sorted({src.sizes, dst.sizes}))
        skey = (shape, itemsize, src, grids)
        search = self._searches.get(skey)
        if search is None:
            search = self._searches[skey] = _Search(src)
        if dst in search.done:
            return search.dist[dst], search, dst
        heap, dist, prev, done = search.heap, search.dist, search.prev, search.done
        while heap:
            d, _, u = heapq.heappop(heap)
            if u in done:
                continue
            done.add(u)
            for lay in [x for x in (u.reexpress(g) for g in grids) if x is not None]:
                for kind, axes, v, nbytes in moves(shape, itemsize, lay):
                    if v in done:
                        continue
                    nd = d + self.step_time(kind, nbytes, lay.sizes, axes)
                    if nd < dist.get(v, math.inf):
                        dist[v] = nd
                        prev[v] = (lay, kind, axes, nbytes)
                        heapq.heappush(heap, (nd, next(search.counter), v))
            if u == dst:
                return d, search, u
        return math.inf, search, None

    def cache_info(self) -> dict:
        """Sizes of the caches (searches, paths, collective times)."""
        return {"searches": len(self._searches), "paths": len(self._paths), "collectives": len(self._ctime),
                "states": sum(len(s.dist) for s in self._searches.values()),
                "expanded": sum(len(a) for a in self._adj.values())}


# -- the move-graph engine --------------------------------------------------------------------------


def dijkstra_py(indptr, indices, weights, source, targets, dist, prev, done) -> int:
    """Pure-Python reference of the compiled ``_reschedule.dijkstra`` (same arguments and results).

    Single-source Dijkstra over a CSR graph (``indptr``, ``indices``, ``weights``) from
    ``source``, stopping once every node of ``targets`` is settled (all nodes if empty).
    Heap entries are ``(distance, push counter, node)`` and neighbours are relaxed in CSR
    order with a strict ``<``: exactly the tie-breaking of :class:`ReferenceRescheduler`, so
    distances and predecessors are identical. Fills ``dist`` (caller-initialised to inf),
    ``prev`` (CSR edge that reached each node, -1) and ``done`` (0/1); returns the number of
    settled nodes.
    """
    want = {int(t) for t in targets if not done[t]}
    if len(targets) and not want:
        return 0
    all_targets = len(targets) == 0
    indptr = indptr.tolist() if hasattr(indptr, "tolist") else list(indptr)
    ind = indices.tolist() if hasattr(indices, "tolist") else list(indices)
    w = weights.tolist() if hasattr(weights, "tolist") else list(weights)
    dist[source] = 0.0
    heap = [(0.0, 0, int(source))]
    counter = 1
    settled = 0
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        d, _, u = pop(heap)
        if done[u]:
            continue
        done[u] = 1
        settled += 1
        for e in range(indptr[u], indptr[u + 1]):
            v = ind[e]
            if done[v]:
                continue
            nd = d + w[e]
            if nd < dist[v]:
                dist[v] = nd
                prev[v] = e
                push(heap, (nd, counter, v))
                counter += 1
        if not all_targets and u in want:
            want.discard(u)
            if not want:
                break
    return settled


try:  # the compiled kernels (built by setup.py); the pure-Python references otherwise
    from ._reschedule import dijkstra as _dijkstra
    from ._reschedule import expand_closure as _expand_closure
except ImportError:  # pragma: no cover - depends on the build
    _dijkstra = dijkstra_py
    _expand_closure = None

_NO_TARGETS = np.zeros(0, dtype=np.int32)
_MOVE_KINDS = ("slice", "all_gather", "all_reduce", "reduce_scatter", "all_to_all")
#: Most placements a skeleton's dense table of codes may hold (the compiled expansion's).
_MAX_CODES = 1 << 24


class _MoveSkeleton:
    """The moves of every tensor whose dimensions share their divisors with ``N``: nodes and edges, no times.

    :func:`_place_moves` reads a tensor's shape only through which products of fine sizes
    (divisors of ``N``) divide each dimension, and through the local block's bytes. Both
    follow from ``profile = (gcd(d, N) for d in shape)``: a divisor of ``N`` divides ``d``
    exactly when it divides ``gcd(d, N)``, and a move's bytes for the real tensor are its
    bytes for a tensor of shape ``profile`` and itemsize 1 times ``prod(shape) //
    prod(profile) * itemsize``. So the tensors of a model (a few dozen shapes, a handful of
    profiles) share one skeleton per profile, and only the move times differ
    (:class:`_MoveGraph`).

    Nodes are discovered as closures: when a placement is first asked for, everything
    reachable from it is enumerated (in :func:`moves` order), so a node id beyond what
    existed when a search ran is unreachable from that search's source. The compiled
    expansion (``_reschedule.expand_closure``) numbers placements by integer codes in a
    dense table, keeps them as codes (a 64-device build discovers hundreds of thousands, and
    its paths read a few: :meth:`place` decodes one) and numbers the moves of a closure by a
    hash of their keys; :meth:`_expand_reference`, on :func:`_place_moves`, is its reference
    and serves where the kernel is not built or the table would be too large (``compiled``).
    """

    __slots__ = ("profile", "sizes", "move_info", "_places", "_chunks", "_index", "_code2id", "_powers",
                 "_move_id", "_indptr", "_targets", "_moves", "_csr")

    def __init__(self, profile, sizes, compiled=True):
        self.profile, self.sizes = profile, sizes
        self.move_info: list = []  # move id -> (kind, axes, bytes of the profile tensor at itemsize 1)
        base = len(profile) + 2
        codes = base ** len(sizes)
        self._places: list = []  # node id -> placement tuple (the reference expansion)
        self._chunks: list = []  # (first node id, codes) of each compiled closure, decoded on demand
        self._index: dict = {}  # placement -> node id (the reference expansion)
        self._code2id = None
        if (compiled and _expand_closure is not None and codes <= _MAX_CODES and len(profile) <= 16
                and math.prod(profile) < 1 << (59 - len(sizes))):  # the kernel's rank limit; move keys in int64
            self._code2id = np.full(codes, -1, dtype=np.int32)
            self._powers = tuple(base ** a for a in range(len(sizes)))
        self._move_id: dict = {}  # move key -> move id
        self._indptr = [np.zeros(1, dtype=np.int64)]  # CSR pieces, one per closure
        self._targets: list = []
        self._moves: list = []
        self._csr = None

    @property
    def n_expanded(self) -> int:
        """Nodes whose moves are enumerated (every node of a closure once it is expanded)."""
        return sum(len(p) for p in self._indptr) - 1

    @property
    def n_places(self) -> int:
        """Nodes discovered."""
        return self.n_expanded  # a closure expands every node it discovers

    def place(self, i: int) -> tuple:
        """Placement of node ``i``."""
        if self._code2id is None:
            return self._places[i]
        k = bisect.bisect_right(self._chunks, i, key=lambda chunk: chunk[0]) - 1
        first, codes = self._chunks[k]
        code = int(codes[i - first])
        base = len(self.profile) + 2
        return tuple(code // w % base - 2 for w in self._powers)

    @property
    def places(self) -> list:
        """Every placement, by node id."""
        return [self.place(i) for i in range(self.n_places)]

    def id_of(self, place) -> int:
        """Node id of a placement, -1 if not discovered."""
        if self._code2id is None:
            return self._index.get(place, -1)
        return int(self._code2id[self._code(place)])

    def _code(self, place) -> int:
        return sum((p + 2) * w for p, w in zip(place, self._powers))

    def node(self, place) -> int:
        i = self.id_of(place)
        if i < 0:
            i = self._expand(place)
        return i

    def _expand(self, place) -> int:
        start = self.n_places
        if self._code2id is None:
            self._expand_reference(place)
        else:
            self._expand_compiled(place)
        return start

    def _expand_compiled(self, place):
        """The closure of ``place`` by ``_reschedule.expand_closure``: placements come back as
        integer codes, moves as indices into the closure's distinct keys, each new key decoded
        here once."""
        start = self.n_places
        codes, indptr, targets, moves, keys = _expand_closure(
            np.asarray(self.profile, dtype=np.int64), np.asarray(self.sizes, dtype=np.int64), self._code(place),
            self._code2id, start)
        self._chunks.append((start, codes))
        # move ids in the order of first use, as the reference numbers them
        A = len(self.sizes)
        ids = np.empty(len(keys), dtype=np.int32)
        for q, key in enumerate(keys.tolist()):
            m = self._move_id.get(key)
            if m is None:
                mask = (key >> 3) & ((1 << A) - 1)
                m = self._move_id[key] = len(self.move_info)
                self.move_info.append((_MOVE_KINDS[key & 7], tuple(a for a in range(A) if mask >> a & 1),
                                       key >> (A + 3)))
            ids[q] = m
        self._add_closure(indptr, targets, ids[moves])

    def _expand_reference(self, place):
        """The closure of ``place`` by :func:`_place_moves`, breadth first, new nodes numbered in
        the order their first move reaches them."""
        index, places, move_id, move_info = self._index, self._places, self._move_id, self.move_info
        k = len(places)
        index[place] = k
        places.append(place)
        lens, vs, ms = [], [], []
        while k < len(places):
            moves_k = _place_moves(self.profile, 1, self.sizes, places[k])
            for kind, axes, after, nbytes in moves_k:
                v = index.get(after)
                if v is None:
                    v = index[after] = len(places)
                    places.append(after)
                key = (kind, axes, nbytes)
                m = move_id.get(key)
                if m is None:
                    m = move_id[key] = len(move_info)
                    move_info.append(key)
                vs.append(v)
                ms.append(m)
            lens.append(len(moves_k))
            k += 1
        self._add_closure(np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                          np.asarray(vs, dtype=np.int32), np.asarray(ms, dtype=np.int32))

    def _add_closure(self, indptr, targets, moves):
        self._indptr.append(indptr[1:] + self._indptr[-1][-1])
        self._targets.append(targets)
        self._moves.append(moves)
        self._csr = None

    def csr(self):
        """``(indptr, indices, edge_move, edge_src)`` arrays of the current graph."""
        if self._csr is None:
            indptr = np.concatenate(self._indptr)
            indices = np.concatenate(self._targets) if self._targets else np.zeros(0, dtype=np.int32)
            edge_move = np.concatenate(self._moves) if self._moves else np.zeros(0, dtype=np.int32)
            edge_src = np.repeat(np.arange(len(indptr) - 1, dtype=np.int32), np.diff(indptr))
            self._indptr, self._targets, self._moves = [indptr], [indices], [edge_move]
            self._csr = (indptr, indices, edge_move, edge_src)
        return self._csr


class _MoveGraph:
    """The move graph of one ``(shape, itemsize, fine sizes)``: a :class:`_MoveSkeleton` plus move times.

    Node ids are the skeleton's, shared by every tensor of the same profile.
    """

    __slots__ = ("shape", "itemsize", "sizes", "skeleton", "scale", "_times", "_csr", "_csr_of")

    def __init__(self, shape, itemsize, sizes, skeleton):
        self.shape, self.itemsize, self.sizes, self.skeleton = shape, itemsize, sizes, skeleton
        self.scale = math.prod(shape) // math.prod(skeleton.profile) * itemsize
        self._times: list = []  # move id -> seconds, for this tensor
        self._csr = self._csr_of = None

    @property
    def n_places(self) -> int:
        return self.skeleton.n_places

    def place(self, i: int) -> tuple:
        return self.skeleton.place(i)

    def id_of(self, place) -> int:
        return self.skeleton.id_of(place)

    def node(self, place, step_time) -> int:
        return self.skeleton.node(place)

    def move(self, m: int, step_time):
        """``(kind, axes, nbytes, seconds)`` of move ``m`` for this tensor."""
        kind, axes, nbytes = self.skeleton.move_info[m]
        nbytes *= self.scale
        return kind, axes, nbytes, step_time(kind, nbytes, self.sizes, axes)

    def csr(self, step_time):
        """``(indptr, indices, weights, edge_move, edge_src)`` arrays of the current graph."""
        skel = self.skeleton.csr()
        if self._csr_of is not skel:
            info, times = self.skeleton.move_info, self._times
            for m in range(len(times), len(info)):
                times.append(self.move(m, step_time)[3])
            weights = np.asarray(times, dtype=np.float64)[skel[2]]
            self._csr = (skel[0], skel[1], weights, skel[2], skel[3])
            self._csr_of = skel
        return self._csr


class _Run:
    """One (possibly early-stopped) Dijkstra from a source node of a :class:`_MoveGraph`."""

    __slots__ = ("dist", "prev", "done", "complete")

    def __init__(self, dist, prev, done, complete):
        self.dist, self.prev, self.done, self.complete = dist, prev, done, complete


def _run_key(g: _MoveGraph, sid: int):
    """The cache key of a search from node ``sid`` of move graph ``g``."""
    return (g.shape, g.itemsize, g.sizes, sid)


def _search(csr, sid: int, tids) -> _Run:
    """A Dijkstra from ``sid`` over a move graph's ``csr`` arrays, stopped once every node of
    ``tids`` (int32 array; all nodes if None) is settled. Touches nothing shared, so searches
    run on several threads at once."""
    indptr, indices, weights = csr[0], csr[1], csr[2]
    n = len(indptr) - 1
    dist = np.full(n, np.inf)
    prev = np.full(n, -1, dtype=np.int32)
    done = np.zeros(n, dtype=np.int8)
    if tids is None:
        targets = _NO_TARGETS
    else:
        targets = np.ascontiguousarray(tids[tids < n])
        if targets.shape[0] == 0:
            targets = np.array([sid], dtype=np.int32)
    _dijkstra(indptr, indices, weights, sid, targets, dist, prev, done)
    complete = tids is None or not bool(np.any((done == 0) & (dist < np.inf)))
    return _Run(dist, prev, done, complete)


class Rescheduler(ReferenceRescheduler):
    """Shortest-path rescheduling with a cache (see the module docstring).

    Parameters
    ----------
    comm : CommModel
        Anything with ``collective_time(kind, nbytes, groups)``.
    slice_time : float, default 0.0
        Seconds charged per local slice.
    threads : int or None, default None
        Threads that run the searches of one :meth:`matrices` batch at once (None: every
        core). The results do not depend on it.

    Notes
    -----
    The moves between layouts of one ``(shape, itemsize, fine sizes)`` form a fixed graph:
    it is enumerated once (per reachable closure) into CSR arrays, and each source runs a
    compiled Dijkstra (``_reschedule.dijkstra``, pure-Python :func:`dijkstra_py` if not
    built) with the tie-breaking of :class:`ReferenceRescheduler`, so times *and* paths are
    identical to it. :meth:`matrix` runs one search per source, stopped once every target is
    settled; paths are rebuilt from the predecessor edges only when :meth:`path` asks.
    Layouts over different fine grids that cannot be re-expressed on the source's grid use
    the reference search over several grids.
    """

    #: Upper bound on the nodes of the Dijkstra results kept (LRU), about 13 bytes each.
    RUN_CACHE_NODES = 1 << 22

    #: Most nodes the searches of one wave of a batch hold at once (their results are kept
    #: in the LRU cache or dropped before the next wave runs).
    WAVE_NODES = 1 << 20
    #: Least mean moves per search of a wave for which its searches run on several threads
    #: (fewer: each search takes well under a millisecond, and the threads' hand-offs of the
    #: Python around it cost more than they save; a 16-device model's searches have about
    #: 10,000 moves, a 32-device one's 68,000).
    THREAD_MIN_EDGES = 30_000

    def __init__(self, comm, *, slice_time: float = 0.0, threads: int | None = None):
        super().__init__(comm, slice_time=slice_time)
        self.threads = resolve_threads(threads)
        self._graphs: dict = {}
        self._skeletons: dict = {}
        self._runs: dict = {}  # (graph key, source id) -> _Run, insertion order = LRU order
        self._run_nodes = 0
        self._fits: dict = {}
        self._nruns = 0

    # -- graph and searches -----------------------------------------------------------------
    def _graph(self, shape, itemsize, sizes) -> _MoveGraph:
        key = (shape, itemsize, sizes)
        g = self._graphs.get(key)
        if g is None:
            n = math.prod(sizes)
            profile = tuple(math.gcd(d, n) for d in shape)
            skel = self._skeletons.get((profile, sizes))
            if skel is None:
                skel = self._skeletons[(profile, sizes)] = _MoveSkeleton(profile, sizes)
            g = self._graphs[key] = _MoveGraph(shape, itemsize, sizes, skel)
        return g

    def _run(self, g: _MoveGraph, sid: int, tids=None) -> _Run:
        """A search from ``sid`` that has settled every node of ``tids`` (int array; all nodes if None)."""
        key = _run_key(g, sid)
        if tids is not None:
            tids = np.asarray(tids, dtype=np.int32)
        r = self._cached_run(key, tids)
        if r is None:
            r = _search(g.csr(self.step_time), sid, tids)
            self._remember(key, r)
        return r

    def _cached_run(self, key, tids):
        """The cached search of ``key`` if it settled every node of ``tids`` (None: all), else None."""
        r = self._runs.get(key)
        if r is not None and (r.complete or (tids is not None and bool(r.done[tids[tids < len(r.done)]].all()))):
            self._runs[key] = self._runs.pop(key)  # most recently used
            return r
        return None

    def _remember(self, key, r: _Run) -> None:
        """Cache search ``r`` of ``key`` (replacing an earlier one), evicting the least recently used past the bound."""
        runs = self._runs
        self._nruns += 1
        old = runs.pop(key, None)
        if old is not None:
            self._run_nodes -= len(old.dist)
        runs[key] = r
        self._run_nodes += len(r.dist)
        while self._run_nodes > self.RUN_CACHE_NODES and len(runs) > 1:
            k0 = next(iter(runs))
            self._run_nodes -= len(runs.pop(k0).dist)

    def _runs_of(self, jobs):
        """``(job, _Run)`` of each ``(graph, sid, tids, ...)`` of ``jobs``: the cached search,
        or a new one, then cached. New searches run ``self.threads`` at a time (the compiled
        Dijkstra releases the GIL) in waves of at most ``WAVE_NODES`` nodes, each wave cached
        (and its results used) before the next runs, so what a batch holds stays bounded however
        many sources it has. Every search is deterministic: the order does not change a result."""
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tensoropt-reschedule") if self.threads > 1 else None
        wave, nodes = [], 0
        try:
            for job in jobs:
                g, sid, tids = job[:3]
                key = _run_key(g, sid)
                r = self._cached_run(key, tids)
                if r is not None:
                    yield job, r
                    continue
                csr = g.csr(self.step_time)  # in this thread: it fills the graph's move times
                wave.append((job, key, csr))
                nodes += len(csr[0]) - 1
                if nodes >= self.WAVE_NODES:
                    yield from self._wave(wave, pool)
                    wave, nodes = [], 0
            yield from self._wave(wave, pool)
        finally:
            if pool is not None:
                pool.shutdown()

    def _wave(self, wave, pool):
        """Run the searches of ``wave`` (``(job, key, csr)``) and cache them: on ``pool``, one
        interleaved share per thread, where the searches are large enough to pay for it."""
        edges = sum(len(csr[1]) for _, _, csr in wave)

        def searched(part):
            return [_search(csr, job[1], job[2]) for job, _, csr in part]

        if pool is None or len(wave) < 2 or edges < self.THREAD_MIN_EDGES * len(wave):
            found = searched(wave)
        else:
            found = [None] * len(wave)
            for k, runs in enumerate(pool.map(searched, [wave[k::self.threads] for k in range(self.threads)])):
                found[k::self.threads] = runs
        for (job, key, _), r in zip(wave, found):
            self._remember(key, r)
            yield job, r

    def _fit(self, shape, lay) -> bool:
        key = (shape, lay.sizes, lay.place)
        f = self._fits.get(key)
        if f is None:
            f = self._fits[key] = lay.fits(shape)
        return f

    def _pair_ok(self, shape, src, dst) -> bool:
        """Whether :meth:`_check` passes (without building error messages)."""
        return (self._fit(shape, src) and self._fit(shape, dst) and src.num_devices == dst.num_devices
                and not (PARTIAL in dst.place and PARTIAL not in src.place))

    def _target_id(self, g, src, dst):
        """Node id of ``dst`` in ``src``'s graph: -1 unreachable, None: needs the multi-grid search."""
        if dst.sizes != src.sizes:
            dst = dst.reexpress(src.sizes)
            if dst is None:
                return None
        return g.id_of(dst.place)

    def _dist(self, shape, itemsize, src, dst) -> float:
        """Seconds from ``src`` to ``dst`` (checked, ``src != dst``)."""
        g = self._graph(shape, itemsize, src.sizes)
        sid = g.node(src.place, self.step_time)
        tid = self._target_id(g, src, dst)
        if tid is None:
            return self._solve_general(shape, itemsize, src, dst)[0]
        if tid < 0:
            return math.inf
        r = self._run(g, sid, (tid,))
        if tid >= len(r.dist) or not r.done[tid]:
            return math.inf
        return float(r.dist[tid])

    # -- public API ---------------------------------------------------------------------------
    def time(self, shape, dtype, src: Layout, dst: Layout) -> float:
        """Seconds of the cheapest rescheduling (0 when ``src == dst``; inf if unreachable)."""
        if src == dst:
            return 0.0
        return self._dist(self._check(shape, src, dst), _itemsize(dtype), src, dst)

    def times(self, shape, dtype, src: Layout, targets) -> np.ndarray:
        """Seconds from ``src`` to each of ``targets`` (one search; inf where unreachable)."""
        shape = tuple(int(s) for s in shape)
        itemsize = _itemsize(dtype)
        targets = tuple(targets)
        if not targets:
            return np.empty(0)
        return self._batch([(shape, itemsize, (src,), targets)])[0][0]

    def matrix(self, shape, dtype, sources, targets) -> np.ndarray:
        """``(len(sources), len(targets))`` seconds of every rescheduling (cached per argument tuple)."""
        return self.matrices([(shape, dtype, sources, targets)])[0]

    def matrices(self, requests) -> list:
        """:meth:`matrix` of each ``(shape, dtype, sources, targets)`` of ``requests``, batched.

        Every distinct source layout is searched once, until all the targets any request
        asks of it are settled. Results are cached per argument tuple like :meth:`matrix`.
        """
        out: list = [None] * len(requests)
        todo, keys = [], {}
        for q, (shape, dtype, sources, targets) in enumerate(requests):
            shape = tuple(int(s) for s in shape)
            itemsize = _itemsize(dtype)
            sources, targets = tuple(sources), tuple(targets)
            key = (shape, itemsize, sources, targets)
            hit = self._matrices.get(key)
            if hit is not None:
                out[q] = hit
            elif key in keys:
                keys[key].append(q)
            else:
                keys[key] = [q]
                todo.append(key)
        if todo:
            for key, m in zip(todo, self._batch(todo)):
                m.setflags(write=False)
                self._matrices[key] = m
                for q in keys[key]:
                    out[q] = m
        return out

    def _batch(self, requests) -> list:
        """Seconds matrices of ``(shape, itemsize, sources, targets)`` requests (pairs checked like :meth:`_check`)."""
        mats = [np.empty((len(sources), len(targets))) for _, _, sources, targets in requests]
        # 1. check every pair, enumerate the move graphs of every source
        srcs = []  # per request, per source: (graph, source node id)
        for shape, itemsize, sources, targets in requests:
            ids = []
            if targets:
                t_fit = all(self._fit(shape, d) for d in targets)
                t_dev = {d.num_devices for d in targets}
                t_partial = any(PARTIAL in d.place for d in targets)
            for src in sources:
                if not targets:
                    ids.append(None)
                    continue
                if not (t_fit and len(t_dev) == 1 and self._fit(shape, src) and src.num_devices in t_dev
                        and (not t_partial or PARTIAL in src.place)):
                    for dst in targets:  # raise the reference's error for the first bad pair
                        if not self._pair_ok(shape, src, dst):
                            self._check(shape, src, dst)
                g = self._graph(shape, itemsize, src.sizes)
                ids.append((g, g.node(src.place, self.step_time)))
            srcs.append(ids)
        # 2. target node ids per request and grid (graphs are complete for these sources now)
        work: dict = {}  # (graph key, sid) -> [graph, sid, [(request, row, tinfo)]]
        general = []
        for q, (shape, itemsize, sources, targets) in enumerate(requests):
            tinfo: dict = {}
            for a, src in enumerate(sources):
                if srcs[q][a] is None:
                    continue
                g, sid = srcs[q][a]
                ti = tinfo.get(src.sizes)
                if ti is None:
                    tids = np.empty(len(targets), dtype=np.int64)
                    gen = []
                    for i, dst in enumerate(targets):
                        t = self._target_id(g, src, dst)
                        if t is None:
                            gen.append(i)
                            t = -1
                        tids[i] = t
                    need = np.unique(tids[tids >= 0]).astype(np.int32)
                    ti = tinfo[src.sizes] = (np.maximum(tids, 0), tids < 0, gen, need)
                w = work.get((id(g), sid))
                if w is None:
                    w = work[(id(g), sid)] = [g, sid, []]
                w[2].append((q, a, ti))
                if ti[2]:
                    general.append((q, a, ti[2]))
        # 3. one search per distinct source, until every target asked of it is settled
        jobs = []
        for g, sid, uses in work.values():
            needs = {id(ti[3]): ti[3] for _, _, ti in uses}
            if len(needs) == 1:
                need = next(iter(needs.values()))
            else:
                mask = np.zeros(g.n_places, dtype=bool)
                for nd in needs.values():
                    mask[nd] = True
                need = np.flatnonzero(mask).astype(np.int32)
            jobs.append((g, sid, need, uses))
        for (g, _, _, uses), r in self._runs_of(jobs):
            n = len(r.dist)
            stale = n < g.n_places  # a cached search from before the graph grew
            for q, a, (safe, absent, _, _) in uses:
                if stale:  # nodes added since are unreachable from it
                    absent = absent | (safe >= n)
                    safe = np.where(absent, 0, safe)
                row = r.dist[safe]
                row[absent] = np.inf
                mats[q][a] = row
        for q, a, gen in general:
            shape, itemsize, sources, targets = requests[q]
            src = sources[a]
            for i in gen:
                dst = targets[i]
                mats[q][a, i] = 0.0 if src == dst else self._solve_general(shape, itemsize, src, dst)[0]
        return mats

    def path(self, shape, dtype, src: Layout, dst: Layout) -> ReschedulePath:
        """The cheapest sequence of collectives turning ``src`` into ``dst``."""
        shape, itemsize, key, hit = self._lookup(shape, dtype, src, dst)
        if hit is not None:
            return hit
        g = self._graph(shape, itemsize, src.sizes)
        sid = g.node(src.place, self.step_time)
        tid = self._target_id(g, src, dst)
        if tid is None:
            return super().path(shape, itemsize, src, dst)  # multi-grid reference search (caches itself)
        r = self._run(g, sid, (tid,)) if tid >= 0 else None
        if r is None or tid >= len(r.dist) or not r.done[tid] or not math.isfinite(r.dist[tid]):
            raise InvalidInputError(f"no rescheduling from {src} to {dst} for shape {list(shape)}")
        _, _, _, edge_move, edge_src = g.csr(self.step_time)
        sizes = g.sizes
        steps = []
        node = tid
        after = Layout(sizes, g.place(node))
        while r.prev[node] >= 0:
            e = int(r.prev[node])
            u = int(edge_src[e])
            kind, axes, nbytes, t = g.move(int(edge_move[e]), self.step_time)
            before = Layout(sizes, g.place(u))
            steps.append(RescheduleStep(kind, axes, fine_groups(sizes, axes) if kind != "slice" else (),
                                        nbytes, self.step_time(kind, nbytes, sizes, axes), before, after))
            node, after = u, before
        steps.reverse()
        return self._store(key, src, dst, steps)

    def cache_info(self) -> dict:
        """Sizes of the caches (searches, paths, collective times, move-graph states)."""
        info = super().cache_info()
        info["searches"] += self._nruns
        info["states"] += sum(g.n_places for g in self._skeletons.values())
        info["expanded"] += sum(g.n_expanded for g in self._skeletons.values())
        info["graphs"] = len(self._graphs)
        info["skeletons"] = len(self._skeletons)
        return info
