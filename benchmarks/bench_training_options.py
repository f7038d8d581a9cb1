"""Plain vs extended frontiers: recomputation, sharded optimizer state and bf16 in the search space.

    python benchmarks/bench_training_options.py [--models bert_large,gpt2] [--cluster dgx-a100-2x8]
                                                [--devices 8] [--no-bf16]

For each model, in one run: the plain frontier (tensor sharding only), the extended one
(``recompute=True, shard_optimizer=True``: a superset of choices, so it must dominate the plain
one) and, unless ``--no-bf16``, the extended one in ``bf16-mixed``. Printed per frontier: points,
least memory, fastest time, how many points use each lever, the seconds spent building the cost
graph and tracking it; then whether every plain point is dominated by an extended one and the
least-memory ratio extended / plain.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tensoropt_py as to  # noqa: E402


def dominated(a, b, rtol=1e-9):
    """How many points of frontier ``a`` no point of ``b`` dominates (memory and time both <=)."""
    bad = 0
    for m, t in zip(a.memory, a.time):
        if not np.any((b.memory <= m * (1 + rtol)) & (b.time <= t * (1 + rtol))):
            bad += 1
    return bad


def row(name, fr, wall):
    use = fr.option_usage()
    rec = int((use["recompute"] > 0).sum())
    sh = int((use["shard_state"] > 0).sum())
    return (f"  {name:<22} {len(fr):>6} {fr.memory.min() / 1e9:>12.3f} {fr.time.min() * 1e3:>12.2f} "
            f"{rec:>10} {sh:>10} {fr.seconds['build']:>8.2f} {fr.seconds['track']:>8.2f} {wall:>8.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert_large,gpt2")
    ap.add_argument("--cluster", default="dgx-a100-2x8")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--no-bf16", action="store_true")
    args = ap.parse_args()
    variants = [("plain", {}), ("recompute+shard", dict(recompute=True, shard_optimizer=True))]
    if not args.no_bf16:
        variants.append(("recompute+shard bf16", dict(recompute=True, shard_optimizer=True, precision="bf16-mixed")))
    for model in args.models.split(","):
        print(f"{model} on {args.devices} devices of {args.cluster}")
        print(f"  {'space':<22} {'points':>6} {'least mem GB':>12} {'fastest ms':>12} {'recompute':>10} "
              f"{'sharded':>10} {'build s':>8} {'track s':>8} {'wall s':>8}")
        frs = {}
        for name, kw in variants:
            t0 = time.perf_counter()
            frs[name] = fr = to.frontier(model, args.cluster, args.devices, progress=False, cache=False, **kw)
            print(row(name, fr, time.perf_counter() - t0), flush=True)
        plain, ext = frs["plain"], frs["recompute+shard"]
        print(f"  plain points not dominated by the extended frontier: {dominated(plain, ext)} of {len(plain)}")
        print(f"  least memory extended / plain: {ext.memory.min() / plain.memory.min():.4f}; "
              f"fastest extended / plain: {ext.time.min() / plain.time.min():.3f}")
        if "recompute+shard bf16" in frs:
            b = frs["recompute+shard bf16"]
            print(f"  bf16-mixed extended / plain: least memory {b.memory.min() / plain.memory.min():.3f}, "
                  f"fastest {b.time.min() / plain.time.min():.3f}")


if __name__ == "__main__":
    main()
