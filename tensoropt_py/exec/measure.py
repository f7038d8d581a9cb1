"""Measurement: what a run measured next to the plan's predictions, and the collectives a plan implies.

* :class:`Report`: losses per step; per-iteration time (median over the steps after the
  warm-up; the slowest rank), time in communication (sum of the seconds of the collectives
  of one iteration: edges and gradient all-reduces; median, slowest rank), per-rank peak
  memory (CPU: the high-water mark of one more iteration under torch's ``MemTracker``,
  :func:`~tensoropt_py.exec.runner.tracked_peak`, or parameters + gradients + optimizer state
  + constants + the distinct storages autograd saved in forward where the tracker is missing; CUDA:
  ``torch.cuda.max_memory_allocated``), each next to the plan's prediction with the relative
  error, and the collectives of the last iteration. ``to_json`` writes
  ``{"losses", "time": {"predicted", "measured"}, "memory": {...}, "communication_time": {...},
  "collectives": [...]}`` (plus relative errors, per-rank memory and per-step times).
* :func:`expected_collectives`: the per-iteration collectives one rank runs according to a
  plan, to compare with :func:`collective_counts` of the executor's records.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..space.layout import PARTIAL

__all__ = ["Report", "expected_collectives", "collective_counts", "relative_error"]


def relative_error(measured, predicted) -> float:
    """``(measured - predicted) / predicted`` (NaN when nothing was predicted)."""
    if not predicted:
        return math.nan
    return (measured - predicted) / predicted


_rel = relative_error


def collective_counts(records, *, tags=("edge:", "reuse:", "grad:")) -> Counter:
    """Counter of ``(phase, kind)`` over records whose tag starts with one of ``tags``.

    Edge reschedulings are tagged ``edge:<producer>-><consumer>:<tensor>``, the
    re-derivation of a copy the plan does not keep ``reuse:<producer>-><consumer>:<tensor>``
    (phase ``"rederive"``), gradient all-reduces ``grad:<operator>``, tied-parameter
    reschedulings ``param:<name>``.
    """
    return Counter((r.phase, r.kind) for r in records if r.tag.startswith(tuple(tags)))


def expected_collectives(plan, graph=None) -> Counter:
    """Per-iteration collectives one rank runs according to ``plan``: Counter of ``(phase, kind)``.

    Edge collectives (``fwd``/``bwd``, and ``rederive`` for copies the plan does not keep;
    slices excluded, they are local) come from the plan's paths; with ``graph``, the gradient all-reduces (``grad``) its configurations imply: one
    per operator and set of mesh axes splitting loop dimensions a parameter does not index
    (fused, as the cost model counts them), for parameters read by a single operator; an
    operator with sharded optimizer state runs a reduce-scatter and an all-gather per group
    instead. With ``graph``, an edge from a recomputed producer to a consumer that saves the
    tensor re-derives the consumer's copy with the edge's forward collectives (``rederive``).
    """
    c = Counter()
    for e in plan.edges:
        for s in e.forward:
            if s.kind != "slice":
                c[("fwd", s.kind)] += 1
        for s in e.backward:
            if s.kind != "slice":
                c[("bwd", s.kind)] += 1
        for s in e.rederive:
            if s.kind != "slice":
                c[("rederive", s.kind)] += 1
    if graph is not None:
        from ..graph.ir import TensorRole
        from ..plan import config_from_plan

        recomputed = {o.name for o in plan.operators if getattr(o, "recompute", False)}
        for e in plan.edges:
            if e.producer in recomputed and e.tensor in graph.operator(e.consumer).saved:
                for s in e.forward:
                    if s.kind != "slice":
                        c[("rederive", s.kind)] += 1
        readers = {k: len(v) for k, v in graph.parameter_users().items()}
        for op, op_plan in zip(graph.operators, plan.operators):
            cfg = config_from_plan(op, op_plan)
            axes_sets = set()
            for pi, use in enumerate(op.params):
                spec = graph.tensors[use.tensor]
                if spec.role is not TensorRole.PARAMETER or readers.get(use.tensor, 0) != 1:
                    continue
                lay = cfg.layout(op, len(op.inputs) + pi, gradient=True)
                axes = tuple(a for a, p in enumerate(lay.place) if p == PARTIAL)
                if axes:
                    axes_sets.add(axes)
            if axes_sets and cfg.shard_state:
                c[("grad", "reduce_scatter")] += len(axes_sets)
                c[("grad", "all_gather")] += len(axes_sets)
            elif axes_sets:
                c[("grad", "all_reduce")] += len(axes_sets)
    return c


# ----------------------------------------------------------------------------------------------
@dataclass
class Report:
    """What a run measured next to what the plan predicted (identical on every rank)."""

    losses: list
    step_times: list
    time_predicted: float
    time_measured: float
    memory_predicted: float
    memory_measured: float
    memory_per_rank: list
    comm_predicted: float
    comm_measured: float
    collectives: list
    collective_counts: dict
    backend: str
    devices: int
    steps: int
    warmup: int
    optimizer: str
    notes: list = field(default_factory=list)
    params: dict | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {
            "losses": list(self.losses),
            "time": {"predicted": self.time_predicted, "measured": self.time_measured,
                     "relative_error": _rel(self.time_measured, self.time_predicted), "per_step": list(self.step_times)},
            "memory": {"predicted": self.memory_predicted, "measured": self.memory_measured,
                       "relative_error": _rel(self.memory_measured, self.memory_predicted),
                       "per_rank": list(self.memory_per_rank)},
            "communication_time": {"predicted": self.comm_predicted, "measured": self.comm_measured,
                                   "relative_error": _rel(self.comm_measured, self.comm_predicted)},
            "collectives": list(self.collectives),
            "collective_counts": dict(self.collective_counts),
            "backend": self.backend, "devices": self.devices, "steps": self.steps, "warmup": self.warmup,
            "optimizer": self.optimizer, "notes": list(self.notes),
        }

    def to_json(self, path=None) -> str:
        import json

        text = json.dumps(self.to_dict(), indent=1, allow_nan=True)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def summary(self) -> str:
        def row(what, p, m, unit):
            return f"  {what:<22} predicted {p:>12.6g} {unit}  measured {m:>12.6g} {unit}  rel. error {_rel(m, p):+.1%}"

        lines = [f"ran {self.steps} steps on {self.devices} ranks ({self.backend}, {self.optimizer}); "
                 f"losses {', '.join(f'{x:.6g}' for x in self.losses)}",
                 row("time / iteration", self.time_predicted, self.time_measured, "s"),
                 row("communication / iter.", self.comm_predicted, self.comm_measured, "s"),
                 row("peak memory / rank", self.memory_predicted, self.memory_measured, "B"),
                 "  collectives / iteration (rank 0): "
                 + ", ".join(f"{k} x{v}" for k, v in sorted(self.collective_counts.items()))]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


