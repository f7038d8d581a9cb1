"""Peak memory of a strategy: the largest live memory over one training iteration.

TensorOpt's Eq. 3 adds memory like time: parameters + gradients + optimizer state + every
tensor kept for backward. A device's real high-water mark is reached at one instant of the
iteration, and it also holds *transients* the sum never sees: the forward activations not yet
freed, the gradients of activations in flight during backward, the loss head's log-probability
gradient, the optimizer's scratch tensors. This module walks the iteration the way the executor
(:mod:`tensoropt_py.exec.runner`) runs it and returns the peak and where it happens.

The timeline (per device, steady state: optimizer state exists, ``zero_grad(set_to_none=True)``)
--------------------------------------------------------------------------------------------
Events: for every operator in graph order the rescheduling of its inputs, then its forward
(``0 .. 2n-1``); for every operator in reverse order its backward, then the rescheduling of its
input gradients to their producers' layouts (``2n .. 4n-1``); then the optimizer step (``4n``,
gradient all-reduces included). Live memory at an event is the sum of
the allocations whose interval holds it, plus the event's own transient:

==================================== =========================================== ==========================
allocation (local shard bytes)       interval                                     notes
==================================== =========================================== ==========================
weights, optimizer state, constants  every event                                  ``zero_grad`` keeps them
gradient of a parameter              backward of its reader .. optimizer step      a shared one: its first
                                                                                  reader's layout
node's saved tensors (Eq. 1)         forward .. backward of the operator
edge's saved copies (tensor reuse)   forward .. backward of the producer          an upper bound on the copy's life
output kept by no operator           forward of producer .. forward of last        dropped from the working set
                                     reader                                       after its last reader; reshape
                                                                                  and transpose outputs are views
output kept by consumers only        forward of producer .. before first keeper    then the keeper's copy
gradient of an activation            backward of its last reader .. backward of    what autograd accumulates
                                     its producer
rescheduling buffers                 before the consumer's forward; after its      input, result and the result
                                     backward for the gradient's                  in place, per collective
consumer's rescheduled copy          the consumer's forward                        unless it keeps it (saved)
gradient of a rescheduled copy       after the consumer's backward                 the backward rescheduling's
                                                                                  input
==================================== =========================================== ==========================

A shared parameter is kept in its first reader's layout; a reader with another layout holds a
rescheduled copy from its forward to its backward and sends its gradient back (twice the copy,
in its backward). A copy a single-copy tensor-reuse option drops is re-derived in backward
(its rescheduling's buffers at the backward of the operator that kept it). Event transients: a shared parameter's reader other than the first to run backward adds its
gradient to the accumulated one (the incoming gradient and the sum, twice the shard, next to
it); a cross-entropy loss's backward materialises the gradient of its
log-probabilities next to the logits' gradient (both the size of the logits); the optimizer
step of Adam needs scratch tensors: one per parameter shard at once for torch's ``foreach``
implementation (CUDA's default, so the size of all weights), two of the largest shard for the
single-tensor one (CPU); a gradient all-reduce holds the gradients it fuses (an operator's parameters reduced over the
same mesh axes) three times over (flattened, reduced, and copied back into place).

Training options (:mod:`tensoropt_py.cost.training`)
----------------------------------------------------
Sharded optimizer state: a rank keeps its chunk of the master weights and state; at the step,
a group's flat gradient and its reduce-scatter result (then the chunk's gradient, kept), the
step on the chunk, and the all-gather of the updated weights. Recomputation: a recomputed
operator's outputs are dropped after their last forward reader; its re-run's outputs live from
the first backward read of one of them (its own backward or a consumer's that saved one, or a
recomputed consumer's re-run) to its backward. bf16-mixed:
bf16 activations and working weights and gradients, fp32 masters stepped by the optimizer
with fp32 copies of their gradients. On a GPU, autocast runs layer norms, softmax and some
elementwise functions in fp32: the fp32 copies they save are charged to them
(:func:`~tensoropt_py.cost.training.autocast_fp32_copies`; a recomputed one's copy, made again
during its re-run, is not), and a cross-entropy loss's logits gradient is fp32 at its backward
before it is cast to bf16. A CPU's autocast keeps those in bf16.

What is exact, what is a bound
------------------------------
For a given strategy the peak is exact for the model above (checked against
``torch.distributed._tools.mem_tracker.MemTracker`` on CPU ranks for plans of small zoo
models in every training option, ``benchmarks/bench_memory.py``, and against
``torch.cuda.max_memory_allocated`` in ``shared/ground-truth/h100`` and, for bf16-mixed, on
an H100 with ``benchmarks/gpu_training_options.py``; CUDA's library workspaces, cuBLAS's
32 MiB per handle there, are not counted):
it depends on the operators' ``saved`` lists of the IR, which decide what autograd keeps.
The engine adds costs, so the frontier is tracked on the additive memory of Eq. 3 and each
frontier point's memory is then replaced by its peak (:func:`peak_frontier`): every point is
achievable and its memory is its peak, but a strategy that is Pareto-optimal for the peak and
dominated for the sum is not found.

Examples
--------
>>> from tensoropt_py.graph.builder import GraphBuilder
>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.cost.builder import build_cost_graph
>>> gb = GraphBuilder("mlp")
>>> x, y = gb.input([("x", (32, 64), "float32"), ("y", (32,), "int64")])
>>> loss = gb.loss(gb.linear(gb.relu(gb.linear(x, 128)), 10), y)
>>> mcg = build_cost_graph(gb.build(), Cluster.preset("v100-2x8"), 1)
>>> prof = MemoryModel(mcg).profile([0] * len(mcg.op_names))
>>> prof.phase in ("forward", "backward", "optimizer"), prof.peak >= prof.persistent
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..elimination.table import unique_rows
from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES, OpKind, TensorRole
from .optimizer import check_optimizer, state_bytes_per_param

__all__ = ["MemoryProfile", "MemoryModel", "peak_frontier", "memory_events", "PHASES"]

#: Phase names of :attr:`MemoryProfile.phase`.
PHASES = ("forward", "backward", "optimizer")
#: Bytes the timelines of :meth:`MemoryModel.peaks` may take at once (strategies are
#: evaluated in blocks that fit).
PEAK_BLOCK_BYTES = 1 << 28

_FLOAT = ("float32", "float16", "bfloat16", "float64")

#: Operators whose output is a view of their input (no new storage, forward or backward).
_VIEWS = frozenset({OpKind.RESHAPE, OpKind.TRANSPOSE})


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """The peak live memory of one strategy on its busiest device, and where it happens.

    Attributes
    ----------
    peak : float
        Bytes live at the peak.
    operator : str
        The operator running at the peak (``""`` in the optimizer step).
    phase : {"forward", "backward", "optimizer"}
    persistent : float
        Weights + optimizer state + constants (live all the time).
    gradients : float
        Parameter gradients live at the peak.
    saved : float
        Tensors kept for backward (node and edge memory of Eq. 1 and the reuse options) live at
        the peak.
    transient : float
        The rest: forward activations not yet freed, activation gradients, the event's scratch.
    additive : float
        The CostGraph's additive memory of the same strategy (Eq. 3).
    """

    peak: float
    operator: str
    phase: str
    persistent: float
    gradients: float
    saved: float
    transient: float
    additive: float


class MemoryModel:
    """Peak-memory timeline of the strategies of a :class:`~tensoropt_py.cost.builder.ModelCostGraph`.

    Parameters
    ----------
    mcg : ModelCostGraph
    optimizer : {"sgd", "momentum", "adam"}, optional
        Default: the optimizer the cost graph was built for.
    mixed_precision : bool, optional
        Default: as the cost graph was built.
    foreach : bool, optional
        Whether the optimizer runs torch's multi-tensor (``foreach``) kernels: torch's default
        on GPUs. Default: True unless the cluster's device is a CPU (its name starts with
        ``"cpu"``).
    """

    def __init__(self, mcg, *, optimizer=None, mixed_precision=None, foreach=None, dropout=False):
        self.mcg = mcg
        self.optimizer = check_optimizer(optimizer if optimizer is not None else getattr(mcg, "optimizer", "adam"))
        self.mixed_precision = bool(getattr(mcg, "mixed_precision", False) if mixed_precision is None
                                    else mixed_precision)
        cl = getattr(mcg, "cluster", None)
        self.cpu = cl is not None and cl.device.is_cpu
        self.foreach = bool(not self.cpu if foreach is None else foreach)
        self.dropout = bool(dropout)
        g = mcg.graph
        self.ops = g.operators
        self.n = len(self.ops)
        self.index = {op.name: i for i, op in enumerate(self.ops)}
        self.readers = {p: len(u) for p, u in g.parameter_users().items()}
        # structure: last reader / first keeper of every output, per producer
        saved_by = {}
        for op in self.ops:
            for t in op.saved:
                saved_by.setdefault(t, set()).add(op.name)
        self._saved_by = saved_by
        # per op: (output position, tensor, last forward slot it is live in or None, grad start op)
        self._outputs = []
        for i, op in enumerate(self.ops):
            outs = []
            for o, use in enumerate(op.outputs):
                t = use.tensor
                cons = [self.index[c] for c in g.consumers(t) if c in self.index]
                keepers = saved_by.get(t, set())
                if op.name in keepers:
                    end = None  # the producer's saved memory (node or edge) covers it
                elif keepers:  # until the first keeper's copy takes over (its rescheduling slot)
                    end = 2 * min(self.index[c] for c in keepers)
                else:  # until its last reader has run
                    end = 2 * (max(cons) if cons else i) + 1
                spec = g.tensors[t]
                grad = (max(cons) if cons and op.kind is not OpKind.INPUT and spec.dtype in _FLOAT else None)
                last = 2 * (max(cons) if cons else i) + 1
                outs.append((o, t, end, grad, last))
            self._outputs.append(outs)
        self._aliases = self._find_aliases(saved_by)
        # operators reading a shared parameter, other than the first to run backward: their
        # gradient is added to the one accumulated so far (parameter names per operator)
        self._tied_readers: dict = {}
        self._first_reader = {pname: min(self.index[u] for u in users if u in self.index)
                              for pname, users in g.parameter_users().items() if len(users) > 1}
        self._tied_copies: list = []  # (parameter, first reader, other reader)
        for pname, users in g.parameter_users().items():
            if len(users) > 1:
                idx = sorted(self.index[u] for u in users if u in self.index)
                for i in idx[:-1]:
                    self._tied_readers.setdefault(i, []).append(pname)
                for r in idx[1:]:  # the executor keeps the parameter in its first reader's layout
                    self._tied_copies.append((pname, idx[0], r))
        self._cache: dict = {}
        self._last_single = None  # (strategy key, timeline) of the last one-strategy call
        self._copies: dict = {}
        self._paths: dict = {}

    def _find_aliases(self, saved_by):
        """Saved inputs that share the storage of an attention output its operator keeps.

        ``scaled_dot_product_attention`` returns its output as a transposed view of a
        ``[batch, seq, heads, dim]`` buffer, so the transpose + reshape that merges the heads
        back is a view, and the projection that keeps the merged tensor keeps the attention's
        storage: ``(consumer index, input position, [edge indices of the chain])``, charged
        once when no edge of the chain reschedules.
        """
        g = self.mcg.graph
        edge_at = {(e.consumer, e.use_index): j for j, e in enumerate(self.mcg.edges)}
        out = []
        for c, op in enumerate(self.ops):
            for ui, use in enumerate(op.inputs):
                t = use.tensor
                if t not in op.saved or saved_by.get(t) != {op.name}:
                    continue
                chain, cur, cons, pos, ok = [], t, op.name, ui, False
                while True:
                    j = edge_at.get((cons, pos))
                    # the keeper's own copy may sit on its edge (mode "keep", recomputation in the space)
                    if j is None or self.mcg.edges[j].reuse not in (("none", "keep") if not chain else ("none",)):
                        break
                    chain.append(j)
                    p = g.operator(g.producer(cur))
                    if p.kind is OpKind.ATTENTION:
                        ok = p.outputs[0].tensor == cur and cur in p.saved
                        break
                    if p.kind not in _VIEWS or len(p.inputs) != 1:
                        break
                    cons, pos, cur = p.name, 0, p.inputs[0].tensor
                if ok and len(chain) > 1:
                    out.append((c, ui, tuple(chain)))
        return out

    # --- per (node, config) quantities --------------------------------------------------------
    def _node(self, i: int, k: int):
        """``(persistent, grads, saved, out bytes per output, loss transient, largest shard)``."""
        key = (i, k)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        mcg, op = self.mcg, self.ops[i]
        cfg = mcg.configs[i][k]
        tensors = mcg.graph.tensors
        nin, npar = len(op.inputs), len(op.params)
        persistent = grads = largest = stepped = master_grads = 0.0
        zero: dict = {}  # sharded state (ZeRO-1): replica axes -> [elements, replicas]
        reduced: dict = {}  # fused gradient all-reduces: replica axes -> bytes
        seen = set()
        mp = self.mixed_precision
        for pi, use in enumerate(op.params):
            if use.tensor in seen:
                continue
            seen.add(use.tensor)
            spec = tensors[use.tensor]
            loc = cfg.layout(op, nin + pi).local_numel(spec.shape)
            if spec.role is TensorRole.PARAMETER:
                # a shared parameter lives (with its gradient and state) in its first reader's layout
                share = 1.0 if self._first_reader.get(use.tensor, i) == i else 0.0
                per = state_bytes_per_param(self.optimizer, spec.dtype, mixed_precision=mp)
                gb = 2 if mp else DTYPE_BYTES[spec.dtype]
                item = 4 if mp else DTYPE_BYTES[spec.dtype]  # what the optimizer steps
                axes, r = self._replicas(op, cfg, use)
                if not cfg.shard_state or use.tensor in self._first_reader:
                    r = 1
                if r > 1:  # master weight and optimizer state of this rank's chunk only
                    persistent += loc * gb + loc * (per - 2 * gb) / r
                    entry = zero.setdefault(axes, [0.0, r])
                    entry[0] += loc
                else:
                    persistent += loc * (per - gb) * share
                    if mp:  # the fp32 master's gradient, a copy of the bf16 one, through the step
                        master_grads += loc * 4 * share
                    if axes and use.tensor not in self._first_reader:  # all-reduced with its group
                        reduced[axes] = reduced.get(axes, 0.0) + loc * gb
                grads += loc * gb * share
                largest = max(largest, loc * item / r)
                stepped += loc * item / r / max(int(self.readers.get(use.tensor, 1)), 1)
            else:
                persistent += loc * DTYPE_BYTES[spec.dtype]
        gb = 2 if mp else 4
        # per sharded group: the reduce-scatter's flat gradient and its result (the MPI backend sums
        # bf16 in fp32), the chunk's gradient (and its fp32 copy) kept to the step, the all-gather
        zero_sync = max((m * gb + m / r * gb + (m * 4 + m / r * 4 if mp and self.cpu else 0.0)
                         for m, r in zero.values()), default=0.0)
        # a fused all-reduce holds the flat gradients, the result and the copies back in place
        # (the MPI backend sums bf16 in fp32: two fp32 buffers and the bf16 result besides)
        sync = max(reduced.values(), default=0.0) * (6.0 if mp and self.cpu else 3.0)
        zero_kept = sum(m / r * (gb + (4 if mp else 0)) for m, r in zero.values()) + master_grads
        zero_gather = max((m * gb for m, r in zero.values()), default=0.0)
        node_mem = float(mcg.node_costs[i][k][0])
        saved = max(node_mem - self._param_memory(i, k), 0.0)
        outs = []
        for o, use in enumerate(op.outputs):
            spec = tensors[use.tensor]
            if op.kind in _VIEWS or (o == 0 and self._identity_dropout(op)):
                outs.append(0.0)  # a view of its input's storage (and its gradient a view of the output's)
            else:
                outs.append(float(cfg.layout(op, nin + npar + o).local_numel(spec.shape) * DTYPE_BYTES[spec.dtype]))
        if self._identity_dropout(op):  # the executor's dropout keeps no mask
            for o, use in enumerate(op.outputs):
                if o > 0 and use.tensor in op.saved:
                    spec = tensors[use.tensor]
                    saved -= cfg.layout(op, nin + npar + o).local_numel(spec.shape) * DTYPE_BYTES[spec.dtype]
            saved = max(saved, 0.0)
        ins = [float(cfg.layout(op, u).local_numel(tensors[use.tensor].shape) * DTYPE_BYTES[tensors[use.tensor].dtype])
               for u, use in enumerate(op.inputs)]
        loss_grad = 0.0
        if op.kind is OpKind.LOSS and dict(op.attrs).get("fn") == "cross_entropy" and len(outs) > 1:
            loss_grad = outs[1]  # the gradient of the log-probabilities, next to the logits' gradient
            if mp and not self.cpu and tensors[op.inputs[0].tensor].dtype == "bfloat16":
                # a GPU's autocast ran the log-softmax in fp32: the logits' gradient is fp32 until
                # autograd casts it to the logits' bf16 (one bf16 shard more than the model's)
                loss_grad += ins[0]
        hit = self._cache[key] = (persistent, grads, saved, outs, loss_grad, largest, ins,
                                  (zero_sync, zero_kept, zero_gather, stepped, sync))
        return hit

    def _replicas(self, op, cfg, use):
        """The fine mesh axes a parameter's gradient is reduced over and their device count."""
        index = {d.name: a for a, d in enumerate(op.loop_dims)}
        indexed = {index[nm] for nm in use.loop_dims()}
        sizes = cfg.mesh.fine_sizes
        axes = tuple(a for a, lab in enumerate(cfg.fine) if lab >= 0 and lab not in indexed)
        return axes, int(np.prod([sizes[a] for a in axes])) if axes else 1

    def _tied_copy_bytes(self, pname: str, m: int, km: int, r: int, kr: int) -> float:
        """Bytes of reader ``r``'s copy of shared parameter ``pname`` (0 in the first reader's layout)."""
        key = ("tied", pname, m, km, r, kr)
        hit = self._cache.get(key)
        if hit is None:
            def layout(i, k):
                op = self.ops[i]
                u = [pi for pi, use in enumerate(op.params) if use.tensor == pname][0]
                return self.mcg.configs[i][k].layout(op, len(op.inputs) + u)

            lr = layout(r, kr)
            hit = 0.0 if layout(m, km) == lr else self._param_bytes(r, kr, {pname})
            self._cache[key] = hit
        return hit

    def _param_bytes(self, i: int, k: int, names) -> float:
        """Local bytes of the parameters ``names`` of operator ``i`` under config ``k``."""
        op, cfg = self.ops[i], self.mcg.configs[i][k]
        tensors = self.mcg.graph.tensors
        total, seen = 0.0, set()
        for pi, use in enumerate(op.params):
            if use.tensor in names and use.tensor not in seen:
                seen.add(use.tensor)
                spec = tensors[use.tensor]
                item = 2 if self.mixed_precision else DTYPE_BYTES[spec.dtype]
                total += cfg.layout(op, len(op.inputs) + pi).local_numel(spec.shape) * item
        return total

    def _param_memory(self, i: int, k: int) -> float:
        """The parameter part of node ``i``'s memory under config ``k`` as the cost graph charges it
        (Eq. 1: a shared parameter's readers each pay ``1/readers`` of it in their own layout; with
        sharded state, :func:`~tensoropt_py.cost.training`'s master weight and state over the replicas)."""
        op, cfg = self.ops[i], self.mcg.configs[i][k]
        tensors = self.mcg.graph.tensors
        total, seen = 0.0, set()
        for pi, use in enumerate(op.params):
            if use.tensor in seen:
                continue
            seen.add(use.tensor)
            spec = tensors[use.tensor]
            loc = cfg.layout(op, len(op.inputs) + pi).local_numel(spec.shape)
            if spec.role is TensorRole.PARAMETER:
                readers = max(int(self.readers.get(use.tensor, 1)), 1)
                per = state_bytes_per_param(self.optimizer, spec.dtype, mixed_precision=self.mixed_precision)
                total += loc * per / readers
                _, r = self._replicas(op, cfg, use)
                if cfg.shard_state and readers == 1 and r > 1:
                    wb = 2 if self.mixed_precision else DTYPE_BYTES[spec.dtype]
                    total -= loc * (per - 2 * wb) * (1.0 - 1.0 / r)
            else:
                total += loc * DTYPE_BYTES[spec.dtype]
        return total

    def _identity_dropout(self, op) -> bool:
        return (not self.dropout and op.kind is OpKind.UNARY and dict(op.attrs).get("fn") == "dropout")

    # --- the timeline -------------------------------------------------------------------------
    def _timeline(self, choices: np.ndarray, edge_choices: np.ndarray, split: bool = True):
        """Live bytes ``(P, 4n + 1)`` by category: persistent (P,), grads, saved, transient;
        ``split=False``: persistent and the sum of the three, with half the arrays."""
        P, n = choices.shape[0], self.n
        E = 4 * n + 1
        fwd = 2 * np.arange(n) + 1  # running an operator forward
        pre = 2 * np.arange(n)  # rescheduling an operator's inputs
        bwd = 4 * n - 2 - 2 * np.arange(n)  # running an operator backward
        post = bwd + 1  # rescheduling its input gradients (autograd runs that right after it)
        opt = 4 * n
        # changes of live bytes per event (event-major: an event's update is contiguous), one
        # array per category or one for all
        d_grad = np.zeros((E + 1, P))
        d_saved, d_trans = (np.zeros((E + 1, P)), np.zeros((E + 1, P))) if split else (d_grad, d_grad)
        point_trans = np.zeros((E, P))
        persistent = np.zeros(P)
        largest = np.zeros(P)
        sync = np.zeros(P)
        zero_sync, zero_kept, zero_gather, stepped = np.zeros(P), np.zeros(P), np.zeros(P), np.zeros(P)

        rows = np.arange(P)

        def add(d, b, s, e):  # b live from event s to event e (scalars or one per point)
            d[s, rows if np.ndim(s) else slice(None)] += b
            d[np.asarray(e) + 1, rows if np.ndim(e) else slice(None)] -= b

        recomputed = np.array([[c.recompute for c in cfgs] for cfgs in self.mcg.configs], dtype=object)
        rec = np.stack([np.asarray(recomputed[i], dtype=bool)[choices[:, i]] for i in range(n)], axis=1)
        rerun_from = self._rerun_starts(rec)
        for i in range(n):
            ks = choices[:, i]
            uniq, inv = np.unique(ks, return_inverse=True)
            vals = [self._node(i, int(k)) for k in uniq]
            per = np.array([v[0] for v in vals])[inv]
            gr = np.array([v[1] for v in vals])[inv]
            sv = np.array([v[2] for v in vals])[inv]
            persistent += per
            largest = np.maximum(largest, np.array([v[5] for v in vals])[inv])
            add(d_grad, gr, bwd[i], opt)
            add(d_saved, sv, fwd[i], bwd[i])
            z = np.array([v[7] for v in vals])[inv]  # (P, 4)
            zero_sync = np.maximum(zero_sync, z[:, 0])
            zero_kept += z[:, 1]
            zero_gather = np.maximum(zero_gather, z[:, 2])
            stepped += z[:, 3]
            sync = np.maximum(sync, z[:, 4])
            rerun = np.zeros(P)
            for o, t, end, grad, last in self._outputs[i]:
                b = np.array([v[3][o] for v in vals])[inv]
                # a recomputed operator's outputs are kept by nobody: dropped after their last reader
                stop = np.where(rec[:, i], last, fwd[i] - 1 if end is None else end)
                stop = np.maximum(stop, fwd[i] - 1)
                add(d_trans, np.where(stop >= fwd[i], b, 0.0), fwd[i], stop)
                if grad is not None:
                    add(d_trans, b, bwd[grad], bwd[i])
                rerun += b
            # the re-run's outputs (its saved tensors among them) live from the first backward read
            # of one of them to the operator's own backward
            add(d_trans, np.where(rec[:, i], rerun, 0.0), bwd[rerun_from[:, i]], bwd[i])
            lg = np.array([v[4] for v in vals])[inv]
            point_trans[bwd[i]] += lg
            tied = self._tied_readers.get(i)
            if tied:  # the gradient arriving from another reader and the sum, next to the held one
                point_trans[bwd[i]] += 2.0 * np.array([self._param_bytes(i, int(k), tied) for k in uniq])[inv]
        for j, (info, (sc, dc, table)) in enumerate(zip(self.mcg.edges, self.mcg.edge_tables)):
            u, v = self.mcg.edge_index[j]
            a, b, r = sc[choices[:, u]], dc[choices[:, v]], edge_choices[:, j]
            mem = table[a, b, r, 0]
            a = a % len(info.src_layouts)  # classes split by the producer's recompute flag
            if info.reuse == "keep":  # the consumer's own saved copy, charged on the edge
                add(d_saved, np.where(np.isfinite(mem), mem, 0.0), fwd[v], bwd[v])
            else:
                add(d_saved, np.where(np.isfinite(mem), mem, 0.0), fwd[u], bwd[u])
            # the rescheduling's buffers (the consumer's copy included), live during its forward;
            # in backward, once the consumer's backward is done, the gradient of its copy and the
            # buffers rescheduling it into the producer's layout
            fw, bw = self._path_bytes(j, a, b)
            point_trans[pre[v]] += fw
            if info.consumer not in self._saved_by.get(info.tensor, ()):
                point_trans[fwd[v]] += self._copy_bytes(j, a, b)  # the consumer reads its copy
            point_trans[post[v]] += bw
            if info.reuse == "keep":  # a recomputed producer's copy, re-derived for the consumer's backward
                dropped = (sc[choices[:, u]] >= len(info.src_layouts)) & np.isfinite(mem)
                point_trans[bwd[v]] += np.where(dropped, fw, 0.0)
            if table.shape[2] > 1:  # a copy dropped after forward is re-derived in backward
                at_v, at_u = self._rederive_bytes(j, a, b, r)
                point_trans[bwd[v]] += at_v
                point_trans[bwd[u]] += at_u
        for pname, m, r in self._tied_copies:
            # a reader whose layout of a shared parameter is not the first reader's works on a
            # rescheduled copy (kept for its backward) and sends its gradient back
            b = np.array([self._tied_copy_bytes(pname, m, int(km), r, int(kr))
                          for km, kr in zip(choices[:, m], choices[:, r])])
            add(d_saved, b, fwd[r], bwd[r])
            point_trans[bwd[r]] += 2.0 * b
        for c, ui, chain in self._aliases:
            same = np.ones(P, dtype=bool)
            for j in chain:
                u, v = self.mcg.edge_index[j]
                sc, dc, _ = self.mcg.edge_tables[j]
                a = sc[choices[:, u]] % len(self.mcg.edges[j].src_layouts)
                same &= self._copy_bytes(j, a, dc[choices[:, v]]) == 0
                if self.mcg.edges[j].reuse == "keep":  # a recomputed producer drops the copy
                    same &= sc[choices[:, u]] < len(self.mcg.edges[j].src_layouts)
            att = self.mcg.edge_index[chain[-1]][0]  # a recomputed attention keeps no output
            same &= ~np.array([self.mcg.configs[att][int(k)].recompute for k in choices[:, att]], dtype=bool)
            ks = choices[:, c]
            b = np.array([self._node(c, int(k))[6][ui] for k in ks])
            add(d_saved, -np.where(same, b, 0.0), fwd[c], bwd[c])
        if self.optimizer == "adam":
            scratch = stepped if self.foreach else 2.0 * largest
        else:
            scratch = np.zeros(P)
        # in turn: the gradient reductions, the step, the all-gathers of sharded parameters
        point_trans[opt] += np.maximum(np.maximum(scratch, sync), np.maximum(zero_sync, zero_gather)) + zero_kept
        trans = np.cumsum(d_trans[:E], axis=0)
        trans += point_trans
        if not split:  # the one array holds every category
            return persistent, trans.T
        return persistent, np.cumsum(d_grad[:E], axis=0).T, np.cumsum(d_saved[:E], axis=0).T, trans.T

    def _rerun_starts(self, rec: np.ndarray) -> np.ndarray:
        """Per point and operator, the operator whose backward first reads a recomputed operator's
        tensors (running its re-run): the last of the operator itself, the consumers that saved one
        of its outputs, and the re-runs of recomputed such consumers (which read their saved input)."""
        P, n = rec.shape
        start = np.tile(np.arange(n), (P, 1))
        for i in range(n - 1, -1, -1):
            for _, t, _, _, _ in self._outputs[i]:
                for c in self._saved_by.get(t, ()):
                    v = self.index[c]
                    if v != i:
                        start[:, i] = np.maximum(start[:, i], np.where(rec[:, v], start[:, v], v))
        return start

    def _pair_copy(self, j: int, a: int, b: int) -> float:
        """Bytes of the consumer's rescheduled copy on edge ``j`` for layout classes ``(a, b)``
        (0 where the consumer reads the producer's layout)."""
        info = self.mcg.edges[j]
        spec = self.mcg.graph.tensors[info.tensor]
        A, B = info.src_layouts[a], info.dst_layouts[b]
        key = (A, B, spec.shape, spec.dtype)
        hit = self._copies.get(key)
        if hit is None:
            hit = self._copies[key] = (0.0 if A.without_partial() == B
                                       else float(B.local_numel(spec.shape) * DTYPE_BYTES[spec.dtype]))
        return hit

    def _copy_bytes(self, j: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """:meth:`_pair_copy` per point (layout classes ``a``, ``b`` of the points)."""
        uniq, inv = _unique_rows(a, b)
        vals = np.array([self._pair_copy(j, int(x), int(y)) for x, y in uniq])
        return vals[inv]

    def _path_bytes(self, j: int, a: np.ndarray, b: np.ndarray):
        """Transient bytes of edge ``j``'s forward and backward reschedulings per point.

        A step holds its input (except the first step, which reads the producer's tensor, counted
        already) and what :func:`_step_bytes` says it allocates.
        """
        uniq, inv = _unique_rows(a, b)
        fw = np.zeros(len(uniq))
        bw = np.zeros(len(uniq))
        for q, (ai, bi) in enumerate(uniq):
            info = self.mcg.edges[j]
            key = (info.src_layouts[ai], info.dst_layouts[bi], info.dst_grad_layouts[bi], info.tensor, info.backward)
            hit = self._paths.get(key)
            if hit is None:
                hit = self._paths[key] = self._edge_path_bytes(j, int(ai), int(bi))
            fw[q], bw[q] = hit
        return fw[inv], bw[inv]

    def _rederive_bytes(self, j: int, a: np.ndarray, b: np.ndarray, r: np.ndarray):
        """Bytes of re-deriving the copy a single-copy reuse option dropped, per point:
        ``(at the consumer's backward, at the producer's backward)``."""
        from .builder import REUSE_OPTIONS

        _, _, table = self.mcg.edge_tables[j]
        names = REUSE_OPTIONS[table.shape[2]]
        info = self.mcg.edges[j]
        spec = self.mcg.graph.tensors[info.tensor]
        rs = self.mcg.rescheduler
        uniq, inv = _unique_rows(a, b, r)
        u_v, u_u = np.zeros(len(uniq)), np.zeros(len(uniq))
        for q, (ai, bi, ri) in enumerate(uniq):
            name = names[int(ri)]
            if name not in ("producer_copy", "consumer_copy"):
                continue
            key = ("rederive", info.src_layouts[ai], info.dst_layouts[bi], info.tensor, name)
            hit = self._paths.get(key)
            if hit is None:
                src, dst = info.src_layouts[int(ai)], info.dst_layouts[int(bi)]
                path = (rs.path(spec.shape, spec.dtype, src, dst) if name == "producer_copy"
                        else rs.path(spec.shape, spec.dtype, dst, src.without_partial()))
                hit = self._paths[key] = _path_peak(path, spec.shape, DTYPE_BYTES[spec.dtype], True,
                                                    self._upcast(spec.dtype))
            if name == "producer_copy":
                u_v[q] = hit
            else:
                u_u[q] = hit
        return u_v[inv], u_u[inv]

    def _upcast(self, dtype: str) -> bool:
        """Whether collectives that sum ``dtype`` run in fp32 (bf16 on the CPU's MPI backend)."""
        return self.cpu and dtype == "bfloat16"

    def _edge_path_bytes(self, j: int, a: int, b: int):
        info = self.mcg.edges[j]
        if self._pair_copy(j, a, b) == 0 and not info.src_layouts[a].is_partial:
            return 0.0, 0.0
        spec = self.mcg.graph.tensors[info.tensor]
        item = DTYPE_BYTES[spec.dtype]
        rs = self.mcg.rescheduler

        def peak(path, keep_last):
            return _path_peak(path, spec.shape, item, keep_last, self._upcast(spec.dtype))

        fwd = peak(rs.path(spec.shape, spec.dtype, info.src_layouts[a], info.dst_layouts[b]), True)
        bwd = 0.0
        if info.backward:  # its result is the producer's output gradient, counted already
            path = rs.backward(spec.shape, spec.dtype, info.src_layouts[a], info.dst_layouts[b],
                               info.dst_grad_layouts[b])
            if path.steps:  # the path reads the gradient of the consumer's copy, held until it is done
                bwd = peak(path, False) + info.dst_grad_layouts[b].local_numel(spec.shape) * item
        return fwd, bwd

    def _check(self, choices, edge_choices):
        choices = np.atleast_2d(np.asarray(choices, dtype=np.int64))
        if choices.shape[1] != self.n:
            raise InvalidInputError(f"choices have {choices.shape[1]} entries per strategy, the graph has {self.n} nodes")
        for i in range(self.n):
            K = len(self.mcg.configs[i])
            bad = (choices[:, i] < 0) | (choices[:, i] >= K)
            if bad.any():
                raise InvalidInputError(f"config {int(choices[bad, i][0])} of node {i} ({self.ops[i].name}) "
                                        f"out of range 0..{K - 1}")
        ne = len(self.mcg.edges)
        if edge_choices is None:
            edge_choices = np.zeros((choices.shape[0], ne), dtype=np.int64)
        edge_choices = np.atleast_2d(np.asarray(edge_choices, dtype=np.int64))
        if ne == 0:
            edge_choices = np.zeros((choices.shape[0], 0), dtype=np.int64)
        if edge_choices.shape != (choices.shape[0], ne):
            raise InvalidInputError(f"edge_choices has shape {edge_choices.shape}, expected {(choices.shape[0], ne)}")
        return choices, edge_choices

    def peaks(self, choices, edge_choices=None) -> np.ndarray:
        """Peak bytes of every strategy: ``choices (P, n)``, ``edge_choices (P, edges)`` -> ``(P,)``.

        The timelines are built for a block of strategies at a time, so that their arrays
        (about four of ``(block, 4n + 1)`` floats) stay within ``PEAK_BLOCK_BYTES``: a frontier
        of 40,000 points of a 2,000-operator model would otherwise need 10 GB at once."""
        choices, edge_choices = self._check(choices, edge_choices)
        block = max(1, PEAK_BLOCK_BYTES // (4 * 8 * (4 * self.n + 2)))
        out = np.empty(choices.shape[0])
        for lo in range(0, choices.shape[0], block):
            persistent, live = self._timeline(choices[lo:lo + block], edge_choices[lo:lo + block], split=False)
            out[lo:lo + block] = persistent + np.max(live, axis=1)
        return out

    def live(self, choices, edge_choices=None) -> np.ndarray:
        """Live bytes at every event of one strategy's iteration, ``(4n + 1,)``
        (events named by :func:`memory_events`)."""
        choices, edge_choices = self._check(choices, edge_choices)
        if choices.shape[0] != 1:
            raise InvalidInputError(f"live() takes one strategy, got {choices.shape[0]}")
        persistent, grads, saved, trans = self._single_timeline(choices, edge_choices)
        return persistent[0] + (grads + saved + trans)[0]

    def _single_timeline(self, choices, edge_choices):
        """:meth:`_timeline` of one strategy, kept for the next call: a plan asks for its
        strategy's :meth:`profile` and :meth:`live` in turn."""
        key = (choices.tobytes(), edge_choices.tobytes())
        if self._last_single is None or self._last_single[0] != key:
            self._last_single = (key, self._timeline(choices, edge_choices))
        return self._last_single[1]

    def profile(self, choices, edge_choices=None) -> MemoryProfile:
        """The :class:`MemoryProfile` of one strategy."""
        choices, edge_choices = self._check(choices, edge_choices)
        if choices.shape[0] != 1:
            raise InvalidInputError(f"profile() takes one strategy, got {choices.shape[0]}")
        persistent, grads, saved, trans = self._single_timeline(choices, edge_choices)
        live = grads + saved + trans
        e = int(np.argmax(live[0]))
        n = self.n
        if e < 2 * n:
            phase, op = "forward", self.ops[e // 2].name
        elif e < 4 * n:
            phase, op = "backward", self.ops[n - 1 - (e - 2 * n) // 2].name
        else:
            phase, op = "optimizer", ""
        additive = self._additive(choices[0], edge_choices[0])
        return MemoryProfile(peak=float(persistent[0] + live[0, e]), operator=op, phase=phase,
                             persistent=float(persistent[0]), gradients=float(grads[0, e]), saved=float(saved[0, e]),
                             transient=float(trans[0, e]), additive=additive)

    def _additive(self, choices, edge_choices) -> float:
        total = sum(float(self.mcg.node_costs[i][int(k)][0]) for i, k in enumerate(choices))
        for j, (sc, dc, table) in enumerate(self.mcg.edge_tables):
            u, v = self.mcg.edge_index[j]
            total += float(table[sc[choices[u]], dc[choices[v]], int(edge_choices[j]), 0])
        return total


def _unique_rows(*columns):
    """The distinct rows of non-negative integer ``columns`` (equal length) in lexicographic
    order and each row's index among them, by :func:`~tensoropt_py.elimination.table.unique_rows`
    (one integer key per row, which sorts far faster than the rows themselves)."""
    rows = np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=1)
    first, inv = unique_rows(rows)
    return rows[first], inv


def _step_bytes(kind, inp, out, upcast) -> float:
    """Bytes one rescheduling step allocates next to its input block of ``inp`` bytes, as the
    executor runs it (:func:`tensoropt_py.exec.reschedule_exec.run_step` and the backends): a
    slice copies its block; an all-gather receives the stacked blocks, then places them; an
    all-reduce receives its result; a reduce-scatter stacks the pieces to send and receives one;
    an all-to-all stacks and receives, then places (the stacked pieces are gone by then).
    ``upcast``: the sums of bf16 run in fp32 (the MPI backend): an fp32 copy of what is sent
    and an fp32 result before the bf16 one."""
    if kind == "slice":
        return out
    if kind in ("all_gather", "all_to_all"):
        return 2 * out
    sent = inp if kind == "reduce_scatter" else 0.0
    return sent + out + (2 * inp + 2 * out if upcast else 0.0)


def _path_peak(path, shape, item, keep_last, upcast=False) -> float:
    """Most bytes a rescheduling path holds at once beyond its source (see ``_path_bytes``)."""
    best = 0.0
    for k, st in enumerate(path.steps):
        out = st.after.local_numel(shape) * item
        inp = st.before.local_numel(shape) * item
        best = max(best, (inp if k else 0.0) + _step_bytes(st.kind, inp, out, upcast))
    if path.steps and not keep_last:
        best -= path.steps[-1].after.local_numel(shape) * item
    return float(max(best, 0.0))


def memory_events(operators) -> tuple:
    """``(operator, phase)`` of every event of the timeline, for operators in graph order.

    Event ``2i`` reschedules operator ``i``'s inputs and ``2i + 1`` runs it forward,
    ``4n - 2 - 2i`` runs its backward and ``4n - 1 - 2i`` reschedules its input gradients,
    ``4n`` is the optimizer step (operator ``""``).

    Parameters
    ----------
    operators : sequence of str

    Examples
    --------
    >>> memory_events(["a", "b"])
    (('a', 'forward'), ('a', 'forward'), ('b', 'forward'), ('b', 'forward'), ('b', 'backward'), ('b', 'backward'), ('a', 'backward'), ('a', 'backward'), ('', 'optimizer'))
    """
    ops = tuple(operators)
    fwd = tuple((op, "forward") for op in ops for _ in range(2))
    return fwd + tuple((op, "backward") for op in reversed(ops) for _ in range(2)) + (("", "optimizer"),)


def peak_frontier(mcg, time, choices, edge_choices, *, model: MemoryModel | None = None):
    """Give each point of a tracked frontier (additive memory) its peak; keep the Pareto points.

    Parameters
    ----------
    mcg : ModelCostGraph
    time : array (P,)
        The tracked frontier's time.
    choices, edge_choices : array (P, n), (P, edges)
        Its strategies.
    model : MemoryModel, optional

    Returns
    -------
    keep : ndarray of int
        Indices of the points kept, ordered by peak memory ascending (time strictly descending).
    peaks : ndarray
        Their peak memory.
    """
    time = np.asarray(time, dtype=float)
    if len(time) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    mm = model if model is not None else MemoryModel(mcg)
    peaks = mm.peaks(choices, edge_choices)
    order = np.lexsort((time, peaks))
    keep, best = [], np.inf
    for p in order:
        if time[p] < best:
            keep.append(int(p))
            best = time[p]
    keep = np.asarray(keep, dtype=np.int64)
    return keep, peaks[keep]

