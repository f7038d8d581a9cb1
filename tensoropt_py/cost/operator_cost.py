"""Operator cost (TensorOpt Eq. 1), vectorised over an operator's configurations.

For a configuration of an operator (see :mod:`tensoropt_py.space.configs`):

* **memory** ``m = m_p + m_t``: every parameter shard times the bytes of weight + gradient
  + optimizer state per element (:mod:`tensoropt_py.cost.optimizer`; constants count once),
  plus the local shards of the tensors the operator keeps for backward (its ``saved``
  tensors other than parameters). Saved activations shared with a neighbour over a graph
  edge are *excluded* here (``exclude_saved``) and costed on the edge, where tensor reuse
  decides who keeps them (:mod:`tensoropt_py.cost.builder`).
* **time** ``t = t_c + t_s``:

  - ``t_c``: forward + backward compute of the local shard with the roofline
    :class:`~tensoropt_py.cost.compute.ComputeModel`: local FLOPs are the operator's FLOPs
    divided by the split factor of every split loop dimension (replicating axes repeat the
    work); bytes moved are the local shards of every tensor the operator touches (forward)
    and twice that in backward (reading them plus the output gradient, writing the input
    and parameter gradients). When the compute model carries a measured table
    (:meth:`~tensoropt_py.cluster.Cluster.with_calibration`, written by
    :func:`~tensoropt_py.calibrate.calibrate_model_compute`), a configuration whose
    :func:`compute_key` (op kind, attributes, local shard shapes, dtype) is in the table uses
    the measured forward + backward seconds instead. ``t_c`` also holds the optimizer
    update of every trained parameter shard (one elementwise pass over weight, gradient and
    state: :func:`~tensoropt_py.cost.optimizer.update_work`, or the measured
    :func:`~tensoropt_py.cost.optimizer.update_key` entry).
  - ``t_s``: the gradient all-reduce of every parameter over the fine axes that split a
    loop dimension the parameter does not index (the IR's partial-sum rule: e.g. the batch
    under data parallelism); axes that replicate the computation produce identical
    gradients and need no reduction. Parameters of one operator reduced over the same
    axes are fused into one all-reduce.

  Partial sums of *activations* are not in the operator: a forward output that is partial
  over reduction axes has a ``P`` layout and the edge's rescheduling reduces it; an input
  gradient that is partial (the consumer splits a dimension the input does not index) is
  the source layout of the edge's backward rescheduling. Each reduction is therefore
  counted exactly once, on the edge that needs it.
  A *graph output* (``reduce_outputs``: no consumer reads it, e.g. the loss) has no edge, yet
  its value is only usable reduced: the operator pays the all-reduce of its local block over
  the fine axes where it is partial (``t_s``), so no strategy leaves it as unreduced partial
  sums for free.

Examples
--------
>>> from tensoropt_py.graph.ir import *
>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.space.configs import enumerate_configs
>>> op = Operator("fc", OpKind.LINEAR,
...               (LoopDim("b", 64, DimKind.SAMPLE), LoopDim("k", 256, DimKind.REDUCTION),
...                LoopDim("n", 256, DimKind.PARAMETER)),
...               inputs=(TensorUse("x", (("b",), ("k",))),), params=(TensorUse("w", (("k",), ("n",))),),
...               outputs=(TensorUse("y", (("b",), ("n",))),), flops=2 * 64 * 256 * 256,
...               backward_flops=4 * 64 * 256 * 256, saved=("x",))
>>> tensors = {"x": TensorSpec("x", (64, 256)), "y": TensorSpec("y", (64, 256)),
...            "w": TensorSpec("w", (256, 256), role=TensorRole.PARAMETER)}
>>> cfgs = enumerate_configs(op, 4)
>>> oc = OperatorCoster(Cluster.preset("v100-2x8"))
>>> c = oc.costs(op, tensors, cfgs)
>>> dp = [i for i, k in enumerate(cfgs) if str(k) == "mesh[4] map[0,-1,-1]"][0]
>>> int(c.memory[dp]) == 256 * 256 * 16 + 16 * 256 * 4   # Adam state + x shard
True
>>> bool(c.comm_time[dp] > 0), float(c.comm_time[0])                  # gradient all-reduce; replicated: none
(True, 0.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES, Operator, OpKind, TensorRole
from ..space.mesh import fine_groups
from .compute import FORWARD_KEY_SUFFIX
from .optimizer import check_optimizer, state_bytes_per_param, update_key, update_work

__all__ = ["OperatorCosts", "OperatorCoster", "split_matrix", "local_numel", "compute_key", "local_shapes", "op_family",
           "config_compute_keys", "compute_dtype", "forward_key", "KEY_IGNORED_ATTRS"]

#: Attributes left out of :func:`compute_key`: tensor names (``order``), global target shapes
#: (``shape``, ``sizes``: the local output shapes already carry them) and constants that do
#: not change the work (``eps``, ``scale``).
KEY_IGNORED_ATTRS = frozenset({"order", "shape", "sizes", "eps", "scale"})


@dataclass(frozen=True, slots=True)
class OperatorCosts:
    """Costs of every configuration of one operator (arrays of shape ``(K,)``).

    ``memory`` (bytes) = ``param_memory + saved_memory``; ``time`` (s) = ``compute_time +
    comm_time``.
    """

    memory: np.ndarray
    time: np.ndarray
    compute_time: np.ndarray
    comm_time: np.ndarray
    param_memory: np.ndarray
    saved_memory: np.ndarray


def split_matrix(op: Operator, configs) -> np.ndarray:
    """``(K, L)`` int array: split factor of every loop dimension under every configuration."""
    K, L = len(configs), len(op.loop_dims)
    out = np.ones((K, L), dtype=np.int64)
    for k, c in enumerate(configs):
        for s, lab in zip(c.mesh.fine_sizes, c.fine):
            if lab >= 0:
                out[k, lab] *= s
    return out


def local_numel(op: Operator, use, numel: int, splits: np.ndarray) -> np.ndarray:
    """Local elements of ``use`` per configuration (a partial block is full size)."""
    index = {d.name: i for i, d in enumerate(op.loop_dims)}
    div = np.ones(splits.shape[0], dtype=np.int64)
    for g in use.dims:
        if g:
            div = div * splits[:, index[g[0]]]
    return numel // div


def _fmt(v) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def compute_key(op: Operator, local_shapes, dtype) -> str:
    """Measured-table key of one operator shard: kind, relevant attributes, local shapes, dtype.

    ``local_shapes`` are the local shard shapes of ``op.uses()`` (inputs, parameters, outputs,
    in that order); uses are labelled by role and position (``x0`` inputs, ``w0`` parameters,
    ``y0`` outputs), never by tensor name, so that operators doing equal local work (repeated
    layers, configurations with equal shards) share a key. The entry is forward + backward.

    Examples
    --------
    >>> from tensoropt_py.graph.ir import *
    >>> op = Operator("fc", OpKind.LINEAR, (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("k", 64, DimKind.REDUCTION),
    ...               LoopDim("n", 32, DimKind.PARAMETER)), inputs=(TensorUse("x", (("b",), ("k",))),),
    ...               params=(TensorUse("w", (("k",), ("n",))),), outputs=(TensorUse("y", (("b",), ("n",))),),
    ...               attrs=(("bias", False),))
    >>> compute_key(op, [(8, 64), (64, 32), (8, 32)], "float32")
    'linear|bias=False|x0[8,64];w0[64,32];y0[8,32]|float32'
    """
    uses = op.uses()
    shapes = list(local_shapes)
    if len(shapes) != len(uses):
        raise InvalidInputError(f"operator {op.name!r} has {len(uses)} tensor uses, got {len(shapes)} local shapes")
    nin, npar = len(op.inputs), len(op.params)
    parts = []
    for u, shp in enumerate(shapes):
        role, pos = ("x", u) if u < nin else ("w", u - nin) if u < nin + npar else ("y", u - nin - npar)
        parts.append(f"{role}{pos}{_fmt(tuple(int(d) for d in shp))}")
    return f"{op_work_kind(op)}|{';'.join(parts)}|{dtype}"


def forward_key(key: str) -> str:
    """The measured-table key of the forward pass alone of the work :func:`compute_key` names
    (whose entry is forward + backward): what a recomputation runs again.

    Examples
    --------
    >>> forward_key("linear|bias=False|x0[8,64];w0[64,32];y0[8,32]|float32")
    'linear|bias=False|x0[8,64];w0[64,32];y0[8,32]|float32|fwd'
    """
    return key + FORWARD_KEY_SUFFIX


def op_work_kind(op: Operator) -> str:
    """Operator kind and the attributes that change its local work (``"linear|bias=True"``).

    Tensor names, global shapes and numeric constants (:data:`KEY_IGNORED_ATTRS`) are left
    out, so repeated layers share it.
    """
    attrs = ",".join(f"{k}={_fmt(v)}" for k, v in sorted(op.attrs, key=lambda kv: kv[0]) if k not in KEY_IGNORED_ATTRS)
    return f"{op.kind.value}|{attrs}"


def _updates_as_executed(table) -> bool:
    """Whether a measured table's optimizer-update entries time updates as the executor runs them.

    On a GPU torch's optimizer runs one multi-tensor (``foreach``) step over every parameter;
    tables written before :mod:`tensoropt_py.calibrate` timed it that way (no
    ``optimizer_timing`` in their metadata, ``torch_device`` CUDA) hold single-tensor steps,
    mostly launch overhead a real step pays once (0.15 ms per parameter on the H100 of
    ``shared/ground-truth``: +29 ms on GPT-2's 195 ms).
    """
    meta = getattr(table, "meta", None) or {}
    if not str(meta.get("torch_device", "cpu")).startswith("cuda"):
        return True
    return meta.get("optimizer_timing") == "multi_tensor"


def op_family(op: Operator) -> str:
    """The operator family the compute model's efficiencies are keyed by: the kind, and the
    function of elementwise and loss operators (``"linear"``, ``"unary:gelu"``, ``"binary:add"``)."""
    fn = dict(op.attrs).get("fn") if op.kind in (OpKind.UNARY, OpKind.BINARY) else None
    return op.kind.value if fn is None else f"{op.kind.value}:{fn}"


def local_shapes(op: Operator, tensors, config) -> tuple[tuple[int, ...], ...]:
    """Local shard shape of every use of ``op`` (``op.uses()`` order) under ``config``.

    A partial block is full size; a dimension that does not divide evenly keeps its
    floor (the configurations enumerated never produce one).
    """
    out = []
    for u, use in enumerate(op.uses()):
        shape = tensors[use.tensor].shape
        f = config.layout(op, u).split_factors(len(shape))
        out.append(tuple(int(n) // k for n, k in zip(shape, f)))
    return tuple(out)


def config_compute_keys(op: Operator, tensors, configs, dtype) -> list[str]:
    """:func:`compute_key` of ``op`` under each of ``configs``."""
    return [compute_key(op, local_shapes(op, tensors, c), dtype) for c in configs]


def compute_dtype(op: Operator, tensors, dtype=None, mixed_precision=False) -> str:
    """The dtype an :class:`OperatorCoster` computes ``op`` in (selects peak and key)."""
    dtype = dtype or (tensors[op.outputs[0].tensor].dtype if op.outputs else "float32")
    if dtype not in ("float32", "float16", "bfloat16", "float64"):
        dtype = "float32"
    if mixed_precision and dtype == "float32":
        dtype = "float16"
    return dtype


class OperatorCoster:
    """Computes :class:`OperatorCosts` (see the module docstring).

    Parameters
    ----------
    cluster : Cluster
    comm, compute : optional
        A :class:`~tensoropt_py.cost.comm.CommModel` / :class:`~tensoropt_py.cost.compute.ComputeModel`
        (built from ``cluster`` when omitted).
    optimizer : {"sgd", "momentum", "adam"}, default "adam"
    mixed_precision : bool, default False
    dtype : str, optional
        Compute dtype (selects the peak FLOP/s); default the dtype of the op's first output.
    """

    def __init__(self, cluster, *, comm=None, compute=None, optimizer="adam", mixed_precision=False, dtype=None):
        if comm is None:
            from .comm import CommModel

            comm = CommModel(cluster)
        if compute is None:
            from .compute import ComputeModel

            compute = ComputeModel(cluster)
        self.cluster = cluster
        self.comm = comm
        self.compute = compute
        self.optimizer = check_optimizer(optimizer)
        self.mixed_precision = bool(mixed_precision)
        if dtype is not None and dtype not in DTYPE_BYTES:
            raise InvalidInputError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
        self.dtype = dtype
        self._ar: dict = {}

    def _allreduce(self, nbytes, sizes, axes) -> float:
        key = (nbytes, sizes, axes)
        t = self._ar.get(key)
        if t is None:
            t = self._ar[key] = float(self.comm.collective_time("all_reduce", nbytes, fine_groups(sizes, axes)))
        return t

    def _update_times(self, op, tensors, configs, splits, readers) -> np.ndarray:
        """Seconds of the optimizer updates of ``op``'s trained parameter shards, per configuration.

        One elementwise kernel per parameter (roofline of :func:`update_work`, or the measured
        :func:`update_key` entry); a parameter shared by several readers is charged
        ``1/readers`` of it by each, as its state is.
        """
        out = np.zeros(len(configs))
        table = getattr(self.compute, "table", None)
        if table is not None and not _updates_as_executed(table):
            table = None  # per-tensor GPU timings of a multi-tensor step: the roofline is closer
        seen = set()
        for pi, use in enumerate(op.params):
            spec = tensors[use.tensor]
            if use.tensor in seen or spec.role is not TensorRole.PARAMETER:
                continue
            seen.add(use.tensor)
            flops, nbytes = update_work(self.optimizer, spec.dtype, mixed_precision=self.mixed_precision)
            share = 1.0 / max(int((readers or {}).get(use.tensor, 1)), 1)
            numel = local_numel(op, use, spec.numel, splits).astype(np.float64)
            t = self.compute.times(flops * numel, nbytes * numel, dtype="float32")
            if table is not None and len(table):
                u = len(op.inputs) + pi
                for k, c in enumerate(configs):
                    f = c.layout(op, u).split_factors(len(spec.shape))
                    key = update_key(self.optimizer, tuple(n // d for n, d in zip(spec.shape, f)), spec.dtype)
                    if key in table:
                        t[k] = self.compute.time(0.0, 0.0, key=key)
            out += t * share
        return out

    def _roofline_passes(self, op, tensors, splits):
        """``(dtype, local bytes per tensor, forward, backward)``: the compute dtype, and the
        roofline seconds of each pass of ``op``'s local shard per configuration (the rows of
        ``splits``)."""
        K = splits.shape[0]
        total_split = np.prod(splits, axis=1).astype(np.float64)
        local_bytes = {}
        moved = np.zeros(K)
        for use in op.uses():
            spec = tensors[use.tensor]
            lb = local_numel(op, use, spec.numel, splits) * DTYPE_BYTES[spec.dtype]
            local_bytes.setdefault(use.tensor, lb)
            moved += lb
        dtype = compute_dtype(op, tensors, self.dtype, self.mixed_precision)
        fam = op_family(op)
        fwd = np.asarray(self.compute.times(op.flops / total_split, moved, dtype=dtype, family=fam), dtype=np.float64)
        bwd = (np.asarray(self.compute.times(op.backward_flops / total_split, 2 * moved, dtype=dtype, family=fam),
                          dtype=np.float64) if op.backward_flops else np.zeros(K))
        return dtype, local_bytes, fwd, bwd

    def _measured_keys(self, op, tensors, configs, dtype):
        """``(k, key)`` for every configuration ``k`` whose forward + backward key is in the
        measured table."""
        table = getattr(self.compute, "table", None)
        if table is None or not len(table) or op.kind is OpKind.INPUT:
            return []
        return [(k, key) for k, key in enumerate(config_compute_keys(op, tensors, configs, dtype)) if key in table]

    def forward_times(self, op: Operator, tensors, configs) -> np.ndarray:
        """Forward compute seconds of ``op``'s local shard per configuration: what recomputing
        it runs again in backward (:mod:`tensoropt_py.cost.training`).

        The measured :func:`forward_key` entry where the table has one (the calibration times
        the forward alone too); else, where only the forward + backward entry is measured, that
        time split in the roofline's proportion of the two passes; else the roofline forward,
        with the same per-family efficiency as :meth:`costs`.

        Parameters
        ----------
        op : Operator
        tensors : mapping name -> TensorSpec
        configs : sequence of OpConfig

        Returns
        -------
        ndarray of float64, shape (len(configs),)

        Examples
        --------
        >>> from tensoropt_py.graph.zoo import mlp
        >>> from tensoropt_py.cluster import Cluster
        >>> from tensoropt_py.cost.compute import ComputeModel
        >>> from tensoropt_py.space.configs import enumerate_configs
        >>> g = mlp()
        >>> op = g.operator("relu0")
        >>> cfgs = enumerate_configs(op, 1)
        >>> key = config_compute_keys(op, g.tensors, cfgs, "float32")[0]
        >>> cluster = Cluster.preset("cpu-1x4")
        >>> oc = OperatorCoster(cluster, compute=ComputeModel(cluster, {key: 3e-3, forward_key(key): 1e-3}))
        >>> oc.forward_times(op, g.tensors, cfgs).tolist(), oc.costs(op, g.tensors, cfgs).compute_time.tolist()
        ([0.001], [0.003])
        """
        splits = split_matrix(op, configs)
        dtype, _, fwd, bwd = self._roofline_passes(op, tensors, splits)
        for k, key in self._measured_keys(op, tensors, configs, dtype):
            if forward_key(key) in self.compute.table:
                fwd[k] = self.compute.time(0.0, 0.0, key=forward_key(key), dtype=dtype)
            else:
                both = fwd[k] + bwd[k]
                fwd[k] = self.compute.time(0.0, 0.0, key=key, dtype=dtype) * (fwd[k] / both if both > 0 else 1.0)
        return fwd

    def costs(self, op: Operator, tensors, configs, *, exclude_saved=(), hold_outputs=(), readers=None,
              reduce_outputs=(), fp32_copies=None) -> OperatorCosts:
        """Costs of ``op`` under each of ``configs``.

        Parameters
        ----------
        op : Operator
        tensors : mapping name -> TensorSpec
        configs : sequence of OpConfig
        exclude_saved : iterable of str
            Saved tensors whose memory is accounted elsewhere (edges).
        hold_outputs : iterable of str
            Outputs the operator does not save but whose local shard it is charged for
            because several consumers save them and share the copy (see
            :mod:`tensoropt_py.cost.builder`, "Tensor reuse"); nothing is charged under a
            configuration leaving the output as partial sums (no consumer reads that copy).
        readers : mapping parameter name -> int, optional
            How many operators read each parameter (shared weights: RNN cells of every
            time step, tied embeddings). A shared parameter's state is held once and its
            gradient all-reduced once per iteration, so each reader is charged ``1/readers``
            of both: exact when the readers shard it alike (the common case: one cell config
            repeated over time), an average when they shard it differently.
        reduce_outputs : iterable of str
            Outputs no operator reads (graph outputs such as the loss): under a configuration
            leaving one as partial sums, its all-reduce over the partial axes is added to
            ``comm_time`` (the reduction is owed; no edge would charge it).
        fp32_copies : mapping str -> int, optional
            Saved bf16 tensors the operator keeps as fp32 copies (autocast runs it in fp32 on a
            GPU), each with how many of its bf16 local shards the copy costs beyond the bf16
            tensor's own charge (:func:`~tensoropt_py.cost.training.autocast_fp32_copies`).
            Charged to the operator whether or not the bf16 tensor is costed on an edge.
        """
        K = len(configs)
        if K == 0:
            raise InvalidInputError(f"operator {op.name!r} has no configuration")
        splits = split_matrix(op, configs)
        exclude = set(exclude_saved)
        dtype, local_bytes, fwd, bwd = self._roofline_passes(op, tensors, splits)
        compute_time = fwd + bwd
        # measured forward + backward of the local shard (one table entry per key; the
        # vectorised roofline above is the fallback for keys the table lacks)
        for k, key in self._measured_keys(op, tensors, configs, dtype):
            compute_time[k] = self.compute.time(0.0, 0.0, key=key, dtype=dtype)

        param_mem = np.zeros(K)
        comm_time = np.zeros(K)
        index = {d.name: i for i, d in enumerate(op.loop_dims)}
        trained = []
        seen = set()
        for use in op.params:
            if use.tensor in seen:
                continue
            seen.add(use.tensor)
            spec = tensors[use.tensor]
            numel_local = local_bytes[use.tensor] // DTYPE_BYTES[spec.dtype]
            if spec.role is TensorRole.PARAMETER:
                share = 1.0 / max(int((readers or {}).get(use.tensor, 1)), 1)
                per = state_bytes_per_param(self.optimizer, spec.dtype, mixed_precision=self.mixed_precision)
                param_mem += numel_local * per * share
                gbytes = 2 if self.mixed_precision else DTYPE_BYTES[spec.dtype]
                indexed = {index[n] for n in use.loop_dims()}
                trained.append((numel_local * gbytes * share, indexed))
            else:
                param_mem += local_bytes[use.tensor]
        if trained:
            compute_time = compute_time + self._update_times(op, tensors, configs, splits, readers)
            for k, c in enumerate(configs):
                sizes = c.mesh.fine_sizes
                fused: dict = {}
                for gb, indexed in trained:
                    axes = tuple(a for a, lab in enumerate(c.fine) if lab >= 0 and lab not in indexed)
                    if axes:
                        fused[axes] = fused.get(axes, 0) + float(gb[k])
                comm_time[k] = sum(self._allreduce(b, sizes, ax) for ax, b in fused.items())

        for use in op.outputs:  # graph outputs left partial: their reduction is owed here
            if use.tensor in reduce_outputs:
                indexed = {index[nm] for nm in use.loop_dims()}
                nbytes = local_bytes[use.tensor].astype(np.float64)
                for k, c in enumerate(configs):
                    axes = tuple(a for a, lab in enumerate(c.fine) if lab >= 0 and lab not in indexed)
                    if axes:
                        comm_time[k] += self._allreduce(float(nbytes[k]), c.mesh.fine_sizes, axes)

        saved_mem = np.zeros(K)
        param_names = {u.tensor for u in op.params}
        for name in dict.fromkeys(op.saved):
            if name in exclude or name in param_names:
                continue
            saved_mem += local_bytes[name]
        for name, extra in (fp32_copies or {}).items():
            saved_mem += extra * local_bytes[name]
        for use in op.outputs:
            if use.tensor in hold_outputs:
                indexed = {index[n] for n in use.loop_dims()}
                unindexed = [d for d in range(len(op.loop_dims)) if d not in indexed]
                partial = np.any(splits[:, unindexed] > 1, axis=1) if unindexed else np.zeros(K, dtype=bool)
                saved_mem += np.where(partial, 0.0, local_bytes[use.tensor])
        memory = param_mem + saved_mem
        return OperatorCosts(memory=memory, time=compute_time + comm_time, compute_time=compute_time,
                             comm_time=comm_time, param_memory=param_mem, saved_memory=saved_mem)
