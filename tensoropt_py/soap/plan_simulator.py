"""Simulating any :class:`~tensoropt_py.plan.Plan` on per-device compute and network streams.

FlexFlow's simulator (:class:`~tensoropt_py.soap.simulator.Simulator`) runs SOAP strategies,
which have no partial sums, no redundant computation and no tensor reuse; the frontier's plans
have all three. This simulator runs a Plan as the executor does, on the task graph of
:mod:`.task_graph` (FIFO per stream, a task starts when its inputs are ready and its stream is free):

* every device has a **compute** stream and a **network** stream;
* forward: every operator runs its shard on every device (its mesh covers all devices; replicas
  compute redundantly), after the forward rescheduling collectives of each of its inputs;
* backward, in reverse order: an operator's backward waits for the backward collectives of its
  outputs' gradients; the collectives that re-derive a dropped copy (tensor reuse) run once the
  forward pass is over; the operator's gradient all-reduce runs on the network stream after its
  backward, **overlapping** the backward of the operators before it (what the additive model,
  which adds every second of communication to the iteration, cannot see);
* a collective starts when every member of its group is ready (the wait for the slowest rank).

The operator's compute time is split between forward and backward in proportion to its forward
and backward FLOPs (``Operator.flops`` and ``backward_flops``); the optimizer update is part of
the backward share. Times are the Plan's own predictions, so with no overlap the simulated time
equals the additive one (tested), and it is never larger (but for 1e-12 s per zero-time step).

Examples
--------
>>> import tensoropt_py as to
>>> plan = to.find_strategy("mlp", "cpu-1x4", devices=4)
>>> sim = simulate_plan(plan, to.api.load_model("mlp"))
>>> bool(0 < sim.time <= plan.time * (1 + 1e-6))
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidInputError
from .task_graph import TaskGraph

__all__ = ["TimelineEvent", "PlanSimulation", "simulate_plan"]

Stream = Literal["compute", "network"]
#: Tasks need a positive duration; zero-time steps (local slices) take this long.
_MIN_TASK = 1e-12


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One task of the simulated iteration."""

    device: int
    stream: Stream
    label: str  # operator name, or "producer -> consumer [tensor]: kind"
    phase: Literal["forward", "backward", "gradient sync", "rederive"]
    start: float
    end: float

    def __str__(self):
        return f"dev{self.device} {self.stream} {self.phase} {self.label} {self.start * 1e3:.3f}-{self.end * 1e3:.3f} ms"


@dataclass(frozen=True, slots=True)
class PlanSimulation:
    """The simulated iteration of a Plan.

    Attributes
    ----------
    time : float
        Seconds from the first forward task to the last task of the iteration.
    additive_time : float
        The Plan's additive estimate (``plan.time``), for comparison.
    events : tuple of TimelineEvent
        Every task, sorted by device, stream and start.
    """

    time: float
    additive_time: float
    events: tuple[TimelineEvent, ...]

    @property
    def overlap_saving(self) -> float:
        """Fraction of the additive time that overlap saves (``1 - time / additive_time``)."""
        return 0.0 if self.additive_time <= 0 else 1.0 - self.time / self.additive_time

    def busy(self, device: int, stream: Stream) -> float:
        """Seconds ``stream`` of ``device`` is busy."""
        return sum(e.end - e.start for e in self.events if e.device == device and e.stream == stream)

    def __str__(self):
        return (f"PlanSimulation(time {self.time * 1e3:.4g} ms, additive {self.additive_time * 1e3:.4g} ms, "
                f"{len(self.events)} tasks)")


def _forward_share(op) -> float:
    total = float(op.flops) + float(op.backward_flops or 0)
    return 1.0 if total <= 0 or not op.backward_flops else float(op.flops) / total


def simulate_plan(plan, graph) -> PlanSimulation:
    """Simulate one training iteration of ``plan`` (see the module docstring).

    Parameters
    ----------
    plan : Plan
        Any plan of ``graph`` (frontier, baseline, loaded from JSON).
    graph : Graph
        The model the plan was made for (its fingerprint must match when the plan has one).

    Returns
    -------
    PlanSimulation
    """
    if plan.model_fingerprint and plan.model_fingerprint != graph.fingerprint():
        raise InvalidInputError(f"plan {plan.model!r} was made for another model than {graph.name!r} "
                                f"(fingerprint {plan.model_fingerprint} != {graph.fingerprint()})")
    by_name = {o.name: o for o in plan.operators}
    missing = [op.name for op in graph.operators if op.name not in by_name]
    if missing:
        raise InvalidInputError(f"the plan has no config for operators {missing[:5]} of {graph.name!r}")
    n = int(plan.devices)
    tg = TaskGraph()
    labels: dict = {}

    def task(key, device, stream, exe, label, phase):
        t = tg.add_task(key, (stream, device), max(float(exe), _MIN_TASK))
        labels[key] = (device, stream, label, phase)
        return t

    def chain(collectives, start, key, label, phase):
        """The collectives of a path on the network streams; returns the last task of every device."""
        last = dict(start)
        for i, c in enumerate(collectives):
            step = {}
            for group in c.groups:
                for d in group:
                    t = task(key + (i, d), d, "network", c.time, f"{label}: {c.kind}", phase)
                    for member in group:  # a collective waits for every member of its group
                        if member in last:
                            tg.add_dep(last[member], t)
                    step[d] = t
            last.update(step)
        return last

    ops = graph.operators
    fwd = {}
    bwd = {}
    for op in ops:
        o = by_name[op.name]
        share = _forward_share(op)
        for d in range(n):
            fwd[op.name, d] = task(("F", op.name, d), d, "compute", o.compute_time * share, op.name, "forward")
            bwd[op.name, d] = task(("B", op.name, d), d, "compute", o.compute_time * (1 - share), op.name, "backward")
            tg.add_dep(fwd[op.name, d], bwd[op.name, d])
    # forward and backward rescheduling of every edge
    for j, e in enumerate(plan.edges):
        if (e.producer, 0) not in fwd or (e.consumer, 0) not in fwd:
            raise InvalidInputError(f"plan edge {e.producer} -> {e.consumer} names an operator not in {graph.name!r}")
        label = f"{e.producer} -> {e.consumer} [{e.tensor}]"
        ends = chain(e.forward, {d: fwd[e.producer, d] for d in range(n)}, ("EF", j), label, "forward")
        for d in range(n):
            tg.add_dep(ends[d], fwd[e.consumer, d])
        ends = chain(e.backward, {d: bwd[e.consumer, d] for d in range(n)}, ("EB", j), label, "backward")
        for d in range(n):
            tg.add_dep(ends[d], bwd[e.producer, d])
    # Backward runs after the whole forward pass (the loss), in reverse order on each device.
    last_op = ops[-1].name
    for d in range(n):
        for op in ops[:-1]:
            tg.add_dep(fwd[last_op, d], bwd[op.name, d])
        for later, earlier in zip(reversed(ops), list(reversed(ops))[1:]):
            tg.add_dep(bwd[later.name, d], bwd[earlier.name, d])
    for j, e in enumerate(plan.edges):
        if not e.rederive:
            continue
        # the dropped copy comes back once forward is over, before the backward that reads it
        needs = e.consumer if e.reuse == "producer_copy" else e.producer
        ends = chain(e.rederive, {d: fwd[last_op, d] for d in range(n)}, ("ER", j),
                     f"{e.producer} -> {e.consumer} [{e.tensor}]", "rederive")
        for d in range(n):
            tg.add_dep(ends[d], bwd[needs, d])
    for op in ops:
        o = by_name[op.name]
        if o.communication_time > 0:
            for d in range(n):
                g = task(("G", op.name, d), d, "network", o.communication_time, op.name, "gradient sync")
                tg.add_dep(bwd[op.name, d], g)
    time = float(tg.simulate())
    events = []
    for key, t in tg.tasks.items():
        device, stream, label, phase = labels[key]
        events.append(TimelineEvent(device, stream, label, phase, float(t.start), float(t.end)))
    events.sort(key=lambda e: (e.device, e.stream, e.start, e.end))
    return PlanSimulation(time=time, additive_time=float(plan.time), events=tuple(events))
