"""Time building the CostGraph (configs, operator costs, rescheduling tables) of zoo models.

Run: ``python benchmarks/bench_cost_graph.py [--devices 8 16 32] [--models transformer mlp]``.
Prints, per model and device count, the build time, the config counts per operator kind,
the number of layout classes and rescheduling searches. Uses ``tensoropt_py.models`` when
it provides the model, else the small stand-ins defined here.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.graph.builder import GraphBuilder


def transformer(layers=2, batch=32, seq=128, d_model=1024, heads=16, d_ff=4096):
    """A stand-in transformer encoder (used when the zoo is not available)."""
    gb = GraphBuilder("transformer")
    x, y = gb.input([("x", (batch, seq, d_model), "float32"), ("y", (batch, seq), "int64")])
    h = x
    for i in range(layers):
        with gb.scope(f"l{i}"):
            dh = d_model // heads
            q, k, v = (gb.transpose(gb.reshape(gb.linear(h, d_model), (batch, seq, heads, dh)), (0, 2, 1, 3))
                       for _ in range(3))
            o = gb.attention(q, k, v)
            o = gb.reshape(gb.transpose(o, (0, 2, 1, 3)), (batch, seq, d_model))
            a = gb.linear(o, d_model)
            h = gb.layer_norm(gb.add(h, a))
            f = gb.linear(gb.gelu(gb.linear(h, d_ff)), d_model)
            h = gb.layer_norm(gb.add(h, f))
    gb.loss(gb.linear(h, 1000), y)
    return gb.build()


def mlp(batch=256, width=4096, depth=4):
    gb = GraphBuilder("mlp")
    x, y = gb.input([("x", (batch, width), "float32"), ("y", (batch,), "int64")])
    h = x
    for _ in range(depth):
        h = gb.relu(gb.linear(h, width))
    gb.loss(gb.linear(h, 1000), y)
    return gb.build()


def _model(name):
    try:
        from tensoropt_py import models

        fn = getattr(models, name)
        return fn()
    except Exception:  # noqa: BLE001 - zoo missing or failing: fall back to the stand-in
        return {"transformer": transformer, "mlp": mlp}[name]()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--models", nargs="+", default=["mlp", "transformer"])
    args = ap.parse_args(argv)
    cl = Cluster.preset("h100-4x8")
    print(f"{'model':12s} {'N':>3s} {'ops':>4s} {'build s':>8s} {'configs':>8s} {'searches':>8s}  configs per op kind (max)")
    for name in args.models:
        g = _model(name)
        for n in args.devices:
            t0 = time.perf_counter()
            mcg = build_cost_graph(g, cl, n)
            dt = time.perf_counter() - t0
            per_kind = defaultdict(int)
            for op, cfgs in zip(g.operators, mcg.configs):
                per_kind[op.kind.value] = max(per_kind[op.kind.value], len(cfgs))
            total = sum(len(c) for c in mcg.configs)
            info = mcg.rescheduler.cache_info()
            print(f"{name:12s} {n:3d} {len(g.operators):4d} {dt:8.2f} {total:8d} {info['searches']:8d}  "
                  + " ".join(f"{k}={v}" for k, v in sorted(per_kind.items())))


if __name__ == "__main__":
    main()
