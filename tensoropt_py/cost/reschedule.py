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

Examples
--------
>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.cost.comm import CommModel
>>> from tensoropt_py.space.layout import Layout
>>> rs = Rescheduler(CommModel(Cluster.preset("v100-2x8")))
>>> p = rs.path((64, 1024), "float32", Layout((2, 2), (0, 0)), Layout((2, 2), (-1, -1)))
>>> [(s.kind, s.fine_axes, s.groups, s.nbytes) for s in p.steps]
[('all_gather', (1,), ((0, 1), (2, 3)), 131072), ('all_gather', (0,), ((0, 2), (1, 3)), 262144)]
>>> str(rs.path((64, 1024), "float32", Layout((2, 2), (-2, -1)), Layout((2, 2), (-1, 1))))
'slice[1] -> all_reduce[0]'
>>> rs.path((64, 1024), "float32", Layout((2, 2), (0, 1)), Layout((2, 2), (0, 1))).time
0.0
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES
from ..space.layout import PARTIAL, REPLICATE, Layout
from ..space.mesh import fine_groups

__all__ = ["RescheduleStep", "ReschedulePath", "Rescheduler", "moves"]


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


class _Search:
    """A resumable single-source Dijkstra over layouts."""

    __slots__ = ("dist", "prev", "heap", "done", "counter")

    def __init__(self, src):
        self.dist = {src: 0.0}
        self.prev = {src: None}
        self.heap = [(0.0, 0, src)]
        self.done = set()
        self.counter = itertools.count(1)


class Rescheduler:
    """Shortest-path rescheduling with a cache (see the module docstring).

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

    def path(self, shape, dtype, src: Layout, dst: Layout) -> ReschedulePath:
        """The cheapest sequence of collectives turning ``src`` into ``dst``."""
        shape = self._check(shape, src, dst)
        itemsize = _itemsize(dtype)
        key = (shape, itemsize, src.sizes, src.place, dst.sizes, dst.place)
        hit = self._paths.get(key)
        if hit is not None:
            return hit
        if src == dst:
            p = ReschedulePath(src, dst, (), 0.0)
        else:
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
            # the last state may be an equal-key re-expression: report dst itself
            if steps:
                last = steps[-1]
                steps[-1] = RescheduleStep(last.kind, last.fine_axes, last.groups, last.nbytes, last.time,
                                           last.before, dst if last.after.sizes == dst.sizes else last.after)
            p = ReschedulePath(src, dst, tuple(steps), float(sum(s.time for s in steps)))
        self._paths[key] = p
        return p

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
