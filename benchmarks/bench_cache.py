"""Ask once, answer many times: the first mini_time question tracks the frontier, later ones reuse it.

Prints, for one model and device count, the seconds of the first ``find_strategy(option="mini_time")``
call, of each later call with another memory cap (in-memory cache), and of a call in a fresh
process reading the frontier back from ``--cache-dir`` (the cost graph is rebuilt, not re-tracked).

    python benchmarks/bench_cache.py --model transformer --devices 8 --caps 7
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_FRESH = r"""
import sys, time
sys.path.insert(0, {root!r})
import tensoropt_py as to
t0 = time.perf_counter()
plan = to.find_strategy({model!r}, {cluster!r}, devices={devices}, memory_cap={cap!r}, epsilon={eps!r},
                        cache_dir={cache!r}, progress=False)
print(time.perf_counter() - t0)
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="transformer")
    p.add_argument("--cluster", default="v100-2x8")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--caps", type=int, default=7, help="memory caps asked after the first question")
    p.add_argument("--epsilon", type=float, default=1e-3)
    args = p.parse_args(argv)

    import tensoropt_py as to

    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        fr = to.frontier(args.model, args.cluster, devices=args.devices, epsilon=args.epsilon, cache_dir=cache,
                         progress=False)
        first = time.perf_counter() - t0
        caps = np.linspace(fr.memory.min(), fr.memory.max(), args.caps)
        later = []
        for cap in caps:
            t0 = time.perf_counter()
            to.find_strategy(args.model, args.cluster, devices=args.devices, memory_cap=float(cap),
                             epsilon=args.epsilon, cache_dir=cache, progress=False)
            later.append(time.perf_counter() - t0)
        code = _FRESH.format(root=str(ROOT), model=args.model, cluster=args.cluster, devices=args.devices,
                             cap=float(caps[len(caps) // 2]), eps=args.epsilon, cache=cache)
        fresh = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.split()[-1])
    print(f"{args.model} on {args.devices} devices of {args.cluster}, epsilon={args.epsilon:g} ({len(fr)} points)")
    print("| question | seconds |")
    print("|---|---|")
    print(f"| first (build + track) | {first:.2f} |")
    print(f"| {args.caps} more caps, same process (each, median / max) | {np.median(later):.4f} / {max(later):.4f} |")
    print(f"| one cap in a fresh process, frontier read from --cache-dir (build only) | {fresh:.2f} |")
    print(f"speed-up of a repeated question: {first / np.median(later):.0f}x in memory, {first / fresh:.1f}x from disk")


if __name__ == "__main__":
    main()
