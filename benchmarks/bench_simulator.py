"""Delta vs full simulation (FlexFlow Table 5) and MCMC search time, measured in one run.

    python benchmarks/bench_simulator.py           # 4..64 devices, a few models
    python benchmarks/bench_simulator.py --quick   # < 1 minute

Part 1: a random walk of single-operator changes (each step a random config of a random
operator, as MCMC proposes); per step, the delta simulator applies the change
(:meth:`SimState.change`) and the full simulator rebuilds and simulates the same strategy from
scratch. Both share the simulator's cost caches, which are warmed first, so the figures compare
simulation work only. Every step also asserts that both give the same makespan. Each timing
is the best of ``--reps`` repetitions (a fresh walk each time, garbage collected before each
phase), for each task-graph backend (``--backend``: the compiled Cython event loop and/or the
pure-Python reference; see :mod:`tensoropt_py.soap.task_graph`).

Part 2: end-to-end MCMC search (:func:`tensoropt_py.soap.search`) with delta and with full
simulation (same seed: the same chain, so the same best strategy), and the time until the best
strategy was found.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time

import numpy as np

from tensoropt_py.cluster import Cluster
from tensoropt_py.soap import ConfigSpace, Simulator, data_parallel, search
from tensoropt_py.soap import task_graph


def _cluster(n: int) -> Cluster:
    base = Cluster.preset("v100-2x8")
    return dataclasses.replace(base, machines=max(1, n // base.devices_per_machine)) if n > 8 else base


def _models(quick: bool):
    try:
        from tensoropt_py import models as zoo

        out = [("small_cnn", zoo.small_cnn()), ("small_transformer", zoo.small_transformer())]
        if not quick:
            out.append(("mlp", zoo.mlp()))
        return out
    except Exception as exc:  # the zoo is optional for this benchmark
        print(f"(model zoo unavailable: {exc}; using soap.testing graphs)")
        from tensoropt_py.soap.testing import lenet_graph, mlp_graph

        return [("lenet", lenet_graph()), ("mlp", mlp_graph())]


def bench_delta_vs_full(graph, n: int, steps: int, seed: int = 0, reps: int = 3):
    sim = Simulator(graph, _cluster(n), n)
    space = ConfigSpace(graph, sim.devices)
    rng = np.random.default_rng(seed)
    moves = []
    for _ in range(steps):
        i = int(rng.integers(len(graph)))
        moves.append((i, space.random(i, rng)))
    # strategies along the walk (for the full simulator) and warm caches
    start = data_parallel(graph, sim.devices)
    strategies = []
    s = start
    for i, c in moves:
        s = s.replace(i, c)
        strategies.append(s)
    for s in strategies[: min(len(strategies), 50)]:
        sim.simulate(s, timeline=False)
    for s in strategies:
        for i, c in enumerate(s):
            sim._plan(i, c.degrees)
    t_delta = t_full = float("inf")
    for _ in range(reps):
        st = sim.start(start)
        tasks = 0
        times_delta = []
        gc.collect()
        t0 = time.perf_counter()
        for i, c in moves:
            st.change(i, c)
            times_delta.append(st.time)
            tasks += len(st.tg)
        t_delta = min(t_delta, (time.perf_counter() - t0) / steps)
        del st
        gc.collect()
        t0 = time.perf_counter()
        times_full = [sim.simulate(s, timeline=False).time for s in strategies]
        t_full = min(t_full, (time.perf_counter() - t0) / steps)
        if times_full != times_delta:
            raise AssertionError("delta and full simulation disagree")
    return t_full, t_delta, tasks / steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and sizes (< 1 min)")
    ap.add_argument("--backend", choices=("both",) + tuple(sorted(task_graph.BACKENDS)), default="both",
                    help="task-graph event loop(s) to measure (default: both)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per timing (best is kept)")
    ap.add_argument("--no-search", action="store_true", help="skip part 2 (MCMC search)")
    args = ap.parse_args(argv)
    backends = sorted(task_graph.BACKENDS, reverse=True) if args.backend == "both" else [args.backend]
    quick = args.quick
    models = _models(quick)
    device_counts = (4, 16, 64) if quick else (4, 8, 16, 32, 64)
    steps = 30 if quick else 150

    print("== Delta vs full simulation (per simulated strategy; random single-operator changes) ==")
    print(f"{'model':<18} {'backend':>7} {'devices':>7} {'tasks':>7} {'full ms':>9} {'delta ms':>9} {'speedup':>8} "
          f"{'full sim/s':>10} {'delta sim/s':>11}")
    prev = task_graph.set_backend(backends[0])
    try:
        for name, g in models[:2] if quick else models:
            for n in device_counts:
                for b in backends:
                    task_graph.set_backend(b)
                    t_full, t_delta, tasks = bench_delta_vs_full(g, n, steps if n < 64 else max(30, steps // 3),
                                                                 reps=args.reps)
                    print(f"{name:<18} {b:>7} {n:>7} {tasks:>7.0f} {t_full * 1e3:>9.2f} {t_delta * 1e3:>9.2f} "
                          f"{t_full / t_delta:>7.1f}x {1 / t_full:>10.0f} {1 / t_delta:>11.0f}")
                    sys.stdout.flush()
    finally:
        task_graph.set_backend(prev)
    if args.no_search:
        return

    print()
    print("== MCMC search (seed 0; same chain with delta and full simulation) ==")
    print(f"{'model':<18} {'devices':>7} {'budget':>6} {'DP time ms':>10} {'best ms':>9} {'gain':>6} "
          f"{'delta s':>8} {'full s':>8} {'speedup':>8} {'to best s':>9}")
    budget = 200 if quick else 1000
    for name, g in models[:2] if quick else models:
        for n in ((8,) if quick else (8, 16)):
            sim = Simulator(g, _cluster(n), n)
            dp = sim.simulate(data_parallel(g, sim.devices), timeline=False).time
            s1, r1, a = search(g, _cluster(n), n, budget=budget, seed=0, simulator=sim, return_stats=True)
            s2, r2, b = search(g, _cluster(n), n, budget=budget, seed=0, simulator=sim, delta=False, return_stats=True)
            assert r1.time == r2.time
            print(f"{name:<18} {n:>7} {budget:>6} {dp * 1e3:>10.3f} {r1.time * 1e3:>9.3f} {dp / r1.time:>5.2f}x "
                  f"{a['elapsed']:>8.2f} {b['elapsed']:>8.2f} {b['elapsed'] / a['elapsed']:>7.1f}x {a['time_to_best']:>9.2f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
