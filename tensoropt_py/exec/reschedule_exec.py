"""Execute a rescheduling path (:class:`~tensoropt_py.cost.reschedule.ReschedulePath`) on local shards.

Each step turns the rank's local block in layout ``before`` into its block in layout
``after`` by one collective along the step's groups (TensorOpt §4.2 "Flexible tensor
splitting"). The steps are executed by *region arithmetic* (:func:`~.shard.region`): the
members of a group differ only along the collective's axes, so

* ``slice``: the ``after`` block is a sub-block of the ``before`` block: cut it out;
* ``all_gather``: the members' ``before`` blocks tile the ``after`` block: gather and place;
* ``all_reduce``: sum the partial blocks;
* ``reduce_scatter``: member ``m`` receives the sum of everyone's piece of ``m``'s ``after``
  block (cut from the partial ``before`` blocks);
* ``all_to_all``: send member ``m`` the part of my ``before`` block inside ``m``'s ``after``
  block, place what member ``m`` sends at the part of its ``before`` block inside mine.

This needs nothing but the two layouts and the groups, so steps from a freshly computed
path and steps loaded from a plan's JSON (canonical layout strings, explicit groups) run
the same way. :class:`Reschedule` wraps a forward path and its backward path (the
gradient's own rescheduling, e.g. all-gather forward / reduce-scatter backward) in a
``torch.autograd.Function``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..errors import InvalidInputError
from ..space.layout import Layout
from .shard import local_shape, parse_layout, region

__all__ = ["ExecStep", "steps_from_path", "steps_from_collectives", "run_step", "run_steps", "Reschedule",
           "reschedule"]

KINDS = ("slice", "all_gather", "all_reduce", "reduce_scatter", "all_to_all")


@dataclass(frozen=True, slots=True)
class ExecStep:
    """One executable step: ``kind`` from ``before`` to ``after`` along ``groups`` (empty for slices)."""

    kind: str
    before: Layout
    after: Layout
    groups: tuple[tuple[int, ...], ...]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidInputError(f"unknown rescheduling step {self.kind!r}; known: {', '.join(KINDS)}")


def steps_from_path(path) -> tuple[ExecStep, ...]:
    """Steps of a :class:`~tensoropt_py.cost.reschedule.ReschedulePath` (or None: no steps)."""
    if path is None:
        return ()
    return tuple(ExecStep(s.kind, s.before, s.after, tuple(tuple(int(d) for d in g) for g in s.groups))
                 for s in path.steps)


def steps_from_collectives(collectives, num_devices: int) -> tuple[ExecStep, ...]:
    """Steps of a plan's :class:`~tensoropt_py.plan.Collective` tuple (layouts parsed from strings)."""
    out = []
    for c in collectives:
        out.append(ExecStep(c.kind, parse_layout(c.src, num_devices), parse_layout(c.dst, num_devices),
                            tuple(tuple(int(d) for d in g) for g in c.groups)))
    return tuple(out)


def _rel(inner, outer):
    """Index of region ``inner`` relative to region ``outer``."""
    return tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(inner, outer))


def _intersect(r1, r2):
    out = []
    for (a, b), (c, d) in zip(r1, r2):
        lo, hi = max(a, c), min(b, d)
        if hi <= lo:
            return None
        out.append((lo, hi))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def _step_plan(step: ExecStep, shape: tuple, rank: int, group: tuple):
    """The index arithmetic of one step on one rank (pure; cached: a plan repeats it every iteration).

    Returns ``(input shape, output shape, parts)``: ``parts`` are, per kind, the slice of the
    ``after`` block in the ``before`` block (slice), the place of every member's block in the
    output (all_gather), the pieces of my block for every member (reduce_scatter), or both
    the pieces I send and the places of what I receive (all_to_all).
    """
    want_in = local_shape(step.before, shape)
    want_out = local_shape(step.after, shape)
    rb = region(step.before, shape, rank)
    ra = region(step.after, shape, rank)
    kind = step.kind
    if kind == "slice":
        parts = _rel(ra, rb)
    elif kind == "all_gather":
        parts = tuple(_rel(region(step.before, shape, m), ra) for m in group)
    elif kind == "reduce_scatter":
        parts = tuple(_rel(region(step.after, shape, m), rb) for m in group)
    elif kind == "all_to_all":
        send, recv = [], []
        for m in group:
            inter = _intersect(rb, region(step.after, shape, m))
            if inter is None:
                raise InvalidInputError(f"all_to_all {step.before} -> {step.after}: rank {rank} shares no data with {m}")
            send.append(_rel(inter, rb))
            recv.append(_rel(_intersect(region(step.before, shape, m), ra), ra))
        parts = (tuple(send), tuple(recv))
    else:  # all_reduce: the block keeps its place
        parts = ()
    return want_in, want_out, parts


def run_step(x: torch.Tensor, step: ExecStep, shape, rank: int, backend) -> torch.Tensor:
    """Apply one step to the local block ``x`` (layout ``step.before``); returns the block in ``step.after``."""
    shape = tuple(int(s) for s in shape)
    kind = step.kind
    g = backend.group_of(step.groups) if kind != "slice" else ()
    want_in, want_out, parts = _step_plan(step, shape, int(rank), g)
    if tuple(x.shape) != want_in:
        raise InvalidInputError(f"{kind}: local block {tuple(x.shape)} does not match {step.before} "
                                f"of a {list(shape)} tensor (expected {want_in})")
    if kind == "slice":
        # a copy, not a view: a view would keep the whole source block alive as long as
        # autograd keeps the slice (the memory model counts the slice only)
        return x[parts].clone(memory_format=torch.contiguous_format)
    if kind == "all_reduce":
        return backend.all_reduce(x, step.groups)
    if kind == "all_gather":
        stacked = backend.all_gather(x, step.groups)
        out = torch.empty(want_out, dtype=x.dtype, device=x.device)
        for p, where in enumerate(parts):
            out[where] = stacked[p]
        return out
    if kind == "reduce_scatter":
        return backend.reduce_scatter(torch.stack([x[piece] for piece in parts]), step.groups)
    if kind == "all_to_all":
        send, recv_at = parts
        recv = backend.all_to_all(torch.stack([x[piece] for piece in send]), step.groups)
        out = torch.empty(want_out, dtype=x.dtype, device=x.device)
        for p, where in enumerate(recv_at):
            out[where] = recv[p]
        return out
    raise InvalidInputError(f"unknown rescheduling step {kind!r}")  # pragma: no cover


def run_steps(x: torch.Tensor, steps, shape, rank: int, backend) -> torch.Tensor:
    """Apply every step in order."""
    for s in steps:
        x = run_step(x, s, shape, rank, backend)
    return x


class Reschedule(torch.autograd.Function):
    """Forward: run ``fwd`` steps; backward: run ``bwd`` steps on the gradient (phase ``"bwd"``)."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, shape, backend, tag):
        ctx.bwd, ctx.shape, ctx.backend, ctx.tag = bwd, shape, backend, tag
        if not fwd:
            return x.view_as(x)
        with backend.tag(tag):
            return run_steps(x.detach(), fwd, shape, backend.rank, backend)

    @staticmethod
    def backward(ctx, grad):
        be = ctx.backend
        with be.phase("bwd"), be.tag(ctx.tag):
            g = run_steps(grad.contiguous(), ctx.bwd, ctx.shape, be.rank, be)
        return g, None, None, None, None, None


def reschedule(x: torch.Tensor, fwd, bwd, shape, backend, *, tag: str = "") -> torch.Tensor:
    """Reschedule ``x`` with ``fwd`` steps; the gradient travels back with ``bwd`` (autograd-aware).

    Without a gradient (integer tensors, ``x`` not requiring grad and no backward steps) the
    forward steps run directly.
    """
    if not (x.requires_grad and torch.is_grad_enabled()):
        if not fwd:
            return x
        with backend.tag(tag):
            return run_steps(x, fwd, shape, backend.rank, backend)
    return Reschedule.apply(x, tuple(fwd), tuple(bwd), tuple(int(s) for s in shape), backend, tag)
