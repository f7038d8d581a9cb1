"""Model graph + cluster -> :class:`~tensoropt_py.engine.CostGraph` (TensorOpt Eq. 1-3).

:func:`build_cost_graph` enumerates the configurations of every operator
(:mod:`tensoropt_py.space.configs`), costs them (:mod:`tensoropt_py.cost.operator_cost`),
and costs every graph edge (producer, consumer, tensor) as a
:class:`~tensoropt_py.engine.LayoutEdge`: a table over (producer output layout,
consumer input layout) pairs, never a dense config x config table.

Edge cost (Eq. 2)
-----------------
``fwd(A -> B_in) + bwd(B_grad -> A_grad)`` with :class:`~tensoropt_py.cost.reschedule.Rescheduler`
(no backward after a data-loading INPUT operator or for integer tensors).

Tensor reuse (§4.2)
-------------------
Let ``t`` be produced by ``P`` and read by consumers ``C_i``; "keeps" = ``t`` is in the
operator's ``saved``.

* ``P`` keeps ``t`` and exactly one consumer keeps it: the edge has 3 options,
  ``("both", "producer_copy", "consumer_copy")`` (:data:`REUSE_OPTIONS`), with memory = the
  kept local shard(s) and time = ``fwd + bwd`` plus, for a single copy, the rescheduling
  that re-derives the other copy in backward (``A -> B_in`` resp. ``B_in -> A`` without
  partial sums). When ``A == B_in`` the three collapse into option 0 (one shared copy, no
  extra time); options 1-2 are +inf there.
* ``P`` keeps ``t`` and several consumers keep it: ``P``'s copy is on ``P``'s node; each
  such consumer edge has 2 options ``("both", "producer_copy")``: its own copy, or
  re-derive it from the producer's copy
  (one option of memory 0 when ``A == B_in``).
* ``P`` does not keep ``t`` but several consumers keep it: consumers reading ``t`` in ``P``'s
  layout ``A`` (no rescheduling) share one storage, so ``P``'s node pays that copy once (for
  the configurations whose ``A`` has no partial sums) and each keeper edge has the same 2
  options as above with memory 0 when ``B_in == A``.
* otherwise (one keeper) the keeper pays its own copy on its node; with recomputation in the
  space (:mod:`tensoropt_py.cost.training`) it pays it on the edge instead (mode ``"keep"``),
  whose producer layout classes are split by the producer's recompute flag.

The third rule is exact when at least one keeper reads ``A`` or re-derives from it; when
every keeper holds a rescheduled copy of its own, the shared copy is charged without being
held (one local shard too many).

:meth:`ModelCostGraph.decode` gives each single-copy edge its ``rederive`` path, and the
executor runs it in backward (:mod:`tensoropt_py.exec.runner`).

Node memory therefore excludes saved tensors that edges carry; every cost is >= 0.

Mesh-TensorFlow
---------------
With ``mesh_tensorflow=True`` (the machine-shaped mesh ``[machines, devices_per_machine]``
of the devices used, or ``[N]`` inside one machine) or a mesh shape, every operator uses
that mesh and an edge may only all-reduce partial sums (``B_in == A`` with partial axes
replicated): other layout pairs cost :data:`FORBIDDEN_TIME` seconds (the engine needs one
finite option per pair), so strategies using them are recognisable by their time.

Performance
-----------
Repeated layers make most operators and edges identical up to names: the default build
costs each distinct operator signature and edge signature once, and computes every
rescheduling matrix in one batch on the compiled move-graph search of
:class:`~tensoropt_py.cost.reschedule.Rescheduler`. ``reference=True`` runs the original
per-operator, per-edge construction; the tests check both give identical results. Edge
tables (and their layout-class arrays) may be shared between edges and are read-only.

Examples
--------
>>> from tensoropt_py.graph.builder import GraphBuilder
>>> from tensoropt_py.cluster import Cluster
>>> gb = GraphBuilder("mlp")
>>> x, y = gb.input([("x", (32, 64), "float32"), ("y", (32,), "int64")])
>>> loss = gb.loss(gb.linear(gb.relu(gb.linear(x, 128)), 10), y)
>>> mcg = build_cost_graph(gb.build(), Cluster.preset("v100-2x8"), 4)
>>> [len(c) for c in mcg.configs]  # doctest: +SKIP
>>> row = mcg.data_parallel_choice()
>>> rec = mcg.decode(row)
>>> bool(rec.memory > 0 and rec.time > 0)
True
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import InvalidInputError, SearchSpaceWarning
from ..graph.ir import DTYPE_BYTES, DimKind, Graph, OpKind
from ..space.configs import OpConfig, enumerate_configs
from ..space.layout import Layout
from ..space.mesh import MeshSpace, check_meshes, mesh_space, meshes as every_mesh, resolve_meshes
from ..units import parse_count
from .operator_cost import OperatorCoster, op_work_kind
from .optimizer import check_optimizer
from .reschedule import ReferenceRescheduler, ReschedulePath, Rescheduler
from .training import TrainingOptions, autocast_fp32_copies, expand_configs, precision_graph, recompute_edge_table

__all__ = ["build_cost_graph", "ModelCostGraph", "EdgeInfo", "OpRecord", "EdgeRecord", "StrategyRecord",
           "FORBIDDEN_TIME", "REUSE_OPTIONS"]

#: Seconds charged for a layout pair Mesh-TensorFlow forbids.
FORBIDDEN_TIME = 1e9

#: Names of the tensor-reuse options per number of options R.
#: ``"both"``: the producer and the consumer keep their own copy; ``"producer_copy"``: only the
#: producer's copy is kept and the consumer's is re-derived from it in backward (the forward
#: rescheduling again); ``"consumer_copy"``: only the consumer's copy is kept and the producer's
#: is re-derived from it (``B_in -> A`` without partial sums).
REUSE_OPTIONS = {1: ("single",), 2: ("both", "producer_copy"), 3: ("both", "producer_copy", "consumer_copy")}

_FLOAT = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True, slots=True)
class EdgeInfo:
    """What CostGraph edge ``j`` is."""

    producer: str
    consumer: str
    tensor: str
    use_index: int  # index of the consumer input use
    src_layouts: tuple[Layout, ...]  # producer output layout classes
    dst_layouts: tuple[Layout, ...]  # consumer input layout classes (forward)
    dst_grad_layouts: tuple[Layout, ...]  # consumer input-gradient layout per class
    reuse: str  # "none" | "pair" | "multi" | "shared" | "keep" (recomputation in the space: cost/training.py)
    backward: bool


@dataclass(frozen=True, slots=True)
class OpRecord:
    name: str
    config: OpConfig
    memory: float
    time: float
    compute_time: float
    comm_time: float


@dataclass(frozen=True, slots=True)
class EdgeRecord:
    producer: str
    consumer: str
    tensor: str
    src: Layout
    dst: Layout
    forward: ReschedulePath
    backward: ReschedulePath | None
    reuse: str
    memory: float
    time: float
    rederive: ReschedulePath | None = None  # re-derives the dropped copy in backward (single-copy reuse)


@dataclass(frozen=True, slots=True)
class StrategyRecord:
    ops: tuple[OpRecord, ...]
    edges: tuple[EdgeRecord, ...]
    memory: float
    time: float
    compute_time: float
    comm_time: float


@dataclass(frozen=True)
class ModelCostGraph:
    """A :class:`CostGraph` plus what decodes its strategies.

    Attributes
    ----------
    cost_graph : CostGraph
    graph : Graph
    num_devices : int
    op_names : tuple of str
        Node ``i`` is operator ``op_names[i]``.
    configs : tuple of tuple of OpConfig
        ``configs[i][k]``: config ``k`` of node ``i``.
    node_costs : tuple of ndarray (K_i, 4)
        memory, time, compute time, comm time.
    edges : tuple of EdgeInfo
    edge_tables : tuple of (src_class (K_u,), dst_class (K_v,), table (A, B, R, 2))
    meshes : {"all", "hierarchical"}
        The mesh space searched (:mod:`tensoropt_py.space.mesh`, ``"auto"`` resolved).
    meshes_restricted : bool
        Whether that space leaves out meshes of the full space (never with ``"all"``).
    """

    cost_graph: Any
    graph: Graph
    num_devices: int
    op_names: tuple
    configs: tuple
    node_costs: tuple
    edges: tuple
    edge_tables: tuple
    rescheduler: Any = field(repr=False, compare=False)
    edge_index: tuple = field(repr=False, compare=False)
    #: What the costs assumed (the peak-memory timeline of :mod:`tensoropt_py.cost.memory` reads them).
    optimizer: str = "adam"
    mixed_precision: bool = False
    cluster: Any = field(default=None, repr=False, compare=False)
    meshes: str = "all"
    meshes_restricted: bool = False

    def config_counts(self) -> dict:
        """Operator name -> number of configurations."""
        return {n: len(c) for n, c in zip(self.op_names, self.configs)}

    def data_parallel_choice(self) -> np.ndarray:
        """Per node, the config splitting the sample dimension over all devices if any (else replicated)."""
        row = np.zeros(len(self.op_names), dtype=np.int64)
        for i, (name, cfgs) in enumerate(zip(self.op_names, self.configs)):
            op = self.graph.operator(name)
            s = [j for j, d in enumerate(op.loop_dims) if d.kind is DimKind.SAMPLE]
            best = None
            for k, c in enumerate(cfgs):
                f = c.split_factors()
                if s and f[s[0]] == self.num_devices:
                    best = k
                    break
            if best is None:
                best = max(range(len(cfgs)), key=lambda k: cfgs[k].split_factors()[s[0]] if s else 0)
            row[i] = best
        return row

    def decode(self, choices, edge_choices=None) -> StrategyRecord:
        """Per-op and per-edge records of one strategy; totals equal the CostGraph's costs."""
        choices = np.asarray(choices, dtype=np.int64).ravel()
        if choices.shape[0] != len(self.op_names):
            raise InvalidInputError(f"choices has {choices.shape[0]} entries, the graph has {len(self.op_names)} nodes")
        if edge_choices is None:
            edge_choices = np.zeros(len(self.edges), dtype=np.int64)
        edge_choices = np.asarray(edge_choices, dtype=np.int64).ravel()
        ops = []
        for i, k in enumerate(choices):
            if not 0 <= k < len(self.configs[i]):
                raise InvalidInputError(f"config {k} of node {i} ({self.op_names[i]}) out of range 0..{len(self.configs[i]) - 1}")
            m, t, ct, cm = self.node_costs[i][k]
            ops.append(OpRecord(self.op_names[i], self.configs[i][k], float(m), float(t), float(ct), float(cm)))
        recs = []
        for j, (info, (sc, dc, table)) in enumerate(zip(self.edges, self.edge_tables)):
            u, v = self.edge_index[j]
            a, b, r = sc[choices[u]], dc[choices[v]], int(edge_choices[j])
            m, t = table[a, b, r]
            a = a % len(info.src_layouts)  # classes split by a recompute flag (cost/training.py)
            spec = self.graph.tensors[info.tensor]
            fwd = self.rescheduler.path(spec.shape, spec.dtype, info.src_layouts[a], info.dst_layouts[b])
            bwd = (self.rescheduler.backward(spec.shape, spec.dtype, info.src_layouts[a], info.dst_layouts[b],
                                             info.dst_grad_layouts[b]) if info.backward else None)
            reuse = REUSE_OPTIONS[table.shape[2]][r]
            rederive = None
            if reuse == "producer_copy":
                rederive = fwd
            elif reuse == "consumer_copy":
                rederive = self.rescheduler.path(spec.shape, spec.dtype, info.dst_layouts[b],
                                                 info.src_layouts[a].without_partial())
            recs.append(EdgeRecord(info.producer, info.consumer, info.tensor, info.src_layouts[a], info.dst_layouts[b],
                                   fwd, bwd, reuse, float(m), float(t), rederive))
        mem = sum(o.memory for o in ops) + sum(e.memory for e in recs)
        time = sum(o.time for o in ops) + sum(e.time for e in recs)
        compute = sum(o.compute_time for o in ops)
        return StrategyRecord(tuple(ops), tuple(recs), float(mem), float(time), float(compute), float(time - compute))


def _fill_option_table(table, mode, fwd, bwd, back, spec, itemsize, src_cls, dB, Ars, mesh_tf):
    """Fill an edge's ``(A, B, R, 2)`` option table (module docstring, "Tensor reuse").

    ``fwd``/``bwd`` are the rescheduling times per layout pair, ``back`` the time to
    re-derive the producer's copy from the consumer's (``mode == "pair"``); ``Ars`` are
    the producer's layouts with partial axes replicated, which decide where both sides
    can share one copy.
    """
    base = fwd + bwd
    amem = np.array([A.local_numel(spec.shape) * itemsize for A in src_cls], dtype=np.float64)[:, None]
    bmem = np.array([B.local_numel(spec.shape) * itemsize for B in dB], dtype=np.float64)[None, :]
    bpos: dict = {}
    for j, B in enumerate(dB):
        bpos.setdefault(B, []).append(j)
    same = np.zeros(fwd.shape, dtype=bool)
    for a, Ar in enumerate(Ars):
        same[a, bpos.get(Ar, [])] = True
    zero = np.zeros_like(base)
    if mode == "none":
        table[:, :, 0, 0], table[:, :, 0, 1] = zero, base
    elif mode == "keep":  # the consumer alone keeps its copy (recomputation in the space)
        table[:, :, 0, 0], table[:, :, 0, 1] = bmem + zero, base
    elif mode in ("multi", "shared"):
        no_source = np.zeros(fwd.shape, dtype=bool)  # no copy of the producer's to share or re-derive from
        if mode == "shared":  # the shared copy is the producer's output itself, held when not partial
            same = np.zeros(fwd.shape, dtype=bool)
            for a, A in enumerate(src_cls):
                if A.is_partial:
                    no_source[a, :] = True
                else:
                    same[a, bpos.get(A, [])] = True
        table[:, :, 0, 0] = np.where(same, 0.0, bmem + zero)
        table[:, :, 0, 1] = base
        table[:, :, 1, 0] = np.where(same | no_source, np.inf, 0.0)
        table[:, :, 1, 1] = np.where(same | no_source, np.inf, base + fwd)
    else:
        table[:, :, 0, 0] = np.where(same, amem + zero, amem + bmem)
        table[:, :, 0, 1] = base
        table[:, :, 1, 0] = np.where(same, np.inf, amem + zero)
        table[:, :, 1, 1] = np.where(same, np.inf, base + fwd)
        table[:, :, 2, 0] = np.where(same, np.inf, bmem + zero)
        table[:, :, 2, 1] = np.where(same, np.inf, base + back)
    if mesh_tf is not None:
        forbid = ~same
        table[forbid] = np.inf
        table[forbid, 0] = (0.0, FORBIDDEN_TIME)


def _valid_counts(cluster):
    return tuple(cluster.device_counts())


def _make_cost_graph(node_costs, edges):
    from ..engine import CostGraph, LayoutEdge

    return CostGraph(node_costs=node_costs, edges=[(u, v, LayoutEdge(s, d, t)) for u, v, s, d, t in edges])


def build_cost_graph(graph: Graph, cluster, devices: int, *, optimizer: str = "adam", dtype: str | None = None,
                     mesh_tensorflow=False, max_configs: int | None = None, mixed_precision: bool = False,
                     comm=None, compute=None, rescheduler: Rescheduler | None = None,
                     reference: bool = False, training: TrainingOptions | None = None,
                     meshes: MeshSpace = "auto", threads: int | None = None) -> ModelCostGraph:
    """Build the CostGraph of ``graph`` on devices ``0..devices-1`` of ``cluster``.

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    devices : int
        Device count; must be one of ``cluster.device_counts()``.
    optimizer : {"sgd", "momentum", "adam"}
    dtype : str, optional
        Compute dtype for the roofline (default: each operator's output dtype).
    mesh_tensorflow : bool or sequence of int
        Mesh-TensorFlow restrictions (module docstring).
    max_configs : int, optional
        Keep at most this many configurations per operator after dominance pruning (the
        fastest ones, always including the one with the least memory).
    mixed_precision : bool
    comm, compute, rescheduler : optional
        Models to use (built from ``cluster`` by default).
    reference : bool, default False
        Use the original unoptimised construction (every operator and edge costed on its
        own, :class:`~tensoropt_py.cost.reschedule.ReferenceRescheduler` by default): the
        reference the fast path is tested against. Both give identical results.
    training : TrainingOptions, optional
        Recomputation, sharded optimizer state and precision options
        (:mod:`tensoropt_py.cost.training`); the default keeps the plain space. Not with
        ``reference=True``.
    meshes : {"auto", "all", "hierarchical"}, default "auto"
        The meshes an operator may use (:mod:`tensoropt_py.space.mesh`, "Mesh spaces"):
        every mesh up to 16 devices and the machine-aligned ones beyond by default, with a
        :class:`~tensoropt_py.errors.SearchSpaceWarning` when that leaves meshes out.
        Ignored with ``mesh_tensorflow``.
    threads : int or None, default None
        Threads of the default :class:`~tensoropt_py.cost.reschedule.Rescheduler`'s
        shortest-path searches (None: every core); the result does not depend on it.

    Notes
    -----
    The fast path (default) costs every distinct operator *signature* once (loop
    dimensions, tensor uses, tensor shapes/dtypes/roles, FLOPs, saved and edge-excluded
    tensors: everything the configurations, layouts and costs depend on) and every distinct
    edge signature (producer and consumer signatures, tensor shape and dtype, reuse mode)
    once; repeated layers share the results. Edge tables and layout-class arrays are then
    shared between edges and read-only.
    """
    if not isinstance(graph, Graph):
        raise InvalidInputError(f"graph must be a tensoropt_py Graph, got {type(graph).__name__}")
    optimizer = check_optimizer(optimizer)
    valid = _valid_counts(cluster)
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or int(devices) not in valid:
        raise InvalidInputError(f"device count {devices!r} is not valid on cluster {cluster.name!r}; "
                                f"valid counts: {', '.join(map(str, valid))}")
    n = int(devices)
    meshes = check_meshes(meshes)
    space = resolve_meshes(meshes, n)
    restricted = not mesh_tensorflow and space != "all" and \
        len(mesh_space(n, space, cluster.devices_per_machine)) < len(every_mesh(n))
    if restricted and meshes == "auto":
        warnings.warn(f"meshes='auto' searches the {space} meshes on {n} devices "
                      f"({', '.join(map(str, mesh_space(n, space, cluster.devices_per_machine)))}), not all "
                      f"{len(every_mesh(n))}; pass meshes='all' for the full space", SearchSpaceWarning, stacklevel=2)
    space_kw = dict(meshes=space, devices_per_machine=cluster.devices_per_machine)
    if max_configs is not None and (isinstance(max_configs, bool) or not isinstance(max_configs, int) or max_configs < 1):
        raise InvalidInputError(f"max_configs must be a positive int or None, got {max_configs!r}")
    parse_count(threads, "threads", allow_none=True)  # here too: the reference rescheduler has none to check
    mesh_tf = None
    if mesh_tensorflow is True:
        dpm = cluster.devices_per_machine
        mesh_tf = (n,) if n <= dpm or n % dpm else (n // dpm, dpm)
    elif mesh_tensorflow is not False and mesh_tensorflow is not None:
        mesh_tf = tuple(int(s) for s in mesh_tensorflow)
        if math.prod(mesh_tf) != n:
            raise InvalidInputError(f"Mesh-TensorFlow mesh {list(mesh_tf)} does not have {n} devices")
    # --- training options (tensoropt_py.cost.training) ---
    training = training or TrainingOptions()
    fp32_copies = {}
    if training.mixed_precision:
        graph, mixed_precision = precision_graph(graph, training.precision), True
        if not cluster.device.is_cpu:  # the GPU's autocast runs some operators in fp32
            fp32_copies = autocast_fp32_copies(graph)
    if reference and training != TrainingOptions():
        raise InvalidInputError("reference=True builds the plain space only; training options need the fast path")
    if comm is None:
        from .comm import CommModel

        comm = CommModel(cluster)
    if rescheduler is None:
        rescheduler = ReferenceRescheduler(comm) if reference else Rescheduler(comm, threads=threads)
    elif threads is not None:
        raise InvalidInputError("threads sets the default rescheduler's threads; pass it to the rescheduler given instead")
    coster = OperatorCoster(cluster, comm=comm, compute=compute, optimizer=optimizer,
                            mixed_precision=mixed_precision, dtype=dtype)
    if reference:
        mcg = _build_reference(graph, n, valid, mesh_tf, max_configs, coster, rescheduler, space_kw)
    else:
        mcg = _build_fast(graph, n, valid, mesh_tf, max_configs, coster, rescheduler, training, space_kw,
                          fp32_copies)
    return replace(mcg, optimizer=optimizer, mixed_precision=bool(mixed_precision), cluster=cluster,
                   meshes=space, meshes_restricted=restricted)


def _use_slots(op):
    """Per tensor use, the index of the first use of the same tensor; name -> that index."""
    slot: dict = {}
    for k, use in enumerate(op.uses()):
        slot.setdefault(use.tensor, k)
    return slot


def _config_signature(op):
    """Everything :func:`enumerate_configs` depends on (loop dims, use structure, INPUT or not)."""
    idx = {d.name: i for i, d in enumerate(op.loop_dims)}
    slot = _use_slots(op)
    uses = tuple((slot[u.tensor], tuple(tuple(idx[nm] for nm in g) for g in u.dims)) for u in op.uses())
    loops = tuple((d.size, d.kind, d.splittable) for d in op.loop_dims)
    return (op.kind is OpKind.INPUT, loops, (len(op.inputs), len(op.params), len(op.outputs)), uses), slot


def _graph_outputs(graph, op):
    """Outputs of ``op`` that are graph outputs (no consumer): their reduction is owed by ``op``."""
    outs = set(graph.outputs)
    return {u.tensor for u in op.outputs if u.tensor in outs}


def _node_signature(op, csig, slot, tensors, exclude, hold, readers, owed=()):
    """Everything an operator's costs, layouts and pruning depend on (names replaced by positions)."""
    specs = tuple((k, tensors[t].shape, tensors[t].dtype, tensors[t].role, readers.get(t, 1))
                  for t, k in slot.items())
    saved = tuple(slot[t] for t in op.saved)
    excl = tuple(sorted(slot[t] for t in exclude))
    held = tuple(sorted(slot[t] for t in hold))
    # The kind and attributes matter once measured compute tables key costs by them.
    owed = tuple(sorted(slot[t] for t in owed))
    return (csig, op_work_kind(op), specs, op.flops, op.backward_flops, saved, excl, held, owed)


def _build_fast(graph, n, valid, mesh_tf, max_configs, coster, rescheduler, training, space_kw, fp32_copies):
    readers = {p: len(users) for p, users in graph.parameter_users().items()}
    tensors = graph.tensors
    ops = graph.operators
    index = {op.name: i for i, op in enumerate(ops)}

    # 1. configurations (one enumeration per config signature)
    cfg_cache: dict = {}
    csigs, slots, configs = [], [], []
    for op in ops:
        csig, slot = _config_signature(op)
        cf = cfg_cache.get(csig)
        if cf is None:
            cf = cfg_cache[csig] = enumerate_configs(op, n, mesh_tensorflow=mesh_tf, **space_kw)
        csigs.append(csig)
        slots.append(slot)
        configs.append(cf)
    if n > 1 and all(len(c) == 1 and all(l < 0 for l in c[0].fine) for op, c in zip(ops, configs)
                     if op.kind is not OpKind.INPUT):
        raise InvalidInputError(f"device count {n} divides no splittable dimension of graph {graph.name!r}; "
                                f"valid counts: {', '.join(map(str, valid))}")

    # 2. edges and tensor-reuse roles
    edge_list, edge_reuse, exclude, hold = _edges_and_reuse(graph, ops, keep=bool(training and training.recompute))

    # 3. node costs and dominance pruning (one per node signature)
    kept_tensors = ({t for (_, _, t, _, _), mode in zip(edge_list, edge_reuse) if mode != "none"}
                    | {t for op in ops for t in op.saved})  # kept by someone (recomputation can drop them)
    node_cache: dict = {}
    node_sig_ids, kept_configs, node_costs, kept_layouts = [], [], [], []
    for i, op in enumerate(ops):
        owed = _graph_outputs(graph, op)
        copies = fp32_copies.get(op.name, {})
        nsig = _node_signature(op, csigs[i], slots[i], tensors, exclude[op.name], hold[op.name], readers, owed)
        nsig += (tuple(sorted((slots[i][t], x) for t, x in copies.items())),)
        if training is not None and training.recompute:  # whether recomputing it can drop anything
            nsig += (tuple(u.tensor in kept_tensors for u in op.outputs),)
        hit = node_cache.get(nsig)
        if hit is None:
            cfgs = configs[i]
            oc = coster.costs(op, tensors, cfgs, exclude_saved=exclude[op.name], hold_outputs=hold[op.name],
                              readers=readers, reduce_outputs=owed, fp32_copies=copies)
            outs, ins, grads = _layouts_of(op, cfgs)
            arr = np.stack([oc.memory, oc.time, oc.compute_time, oc.comm_time], axis=1)
            sigs = list(zip(*(outs + ins + grads))) if outs + ins + grads else [()] * len(cfgs)
            if training is not None and training.expands:  # option variants (cost/training.py)
                cfgs, arr, sigs, (outs, ins, grads) = expand_configs(
                    op, tensors, cfgs, arr, sigs, (outs, ins, grads), coster, training,
                    exclude=exclude[op.name], hold=hold[op.name], readers=readers, kept=kept_tensors)
            keep = _prune(arr, sigs, max_configs)
            kl = ([tuple(L[k] for k in keep) for L in outs], [tuple(L[k] for k in keep) for L in ins],
                  [tuple(L[k] for k in keep) for L in grads])
            hit = node_cache[nsig] = (len(node_cache), tuple(cfgs[k] for k in keep), arr[keep], kl)
        node_sig_ids.append(hit[0])
        kept_configs.append(hit[1])
        node_costs.append(hit[2].copy())
        kept_layouts.append(hit[3])

    # 4. edge tables (one per edge signature; every rescheduling matrix in one batch)
    edge_cache: dict = {}
    keys = []
    for (p, c, t, ui, first), mode in zip(edge_list, edge_reuse):
        u, v = index[p], index[c]
        pop = ops[u]
        oi = [k for k, use in enumerate(pop.outputs) if use.tensor == t][0]
        spec = tensors[t]
        backward = pop.kind is not OpKind.INPUT and spec.dtype in _FLOAT
        ekey = (node_sig_ids[u], oi, node_sig_ids[v], ui, spec.shape, spec.dtype, backward, mode)
        if ekey not in edge_cache:
            src_l = kept_layouts[u][0][oi]
            dst_l, dst_g = kept_layouts[v][1][ui], kept_layouts[v][2][ui]
            edge_cache[ekey] = _EdgePlan(spec, src_l, dst_l, dst_g, backward, mode)
        keys.append((u, v, ekey))
    plans = list(edge_cache.values())
    requests = [q for pl in plans for q in pl.requests]
    if hasattr(rescheduler, "matrices"):
        mats = rescheduler.matrices(requests)
    else:  # a user-supplied rescheduler with matrix() only
        mats = [rescheduler.matrix(*q) for q in requests]
    pos = 0
    for pl in plans:
        k = len(pl.requests)
        pl.finish(mats[pos:pos + k], mesh_tf)
        pos += k
    if training is not None and training.recompute:  # producer layout classes split by the recompute flag
        split = set()
        for u, _, ekey in keys:
            if ekey not in split:  # a shared table once (its producers share a node signature)
                split.add(ekey)
                edge_cache[ekey].split_recompute([c.recompute for c in kept_configs[u]])
    edges_out, infos, tables, eidx = [], [], [], []
    for ((p, c, t, ui, first), mode), (u, v, ekey) in zip(zip(edge_list, edge_reuse), keys):
        pl = edge_cache[ekey]
        edges_out.append((u, v, pl.src_ids, pl.dst_ids, pl.table))
        infos.append(EdgeInfo(p, c, t, ui, pl.src_cls, pl.dst_b, pl.dst_gc, mode, pl.backward))
        tables.append((pl.src_ids, pl.dst_ids, pl.table))
        eidx.append((u, v))

    cg = _make_cost_graph([np.ascontiguousarray(nc[:, :2]) for nc in node_costs], edges_out)
    return ModelCostGraph(cost_graph=cg, graph=graph, num_devices=n, op_names=tuple(op.name for op in ops),
                          configs=tuple(kept_configs), node_costs=tuple(node_costs), edges=tuple(infos),
                          edge_tables=tuple(tables), rescheduler=rescheduler, edge_index=tuple(eidx))


def _edges_and_reuse(graph, ops, keep=False):
    """Graph edges ``(producer, consumer, tensor, use_index, first)``, their reuse modes, the saved
    tensors each node leaves to its edges (``exclude``) and the outputs it holds for them (``hold``).

    With ``keep`` (recomputation in the space), a consumer that is the only keeper of its input
    holds it on the edge (mode ``"keep"``), where the producer's recompute flag can drop it."""
    edge_list = []
    for op in ops:
        seen = set()
        for ui, use in enumerate(op.inputs):
            edge_list.append((graph.producer(use.tensor), op.name, use.tensor, ui, use.tensor not in seen))
            seen.add(use.tensor)
    keepers: dict = {}
    for p, c, t, ui, first in edge_list:
        if first and t in graph.operator(c).saved:
            keepers.setdefault(t, []).append(c)
    exclude = {op.name: set() for op in ops}
    hold = {op.name: set() for op in ops}
    edge_reuse = []
    for p, c, t, ui, first in edge_list:
        prod_keeps = t in graph.operator(p).saved
        cons_keeps = first and t in graph.operator(c).saved
        if cons_keeps and prod_keeps:
            mode = "pair" if len(keepers[t]) == 1 else "multi"
        elif cons_keeps and len(keepers[t]) > 1:
            mode = "shared"
            hold[p].add(t)
        elif cons_keeps and keep:
            mode = "keep"
        else:
            mode = "none"
        if mode != "none":
            exclude[c].add(t)
        if mode == "pair":
            exclude[p].add(t)
        edge_reuse.append(mode)
    return edge_list, edge_reuse, exclude, hold


def _layouts_of(op, cfgs):
    """Per output / input / input gradient, the layout under every config (``OpConfig.layout``)."""
    nin, npar = len(op.inputs), len(op.params)
    outs = [[c.layout(op, nin + npar + o) for c in cfgs] for o in range(len(op.outputs))]
    ins = [[c.layout(op, i) for c in cfgs] for i in range(nin)]
    grads = [[c.layout(op, i, gradient=True) for c in cfgs] for i in range(nin)]
    return outs, ins, grads


class _EdgePlan:
    """The layout classes and rescheduling requests of one edge signature, then its table.

    Same computation as the reference loop of :func:`_build_reference`, split in two so the
    rescheduling matrices of every edge are computed in one batch
    (:meth:`Rescheduler.matrices <tensoropt_py.cost.reschedule.Rescheduler.matrices>`).
    """

    __slots__ = ("spec", "mode", "backward", "src_cls", "src_ids", "dst_ids", "dst_b", "dst_gc", "Ars", "gid", "aid",
                 "requests", "table", "fwd")

    def __init__(self, spec, src_l, dst_l, dst_g, backward, mode):
        self.spec, self.mode, self.backward = spec, mode, backward
        src_cls, self.src_ids = _intern(src_l)
        dst_cls, self.dst_ids = _intern(list(zip(dst_l, dst_g)))
        self.src_cls = tuple(src_cls)
        self.dst_b = tuple(B for B, _ in dst_cls)
        self.dst_gc = tuple(G for _, G in dst_cls)
        self.Ars = [A.without_partial() for A in src_cls]
        reqs = [(spec.shape, spec.dtype, src_cls, list(self.dst_b))]
        if backward:
            grads, self.gid = _intern(list(self.dst_gc))
            ars, self.aid = _intern(self.Ars)
            reqs.append((spec.shape, spec.dtype, grads, ars))
        if mode == "pair":
            reqs.append((spec.shape, spec.dtype, list(self.dst_b), self.Ars))
        self.requests = reqs
        self.table = None

    def finish(self, mats, mesh_tf):
        spec, mode = self.spec, self.mode
        itemsize = DTYPE_BYTES[spec.dtype]
        src_cls, dB, Ars = self.src_cls, self.dst_b, self.Ars
        R = {"none": 1, "keep": 1, "multi": 2, "shared": 2, "pair": 3}[mode]
        table = np.full((len(src_cls), len(dB), R, 2), np.inf)
        fwd = self.fwd = mats[0]
        bwd = np.zeros_like(fwd)
        if self.backward:
            T = mats[1]  # (G, A')
            bwd = T[self.gid][:, self.aid].T
        back = mats[-1].T if mode == "pair" else None  # (A, B)
        _fill_option_table(table, mode, fwd, bwd, back, spec, itemsize, src_cls, dB, Ars, mesh_tf)
        for a in (self.src_ids, self.dst_ids, table):
            a.setflags(write=False)
        self.table = table
        self.Ars = self.gid = self.aid = self.requests = None  # not needed any more

    def split_recompute(self, flags):
        """Split the producer layout classes by the producer's recompute flag (cost/training.py)."""
        flags = np.asarray(flags, dtype=bool)
        if not flags.any():
            return
        A = len(self.src_cls)
        rec = recompute_edge_table(self.table, self.fwd, self.mode)
        table = np.concatenate([self.table, rec], axis=0)
        ids = self.src_ids + A * flags
        for a in (ids, table):
            a.setflags(write=False)
        self.src_ids, self.table = ids, table


def _build_reference(graph, n, valid, mesh_tf, max_configs, coster, rescheduler, space_kw):
    """The original construction (every operator and edge on its own): the tests' reference."""
    readers = {p: len(users) for p, users in graph.parameter_users().items()}
    tensors = graph.tensors
    ops = graph.operators
    index = {op.name: i for i, op in enumerate(ops)}

    # 1. configurations
    configs = [list(enumerate_configs(op, n, mesh_tensorflow=mesh_tf, **space_kw)) for op in ops]
    if n > 1 and all(len(c) == 1 and all(l < 0 for l in c[0].fine) for op, c in zip(ops, configs)
                     if op.kind is not OpKind.INPUT):
        raise InvalidInputError(f"device count {n} divides no splittable dimension of graph {graph.name!r}; "
                                f"valid counts: {', '.join(map(str, valid))}")

    # 2. edges and tensor-reuse roles
    edge_list, edge_reuse, exclude, hold = _edges_and_reuse(graph, ops)

    # 3. node costs and dominance pruning
    node_costs, kept_layouts = [], []
    for i, op in enumerate(ops):
        cfgs = configs[i]
        oc = coster.costs(op, tensors, cfgs, exclude_saved=exclude[op.name], hold_outputs=hold[op.name],
                          readers=readers, reduce_outputs=_graph_outputs(graph, op))
        outs, ins, grads = _layouts_of(op, cfgs)
        arr = np.stack([oc.memory, oc.time, oc.compute_time, oc.comm_time], axis=1)
        keep = _prune(arr, [tuple(L[k] for L in outs + ins + grads) for k in range(len(cfgs))], max_configs)
        configs[i] = [cfgs[k] for k in keep]
        node_costs.append(arr[keep])
        kept_layouts.append(([[L[k] for k in keep] for L in outs], [[L[k] for k in keep] for L in ins],
                             [[L[k] for k in keep] for L in grads]))

    # 4. edge tables
    edges_out, infos, tables, eidx = [], [], [], []
    for (p, c, t, ui, first), mode in zip(edge_list, edge_reuse):
        u, v = index[p], index[c]
        pop = ops[u]
        oi = [k for k, use in enumerate(pop.outputs) if use.tensor == t][0]
        src_l = kept_layouts[u][0][oi]
        dst_l, dst_g = kept_layouts[v][1][ui], kept_layouts[v][2][ui]
        src_cls, src_ids = _intern(src_l)
        dst_cls, dst_ids = _intern(list(zip(dst_l, dst_g)))
        spec = tensors[t]
        backward = pop.kind is not OpKind.INPUT and spec.dtype in _FLOAT
        itemsize = DTYPE_BYTES[spec.dtype]
        R = {"none": 1, "multi": 2, "shared": 2, "pair": 3}[mode]
        table = np.full((len(src_cls), len(dst_cls), R, 2), np.inf)
        dB = [B for B, _ in dst_cls]
        Ars = [A.without_partial() for A in src_cls]
        fwd = rescheduler.matrix(spec.shape, spec.dtype, src_cls, dB)
        bwd = np.zeros_like(fwd)
        if backward:
            grads, gid = _intern([G for _, G in dst_cls])
            ars, aid = _intern(Ars)
            T = rescheduler.matrix(spec.shape, spec.dtype, grads, ars)  # (G, A')
            bwd = T[gid][:, aid].T
        back = None
        if mode == "pair":
            back = rescheduler.matrix(spec.shape, spec.dtype, dB, Ars).T  # (A, B)
        _fill_option_table(table, mode, fwd, bwd, back, spec, itemsize, src_cls, dB, Ars, mesh_tf)
        edges_out.append((u, v, src_ids, dst_ids, table))
        infos.append(EdgeInfo(p, c, t, ui, tuple(src_cls), tuple(B for B, _ in dst_cls), tuple(G for _, G in dst_cls),
                              mode, backward))
        tables.append((src_ids, dst_ids, table))
        eidx.append((u, v))

    cg = _make_cost_graph([np.ascontiguousarray(nc[:, :2]) for nc in node_costs], edges_out)
    return ModelCostGraph(cost_graph=cg, graph=graph, num_devices=n, op_names=tuple(op.name for op in ops),
                          configs=tuple(tuple(c) for c in configs), node_costs=tuple(node_costs), edges=tuple(infos),
                          edge_tables=tuple(tables), rescheduler=rescheduler, edge_index=tuple(eidx))


def _intern(items):
    classes, ids, where = [], np.empty(len(items), dtype=np.int64), {}
    for k, it in enumerate(items):
        c = where.get(it)
        if c is None:
            c = where[it] = len(classes)
            classes.append(it)
        ids[k] = c
    return classes, ids


def _prune(costs: np.ndarray, signatures, max_configs):
    """Indices kept: per layout signature the Pareto-minimal (memory, time) configs (one per cost pair)."""
    groups: dict = {}
    for k, s in enumerate(signatures):
        groups.setdefault(s, []).append(k)
    keep = []
    for ks in groups.values():
        ks = sorted(ks, key=lambda k: (costs[k, 0], costs[k, 1], k))
        best_t = math.inf
        for k in ks:
            if costs[k, 1] < best_t:
                keep.append(k)
                best_t = costs[k, 1]
    keep.sort()
    if max_configs is not None and len(keep) > max_configs:
        mem_min = min(keep, key=lambda k: (costs[k, 0], costs[k, 1]))
        fast = sorted(keep, key=lambda k: (costs[k, 1], costs[k, 0]))[:max_configs]
        if mem_min not in fast:
            fast[-1] = mem_min
        keep = sorted(fast)
    return np.asarray(keep, dtype=np.int64)
