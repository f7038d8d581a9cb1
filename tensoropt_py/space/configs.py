"""Per-operator parallelization configurations (TensorOpt §2.1, FlexFlow §4 / Table 2).

A configuration of an operator over ``N`` devices is a device mesh (an ordered
factorisation of ``N``, :class:`~tensoropt_py.space.mesh.Mesh`) plus an *assignment* of the
operator's loop dimensions to mesh axes: each mesh axis splits at most one loop dimension,
each loop dimension is split by at most one mesh axis, and a mesh axis that splits nothing
replicates the computation (redundant computation is allowed). The tensor map of every
tensor the operator touches follows (TensorOpt's ``mesh [2, 2] map [0, -1]``): tensor
dimension ``j`` is split over the axis splitting its outermost loop dimension.

Validity rules
--------------
* only exact divisions: a loop dimension is split over an axis only if the axis size
  divides it;
* loop dimensions marked unsplittable in the IR, of size 1, or that are an *inner* factor
  of a merged tensor dimension in any use (``("h", "d")``: ``d``) are never split;
* the INPUT operator (data loading, TensorOpt §4.2) only gets data parallelism: its sample
  dimension split over all ``N`` devices (if the batch is not divisible by ``N``, the
  largest row-major prefix of fine axes that divides it; the rest replicates). The edges
  after it reshape the batch into whatever the consumers need, costed by rescheduling.

Canonical form and pruning
--------------------------
Every mesh axis is refined into prime *fine axes*; a configuration is identified by the
loop dimension (or replication) of each fine axis, with adjacent fine axes of the same
role merged (:func:`config_key`). Configurations with the same key put every device on the
same shard of every loop dimension, so :func:`enumerate_configs` keeps one of them (the one
on the mesh with the fewest axes). Dominance pruning (same input/output layouts, no better
memory or time) needs the costs and is done by :func:`tensoropt_py.cost.builder.build_cost_graph`.
No other pruning is done here; ``max_configs`` of the builder may cap the count explicitly.

Mesh-TensorFlow restrictions
----------------------------
With ``mesh_tensorflow`` set to a mesh shape, only configurations on that one mesh are
enumerated (no canonical merging across meshes); the second restriction (a logical
dimension is split the same way in every operator) is global and is enforced by the
builder on the edges: a consumer must read a tensor in exactly the layout its producer
wrote it (partial sums may only be all-reduced). Logical dimensions are identified
structurally by :func:`logical_dims`: two loop dimensions are the same logical dimension
when they index the same dimension of the same tensor (union-find over all tensor uses),
so "batch" is the component holding every sample dimension connected through the graph,
and e.g. the hidden units of a linear layer, the ReLU after it and the reduction dimension
of the next linear layer are one logical dimension. Since every edge then carries a tensor
in one fixed layout, every logical dimension is split over the same fine axes everywhere.

Examples
--------
>>> from tensoropt_py.graph.ir import *
>>> op = Operator("fc", OpKind.LINEAR,
...               (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("k", 4, DimKind.REDUCTION),
...                LoopDim("n", 6, DimKind.PARAMETER)),
...               inputs=(TensorUse("x", (("b",), ("k",))),), params=(TensorUse("w", (("k",), ("n",))),),
...               outputs=(TensorUse("y", (("b",), ("n",))),), flops=2 * 8 * 4 * 6)
>>> cfgs = enumerate_configs(op, 4)
>>> len(cfgs), str(cfgs[0]), str(cfgs[1])
(15, 'mesh[4] map[-1,-1,-1]', 'mesh[4] map[0,-1,-1]')
>>> c = [c for c in cfgs if str(c) == "mesh[2,2] map[0,1,-1]"][0]
>>> c.tensor_maps  # x, w, y
((0, 1), (1, -1), (0, -1))
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache

from ..errors import InvalidInputError
from ..units import parse_count
from ..graph.ir import DimKind, Graph, OpKind, Operator
from .layout import PARTIAL, REPLICATE, Layout, use_layout
from .mesh import Mesh, MeshSpace, mesh_space, prime_factors, resolve_meshes

__all__ = [
    "OpConfig",
    "enumerate_configs",
    "config_key",
    "splittable_dims",
    "logical_dims",
]


@dataclass(frozen=True, slots=True)
class OpConfig:
    """One parallelization configuration of an operator.

    Attributes
    ----------
    mesh : Mesh
    assignment : tuple of int
        Per loop dimension (operator order), the mesh axis splitting it or -1.
    tensor_maps : tuple of tuple of int
        Per tensor use (``op.inputs + op.params + op.outputs``), per tensor dimension, the
        mesh axis splitting it or -1 (TensorOpt's tensor map).
    fine : tuple of int
        Per fine axis of the mesh, the loop dimension index it splits or -1.
    recompute : bool
        Training option (:mod:`tensoropt_py.cost.training`): the operator's outputs and
        internal saved tensors are not kept for backward but recomputed there.
    shard_state : bool
        Training option: the optimizer state of the operator's parameters is sharded over
        their gradient-reducing replicas (ZeRO-1); the gradient all-reduce becomes
        reduce-scatter + all-gather.

    Both options leave the layouts unchanged; :func:`enumerate_configs` never sets them.
    """

    mesh: Mesh
    assignment: tuple[int, ...]
    tensor_maps: tuple[tuple[int, ...], ...]
    fine: tuple[int, ...] = field(repr=False)
    recompute: bool = False
    shard_state: bool = False

    def __str__(self):
        opts = (" recompute" if self.recompute else "") + (" shard-state" if self.shard_state else "")
        return f"{self.mesh} map[{','.join(map(str, self.assignment))}]{opts}"

    @property
    def fine_sizes(self) -> tuple[int, ...]:
        return self.mesh.fine_sizes

    def split_factors(self) -> tuple[int, ...]:
        """Per loop dimension, the number of pieces it is split into."""
        return tuple(self.mesh.shape[a] if a >= 0 else 1 for a in self.assignment)

    @property
    def key(self) -> tuple:
        return config_key(self.mesh.fine_sizes, self.fine)

    def layout(self, op: Operator, use_index: int, *, gradient: bool = False) -> Layout:
        """Layout of tensor use ``use_index`` (in ``op.uses()`` order).

        Outputs are partial over axes splitting a loop dimension they do not index; inputs
        and parameters are replicated there, their gradients (``gradient=True``) partial.
        """
        uses = op.uses()
        is_output = use_index >= len(op.inputs) + len(op.params)
        unindexed = PARTIAL if (is_output or gradient) else REPLICATE
        dmap = _dim_map_items(tuple(d.name for d in op.loop_dims), uses[use_index])
        return _use_layout_cached(self.mesh.fine_sizes, self.fine, dmap, unindexed)

    def to_dict(self) -> dict:
        d = {"mesh": list(self.mesh.shape), "assignment": list(self.assignment),
             "tensor_maps": [list(m) for m in self.tensor_maps]}
        if self.recompute or self.shard_state:
            d.update(recompute=self.recompute, shard_state=self.shard_state)
        return d


def config_key(fine_sizes, fine_labels) -> tuple:
    """Canonical identity of a fine-axis assignment: merged runs of ``(size, label)``.

    >>> config_key((2, 2, 2), (0, -1, -1)) == config_key((2, 2, 2), (0, -1, -1))
    True
    >>> config_key((2, 2, 2), (0, -1, -1))
    ((2, 0), (4, -1))
    """
    runs: list[list[int]] = []
    for s, lab in zip(fine_sizes, fine_labels):
        if runs and runs[-1][1] == lab:
            runs[-1][0] *= s
        else:
            runs.append([s, lab])
    return tuple((s, lab) for s, lab in runs if s > 1)


@lru_cache(maxsize=65536)
def _dim_map_items(names, use):
    index = {n: i for i, n in enumerate(names)}
    return tuple(sorted((index[g[0]], j) for j, g in enumerate(use.dims) if g))


@lru_cache(maxsize=1 << 18)
def _use_layout_cached(sizes, fine, dmap_items, unindexed):
    return use_layout(sizes, fine, dict(dmap_items), unindexed)


def splittable_dims(op: Operator) -> tuple[int, ...]:
    """Indices of the loop dimensions a configuration may split.

    Excluded: IR-unsplittable, size 1, and inner factors of a merged tensor dimension.
    """
    inner = {name for use in op.uses() for group in use.dims for name in group[1:]}
    return tuple(
        i for i, d in enumerate(op.loop_dims) if d.splittable and d.size > 1 and d.name not in inner
    )


def _sample_dim(op: Operator) -> int | None:
    for i, d in enumerate(op.loop_dims):
        if d.kind is DimKind.SAMPLE:
            return i
    return None


@lru_cache(maxsize=4096)
def _raw_configs(sizes: tuple[int, ...], allowed: tuple[int, ...], mesh_list: tuple[Mesh, ...]):
    """(mesh, assignment, fine) triples over the meshes of ``mesh_list``, canonically deduplicated."""
    out, seen = [], set()
    nl = len(sizes)
    for mesh in mesh_list:
        options = []
        for s in mesh.shape:
            options.append([-1] + [l for l in allowed if s > 1 and sizes[l] % s == 0])
        for choice in itertools.product(*options):
            used = [c for c in choice if c >= 0]
            if len(used) != len(set(used)):
                continue
            fine = []
            for ax, c in zip(mesh.fine_of_axis, choice):
                fine.extend([c] * len(ax))
            fine = tuple(fine)
            key = config_key(mesh.fine_sizes, fine)
            if key in seen:
                continue
            seen.add(key)
            assignment = [-1] * nl
            for a, c in enumerate(choice):
                if c >= 0:
                    assignment[c] = a
            out.append((mesh, tuple(assignment), fine))
    return tuple(out)


def _make(op: Operator, mesh: Mesh, assignment, fine) -> OpConfig:
    index = {d.name: i for i, d in enumerate(op.loop_dims)}
    maps = []
    for use in op.uses():
        maps.append(tuple(assignment[index[g[0]]] if g else -1 for g in use.dims))
    return OpConfig(mesh, tuple(assignment), tuple(maps), tuple(fine))


def _check_n(n):
    parse_count(n, "device count")


def enumerate_configs(op: Operator, n: int, *, mesh_tensorflow=None, data_loading: bool = True,
                      meshes: MeshSpace = "all", devices_per_machine: int | None = None) -> tuple[OpConfig, ...]:
    """Every valid configuration of ``op`` on devices ``0..n-1`` (see the module docstring).

    Parameters
    ----------
    op : Operator
    n : int
        Device count.
    mesh_tensorflow : sequence of int, optional
        A mesh shape: restrict to configurations on that single mesh (Mesh-TensorFlow).
    data_loading : bool, default True
        Constrain an INPUT operator to data parallelism.
    meshes : {"all", "hierarchical", "auto"}, default "all"
        The meshes configurations may use (:mod:`tensoropt_py.space.mesh`, "Mesh spaces");
        ignored with ``mesh_tensorflow``.
    devices_per_machine : int, optional
        Of the cluster; needed unless the space is every mesh.

    Returns
    -------
    tuple of OpConfig
        The all-replicated configuration first.

    Examples
    --------
    >>> from tensoropt_py.graph.ir import *
    >>> op = Operator("fc", OpKind.LINEAR,
    ...               (LoopDim("b", 32, DimKind.SAMPLE), LoopDim("k", 64, DimKind.REDUCTION),
    ...                LoopDim("n", 64, DimKind.PARAMETER)),
    ...               inputs=(TensorUse("x", (("b",), ("k",))),), params=(TensorUse("w", (("k",), ("n",))),),
    ...               outputs=(TensorUse("y", (("b",), ("n",))),), flops=2 * 32 * 64 * 64)
    >>> len(enumerate_configs(op, 32)), len(enumerate_configs(op, 32, meshes="hierarchical", devices_per_machine=8))
    (424, 40)
    """
    _check_n(n)
    space = resolve_meshes(meshes, n)
    if space != "all" and (isinstance(devices_per_machine, bool) or not isinstance(devices_per_machine, int)
                           or devices_per_machine < 1):
        raise InvalidInputError(f"the {space!r} mesh space needs the cluster's devices per machine "
                                f"(a positive int), got devices_per_machine={devices_per_machine!r}")
    mesh_shape = None
    if mesh_tensorflow is not None and mesh_tensorflow is not False:
        mesh_shape = tuple(int(s) for s in mesh_tensorflow)
        if math.prod(mesh_shape) != n:
            raise InvalidInputError(f"Mesh-TensorFlow mesh {list(mesh_shape)} does not have {n} devices")
        mesh_shape = Mesh(mesh_shape).shape
    sizes = tuple(d.size for d in op.loop_dims)
    if op.kind is OpKind.INPUT and data_loading:
        return (_input_config(op, n, mesh_shape),)
    if mesh_shape is not None:
        mesh_list = (Mesh(mesh_shape),)
    else:
        mesh_list = mesh_space(n, space, devices_per_machine if space != "all" else 1)
    raw = _raw_configs(sizes, splittable_dims(op), mesh_list)
    return tuple(_make(op, m, a, f) for m, a, f in raw)


def _input_config(op: Operator, n: int, mesh_shape) -> OpConfig:
    """The data-parallel configuration of a data-loading operator."""
    s = _sample_dim(op)
    nl = len(op.loop_dims)
    if mesh_shape is not None:  # Mesh-TF: the batch goes over the longest prefix of axes that divides it
        mesh = Mesh(mesh_shape)
        assignment = [-1] * nl
        fine = [-1] * len(mesh.fine_sizes)
        if s is not None and s in splittable_dims(op):
            size = op.loop_dims[s].size
            ax_prod = 1
            for a, m in enumerate(mesh.shape):
                if size % (ax_prod * m) == 0 and a == 0:
                    assignment[s] = a
                    for f in mesh.fine_of_axis[a]:
                        fine[f] = s
                    ax_prod *= m
                break
        return _make(op, mesh, assignment, fine)
    primes = prime_factors(n) if n > 1 else ()
    assignment = [-1] * nl
    if s is None or s not in splittable_dims(op):
        mesh = Mesh((n,))
        return _make(op, mesh, assignment, [-1] * len(mesh.fine_sizes))
    size = op.loop_dims[s].size
    k, prod = 0, 1
    # the largest prefix of the (descending) prime factors dividing the batch
    ps = sorted(primes, reverse=True)
    while k < len(ps) and size % (prod * ps[k]) == 0:
        prod *= ps[k]
        k += 1
    if prod == n:
        mesh = Mesh((n,))
        assignment[s] = 0
        return _make(op, mesh, assignment, [s] * len(mesh.fine_sizes))
    if prod == 1:
        mesh = Mesh((n,))
        return _make(op, mesh, assignment, [-1] * len(mesh.fine_sizes))
    mesh = Mesh((prod, n // prod))
    assignment[s] = 0
    return _make(op, mesh, assignment, [s] * len(mesh.fine_of_axis[0]) + [-1] * len(mesh.fine_of_axis[1]))


def logical_dims(graph: Graph) -> dict[tuple[str, str], str]:
    """Logical dimension of every ``(operator, loop dimension)`` (Mesh-TensorFlow naming).

    Two loop dimensions are one logical dimension when they index the same dimension (or
    the same factor position of a merged dimension) of the same tensor in two uses;
    components are found by union-find and named ``"<kind>:<most common loop name>"``
    (suffixed ``#k`` when names collide).

    Examples
    --------
    >>> from tensoropt_py.graph.ir import *
    >>> x = TensorSpec("x", (8, 4), role=TensorRole.INPUT); y = TensorSpec("y", (8, 4))
    >>> load = Operator("load", OpKind.INPUT, (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("f", 4, DimKind.ATTRIBUTE)),
    ...                 outputs=(TensorUse("x", (("b",), ("f",))),))
    >>> relu = Operator("relu", OpKind.UNARY, (LoopDim("n", 8, DimKind.SAMPLE), LoopDim("h", 4, DimKind.ATTRIBUTE)),
    ...                 inputs=(TensorUse("x", (("n",), ("h",))),), outputs=(TensorUse("y", (("n",), ("h",))),))
    >>> ld = logical_dims(Graph([x, y], [load, relu]))
    >>> ld[("load", "b")] == ld[("relu", "n")], ld[("load", "b")] == ld[("relu", "h")]
    (True, False)
    """
    parent: dict = {}

    def find(a):
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    first: dict = {}
    for op in graph.operators:
        for d in op.loop_dims:
            find((op.name, d.name))
        for use in op.uses():
            for j, group in enumerate(use.dims):
                for pos, name in enumerate(group):
                    slot = (use.tensor, j, pos, len(group))
                    if slot in first:
                        union(first[slot], (op.name, name))
                    else:
                        first[slot] = (op.name, name)
    comps: dict = {}
    for node in parent:
        comps.setdefault(find(node), []).append(node)
    names: dict = {}
    out = {}
    for root, members in comps.items():
        op0 = graph.operator(members[0][0])
        kind = op0.loop_dim(members[0][1]).kind.value
        counts: dict = {}
        for _, nm in members:
            counts[nm] = counts.get(nm, 0) + 1
        base = f"{kind}:{max(sorted(counts), key=counts.get)}"
        k = names.get(base, 0)
        names[base] = k + 1
        label = base if k == 0 else f"{base}#{k}"
        for m in members:
            out[m] = label
    return out
