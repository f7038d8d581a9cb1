"""Time building the CostGraph (configs, operator costs, rescheduling tables) of zoo models.

Run: ``python benchmarks/bench_cost_graph.py [--devices 8 16 32] [--models transformer mlp]``.
Prints, per model and device count, the build time, the config counts per operator kind,
the number of layout classes and rescheduling searches. Uses ``tensoropt_py.models`` when
it provides the model, else the small stand-ins defined here.

``--reference`` also times the original construction (``build_cost_graph(..., reference=True)``)
and ``--check`` verifies that the fast build equals it exactly (node costs, configs, layout
classes, edge tables, decoded strategies) on a few small models with 4 and 8 devices.

``--closures`` times the rescheduling move graphs alone: the closure of the replicated
placement of a rank-4 tensor whose dimensions all divide ``N``, on the fine grid of ``N``
devices (``N`` of ``--devices``), enumerated by the compiled kernel and by its pure-Python
reference (``_MoveSkeleton(..., compiled=False)``), best of 3 each, with whether the two
graphs are the same (nodes, edges, moves).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

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


def same_cost_graph(a, b) -> bool:
    """Whether two ModelCostGraphs are identical (costs, configs, layout classes, tables, decodes)."""
    if a.op_names != b.op_names or a.configs != b.configs or a.edges != b.edges or a.edge_index != b.edge_index:
        return False
    if not all(np.array_equal(x, y) for x, y in zip(a.node_costs, b.node_costs)):
        return False
    for (sa, da, ta), (sb, db, tb) in zip(a.edge_tables, b.edge_tables):
        if not (np.array_equal(sa, sb) and np.array_equal(da, db) and np.array_equal(ta, tb)):
            return False
    row = a.data_parallel_choice()
    return a.decode(row) == b.decode(row)


def check(cluster) -> bool:
    """Fast builder == reference builder on small models, devices 4 and 8."""
    ok = True
    for name in ("mlp", "small_transformer", "small_cnn", "rnn"):
        try:
            from tensoropt_py import models

            g = getattr(models, name)()
        except Exception:  # noqa: BLE001 - zoo missing: the stand-ins
            g = mlp(batch=32, width=64) if name != "small_transformer" else transformer(1, 8, 16, 64, 4, 128)
        for n in (4, 8):
            for kw in ({}, {"mesh_tensorflow": True}):
                t0 = time.perf_counter()
                fast = build_cost_graph(g, cluster, n, **kw)
                t1 = time.perf_counter()
                ref = build_cost_graph(g, cluster, n, reference=True, **kw)
                t2 = time.perf_counter()
                same = same_cost_graph(fast, ref)
                ok &= same
                print(f"check {name:18s} N={n} {str(kw):28s} fast {t1 - t0:6.2f}s ref {t2 - t1:6.2f}s "
                      f"{'identical' if same else 'DIFFERENT'}")
    return ok


def closures(devices):
    """The move-graph closures, compiled against the pure-Python reference."""
    from tensoropt_py.cost.reschedule import _MoveSkeleton
    from tensoropt_py.space.layout import REPLICATE
    from tensoropt_py.space.mesh import prime_factors

    print(f"{'N':>3s} {'fine grid':>20s} {'nodes':>7s} {'edges':>9s} {'compiled ms':>11s} {'reference ms':>12s} "
          f"{'ratio':>6s}  same")
    for n in devices:
        sizes = prime_factors(n)
        profile = (n,) * 4
        best = {}
        skeletons = {}
        for compiled in (True, False) * 3:
            t0 = time.perf_counter()
            skel = _MoveSkeleton(profile, sizes, compiled=compiled)
            skel.node((REPLICATE,) * len(sizes))
            skel.csr()
            dt = time.perf_counter() - t0
            best[compiled] = min(best.get(compiled, dt), dt)
            skeletons[compiled] = skel
        a, b = skeletons[True], skeletons[False]
        same = (a.places == b.places and a.move_info == b.move_info
                and all(np.array_equal(x, y) for x, y in zip(a.csr(), b.csr())))
        print(f"{n:3d} {str(sizes):>20s} {len(a.places):7d} {len(a.csr()[1]):9d} {best[True] * 1e3:11.2f} "
              f"{best[False] * 1e3:12.2f} {best[False] / best[True]:6.1f}  {same}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--models", nargs="+", default=["mlp", "transformer"])
    ap.add_argument("--reference", action="store_true", help="also time the original (reference) construction")
    ap.add_argument("--check", action="store_true", help="check fast == reference on small models, then exit")
    ap.add_argument("--closures", action="store_true",
                    help="time the move-graph closures (compiled vs reference) on the --devices, then exit")
    args = ap.parse_args(argv)
    cl = Cluster.preset("h100-4x8")
    if args.check:
        raise SystemExit(0 if check(cl) else 1)
    if args.closures:
        closures(args.devices)
        return
    print(f"{'model':12s} {'N':>3s} {'ops':>4s} {'build s':>8s} {'ref s':>8s} {'configs':>8s} {'searches':>8s}  "
          "configs per op kind (max)")
    for name in args.models:
        g = _model(name)
        for n in args.devices:
            t0 = time.perf_counter()
            mcg = build_cost_graph(g, cl, n)
            dt = time.perf_counter() - t0
            ref = "-"
            if args.reference:
                t0 = time.perf_counter()
                rmcg = build_cost_graph(g, cl, n, reference=True)
                ref = f"{time.perf_counter() - t0:.2f}" + ("" if same_cost_graph(mcg, rmcg) else "!DIFF")
            per_kind = defaultdict(int)
            for op, cfgs in zip(g.operators, mcg.configs):
                per_kind[op.kind.value] = max(per_kind[op.kind.value], len(cfgs))
            total = sum(len(c) for c in mcg.configs)
            info = mcg.rescheduler.cache_info()
            print(f"{name:12s} {n:3d} {len(g.operators):4d} {dt:8.2f} {ref:>8s} {total:8d} {info['searches']:8d}  "
                  + " ".join(f"{k}={v}" for k, v in sorted(per_kind.items())))


if __name__ == "__main__":
    main()
