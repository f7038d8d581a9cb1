"""Plans: one parallelization strategy, readable and serialisable.

A :class:`Plan` says, for every operator, its device mesh and the tensor map of
each tensor it touches (TensorOpt §2.1 notation: mesh ``[2, 2]``, map ``[0, -1]``),
for every edge the collectives that reschedule the tensor forward and backward and
the tensor-reuse choice, and the predicted costs. It round-trips through JSON; the
executor runs a loaded plan.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

import numpy as np

from .errors import InvalidInputError
from .space.configs import OpConfig
from .space.mesh import Mesh

__all__ = ["Collective", "OperatorPlan", "EdgePlan", "Plan", "ReuseChoice", "plan_from_choices", "config_from_plan"]

#: ``EdgePlan.reuse``: the tensor-reuse option chosen on an edge (TensorOpt §4.2), named as in
#: :data:`tensoropt_py.cost.builder.REUSE_OPTIONS` (``"single"`` where there is nothing to choose).
ReuseChoice = Literal["single", "both", "producer_copy", "consumer_copy"]

PLAN_FORMAT = "tensoropt_py.plan/1"


def read_json(text_or_path, what: str):
    """The JSON document in ``text_or_path`` (JSON text, or the path of a file holding it).

    Parameters
    ----------
    text_or_path : str or Path
    what : str
        What the document is, for error messages (``"plan"``, ``"frontier"``).

    Examples
    --------
    >>> read_json('{"a": 1}', "plan")
    {'a': 1}
    """
    text = str(text_or_path)
    if not text.lstrip().startswith("{"):
        path = Path(text_or_path)
        if not path.exists():
            raise InvalidInputError(f"{what} file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from None


def _tuples(value):
    """Lists (from JSON) back into tuples, recursively."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective of a rescheduling path.

    ``nbytes`` is the full logical tensor size per group (see :mod:`tensoropt_py.cost.comm`);
    ``groups`` are the concurrent device groups; ``axes`` the fine mesh axes it runs along.
    """

    kind: str
    groups: tuple[tuple[int, ...], ...]
    nbytes: float
    time: float
    axes: tuple[int, ...] = ()
    src: str = ""
    dst: str = ""

    def __str__(self):
        size = len(self.groups[0]) if self.groups else 1
        return f"{self.kind}(x{len(self.groups)} groups of {size}, {self.nbytes / 1e6:.3g} MB, {self.time * 1e3:.3g} ms)"

    @classmethod
    def from_dict(cls, d):
        return cls(**{f.name: _tuples(d[f.name]) for f in fields(cls) if f.name in d})


@dataclass(frozen=True, slots=True)
class OperatorPlan:
    """The configuration of one operator and its predicted cost.

    ``recompute``: the operator's outputs and internal saved tensors are recomputed in
    backward instead of kept; ``shard_state``: its parameters' optimizer state is sharded over
    their gradient-reducing replicas (reduce-scatter + all-gather instead of all-reduce); see
    :mod:`tensoropt_py.cost.training`. Both default to False, so older plan JSON loads.
    """

    name: str
    kind: str
    mesh: tuple[int, ...]
    assignment: tuple[tuple[str, int], ...]  # (loop dimension, mesh axis) for every split loop dimension
    tensor_maps: tuple[tuple[str, tuple[int, ...]], ...]  # (tensor, map: mesh axis per tensor dim or -1)
    memory: float
    time: float
    compute_time: float
    communication_time: float
    config: str = ""
    recompute: bool = False
    shard_state: bool = False

    def __str__(self):
        return self.config or f"mesh{list(self.mesh)} " + " ".join(f"{d}->{a}" for d, a in self.assignment)

    @classmethod
    def from_dict(cls, d):
        return cls(**{f.name: _tuples(d[f.name]) for f in fields(cls) if f.name in d})


@dataclass(frozen=True, slots=True)
class EdgePlan:
    """How one tensor travels from its producer to a consumer."""

    producer: str
    consumer: str
    tensor: str
    src_layout: str
    dst_layout: str
    forward: tuple[Collective, ...]
    backward: tuple[Collective, ...]
    reuse: str
    memory: float
    time: float
    #: Collectives that re-derive the dropped copy in backward: ``"producer_copy"``, the
    #: consumer's copy from the producer's (the forward path again); ``"consumer_copy"``, the
    #: producer's copy from the consumer's. Empty for the other choices.
    rederive: tuple[Collective, ...] = ()

    def __str__(self):
        steps = " -> ".join(c.kind for c in self.forward) or "no-op"
        return f"{self.producer} -> {self.consumer} [{self.tensor}]: {steps} (reuse {self.reuse})"

    @classmethod
    def from_dict(cls, d):
        d = dict(d)
        d["forward"] = tuple(Collective.from_dict(c) for c in d.get("forward", ()))
        d["backward"] = tuple(Collective.from_dict(c) for c in d.get("backward", ()))
        d["rederive"] = tuple(Collective.from_dict(c) for c in d.get("rederive", ()))
        return cls(**{f.name: _tuples(d[f.name]) if f.name not in ("forward", "backward", "rederive") else d[f.name]
                      for f in fields(cls) if f.name in d})


@dataclass(frozen=True, slots=True)
class Plan:
    """One parallelization strategy of a model on a cluster.

    Attributes
    ----------
    model : str
        Model name; ``model_fingerprint`` identifies the exact graph (the executor
        refuses a plan made for another model).
    cluster : str
    devices : int
    memory : float
        Predicted peak memory per device (bytes).
    time : float
        Predicted per-iteration time (seconds), the additive estimate (TensorOpt Eq. 3).
    compute_time, communication_time : float
        The parts of ``time`` spent computing and communicating.
    choices : tuple of int
        The config index of every CostGraph node (matches ``Frontier.cost_graph``).
    edge_choices : tuple of int
        The option chosen on every CostGraph edge (tensor reuse).
    simulated_time : float or None
        The task-graph simulator's time, when the plan was refined by simulation.
    precision : {"32-true", "bf16-mixed"}
        The training precision the costs assume and the executor runs in.
    peak_operator, peak_phase : str
        Where the peak memory happens: the operator running then and the phase
        (``"forward"``, ``"backward"`` or ``"optimizer"``; see :mod:`tensoropt_py.cost.memory`).
        Empty in plans written before peaks were modelled.
    additive_memory : float or None
        TensorOpt Eq. 3's memory (the sum of the operators' and edges' memory, what the engine
        tracks); ``memory`` is the peak of the live memory over the iteration. None in older
        plans, whose ``memory`` is that sum.
    memory_timeline : tuple of float
        Live bytes per device at every event of the iteration
        (:meth:`MemoryModel.live <tensoropt_py.cost.memory.MemoryModel.live>`; events named by
        :func:`~tensoropt_py.cost.memory.memory_events`); empty in older plans.
    meshes : {"all", "hierarchical"}
        The mesh space the strategy was chosen from (:mod:`tensoropt_py.space.mesh`).

    Examples
    --------
    >>> p = Plan(model="m", cluster="c", devices=1, operators=(), edges=(), memory=1e9, time=0.5,
    ...          compute_time=0.4, communication_time=0.1, choices=(), edge_choices=())
    >>> Plan.from_json(p.to_json()) == p
    True
    """

    model: str
    cluster: str
    devices: int
    operators: tuple[OperatorPlan, ...]
    edges: tuple[EdgePlan, ...]
    memory: float
    time: float
    compute_time: float
    communication_time: float
    choices: tuple[int, ...]
    edge_choices: tuple[int, ...]
    model_fingerprint: str = ""
    optimizer: str = "adam"
    simulated_time: float | None = None
    method: str = "tensoropt"
    notes: tuple[str, ...] = field(default=())
    precision: str = "32-true"
    peak_operator: str = ""
    peak_phase: str = ""
    additive_memory: float | None = None
    memory_timeline: tuple[float, ...] = ()
    meshes: str = "all"

    def plot(self, simulation, *, measured_time: float | None = None, measured_memory: float | None = None,
             devices: int | None = 4, path=None, title: str | None = None):
        """Draw one simulated iteration and, under it, the live memory with its peak marked.

        Parameters
        ----------
        simulation : PlanSimulation
            :func:`tensoropt_py.soap.plan_simulator.simulate_plan` of this plan.
        measured_time, measured_memory : float, optional
            The executor's measured iteration time (seconds) and peak (bytes), drawn as references.
        devices : int or None
            Devices drawn (None: all).
        path : str or Path, optional
            Where to save the figure.
        title : str, optional

        Returns
        -------
        matplotlib.figure.Figure

        Examples
        --------
        >>> import tensoropt_py as to
        >>> from tensoropt_py.soap.plan_simulator import simulate_plan
        >>> plan = to.frontier("mlp", "cpu-1x4", devices=2).plan(0)
        >>> fig = plan.plot(simulate_plan(plan, to.models.mlp()))
        >>> fig.axes[1].get_ylabel().startswith("memory")
        True
        """
        from .plot import plot_timeline

        return plot_timeline(simulation, devices=devices, measured_time=measured_time, plan=self,
                             measured_memory=measured_memory, path=path, title=title)

    # --- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["format"] = PLAN_FORMAT
        return d

    def to_json(self, path: str | Path | None = None, *, indent: int | None = 1) -> str:
        """The plan as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent, allow_nan=True)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        fmt = d.get("format", PLAN_FORMAT)
        if fmt != PLAN_FORMAT:
            raise InvalidInputError(f"not a tensoropt_py plan: format {fmt!r}, expected {PLAN_FORMAT!r}")
        missing = [f.name for f in fields(cls) if f.name not in d and f.name not in
                   ("model_fingerprint", "optimizer", "simulated_time", "method", "notes", "precision",
                    "peak_operator", "peak_phase", "additive_memory", "memory_timeline", "meshes")]
        if missing:
            raise InvalidInputError(f"plan JSON lacks the fields {missing}")
        kwargs = {f.name: _tuples(d[f.name]) for f in fields(cls) if f.name in d}
        kwargs["operators"] = tuple(OperatorPlan.from_dict(o) for o in d["operators"])
        kwargs["edges"] = tuple(EdgePlan.from_dict(e) for e in d["edges"])
        n, timeline = len(kwargs["operators"]), kwargs.get("memory_timeline", ())
        if n and len(timeline) == 3 * n + 1:
            # written before each backward had its own gradient-rescheduling event: the
            # rescheduling then held what the backward held
            back = timeline[2 * n:3 * n]
            kwargs["memory_timeline"] = timeline[:2 * n] + tuple(x for b in back for x in (b, b)) + timeline[3 * n:]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "Plan":
        """Load a plan from JSON text or from a file path."""
        return cls.from_dict(read_json(text_or_path, "plan"))

    def with_simulated_time(self, seconds: float) -> "Plan":
        return replace(self, simulated_time=float(seconds))

    # --- display -------------------------------------------------------------------------------
    def summary(self) -> str:
        from .units import format_bytes, format_time

        sim = "" if self.simulated_time is None else f", simulated {format_time(self.simulated_time)}"
        where = f" (peak in {self.peak_phase} of {self.peak_operator or 'the optimizer step'})" if self.peak_phase else ""
        return (
            f"Plan({self.model} on {self.cluster}, {self.devices} devices: memory {format_bytes(self.memory)} per "
            f"device{where}, time {format_time(self.time)} per iteration (compute {format_time(self.compute_time)}, "
            f"communication {format_time(self.communication_time)}){sim}{self.training_summary()})"
        )

    def training_summary(self) -> str:
        """``", precision bf16-mixed, 12 of 40 operators recomputed, 8 with sharded state"`` ("" when plain)."""
        rec = sum(o.recompute for o in self.operators)
        sh = sum(o.shard_state for o in self.operators)
        parts = [f"precision {self.precision}"] if self.precision != "32-true" else []
        if rec:
            parts.append(f"{rec} of {len(self.operators)} operators recomputed")
        if sh:
            parts.append(f"{sh} with sharded optimizer state")
        return "".join(", " + p for p in parts)

    def table(self, limit: int | None = None) -> str:
        """A readable per-operator table (mesh, tensor maps, costs) and the non-trivial edges."""
        mem_top = max((o.memory for o in self.operators), default=0.0)
        m_unit, m_div = ("GB", 1e9) if mem_top >= 1e9 else ("MB", 1e6) if mem_top >= 1e6 else ("kB", 1e3)
        rows = [("operator", "kind", "config", "options", f"memory {m_unit}", "time ms", "comm ms")]
        ops = self.operators if limit is None else self.operators[:limit]
        for o in ops:
            opts = ",".join(n for n, on in (("recompute", o.recompute), ("shard-state", o.shard_state)) if on) or "-"
            cfg = str(o).replace(" recompute", "").replace(" shard-state", "")
            rows.append((o.name, o.kind, cfg, opts, f"{o.memory / m_div:.1f}", f"{o.time * 1e3:.3f}",
                         f"{o.communication_time * 1e3:.3f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        if limit is not None and len(self.operators) > limit:
            lines.append(f"... {len(self.operators) - limit} more operators")
        moving = [e for e in self.edges if e.forward or e.backward or e.time > 0]
        if moving:
            lines.append("")
            lines.append(f"rescheduled edges ({len(moving)} of {len(self.edges)}):")
            shown = moving if limit is None else moving[:limit]
            lines.extend(f"  {e}  {e.time * 1e3:.3f} ms" for e in shown)
            if limit is not None and len(moving) > limit:
                lines.append(f"  ... {len(moving) - limit} more")
        return "\n".join(lines)

    def __str__(self):
        return self.summary() + "\n" + self.table(limit=40)


def _collectives(path) -> tuple[Collective, ...]:
    if path is None:
        return ()
    out = []
    for step in path.steps:
        out.append(Collective(kind=step.kind, groups=tuple(tuple(int(d) for d in g) for g in step.groups),
                              nbytes=float(step.nbytes), time=float(step.time),
                              axes=tuple(int(a) for a in step.fine_axes), src=str(step.before), dst=str(step.after)))
    return tuple(out)


def plan_from_choices(mcg, choices, edge_choices, *, model: str, cluster: str, optimizer: str = "adam",
                      fingerprint: str = "", method: str = "tensoropt", precision: str = "32-true") -> Plan:
    """Decode one CostGraph strategy of ``mcg`` into a :class:`Plan`.

    Parameters
    ----------
    mcg : ModelCostGraph
        What :func:`tensoropt_py.cost.builder.build_cost_graph` returned.
    choices, edge_choices : array of int
        The config index of every node and the option of every edge (one frontier point).
    model, cluster : str
        Names recorded in the Plan.
    optimizer : str
        The optimizer the costs assumed.
    fingerprint : str
        The model graph's :meth:`~tensoropt_py.graph.ir.Graph.fingerprint` (computed when empty).
    method : str
        Who chose the strategy (``"tensoropt"``, a baseline's name...).
    precision : {"32-true", "bf16-mixed"}
        The precision the costs assumed.
    """
    from .cost.memory import MemoryModel

    record = mcg.decode(choices, edge_choices)
    graph = mcg.graph
    mm = MemoryModel(mcg)
    peak = mm.profile(choices, edge_choices)
    ops = []
    for rec in record.ops:
        op = graph.operator(rec.name)
        cfg = rec.config
        assignment = tuple((d.name, int(a)) for d, a in zip(op.loop_dims, cfg.assignment) if a >= 0)
        maps = tuple((use.tensor, tuple(int(a) for a in m)) for use, m in zip(op.uses(), cfg.tensor_maps))
        ops.append(OperatorPlan(name=rec.name, kind=op.kind.value, mesh=tuple(int(s) for s in cfg.mesh.shape),
                                assignment=assignment, tensor_maps=maps, memory=rec.memory, time=rec.time,
                                compute_time=rec.compute_time, communication_time=rec.comm_time, config=str(cfg),
                                recompute=bool(cfg.recompute), shard_state=bool(cfg.shard_state)))
    edges = []
    for rec in record.edges:
        edges.append(EdgePlan(producer=rec.producer, consumer=rec.consumer, tensor=rec.tensor,
                              src_layout=str(rec.src), dst_layout=str(rec.dst), forward=_collectives(rec.forward),
                              backward=_collectives(rec.backward), reuse=rec.reuse, memory=rec.memory, time=rec.time,
                              rederive=_collectives(rec.rederive)))
    return Plan(model=model, cluster=cluster, devices=int(mcg.num_devices), operators=tuple(ops), edges=tuple(edges),
                memory=peak.peak, time=record.time, compute_time=record.compute_time,
                communication_time=record.comm_time,
                choices=tuple(int(c) for c in np.asarray(choices).ravel()),
                edge_choices=tuple(int(c) for c in np.asarray(edge_choices).ravel()),
                model_fingerprint=fingerprint or graph.fingerprint(), optimizer=optimizer, method=method,
                precision=precision, peak_operator=peak.operator,
                peak_phase=peak.phase, additive_memory=record.memory,
                memory_timeline=tuple(float(x) for x in mm.live(choices, edge_choices)), meshes=mcg.meshes)


def config_from_plan(op, op_plan) -> OpConfig:
    """The :class:`~tensoropt_py.space.configs.OpConfig` an :class:`OperatorPlan` describes.

    Parameters
    ----------
    op : Operator
        The graph operator the plan entry is for.
    op_plan : OperatorPlan
    """

    mesh = Mesh(tuple(op_plan.mesh))
    index = {d.name: i for i, d in enumerate(op.loop_dims)}
    assignment = [-1] * len(op.loop_dims)
    for name, ax in op_plan.assignment:
        if name not in index:
            raise InvalidInputError(f"plan assigns unknown loop dimension {name!r} of operator {op.name!r}")
        if not 0 <= int(ax) < mesh.ndim:
            raise InvalidInputError(f"plan assigns {op.name}.{name} to mesh axis {ax} of {mesh}")
        assignment[index[name]] = int(ax)
    fine = []
    for a, fa in enumerate(mesh.fine_of_axis):
        lab = assignment.index(a) if a in assignment else -1
        fine.extend([lab] * len(fa))
    if mesh.shape == (1,):
        fine = []
    maps = tuple(tuple(assignment[index[g[0]]] if g else -1 for g in use.dims) for use in op.uses())
    return OpConfig(mesh, tuple(assignment), maps, tuple(fine), recompute=bool(getattr(op_plan, "recompute", False)),
                    shard_state=bool(getattr(op_plan, "shard_state", False)))
