"""Training options co-searched with tensor sharding: recomputation, sharded state, bf16.

Three levers practitioners use to buy memory (or speed) enter the frontier as options of
each operator's configuration (:class:`~tensoropt_py.space.configs.OpConfig` fields
``recompute`` and ``shard_state``), so the engine needs no change and the frontier mixes
them freely with every tensor split:

``recompute`` (per operator, ``TrainingOptions.recompute``)
    The operator's outputs and its internal saved tensors (statistics, log-probabilities,
    attention's ``out``/``lse``) are not kept for backward: whoever needs them in backward
    (the operator itself, or a consumer that saved its input) gets them by running the
    operator's forward again, from the inputs it saved (re-derived in turn when their own
    producer is recomputed) or, for inputs it does not save, from a reference it keeps
    (charged to it). Granularity: one operator, because a run of consecutive recomputed
    operators then *is* a recomputed block (each re-derives its input from the one before),
    the engine chooses the blocks, and every cost stays additive:

    * node: memory loses the outputs it held and its internal saved tensors, gains the
      inputs it does not save; time gains the forward compute
      (:meth:`~tensoropt_py.cost.operator_cost.OperatorCoster.forward_times`: the measured
      forward where the cluster is calibrated);
    * edge from a recomputed producer: the copies of the tensor are dropped (memory 0) and
      a consumer that keeps one pays the forward rescheduling again
      (:func:`recompute_edge_table`); the edge's producer layout classes are split by the flag.

    Consumers that are the only keeper of an input (reuse mode ``"none"`` before) hold it on
    the edge (mode ``"keep"``, :mod:`~tensoropt_py.cost.builder`) so that the producer's flag
    can drop it.
``shard_state`` (per parameter operator, ``TrainingOptions.shard_optimizer``)
    ZeRO stage 1 on each parameter's replica group (the fine axes its gradient is all-reduced
    over): the master weights (mixed precision) and optimizer state are divided by the
    replica count, the gradient all-reduce becomes a reduce-scatter, each replica updates
    its shard (the update time falls by the replica count) and an all-gather restores the
    parameters. Weights and gradients stay whole (the executor produces every gradient
    before reducing it).
``precision="bf16-mixed"``
    bf16 compute (the preset's ``bfloat16`` throughput, :meth:`DeviceSpec.flops_for
    <tensoropt_py.cluster.DeviceSpec.flops_for>`) and activations (every float activation of
    the graph costed as ``bfloat16``: saved tensors, edges and their collectives), and the
    mixed-precision state of :func:`~tensoropt_py.cost.optimizer.state_bytes_per_param`
    (half-precision weight and gradient, fp32 master weight and state). On a GPU, autocast
    runs some operators in fp32 (:func:`autocast_fp32_copies`): what they save for backward
    is an fp32 copy, charged on top of the bf16 tensor.

Examples
--------
>>> opts = check_training_options(True, True, "32-true", optimizer="adam")
>>> opts.expands, opts.mixed_precision
(True, False)
>>> check_training_options(False, True, "32-true", optimizer="sgd")
Traceback (most recent call last):
...
tensoropt_py.errors.InvalidInputError: shard_optimizer=True shards optimizer state, but optimizer 'sgd' has none; use one of: momentum, adam
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES, Graph, OpKind, TensorRole
from ..space.mesh import fine_groups
from .operator_cost import local_numel, split_matrix
from .optimizer import OPTIMIZERS, check_optimizer, state_bytes_per_param, update_work

__all__ = ["Precision", "PRECISIONS", "TrainingOptions", "check_training_options", "precision_graph", "half_tensors",
           "autocast_fp32", "autocast_fp32_copies", "expand_configs", "recompute_edge_table", "option_counts"]

Precision = Literal["32-true", "bf16-mixed"]
#: Precisions (PyTorch Lightning's names) and the dtype each computes in.
PRECISIONS = {"32-true": "float32", "bf16-mixed": "bfloat16"}


@dataclass(frozen=True, slots=True)
class TrainingOptions:
    """Which training levers the search space holds.

    Parameters
    ----------
    recompute : bool
        Offer every non-INPUT operator a recomputed variant.
    shard_optimizer : bool
        Offer every operator with trained parameters a sharded-state (ZeRO-1) variant.
    precision : {"32-true", "bf16-mixed"}

    Examples
    --------
    >>> TrainingOptions(precision="bf16-mixed").compute_dtype
    'bfloat16'
    """

    recompute: bool = False
    shard_optimizer: bool = False
    precision: Precision = "32-true"

    @property
    def mixed_precision(self) -> bool:
        return self.precision != "32-true"

    @property
    def compute_dtype(self) -> str:
        return PRECISIONS[self.precision]

    @property
    def expands(self) -> bool:
        """Whether operators get option variants (recompute or sharded state)."""
        return self.recompute or self.shard_optimizer


def check_training_options(recompute=False, shard_optimizer=False, precision="32-true", *, optimizer="adam",
                           cluster=None) -> TrainingOptions:
    """Validate the option values (and their combination with ``optimizer`` and ``cluster``).

    Parameters
    ----------
    recompute, shard_optimizer : bool
    precision : {"32-true", "bf16-mixed"}
    optimizer : str
        A ``shard_optimizer`` needs an optimizer with state.
    cluster : Cluster, optional
        A ``"bf16-mixed"`` precision needs the device's ``bfloat16`` throughput.

    Returns
    -------
    TrainingOptions

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> check_training_options(precision="bf16-mixed", cluster=Cluster.preset("v100-2x8"))
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: precision 'bf16-mixed' needs a bfloat16 throughput, but device V100-SXM2-16GB of cluster 'v100-2x8' has rates for float16 only; allowed there: 32-true
    """
    for name, v in (("recompute", recompute), ("shard_optimizer", shard_optimizer)):
        if not isinstance(v, (bool, np.bool_)):
            raise InvalidInputError(f"{name} must be True or False, got {v!r}")
    if precision not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
    opt = check_optimizer(optimizer)
    if shard_optimizer and OPTIMIZERS[opt] == 0:
        stateful = ", ".join(k for k, v in OPTIMIZERS.items() if v)
        raise InvalidInputError(f"shard_optimizer=True shards optimizer state, but optimizer {optimizer!r} has none; "
                                f"use one of: {stateful}")
    if cluster is not None and precision != "32-true":
        dt = PRECISIONS[precision]
        rates = dict(cluster.device.dtype_flops)
        if dt not in rates:
            allowed = ", ".join(p for p, d in PRECISIONS.items() if d == "float32" or d in rates)
            have = ", ".join(rates) or "float32"
            raise InvalidInputError(f"precision {precision!r} needs a {dt} throughput, but device {cluster.device.name} "
                                    f"of cluster {cluster.name!r} has rates for {have} only; allowed there: {allowed}")
    return TrainingOptions(bool(recompute), bool(shard_optimizer), precision)


def half_tensors(graph: Graph) -> frozenset:
    """Names of the tensors a ``bf16-mixed`` run keeps in bf16: every float32 activation and
    loaded float input, except scalars (the loss) and what a LOSS operator saves (it computes
    in fp32 under autocast: its log-probabilities stay fp32).

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import mlp
    >>> sorted(half_tensors(mlp()))[:2]
    ['fc0.out', 'fc1.out']
    """
    fp32 = {t for op in graph.operators if op.kind is OpKind.LOSS for t in op.saved}
    return frozenset(t.name for t in graph.tensors.values()
                     if t.role in (TensorRole.ACTIVATION, TensorRole.INPUT) and t.dtype == "float32"
                     and t.shape != () and t.name not in fp32)


#: Elementwise functions that CUDA's autocast computes in fp32 (torch.amp, "CUDA ops that can
#: autocast to float32"), among those the executor runs (:mod:`tensoropt_py.graph.torch_ops`).
_AUTOCAST_FP32_UNARY = frozenset({"pow", "exp", "log", "rsqrt", "reciprocal"})


def autocast_fp32(op) -> bool:
    """Whether CUDA's autocast runs ``op``, as the executor computes it, in fp32 under bf16.

    Layer normalisation (``native_layer_norm``), softmax and the elementwise functions of
    ``_AUTOCAST_FP32_UNARY`` cast their bf16 inputs to fp32, so the tensors they save for
    backward are fp32 (an RMS norm casts explicitly, on every device, and is left out). A
    CPU's autocast keeps them in bf16.

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import gpt2
    >>> [op.name for op in gpt2(size="small", batch=1, seq_len=8).operators if autocast_fp32(op)][:2]
    ['h0.ln1', 'h0.ln2']
    """
    if op.kind is OpKind.LAYER_NORM:
        return not op.attr("rms")
    if op.kind is OpKind.SOFTMAX:
        return True
    return op.kind is OpKind.UNARY and op.attr("fn") in _AUTOCAST_FP32_UNARY


def autocast_fp32_copies(graph: Graph) -> dict:
    """The fp32 copies a bf16-mixed run on a GPU keeps for backward beyond the bf16 tensors.

    For every operator that :func:`autocast_fp32` holds, each bf16 tensor it saves (of a
    :func:`precision_graph`) is kept as an fp32 copy. Returns ``{operator: {tensor: extra}}``
    where ``extra`` counts the tensor's bf16 local shards the copy costs beyond the cost
    model's own charge of the bf16 tensor: 1 when the operator is the tensor's only keeper
    (the bf16 tensor is then needed only until its last forward reader, and the model's charge
    plus one more shard is the fp32 copy), 2 when another operator keeps the bf16 tensor too.

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import gpt2
    >>> g = precision_graph(gpt2(size="small", batch=1, seq_len=8), "bf16-mixed")
    >>> autocast_fp32_copies(g)["h0.ln1"]
    {'embed_dropout.out': 1, 'h0.h0.ln1.mean': 1, 'h0.h0.ln1.rstd': 1}
    """
    keepers: dict = {}
    for op in graph.operators:
        for t in dict.fromkeys(op.saved):
            keepers[t] = keepers.get(t, 0) + 1
    out = {}
    for op in graph.operators:
        if not autocast_fp32(op):
            continue
        extra = {t: 2 if keepers[t] > 1 else 1 for t in dict.fromkeys(op.saved)
                 if graph.tensors[t].dtype == "bfloat16" and graph.tensors[t].role is not TensorRole.PARAMETER}
        if extra:
            out[op.name] = extra
    return out


def precision_graph(graph: Graph, precision: Precision) -> Graph:
    """``graph`` with its activations in the precision's compute dtype (costing only).

    The tensors of :func:`half_tensors` become ``bfloat16``; parameters and constants keep
    their dtype (fp32 master weights; :func:`~tensoropt_py.cost.optimizer.state_bytes_per_param`
    with ``mixed_precision=True`` counts the bf16 working copy and its gradient).

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import mlp
    >>> g = precision_graph(mlp(), "bf16-mixed")
    >>> sorted({t.dtype for t in g.tensors.values() if t.role.value == "activation"})   # fp32: loss, log-probs
    ['bfloat16', 'float32']
    """
    dt = PRECISIONS[precision]
    if dt == "float32":
        return graph
    half = half_tensors(graph)
    tensors = [replace(t, dtype=dt) if t.name in half else t for t in graph.tensors.values()]
    return Graph(tensors, graph.operators, name=graph.name, outputs=graph.outputs)


def _recompute_delta(op, tensors, configs, coster, exclude, hold, readers, splits):
    """(memory, compute time) of the recomputed variant of every configuration."""
    inputs = {u.tensor for u in op.inputs}
    params = {u.tensor for u in op.params}
    dropped = {t for t in op.saved if t not in inputs and t not in params}
    oc = coster.costs(op, tensors, configs, exclude_saved=set(exclude) | dropped, hold_outputs=(), readers=readers)
    memory = oc.memory.copy()
    seen = set()
    for use in op.inputs:  # inputs it does not save: the recomputation keeps a reference
        if use.tensor in seen or use.tensor in op.saved:
            continue
        seen.add(use.tensor)
        spec = tensors[use.tensor]
        memory += local_numel(op, use, spec.numel, splits) * DTYPE_BYTES[spec.dtype]
    return memory, oc.compute_time + coster.forward_times(op, tensors, configs)


def _shard_delta(op, tensors, configs, coster, readers, splits, base_mem, base_ct, base_cm):
    """(memory, compute, comm) of the sharded-state variant, and which configs it changes."""
    K = len(configs)
    index = {d.name: i for i, d in enumerate(op.loop_dims)}
    mem, ct = base_mem.copy(), base_ct.copy()
    comm = np.zeros(K)
    changed = np.zeros(K, dtype=bool)
    trained, seen = [], set()
    for use in op.params:
        spec = tensors[use.tensor]
        if use.tensor in seen or spec.role is not TensorRole.PARAMETER:
            continue
        seen.add(use.tensor)
        trained.append((use, spec, {index[n] for n in use.loop_dims()}, int((readers or {}).get(use.tensor, 1))))
    if not trained:
        return None
    mp = coster.mixed_precision
    for use, spec, indexed, nread in trained:
        numel = local_numel(op, use, spec.numel, splits).astype(np.float64)
        per = state_bytes_per_param(coster.optimizer, spec.dtype, mixed_precision=mp)
        wb = 2 if mp else DTYPE_BYTES[spec.dtype]
        sharded_bytes = per - 2 * wb  # master weight (mixed) + optimizer state
        flops, nbytes = update_work(coster.optimizer, spec.dtype, mixed_precision=mp)
        upd = np.asarray(coster.compute.times(flops * numel, nbytes * numel, dtype="float32"), dtype=np.float64)
        for k, c in enumerate(configs):
            sizes = c.mesh.fine_sizes
            axes = tuple(a for a, lab in enumerate(c.fine) if lab >= 0 and lab not in indexed)
            r = int(np.prod([sizes[a] for a in axes])) if axes else 1
            if r == 1 or nread > 1:
                continue
            changed[k] = True
            mem[k] -= numel[k] * sharded_bytes * (1.0 - 1.0 / r)
            ct[k] -= upd[k] * (1.0 - 1.0 / r)
    if not changed.any():
        return None
    # communication: per fused group of axes, reduce-scatter the gradients, all-gather the weights
    for k, c in enumerate(configs):
        sizes = c.mesh.fine_sizes
        fused: dict = {}
        for use, spec, indexed, nread in trained:
            axes = tuple(a for a, lab in enumerate(c.fine) if lab >= 0 and lab not in indexed)
            if not axes:
                continue
            share = 1.0 / max(nread, 1)
            n = float(local_numel(op, use, spec.numel, splits[k:k + 1])[0])
            gb = (2 if mp else DTYPE_BYTES[spec.dtype]) * n * share
            entry = fused.setdefault(axes, [0.0, 0.0, 0.0])
            if nread > 1:  # shared parameters keep their all-reduce
                entry[2] += gb
            else:
                entry[0] += gb
                entry[1] += gb
        t = plain = 0.0
        for ax, (rs, ag, ar) in fused.items():
            groups = fine_groups(sizes, ax)
            plain += float(coster.comm.collective_time("all_reduce", rs + ar, groups))
            if rs:
                t += float(coster.comm.collective_time("reduce_scatter", rs, groups))
                t += float(coster.comm.collective_time("all_gather", ag, groups))
            if ar:
                t += float(coster.comm.collective_time("all_reduce", ar, groups))
        # the rest of the plain communication (e.g. the reduction owed by a graph output) stays
        comm[k] = t + max(float(base_cm[k]) - plain, 0.0)
    comm = np.where(changed, comm, base_cm)
    return mem, ct, comm, changed


def expand_configs(op, tensors, configs, arr, signatures, layouts, coster, options: TrainingOptions, *,
                   exclude=(), hold=(), readers=None, kept=None):
    """Add the option variants of ``op``'s configurations (module docstring).

    Parameters
    ----------
    op : Operator
    tensors : mapping name -> TensorSpec
    configs : sequence of OpConfig
        The plain configurations (no option set).
    arr : ndarray (K, 4)
        Their memory, time, compute time, communication time.
    signatures : list
        Per configuration, the layout signature dominance pruning groups by.
    layouts : (outs, ins, grads)
        Per output / input / input gradient, the layout under every configuration.
    coster : OperatorCoster
    options : TrainingOptions
    exclude, hold, readers
        As given to :meth:`OperatorCoster.costs <tensoropt_py.cost.operator_cost.OperatorCoster.costs>`.
    kept : set of str, optional
        The tensors someone keeps for backward. An operator that saves nothing beyond its
        inputs and whose outputs nobody keeps gains nothing from recomputation: it gets no
        recomputed variant (it would only be dominated). None: offer it to every operator.

    Returns
    -------
    configs, arr, signatures, layouts
        The plain configurations first (same indices), then the variants. A signature gains
        the recompute flag: a recomputed configuration changes its output edges' costs, so it
        is never pruned against a stored one.

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import mlp
    >>> from tensoropt_py.cost.builder import build_cost_graph
    >>> from tensoropt_py.cluster import Cluster
    >>> mcg = build_cost_graph(mlp(), Cluster.preset("cpu-1x4"), 4, training=TrainingOptions(recompute=True))
    >>> any(c.recompute for c in mcg.configs[mcg.op_names.index("relu0")])
    True
    """
    K = len(configs)
    if K == 0 or op.kind is OpKind.INPUT or not options.expands:
        return configs, arr, signatures, layouts
    splits = split_matrix(op, configs)
    rows = [(k, False, False) for k in range(K)]
    costs = [arr]
    if options.shard_optimizer:
        sh = _shard_delta(op, tensors, configs, coster, readers, splits, arr[:, 0], arr[:, 2], arr[:, 3])
    else:
        sh = None
    if sh is not None:
        mem, ct, cm, changed = sh
        ks = np.flatnonzero(changed)
        costs.append(np.stack([mem, ct + cm, ct, cm], axis=1)[ks])
        rows += [(int(k), False, True) for k in ks]
    inputs = {u.tensor for u in op.inputs} | {u.tensor for u in op.params}
    useful = kept is None or any(t not in inputs for t in op.saved) or any(u.tensor in kept for u in op.outputs)
    if options.recompute and useful and any(tensors[u.tensor].dtype in ("float32", "bfloat16", "float16", "float64")
                                            for u in op.outputs):
        rmem, rct = _recompute_delta(op, tensors, configs, coster, exclude, hold, readers, splits)
        costs.append(np.stack([rmem, rct + arr[:, 3], rct, arr[:, 3]], axis=1))
        rows += [(k, True, False) for k in range(K)]
        if sh is not None:
            mem, ct, cm, changed = sh
            ks = np.flatnonzero(changed)
            dm = (mem - arr[:, 0])[ks]
            dct = (ct - arr[:, 2])[ks]
            both = np.stack([rmem[ks] + dm, rct[ks] + dct + cm[ks], rct[ks] + dct, cm[ks]], axis=1)
            costs.append(both)
            rows += [(int(k), True, True) for k in ks]
    if len(rows) == K:
        return configs, arr, signatures, layouts
    new_cfgs = [configs[k] if not (rc or sh_) else replace(configs[k], recompute=rc, shard_state=sh_)
                for k, rc, sh_ in rows]
    new_arr = np.concatenate(costs, axis=0)
    new_sigs = [(signatures[k], rc) for k, rc, _ in rows]
    new_layouts = tuple([[L[k] for k, _, _ in rows] for L in group] for group in layouts)
    return new_cfgs, new_arr, new_sigs, new_layouts


def recompute_edge_table(table: np.ndarray, fwd: np.ndarray, mode: str):
    """Rows of an edge table for a recomputed producer, shape ``(A, B, R, 2)``.

    Every copy of the tensor is dropped (memory 0). A consumer that keeps one (reuse modes
    other than ``"none"``) re-derives it in backward from the recomputed output with the
    forward rescheduling (``fwd``, ``(A, B)`` seconds) again; the other reuse options are
    absent (+inf).

    Examples
    --------
    >>> import numpy as np
    >>> table = np.array([[[[8.0, 1.0], [4.0, 2.0]]]])        # A=B=1, R=2: (memory, time)
    >>> recompute_edge_table(table, np.array([[0.5]]), "multi")[0, 0].tolist()
    [[0.0, 1.5], [inf, inf]]
    """
    out = np.full(table.shape, np.inf)
    base = table[:, :, 0, 1]
    out[:, :, 0, 0] = 0.0
    out[:, :, 0, 1] = base if mode == "none" else base + np.where(np.isfinite(base), fwd, 0.0)
    return out


def option_counts(configs) -> dict:
    """How many of ``configs`` (one per operator) use each option.

    Examples
    --------
    >>> option_counts([])
    {'recompute': 0, 'shard_state': 0}
    """
    return {"recompute": sum(bool(getattr(c, "recompute", False)) for c in configs),
            "shard_state": sum(bool(getattr(c, "shard_state", False)) for c in configs)}
