"""Run a :class:`~tensoropt_py.plan.Plan` over MPI ranks: ``run_plan`` and the ``run`` CLI.

::

    mpiexec -n 4 python -m mpi4py -m tensoropt_py run PLAN.json --model mlp --steps 5 --seed 0 --report out.json

What every rank does (TensorOpt §4.2, "System workflow"):

1. **Checks before any work**: the world size equals ``plan.devices``; the plan was made
   for this model (``plan.model_fingerprint == graph.fingerprint()``); a calibration
   file given with ``--calibration`` exists and reads; every operator's configuration can
   run on local shards (:mod:`.local_ops`, else a ``NotImplementedError`` naming operator
   and configuration); every edge's forward and backward collectives start and end at the
   layouts the two configurations imply. The ranks agree on the outcome before starting.
2. **Parameters**: the FULL parameters are initialised identically on every rank from the
   seed (:func:`~tensoropt_py.graph.torch_ops.init_params`, the single-process model's
   values), then each rank keeps its block in the layout of the parameter's reader. A
   parameter read by several operators (tied weights) is stored once in its first reader's
   layout and rescheduled to the others' (forward) and its gradients back (backward).
3. **Data** (§4.2 "Data loading"): a seeded synthetic batch per step (the same on every rank
   count), loaded data-parallel in the INPUT operator's layout (each rank keeps its shard)
   and rescheduled to the consumers like any other tensor.
4. **Forward**: operators in order, each on its local shards (:mod:`.local_ops`); between
   operators each tensor is rescheduled with the plan's collectives
   (:class:`~.reschedule_exec.Reschedule`: forward steps, and the plan's backward steps for
   the gradient). Partial sums stay partial until an edge reduces them.
5. **Backward**: ``loss.backward()`` with seed 1 on every rank (the local loss is a partial
   sum or a replica of the loss); then the gradient all-reduce of each parameter over the
   mesh axes splitting loop dimensions it does not index (fused per operator and axes, as
   the cost model counts it).
6. **Optimizer step** (SGD, momentum SGD or Adam: elementwise, so shards update exactly like
   the full tensor).

Tensor reuse (§4.2): autograd's saved tensors go through ``saved_tensors_hooks``. On an edge
whose plan keeps one copy, the dropped copy's saved tensors are released after the forward of
the operator that saved them and re-derived when backward needs them, with the edge's
``rederive`` collectives: ``"producer_copy"`` re-runs the forward rescheduling from the
producer's copy; ``"consumer_copy"`` rebuilds the producer's copy from the consumer's. Each
re-derivation runs once per iteration (phase ``"rederive"``), whatever number of saved views
share the dropped storage. Tensors are dropped from the forward's working set after their last
reader, so on CUDA too only what autograd saved outlives its readers.

Training options (:mod:`.training_exec`, chosen per operator by the plan): a recomputed
operator's saved outputs and internals, and its consumers' saved copies of its outputs, are
released after forward and re-run in backward; an operator with sharded optimizer state
reduce-scatters its gradients, steps its chunk and all-gathers the parameters; a
``bf16-mixed`` plan runs under autocast with bf16 activations and working weights and fp32
masters.

A failure on one rank after the start (an exception in an operator or a collective) prints
``tensoropt-py run: rank R: ...`` and calls ``MPI_Abort``: the whole job ends non-zero.
"""

from __future__ import annotations

import argparse
import functools
import weakref
import os
import statistics
import sys
import time
from dataclasses import dataclass

import torch

from ..cost.optimizer import OPTIMIZERS
from ..errors import InvalidInputError, TensorOptError
from ..units import parse_count
from ..graph.ir import DTYPE_BYTES, Graph, OpKind, TensorRole
from ..graph.torch_ops import init_params, run_graph, torch_dtype
from ..space.layout import PARTIAL, REPLICATE, Layout
from ..space.mesh import fine_groups
from .backend import Backend, make_backend, world
from .local_ops import LocalOp, prepare
from .reschedule_exec import reschedule, run_steps, steps_from_collectives, steps_from_path
from .measure import Report, collective_counts, expected_collectives
from ..plan import config_from_plan
from .shard import gather_full, place_coordinate, shard
from .training_exec import Rerun, ShardedGroup, autocast, input_sources

__all__ = ["run_plan", "Executor", "Report", "synthetic_batch", "reference_train", "tracked_peak",
           "expected_collectives", "main", "OPTIMIZERS", "make_optimizer"]



# ----------------------------------------------------------------------------------------------
# data, reference
# ----------------------------------------------------------------------------------------------
#: Operators that move integer values without changing them (followed to find their range).
_MOVES_VALUES = (OpKind.RESHAPE, OpKind.TRANSPOSE, OpKind.CONCAT, OpKind.SPLIT, OpKind.OPAQUE)


def _int_high(graph: Graph, tensor: str) -> int:
    """Exclusive upper bound of synthetic integer data for ``tensor`` (vocabulary / classes).

    The ids an EMBEDDING looks up or the labels of a LOSS, followed through operators that only
    move values (reshape, slice, pad...: a causal LM shifts its labels before the loss).
    """
    todo, seen = [tensor], set()
    while todo:
        t = todo.pop()
        seen.add(t)
        for op in graph.operators:
            for i, use in enumerate(op.inputs):
                if use.tensor != t:
                    continue
                if op.kind is OpKind.EMBEDDING:
                    return graph.tensors[op.params[-1].tensor].shape[0]
                if op.kind is OpKind.LOSS and i == 1:
                    return graph.tensors[op.inputs[0].tensor].shape[-1]
                if op.kind in _MOVES_VALUES:
                    todo.extend(u.tensor for u in op.outputs if u.tensor not in seen
                                and graph.tensors[u.tensor].dtype.startswith(("int", "uint")))
    return 2


def synthetic_batch(graph: Graph, seed: int, step: int = 0) -> dict:
    """The full synthetic batch of ``step``: normal floats, integers in the consumers' range.

    The same on every rank and every rank count (one seeded generator over full tensors).
    """
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))
    out = {}
    for op in graph.operators:
        if op.kind is not OpKind.INPUT:
            continue
        for use in op.outputs:
            spec = graph.tensors[use.tensor]
            dt = torch_dtype(spec.dtype)
            if dt.is_floating_point:
                out[spec.name] = torch.randn(spec.shape, generator=gen, dtype=torch.float32).to(dt)
            elif dt == torch.bool:
                out[spec.name] = torch.randint(0, 2, spec.shape, generator=gen).bool()
            else:
                out[spec.name] = torch.randint(0, _int_high(graph, spec.name), spec.shape, generator=gen, dtype=dt)
    return out


def local_ranks(size: int) -> int:
    """Ranks on this machine, as the MPI launcher says (MPICH, Open MPI); ``size`` when it does not."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return int(size)


def check_host_memory(graph: Graph, ranks_here: int, available: float | None = None) -> None:
    """Refuse, with a clear error, a model whose full parameters do not fit in host memory on every rank.

    Every rank draws the whole model's initial parameters (the same seeded values as the
    single-process reference) before keeping its shards, so a machine holds ``ranks_here``
    full copies for a moment. A model imported on the meta device (e.g. an 8B-parameter
    model) plans fine but is larger than that: running it needs real, sharded weights.

    Parameters
    ----------
    graph : Graph
    ranks_here : int
        Ranks on this machine.
    available : float, optional
        Bytes of available host memory (default: what the OS reports).

    Examples
    --------
    >>> from tensoropt_py.graph.zoo import mlp
    >>> check_host_memory(mlp(), 4, available=1e9)
    >>> check_host_memory(mlp(), 4, available=1e3)
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.TensorOptError: mlp: each of the 4 ranks on this machine ...
    """
    need = sum(t.numel * DTYPE_BYTES[t.dtype] for t in graph.tensors.values()
               if t.role in (TensorRole.PARAMETER, TensorRole.CONSTANT))
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # not reported on this OS: nothing to check against
            return
    if need * ranks_here > available:
        raise TensorOptError(
            f"{graph.name}: each of the {ranks_here} ranks on this machine would draw the full model's "
            f"{need / 1e9:.3g} GB of initial parameters before sharding them ({need * ranks_here / 1e9:.3g} GB "
            f"in all, {available / 1e9:.3g} GB available). The executor runs models whose full parameters fit "
            "on every rank; larger ones (e.g. imported on the meta device) can be planned, not run here")


def make_optimizer(name: str, params, lr: float):
    """The torch optimizer ``name`` (one of :data:`OPTIMIZERS`) over ``params``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise InvalidInputError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


def _loss_name(graph: Graph) -> str:
    outs = [t for t in graph.outputs if graph.tensors[t].shape == ()]
    if not outs:
        raise InvalidInputError(f"graph {graph.name!r} has no scalar output (loss) to train on; outputs: {graph.outputs}")
    return outs[0]


def reference_train(graph: Graph, steps: int, seed: int = 0, *, optimizer: str = "adam", lr: float = 1e-3):
    """Single-process torch training: ``(losses, final parameters)`` (the executor's oracle).

    Same initial parameters (:func:`init_params` with ``seed``), same data
    (:func:`synthetic_batch`), :func:`~tensoropt_py.graph.torch_ops.run_graph`, autograd and
    the same torch optimizer.
    """
    params = init_params(graph, seed=seed)
    trained = [params[t.name] for t in graph.parameters]
    opt = make_optimizer(optimizer, trained, lr)
    loss_name = _loss_name(graph)
    losses = []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = run_graph(graph, synthetic_batch(graph, seed, s), params)[loss_name]
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().clone() for k, v in params.items()}


# ----------------------------------------------------------------------------------------------
# plan -> configs and edges
# ----------------------------------------------------------------------------------------------
@dataclass
class _Edge:
    producer: str
    consumer: str
    tensor: str
    use_index: int
    fwd: tuple
    bwd: tuple
    reuse: str
    rederive: tuple = ()  # steps re-deriving the dropped copy ("producer_copy" / "consumer_copy")

    @property
    def tag(self) -> str:
        return f"{self.producer}->{self.consumer}:{self.tensor}"


class _Saved:
    """A tensor autograd saved (the pack hook's handle): kept, or released and re-derived on unpack."""

    __slots__ = ("tensor", "source", "geometry", "__weakref__")

    def __init__(self, tensor):
        self.tensor, self.source, self.geometry = tensor, None, None

    def release(self, source):
        """Drop the tensor; ``source.take()`` rebuilds its storage's base tensor in backward."""
        t = self.tensor
        self.geometry = (tuple(t.size()), tuple(t.stride()), t.storage_offset())
        self.tensor, self.source = None, source

    def get(self):
        if self.tensor is not None:
            return self.tensor
        if self.geometry is None:  # recomputed (training_exec.py): the source gives the tensor itself
            return self.source()
        base = self.source.take()
        size, stride, offset = self.geometry
        if tuple(base.size()) == size and tuple(base.stride()) == stride and offset == 0:
            return base
        return base.as_strided(size, stride, offset)


class _Rederivation:
    """One edge's re-derivation in an iteration: run once, shared by every saved view of the copy."""

    __slots__ = ("make", "left", "value")

    def __init__(self, make, uses: int):
        self.make, self.left, self.value = make, int(uses), None

    def take(self):
        if self.value is None:
            self.value = self.make()
        value = self.value
        self.left -= 1
        if self.left <= 0:  # every saved view got it: let it go with the last reader
            self.value = None
        return value


def _chain(steps, start: Layout, end: Layout, what: str):
    cur = start
    for s in steps:
        if s.before != cur:
            raise InvalidInputError(f"{what}: step {s.kind} starts at {s.before}, the tensor is in {cur}")
        cur = s.after
    if cur != end:
        raise InvalidInputError(f"{what}: the collectives end in {cur}, expected {end}")


class _PathModel:
    """A bandwidth-only communication model for paths the plan does not give (tied parameters)."""

    def collective_time(self, kind, nbytes, groups):
        n = len(groups[0]) if groups else 1
        return 1e-6 + nbytes * (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / max(n, 1) * 1e-9


# ----------------------------------------------------------------------------------------------
# the executor
# ----------------------------------------------------------------------------------------------
class Executor:
    """One rank's part of a plan: shards, local operators, paths, optimizer (see the module docstring)."""

    def __init__(self, plan, graph: Graph, backend: Backend, *, seed: int = 0, optimizer: str | None = None,
                 lr: float = 1e-3):
        self.plan, self.graph, self.be = plan, graph, backend
        self.seed = int(seed)
        self.optimizer_name = optimizer or plan.optimizer
        if self.optimizer_name not in OPTIMIZERS:
            raise InvalidInputError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer_name!r}"
                                    + ("" if optimizer else " (the plan's optimizer)"))
        self.lr = float(lr)
        self.n = int(plan.devices)
        self.rank = backend.rank
        self.device = backend.device
        self.loss_name = _loss_name(graph)
        self._holders, self._sources, self._copies = [], [], {}  # one iteration's saved tensors
        self.precision = getattr(plan, "precision", "32-true")
        self._seq, self._reruns = [], {}  # everything packed in order; recomputations (training_exec.py)
        self._autocast = functools.partial(autocast, self.precision, self.device)
        autocast(self.precision, self.device)  # an unknown precision fails at setup
        self._half = torch.bfloat16 if self.precision == "bf16-mixed" else None
        if self._half is not None:
            from ..cost.training import half_tensors

            self._half_names = half_tensors(graph)
        self._build()

    # -- setup -----------------------------------------------------------------------------------
    def _build(self):
        g, plan, n, rank = self.graph, self.plan, self.n, self.rank
        names = [o.name for o in plan.operators]
        if names != [op.name for op in g.operators]:
            raise InvalidInputError(f"the plan's operators {names[:5]}... are not the graph's "
                                    f"{[op.name for op in g.operators][:5]}...")
        self.configs = {op.name: config_from_plan(op, op_plan) for op, op_plan in zip(g.operators, plan.operators)}
        for op in g.operators:
            if self.configs[op.name].mesh.num_devices != n:
                raise InvalidInputError(f"operator {op.name!r}: mesh {self.configs[op.name].mesh} is not over {n} devices")
        # local operators: every support check happens here, before anything runs
        self.local_ops: dict[str, LocalOp] = {}
        for op in g.operators:
            if op.kind is not OpKind.INPUT:
                self.local_ops[op.name] = prepare(op, self.configs[op.name], g, rank)
        # edges
        edges = [(op, ui, use) for op in g.operators for ui, use in enumerate(op.inputs)]
        if len(edges) != len(plan.edges):
            raise InvalidInputError(f"the plan has {len(plan.edges)} edges, the graph {len(edges)}")
        self.edges: dict = {}
        for (op, ui, use), ep in zip(edges, plan.edges):
            prod = g.operator(g.producer(use.tensor))
            if (ep.producer, ep.consumer, ep.tensor) != (prod.name, op.name, use.tensor):
                raise InvalidInputError(f"plan edge {ep.producer}->{ep.consumer} [{ep.tensor}] does not match the graph "
                                        f"edge {prod.name}->{op.name} [{use.tensor}]")
            A = self.out_layout(prod, use.tensor)
            B = self.configs[op.name].layout(op, ui)
            Bg = self.configs[op.name].layout(op, ui, gradient=True)
            what = f"edge {prod.name} -> {op.name} [{use.tensor}]"
            fwd = steps_from_collectives(ep.forward, n)
            bwd = steps_from_collectives(ep.backward, n)
            _chain(fwd, A, B, what + " forward")
            if bwd:
                _chain(bwd, Bg, A.without_partial(), what + " backward")
            red = steps_from_collectives(ep.rederive, n)
            if ep.reuse == "producer_copy":
                red = red or fwd  # the forward path again
                _chain(red, A, B, what + " re-derivation")
            elif ep.reuse == "consumer_copy":
                if A.is_partial:
                    raise InvalidInputError(f"{what}: reuse 'consumer_copy' needs a producer layout without partial "
                                            f"sums, got {A}")
                _chain(red, B, A, what + " re-derivation")
            elif red:
                raise InvalidInputError(f"{what}: re-derivation collectives given for reuse {ep.reuse!r}; only "
                                        f"'producer_copy' and 'consumer_copy' re-derive a copy")
            self.edges[(op.name, ui)] = _Edge(prod.name, op.name, use.tensor, ui, fwd, bwd, ep.reuse, red)
        # the forward's working set: a tensor leaves it after its last reader
        last = {}
        for i, op in enumerate(g.operators):
            for u in op.outputs:
                last.setdefault(u.tensor, i)
            for u in op.inputs:
                last[u.tensor] = i
        self._dead_after = [[] for _ in g.operators]
        for t, i in last.items():
            if t != self.loss_name:
                self._dead_after[i].append(t)
        self._consumer_copies = {}  # (producer, tensor) -> edges keeping only the consumer's copy
        for e in self.edges.values():
            if e.reuse == "consumer_copy":
                self._consumer_copies.setdefault((e.producer, e.tensor), []).append(e)
        self._build_params()

    def out_layout(self, op, tensor) -> Layout:
        cfg = self.configs[op.name]
        base = len(op.inputs) + len(op.params)
        for k, u in enumerate(op.outputs):
            if u.tensor == tensor:
                return cfg.layout(op, base + k)
        raise InvalidInputError(f"operator {op.name!r} does not produce {tensor!r}")

    def _build_params(self):
        g, rank = self.graph, self.rank
        check_host_memory(g, local_ranks(self.be.size))
        full = init_params(g, seed=self.seed)
        users: dict = {}
        for op in g.operators:
            for pi, use in enumerate(op.params):
                users.setdefault(use.tensor, []).append((op, len(op.inputs) + pi))
        self.master: dict = {}  # trained parameter -> (local leaf tensor, layout)
        self.views: dict = {}  # (op, tensor) -> constant block | ("shared", fwd, bwd)
        self.grad_groups: list = []  # (op name, groups, [param names]) of fused gradient all-reduces
        self.shared: set = set()
        from ..cost.reschedule import Rescheduler

        rs = Rescheduler(_PathModel(), threads=1)  # paths one at a time: the ranks share the host's cores
        for name, us in users.items():
            spec = g.tensors[name]
            if spec.role is TensorRole.CONSTANT:
                for op, ui in us:
                    lay = self.configs[op.name].layout(op, ui)
                    self.views[(op.name, name)] = shard(full[name], lay, rank).to(self.device)
                continue
            op0, ui0 = us[0]
            M = self.configs[op0.name].layout(op0, ui0)
            t = shard(full[name].detach(), M, rank).to(self.device).requires_grad_(True)
            self.master[name] = (t, M)
            if len({op.name for op, _ in us}) > 1:
                self.shared.add(name)
                for op, ui in us:
                    cfg = self.configs[op.name]
                    B, Bg = cfg.layout(op, ui), cfg.layout(op, ui, gradient=True)
                    fwd = steps_from_path(rs.path(spec.shape, spec.dtype, M, B))
                    bwd = steps_from_path(rs.path(spec.shape, spec.dtype, Bg, M))
                    self.views[(op.name, name)] = ("shared", fwd, bwd)
        # fused gradient all-reduces of single-reader parameters (per operator and axes)
        for op in g.operators:
            cfg = self.configs[op.name]
            fused: dict = {}
            for pi, use in enumerate(op.params):
                name = use.tensor
                if name not in self.master or name in self.shared:
                    continue
                G = cfg.layout(op, len(op.inputs) + pi, gradient=True)
                axes = tuple(a for a, p in enumerate(G.place) if p == PARTIAL)
                if axes and name not in fused.get(axes, []):
                    fused.setdefault(axes, []).append(name)
            for axes, names in fused.items():
                self.grad_groups.append((op.name, fine_groups(cfg.mesh.fine_sizes, axes), names))
        # bf16-mixed (training_exec.py): bf16 working parameters, fp32 masters for the optimizer
        self._fp32: dict = {}  # name -> fp32 master of a trained parameter that is not sharded
        if self._half is not None:
            for name, (t, lay) in list(self.master.items()):
                self._fp32[name] = t.detach().clone()
                self.master[name] = (t.detach().to(self._half).requires_grad_(True), lay)
        # sharded optimizer state (ZeRO-1, training_exec.py): the group's parameters become views of a flat buffer
        self.sharded: dict = {}  # index in grad_groups -> ShardedGroup
        for gi, (opname, groups, names) in enumerate(self.grad_groups):
            if self.configs[opname].shard_state:
                sg = ShardedGroup([self.master[nm][0] for nm in names], groups, rank,
                                  master_dtype=torch.float32 if self._half is not None else None)
                for nm, view in zip(names, sg.params):
                    self.master[nm] = (view, self.master[nm][1])
                    self._fp32.pop(nm, None)
                self.sharded[gi] = sg
        self.params = [self.master[t.name][0] for t in g.parameters if t.name in self.master]
        in_shards = {id(p) for sg in self.sharded.values() for p in sg.params}
        stepped = ([self._fp32[t.name] for t in g.parameters if t.name in self._fp32] if self._half is not None
                   else [p for p in self.params if id(p) not in in_shards])
        self.opt = make_optimizer(self.optimizer_name, stepped + [sg.master for sg in self.sharded.values()], self.lr)
        self._param_ptrs = {p.untyped_storage().data_ptr() for p in self.params}
        self._param_ptrs |= {v.untyped_storage().data_ptr() for v in self.views.values() if isinstance(v, torch.Tensor)}

    # -- one iteration ---------------------------------------------------------------------------
    def _param(self, op, name):
        v = self.views.get((op.name, name))
        if isinstance(v, torch.Tensor):
            return v
        t, _ = self.master[name]
        if v is None:
            return t
        _, fwd, bwd = v
        return reschedule(t, fwd, bwd, self.graph.tensors[name].shape, self.be, tag=f"param:{name}")

    def forward(self, step: int):
        g, be, rank = self.graph, self.be, self.rank
        data = synthetic_batch(g, self.seed, step)
        env: dict = {}
        copies = self._copies  # consumer copies the "consumer_copy" edges re-derive from, by edge
        for i, op in enumerate(g.operators):
            if op.kind is OpKind.INPUT:
                for u in op.outputs:  # the full batch goes once sharded: a loader gives each rank its block
                    env[u.tensor] = self._store(u.tensor, shard(data.pop(u.tensor), self.out_layout(op, u.tensor),
                                                                rank).to(self.device))
            else:
                ins = {}
                for ui, use in enumerate(op.inputs):
                    if use.tensor in ins:
                        continue
                    e = self.edges[(op.name, ui)]
                    with be.phase("fwd"):
                        ins[use.tensor] = reschedule(env[use.tensor], e.fwd, e.bwd, g.tensors[use.tensor].shape, be,
                                                     tag=f"edge:{e.tag}")
                    if e.reuse == "consumer_copy":
                        copies[e.tag] = ins[use.tensor].detach()
                prm = {}
                for use in op.params:
                    if use.tensor not in prm:
                        with be.phase("fwd"):
                            prm[use.tensor] = self._param(op, use.tensor)
                first, first_seq = len(self._holders), len(self._seq)
                out = {k: self._store(k, v) for k, v in self.local_ops[op.name].run(ins, prm).items()}
                read = ()
                if self.configs[op.name].recompute or self._recomputed_inputs(op):
                    read = self._release_recomputed(op, ins, prm, out, self._seq[first_seq:], self._holders[first:])
                self._drop_copies(op, ins, env, out, copies, self._holders[first:])
                for h in read:  # the re-run reads these saved inputs once more
                    if isinstance(h.source, _Rederivation):
                        h.source.left += 1
                env.update(out)
            for t in self._dead_after[i]:
                env.pop(t, None)
        return env[self.loss_name]

    def _drop_copies(self, op, ins, env, out, copies, holders):
        """Release the saved tensors of copies the plan does not keep (module docstring, "Tensor reuse")."""
        for ui, use in enumerate(op.inputs):
            e = self.edges[(op.name, ui)]
            if e.reuse == "producer_copy" and use.tensor in ins and e.rederive:
                src = env[use.tensor].detach()
                if _release(holders, ins[use.tensor], functools.partial(self._rederive, e, src)):
                    self._sources.append(src)
        for u in op.outputs:
            for e in self._consumer_copies.get((op.name, u.tensor), ()):
                if _release(holders, out[u.tensor], functools.partial(self._rederive_from, e, copies)):
                    self._sources.append(e.tag)

    def _store(self, name, t):
        """The tensor as the run keeps it: bf16 for the activations bf16-mixed stores in bf16."""
        if self._half is not None and name in self._half_names and t.is_floating_point() and t.dtype != self._half:
            return t.to(self._half)
        return t

    def _recomputed_inputs(self, op):
        return any(u.tensor in self._reruns for u in op.inputs)

    def _release_recomputed(self, op, ins, prm, out, packed, holders):
        """Recomputation (training_exec.py): release what a recomputed operator saved beyond its inputs,
        and the copies of recomputed producers' outputs this operator saved. Returns the holders
        the operator's re-run reads its inputs from."""
        read = []
        if self.configs[op.name].recompute:
            sources = input_sources(op, ins, packed)
            keep = {ins[u.tensor].untyped_storage().data_ptr() for u in op.inputs}
            for name, (kind, t) in sources.items():
                if kind == "ref":
                    self._sources.append(t)  # kept for the re-run (the cost model charges it)
                else:
                    read.append(t[0])
            rerun = Rerun(self.local_ops[op.name], sources, {n: bool(ins[n].requires_grad) for n in sources}, prm,
                          len(packed), self._autocast, op.name, store=self._store)
            for j, h in enumerate(packed):
                if isinstance(h, _Saved) and h.tensor is not None and h.tensor.untyped_storage().data_ptr() not in keep:
                    h.tensor, h.source, h.geometry = None, functools.partial(rerun.saved, j), None
                    rerun.expect("saved", j)
            for u in op.outputs:
                self._reruns[u.tensor] = rerun
        for ui, use in enumerate(op.inputs):
            rerun = self._reruns.get(use.tensor)
            if rerun is None:
                continue
            e = self.edges[(op.name, ui)]
            if _release(holders, ins[use.tensor], functools.partial(self._rederive_recomputed, e, rerun)):
                rerun.expect("output", use.tensor)  # the re-derivation runs once, whatever the views
        return read

    def _rederive_recomputed(self, e, rerun):
        be = self.be
        src = rerun.output(e.tensor)
        with torch.no_grad(), be.phase("rederive"), be.tag(f"reuse:{e.tag}"):
            return run_steps(src, e.fwd, self.graph.tensors[e.tensor].shape, be.rank, be)

    def _rederive(self, e, src):
        be = self.be
        with torch.no_grad(), be.phase("rederive"), be.tag(f"reuse:{e.tag}"):
            return run_steps(src, e.rederive, self.graph.tensors[e.tensor].shape, be.rank, be)

    def _rederive_from(self, e, copies):
        # runs once per iteration: the consumer's copy is no longer needed here after it
        return self._rederive(e, copies.pop(e.tag))

    def _sync_grads(self):
        be = self.be
        with be.phase("grad"):
            for gi, (opname, groups, names) in enumerate(self.grad_groups):
                if gi in self.sharded:  # reduce-scatter into this rank's chunk (training_exec.py)
                    with be.tag(f"grad:{opname}"):
                        self.sharded[gi].reduce_scatter(be)
                    continue
                ts = [self.master[nm][0] for nm in names]
                grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in ts]
                flat = torch.cat([gr.reshape(-1) for gr in grads])
                with be.tag(f"grad:{opname}"):
                    red = be.all_reduce(flat, groups)
                off = 0
                for t, gr in zip(ts, grads):
                    k = gr.numel()
                    t.grad = red[off:off + k].view_as(t).clone()
                    off += k

    def _loss_value(self, loss_local) -> float:
        op = self.graph.operator(self.graph.producer(self.loss_name))
        lay = self.out_layout(op, self.loss_name)
        w = 1.0 if place_coordinate(lay, self.rank, REPLICATE)[0] == 0 else 0.0
        with self.be.phase("report"):
            tot = self.be.all_reduce((loss_local.detach().float() * w).reshape(1), (tuple(range(self.n)),))
        return float(tot[0])

    def step(self, step: int) -> tuple[float, float, int, list]:
        """One training iteration: ``(loss, seconds, saved bytes, records)``."""
        be = self.be
        be.barrier()
        first = len(be.records)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None
        self._holders, self._sources, self._copies = [], [], {}
        self._seq, self._reruns = [], {}
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack), self._autocast():
            loss = self.forward(step)
        # what backward will read: kept saved tensors and the copies re-derivations start from
        sources = [self._copies[x] if isinstance(x, str) else x for x in self._sources]
        saved = _saved_bytes([h.tensor for h in self._holders if h.tensor is not None] + sources, self._param_ptrs)
        # autograd owns the holders and re-runs now: dropping our references lets backward free
        # each saved tensor after its node runs (as plain torch does) instead of at the end of
        # backward. Weak references let us clear what is still alive after backward, so a cycle
        # among holders, re-runs and re-derivations goes then, not at a garbage collection.
        entangled = [weakref.ref(h) for h in self._holders] if self._reruns else []
        reruns = [weakref.ref(r) for r in self._reruns.values()]
        self._holders, self._sources, self._seq, self._reruns = [], [], [], {}
        sources = None
        with be.phase("bwd"):
            loss.backward()
        loss = loss.detach()
        for ref in entangled:
            h = ref()
            if h is not None:
                h.tensor = h.source = None
        for ref in reruns:
            r = ref()
            if r is not None:
                r.result = r.sources = None
        self._holders, self._sources, self._copies = [], [], {}
        self._seq, self._reruns = [], {}
        self._sync_grads()
        for t in self.params:
            if t.grad is None:
                t.grad = torch.zeros_like(t)
        if self._half is not None:  # bf16 gradients -> fp32 masters
            for name, m in self._fp32.items():
                m.grad = self.master[name][0].grad.to(m.dtype)
            for sg in self.sharded.values():
                sg.master.grad = sg.shard.grad.to(sg.master.dtype)
        self.opt.step()
        if self._half is not None:  # fp32 masters -> bf16 working copies
            with torch.no_grad():
                for name, m in self._fp32.items():
                    self.master[name][0].copy_(m)
                for sg in self.sharded.values():
                    sg.shard.copy_(sg.master)
        with be.phase("grad"):
            for gi, sg in self.sharded.items():
                with be.tag(f"grad:{self.grad_groups[gi][0]}"):
                    sg.all_gather(be)
        be.synchronize()
        dt = time.perf_counter() - t0
        recs = be.records[first:]
        return self._loss_value(loss), dt, saved, recs

    def _pack(self, t):
        if t.untyped_storage().data_ptr() in self._param_ptrs:
            self._seq.append(t)
            return t  # parameters and constants are counted as state, never released
        h = _Saved(t)
        self._holders.append(h)
        self._seq.append(h)
        return h

    def state_bytes(self) -> int:
        """Parameters + gradients + optimizer state + constants held by this rank."""
        total = sum(p.numel() * p.element_size() * 2 for p in self.params)
        masters = list(self._fp32.values()) + [sg.master for sg in self.sharded.values() if sg.master is not sg.shard]
        total += sum(m.numel() * m.element_size() for m in masters)  # fp32 masters of bf16-mixed
        for st in self.opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.dim() > 0:
                    total += v.numel() * v.element_size()
        total += sum(v.numel() * v.element_size() for v in self.views.values() if isinstance(v, torch.Tensor))
        return total

    def full_params(self) -> dict:
        """Every trained parameter gathered to a full tensor (on every rank)."""
        out = {}
        for t in self.graph.parameters:
            if t.name in self.master:
                loc, lay = self.master[t.name]
                out[t.name] = gather_full(loc.detach(), lay, t.shape, self.be).cpu()
        return out


def tracked_peak(ex: Executor, step: int) -> float | None:
    """Peak live bytes of one more iteration on CPU, measured with torch's ``MemTracker``.

    ``torch.distributed._tools.mem_tracker.MemTracker`` follows every storage created in its
    context (and the parameters, optimizer state and constants registered with it) and keeps
    the high-water mark: what ``torch.cuda.max_memory_allocated`` reports on a GPU. The
    iteration runs after the timed ones (so the tracker's dispatch overhead never enters a
    time) and the parameters and optimizer state are restored after it, so losses and final
    parameters are those of ``steps`` iterations. Every rank must call it. None when the
    tracker is not available in this torch.
    """
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError:  # pragma: no cover - torch builds without distributed
        return None
    import copy

    weights = [p.detach().clone() for p in ex.params]
    state = copy.deepcopy(ex.opt.state_dict())
    mt = MemTracker()
    # the optimizer's own parameters (bf16-mixed: fp32 masters) are not in ex.params
    stepped = [p for grp in ex.opt.param_groups for p in grp["params"]]
    mt.track_external(*ex.params, *stepped, ex.opt, *[v for v in ex.views.values() if isinstance(v, torch.Tensor)])
    with mt:
        ex.step(step)
    peak = mt.get_tracker_snapshot("peak")
    with torch.no_grad():
        for p, w in zip(ex.params, weights):
            p.copy_(w)
    ex.opt.load_state_dict(state)
    for p in ex.params:
        p.grad = None
    return float(sum(v.get("Total", 0) for v in peak.values()))


def _unpack(h):
    return h.get() if isinstance(h, _Saved) else h


def _release(holders, base, make) -> int:
    """Release the holders whose tensor lives in ``base``'s storage; ``make()`` rebuilds ``base``.

    Only a dense ``base`` owning its whole storage can be rebuilt exactly (the saved views are
    re-created with ``as_strided``); otherwise nothing is released. Returns the count released.
    """
    st = base.untyped_storage()
    if (not base.is_contiguous() or base.storage_offset() != 0
            or st.nbytes() != base.numel() * base.element_size()):
        return 0
    ptr = st.data_ptr()
    mine = [h for h in holders if h.tensor is not None and h.tensor.dtype == base.dtype
            and h.tensor.untyped_storage().data_ptr() == ptr]
    if mine:
        source = _Rederivation(make, len(mine))
        for h in mine:
            h.release(source)
    return len(mine)


def _saved_bytes(tensors, exclude) -> int:
    """Bytes of the distinct storages ``tensors`` live in (storages in ``exclude`` left out)."""
    sizes: dict = {}
    for t in tensors:
        st = t.untyped_storage()
        if st.data_ptr() not in exclude:
            sizes[st.data_ptr()] = st.nbytes()
    return sum(sizes.values())


# ----------------------------------------------------------------------------------------------
# entry points
# ----------------------------------------------------------------------------------------------
def _validate(plan, graph, size: int, calibration=None):

    if not isinstance(graph, Graph):
        raise InvalidInputError(f"graph must be a tensoropt_py Graph, got {type(graph).__name__}")
    if int(plan.devices) != int(size):
        raise InvalidInputError(f"the plan is for {plan.devices} devices but the job has {size} ranks "
                                f"(run it with mpiexec -n {plan.devices})")
    fp = graph.fingerprint()
    if plan.model_fingerprint and plan.model_fingerprint != fp:
        raise InvalidInputError(f"the plan was made for another model: its fingerprint {plan.model_fingerprint} "
                                f"(model {plan.model!r}) is not {fp} (model {graph.name!r})")
    if calibration is not None:
        from ..cluster import load_calibration

        load_calibration(calibration)  # CalibrationError naming the path when missing or corrupt


def run_plan(plan, graph: Graph, steps: int = 3, seed: int = 0, *, backend="auto", optimizer: str | None = None,
             lr: float = 1e-3, warmup: int = 1, calibration=None, return_params: bool = False, comm=None) -> Report:
    """Train ``graph`` for ``steps`` iterations with ``plan`` on the MPI job's ranks; a :class:`Report`.

    Parameters
    ----------
    plan : Plan, str or path
        A :class:`~tensoropt_py.plan.Plan` or its JSON.
    graph : Graph
        The model the plan was made for (checked by fingerprint).
    backend : {"auto", "mpi", "nccl"} or Backend
    optimizer : {"sgd", "momentum", "adam"}, optional
        Default: the plan's optimizer.
    warmup : int
        Steps left out of the time medians.
    calibration : path, optional
        A calibration file to check (``CalibrationError`` when missing or unreadable).
    return_params : bool
        Gather the final parameters to full tensors into ``Report.params``.

    Every rank must call it (collectively); every rank gets the same report.
    """
    from ..plan import Plan

    if not isinstance(plan, Plan):
        plan = Plan.from_json(plan)
    parse_count(steps, "steps")
    parse_count(seed, "seed", least=0)
    if not lr > 0:
        raise InvalidInputError(f"lr must be positive, got {lr!r}")
    if isinstance(backend, Backend):
        be = backend
        comm = getattr(be, "comm", None)
    else:
        comm = world() if comm is None else comm
        be = None
    size = be.size if be is not None else comm.Get_size()
    _validate(plan, graph, size, calibration)
    if be is None:
        be = make_backend(backend, comm)
    err = None
    try:
        ex = Executor(plan, graph, be, seed=seed, optimizer=optimizer, lr=lr)
    except (TensorOptError, ValueError, NotImplementedError) as exc:
        err = exc
    errors = comm.allgather(None if err is None else f"{type(err).__name__}: {err}") if comm is not None else [err]
    if err is not None:
        raise err
    bad = [(r, e) for r, e in enumerate(errors) if e]
    if bad:
        raise TensorOptError(f"rank {bad[0][0]} failed during setup: {bad[0][1]}")

    losses, times, saved_peak, comm_times, last = [], [], 0, [], []
    try:
        for s in range(steps):
            loss, dt, saved, recs = ex.step(s)
            losses.append(loss)
            times.append(dt)
            saved_peak = max(saved_peak, saved)
            comm_times.append(sum(r.seconds for r in recs if r.phase in ("fwd", "bwd", "rederive", "grad")))
            last = recs
    except BaseException as exc:
        exc._tensoropt_during_run = True  # main() aborts the whole job
        raise
    notes = []
    if be.device.type == "cuda":
        mem = float(torch.cuda.max_memory_allocated(be.device))
    else:
        # measure what the plan predicts: its modelled peak (MemTracker), or for a plan whose
        # memory is Eq. 3's sum (no peak recorded) the same sum of state and saved tensors
        tracked = tracked_peak(ex, steps) if getattr(plan, "peak_phase", "") else None
        if tracked is None:
            mem = float(ex.state_bytes() + saved_peak)
            notes.append("CPU memory: parameters, gradients, optimizer state and saved tensors")
        else:
            mem = tracked
    w = min(max(int(warmup), 0), steps - 1)
    t_med = statistics.median(times[w:])
    c_med = statistics.median(comm_times[w:])
    mine = {"time": t_med, "comm": c_med, "memory": mem}
    allr = comm.allgather(mine) if comm is not None else [mine]
    counts = collective_counts(last)
    if ex.shared:
        notes.append(f"tied parameters {sorted(ex.shared)} are rescheduled to their readers (extra collectives)")
    report = Report(
        losses=losses, step_times=times,
        time_predicted=float(plan.time), time_measured=max(r["time"] for r in allr),
        memory_predicted=float(plan.memory), memory_measured=max(r["memory"] for r in allr),
        memory_per_rank=[r["memory"] for r in allr],
        comm_predicted=float(plan.communication_time), comm_measured=max(r["comm"] for r in allr),
        collectives=[r.to_dict() for r in last if r.phase != "report"],
        collective_counts={f"{p}:{k}": v for (p, k), v in sorted(counts.items())},
        backend=be.name, devices=int(plan.devices), steps=steps, warmup=w, optimizer=ex.optimizer_name, notes=notes,
    )
    if return_params:
        report.params = ex.full_params()
    return report


def _parser():
    p = argparse.ArgumentParser(prog="tensoropt-py run",
                                description="Execute a plan over MPI ranks (mpiexec -n N python -m mpi4py -m "
                                            "tensoropt_py run PLAN.json --model NAME ...).")
    p.add_argument("plan", help="PLAN.json")
    p.add_argument("--model", required=True, help="zoo name (name:key=value,...) or package.module:factory")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=1, help="steps left out of the time medians (default 1)")
    p.add_argument("--report", default=None, help="write the report JSON here (rank 0)")
    p.add_argument("--backend", choices=("auto", "mpi", "nccl"), default="auto")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None, help="default: the plan's optimizer")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--calibration", default=None, help="calibration file the plan was made with (checked)")
    return p


def main(argv=None) -> int:
    """``tensoropt-py run`` (see the module docstring). Rank 0 prints and writes the report."""
    from ..inputs import load_model
    from ..plan import Plan

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    comm = world()
    plan = Plan.from_json(args.plan)
    graph = load_model(args.model)
    _validate(plan, graph, comm.Get_size(), args.calibration)
    try:
        report = run_plan(plan, graph, args.steps, args.seed, backend=args.backend, optimizer=args.optimizer,
                          lr=args.lr, warmup=args.warmup, calibration=args.calibration, comm=comm)
    except BaseException as exc:  # noqa: BLE001
        if getattr(exc, "_tensoropt_during_run", False):
            _abort(comm, exc)  # one rank failed mid-run: the others would wait forever
        raise  # a setup error every rank agreed on: a clean one-line error (exit 2)
    if comm.Get_rank() == 0:
        print(f"plan: {plan.summary()}")
        print(report.summary())
        if args.report:
            report.to_json(args.report)
            print(f"report written to {args.report}")
    sys.stdout.flush()
    return 0


def _abort(comm, exc):
    print(f"tensoropt-py run: rank {comm.Get_rank()}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # MPI_Abort tears the job down at once; on a loaded machine the process manager could
    # drop this rank's last line before forwarding it. A moment's pause lets it through.
    time.sleep(0.5)
    try:
        comm.Abort(1)
    finally:  # MPI_Abort may return before the process manager kills us
        os._exit(1)
