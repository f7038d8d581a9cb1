"""Oracles for the executor's tests: every configuration of an operator on virtual ranks.

:func:`check_local_shards` runs one operator under every configuration on ``n`` virtual ranks
(one process, no MPI) and checks that the local outputs assemble to the full operator's
outputs, and the local gradients (seeded with the output gradient's blocks) to the full
gradients, in the layouts the configuration implies.
"""

from __future__ import annotations

import torch

from ..graph.torch_ops import run_operator
from ..space.configs import enumerate_configs
from ..space.layout import REPLICATE
from .local_ops import prepare
from .shard import place_coordinate, region, shard

__all__ = ["assemble", "check_local_shards"]


def assemble(blocks, layout, shape):
    """The full tensor from every virtual rank's block (partial pieces summed, replicas once).

    Parameters
    ----------
    blocks : dict rank -> Tensor
    layout : Layout
    shape : tuple of int
    """
    out = torch.zeros(shape, dtype=next(iter(blocks.values())).dtype)
    for r, b in blocks.items():
        if place_coordinate(layout, r, REPLICATE)[0] == 0:
            out[tuple(slice(a, z) for a, z in region(layout, shape, r))] += b
    return out


def check_local_shards(graph, op, env, n, gen) -> list[str]:
    """Check every configuration of ``op`` on ``n`` virtual ranks; returns the configurations checked.

    Parameters
    ----------
    graph : Graph
    op : Operator
        An operator of ``graph``.
    env : dict name -> Tensor
        Values of every tensor ``op`` reads (parameters included), detached.
    n : int
        Virtual ranks.
    gen : torch.Generator
        Draws the output-gradient seeds.
    """
    uses = list(op.inputs) + list(op.params)
    base = len(uses)
    floats = [u.tensor for u in uses if env[u.tensor].dtype.is_floating_point]
    leaves = {t: env[t].clone().requires_grad_(True) for t in floats}
    full = run_operator(op, {u.tensor: leaves.get(u.tensor, env[u.tensor]) for u in op.inputs},
                        {u.tensor: leaves.get(u.tensor, env[u.tensor]) for u in op.params})
    seeds = {u.tensor: torch.randn(env[u.tensor].shape, generator=gen) for u in op.outputs
             if full[u.tensor].requires_grad}
    want = {}
    if seeds:
        total = sum((full[t] * s).sum() for t, s in seeds.items())
        want = dict(zip(floats, torch.autograd.grad(total, [leaves[t] for t in floats], allow_unused=True)))
    checked = []
    for cfg in enumerate_configs(op, n):
        outs, grads = {}, {t: {} for t in want}
        for r in range(n):
            loc = {u.tensor: shard(env[u.tensor], cfg.layout(op, i), r) for i, u in enumerate(uses)}
            for t in want:
                loc[t].requires_grad_(True)
            outs[r] = prepare(op, cfg, graph, r).run({u.tensor: loc[u.tensor] for u in op.inputs},
                                                     {u.tensor: loc[u.tensor] for u in op.params})
            if want:
                total = sum((outs[r][u.tensor] * shard(seeds[u.tensor], cfg.layout(op, base + k).without_partial(),
                                                       r)).sum()
                            for k, u in enumerate(op.outputs) if u.tensor in seeds)
                for t, gr in zip(want, torch.autograd.grad(total, [loc[t] for t in want], allow_unused=True)):
                    grads[t][r] = torch.zeros_like(loc[t]) if gr is None else gr
        for k, u in enumerate(op.outputs):
            ref = full[u.tensor].detach()
            got = assemble({r: o[u.tensor].detach().to(torch.float64) for r, o in outs.items()},
                           cfg.layout(op, base + k), ref.shape)
            assert torch.allclose(got, ref.double(), rtol=1e-5, atol=1e-6), (op.name, str(cfg), u.tensor)
        for i, u in enumerate(uses):
            if u.tensor in want:
                ref = want[u.tensor] if want[u.tensor] is not None else torch.zeros_like(env[u.tensor])
                got = assemble(grads[u.tensor], cfg.layout(op, i, gradient=True), ref.shape)
                assert torch.allclose(got, ref, rtol=1e-4, atol=1e-6), (op.name, str(cfg), "grad", u.tensor)
        checked.append(str(cfg))
    return checked
