"""Benchmarks of the frontier engine (prints figures and ratios measured in one run; no asserts).

Sections:
  1. compiled kernel vs pure NumPy/Python reference on the same inputs;
  2. FT-LDP vs FT-Elimination on chains (the paper's Table 3 reports 6-15x);
  3. threads=1 vs threads=2 (identical results);
  4. dense edges vs the same costs as LayoutEdges;
  5. epsilon: measured memory loss vs the exact frontier, and the proven bound;
  6. scale: chains and layered DAGs of 100..2000 nodes, K 16..256, dense / layout,
     exact / epsilon=1e-3: seconds, peak RSS (each case in a fresh process), frontier size;
     including the target case (500-node chain, K=128, 16 layout classes, epsilon=1e-3).

Usage: python benchmarks/bench_engine.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tensoropt_py.elimination import combine_ragged, reduce_ragged  # noqa: E402
from tensoropt_py.elimination.reference import combine_reference, reduce_ragged_reference  # noqa: E402
from tensoropt_py.engine import CostGraph, reduce, track  # noqa: E402
from tensoropt_py.engine.scalar import (  # noqa: E402
    lex_min_of_sums,
    lex_min_of_sums_reference,
    min_of_sums,
    min_of_sums_reference,
)
from tensoropt_py.engine.random_graphs import random_chain, random_layered_dag  # noqa: E402


def timed(fn, *a, repeat=1, **kw):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        best = min(best, time.perf_counter() - t0)
    return best, out


def table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = " | ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print()


def random_tables(rng, S, n_cells, pts):
    tabs = []
    for _ in range(S):
        offs, ms, ts = [0], [], []
        for _ in range(n_cells):
            p = np.stack([10 ** rng.uniform(6, 9, pts), 10 ** rng.uniform(-4, -1, pts)], axis=1)
            f = reduce(p)
            ms.extend(f[:, 0])
            ts.extend(f[:, 1])
            offs.append(len(ms))
        tabs.append((np.array(offs), np.array(ms), np.array(ts)))
    return tabs


def bench_kernels(quick):
    print("## 1. compiled kernel vs reference (same inputs)\n")
    rng = np.random.default_rng(0)
    rows = []
    n_out = 8 if quick else 24
    # LDP-like: per output cell, union over terms of (frontier cell x single point)
    tabs = random_tables(rng, 1, 16, 400) + [(np.arange(17), rng.uniform(1e5, 1e7, 16), rng.uniform(1e-5, 1e-3, 16))]
    term_off = np.arange(n_out + 1) * 16
    cells = np.stack([rng.integers(0, 16, term_off[-1]), rng.integers(0, 16, term_off[-1])], axis=1)
    tc, a = timed(combine_ragged, tabs, term_off, cells, threads=1, repeat=20)
    tr, b = timed(combine_reference, tabs, term_off, cells)
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    rows.append(["combine (union of shifted frontiers)", int(term_off[-1]), int(a[0][-1]), f"{tc * 1e3:.2f}", f"{tr * 1e3:.0f}", f"{tr / tc:.0f}x", same])
    # products of multi-point cells
    tabs = random_tables(rng, 3, 8, 12)
    term_off = np.arange(n_out + 1) * 8
    cells = np.stack([rng.integers(0, 8, term_off[-1]) for _ in range(3)], axis=1)
    tc, a = timed(combine_ragged, tabs, term_off, cells, threads=1, repeat=20)
    tr, b = timed(combine_reference, tabs, term_off, cells)
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    rows.append(["combine (3-way products)", int(term_off[-1]), int(a[0][-1]), f"{tc * 1e3:.2f}", f"{tr * 1e3:.0f}", f"{tr / tc:.0f}x", same])
    n = 20000 if quick else 100000
    offs = np.arange(0, n + 1, 100)
    m, t = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    tc, a = timed(reduce_ragged, offs, m, t, repeat=20)
    tr, b = timed(reduce_ragged_reference, offs, m, t)
    same = all(np.array_equal(x, y) for x, y in zip(a, b))
    rows.append(["reduce_ragged", n, int(a[0][-1]), f"{tc * 1e3:.2f}", f"{tr * 1e3:.0f}", f"{tr / tc:.0f}x", same])
    # min_sum's min-plus step: a node of 51 configs eliminated next to neighbours of 22, 100 and
    # 127 classes (one of the Transformer@16's), six factors: the least over axis 0 of their sum
    shape = (51, 22, 100, 127)
    factors = [rng.random(sh) for sh in ((51, 1, 1, 1), (51, 1, 100, 1), (51, 1, 100, 1), (51, 1, 1, 127), (51, 1, 1, 1),
                                          (51, 22, 1, 1))]
    tc, a = timed(min_of_sums, factors, shape, repeat=5)
    tr, b = timed(min_of_sums_reference, factors, shape, repeat=5)
    rows.append(["min_of_sums (min_sum's min-plus step)", int(np.prod(shape)), int(a.size), f"{tc * 1e3:.2f}", f"{tr * 1e3:.0f}",
                 f"{tr / tc:.1f}x", bool(np.array_equal(a, b))])
    # the same step for two components compared in order (min_sum's lam = inf: memory, then
    # time), with a first component of real values (ties rare) and of 3 levels (ties everywhere)
    second = [rng.random(f.shape) for f in factors]
    for label, first in (("rare ties", factors), ("dense ties", [np.round(2 * f) for f in factors])):
        tc, a = timed(lex_min_of_sums, first, second, shape, 1e-12, repeat=5)
        tr, b = timed(lex_min_of_sums_reference, first, second, shape, 1e-12, repeat=5)
        rows.append([f"lex_min_of_sums ({label})", int(np.prod(shape)), int(a[0].size), f"{tc * 1e3:.2f}",
                     f"{tr * 1e3:.0f}", f"{tr / tc:.1f}x", all(np.array_equal(x, y) for x, y in zip(a, b))])
    table(rows, ["kernel", "input terms/points", "output points", "compiled ms", "reference ms", "speed-up", "identical"])


def bench_ldp_vs_elim(quick):
    print("## 2. FT-LDP vs FT-Elimination on chains (exact methods, same epsilon)\n")
    rows = []
    cases = [(30, 16, None, 1e-3), (30, 32, None, 1e-3)] if quick else [(50, 16, None, 1e-3), (50, 32, None, 1e-3), (25, 64, None, 1e-3), (50, 64, 8, 1e-3), (50, 128, 16, 1e-3)]
    for n, k, lay, eps in cases:
        cg = random_chain(n, k, layouts=lay, seed=1)
        ta, a = timed(track, cg, method="ldp", epsilon=eps, threads=1)
        tb, b = timed(track, cg, method="elimination", epsilon=eps, threads=1)
        rows.append([n, k, lay or "dense", eps, f"{ta:.3f}", f"{tb:.3f}", f"{tb / ta:.1f}x", len(a), len(b)])
    table(rows, ["n", "K", "edges", "epsilon", "LDP s", "elimination s", "LDP speed-up", "P (LDP)", "P (elim)"])


def bench_threads(quick):
    print("## 3. threads=1 vs threads=2 (results must be identical)\n")
    rows = []
    cases = [("chain", random_chain(100 if quick else 300, 128, layouts=16, seed=2)),
             ("chain dense", random_chain(40 if quick else 80, 64, seed=2)),
             ("layered DAG", random_layered_dag(10 if quick else 30, 2, 16, layouts=4, options=2, seed=3))]
    for name, cg in cases:
        c0 = time.process_time()
        t1, a = timed(track, cg, epsilon=1e-3, threads=1)
        c1 = time.process_time()
        t2, b = timed(track, cg, epsilon=1e-3, threads=2)
        c2 = time.process_time()
        same = np.array_equal(a.memory, b.memory) and np.array_equal(a.choices, b.choices) and np.array_equal(a.edge_choices, b.edge_choices)
        rows.append([name, str(cg), f"{t1:.2f}", f"{t2:.2f}", f"{t1 / t2:.2f}x", f"{(c1 - c0) / t1:.2f}", f"{(c2 - c1) / t2:.2f}", same])
    table(rows, ["graph", "size", "threads=1 s", "threads=2 s", "speed-up", "cpu/wall (1)", "cpu/wall (2)", "identical"])
    print(f"(load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: on a shared machine thread speed-ups are noisy;"
          " cpu/wall > 1 shows the nogil kernel chunks running concurrently)\n")


def bench_dense_vs_layout(quick):
    print("## 4. dense edges vs the same costs as LayoutEdges (FT-LDP)\n")
    rows = []
    cases = [(40, 64, 8)] if quick else [(60, 64, 8), (60, 128, 16), (30, 256, 16)]
    for n, k, A in cases:
        cg_l = random_chain(n, k, layouts=A, seed=4)
        cg_d = CostGraph(cg_l.node_costs, [(u, v, e.dense()) for u, v, e in cg_l.edges])
        tl, a = timed(track, cg_l, epsilon=1e-3, threads=1)
        td, b = timed(track, cg_d, epsilon=1e-3, threads=1)
        # exactness check of the layout path on a short prefix of the same costs (epsilon = 0)
        short_l = CostGraph(cg_l.node_costs[:8], cg_l.edges[:7])
        short_d = CostGraph(cg_l.node_costs[:8], [(u, v, e.dense()) for u, v, e in cg_l.edges[:7]])
        ea, eb = track(short_l, exact=True), track(short_d, exact=True)
        same = (len(ea) == len(eb) and np.array_equal(ea.choices, eb.choices)
                and np.allclose(ea.memory, eb.memory, rtol=1e-12) and np.allclose(ea.time, eb.time, rtol=1e-12))
        rows.append([n, k, A, f"{td:.2f}", f"{tl:.2f}", f"{td / tl:.1f}x", b.stats["terms"], a.stats["terms"],
                     f"{max(loss(b, a), loss(a, b)):.1e}", same])
    table(rows, ["n", "K", "layouts", "dense s", "layout s", "layout speed-up", "dense terms", "layout terms",
                 "gap between the two eps results", "same exact frontier (8-node prefix)"])


def loss(exact, approx):
    """Largest relative memory gap: max over exact points of min m'/m - 1 over points with t' <= t."""
    worst = 0.0
    for m, t in zip(exact.memory, exact.time):
        ok = approx.time <= t * (1 + 1e-12)
        worst = max(worst, float(approx.memory[ok].min() / m - 1) if ok.any() else float("inf"))
    return worst


def bench_epsilon(quick):
    print("## 5. epsilon thinning: measured loss vs exact, proven bound (1+eps)^L\n")
    rows = []
    graphs = [("chain 40 x K16 dense", random_chain(40, 16, seed=5)),
              ("chain 40 x K32 layouts 8", random_chain(40, 32, layouts=8, seed=5))]
    if not quick:
        graphs += [("chain 100 x K32 layouts 8", random_chain(100, 32, layouts=8, seed=6)),
                   ("layered 10x2 K8", random_layered_dag(10, 2, 8, options=2, seed=7))]
    for name, cg in graphs:
        te, ex = timed(track, cg, exact=True, threads=1)
        for eps in (1e-4, 1e-3, 1e-2):
            ta, ap = timed(track, cg, exact=True, epsilon=eps, threads=1)
            rows.append([name, eps, len(ex), len(ap), f"{te:.2f}", f"{ta:.2f}", f"{loss(ex, ap):.2e}", ap.epsilon_depth, f"{ap.memory_bound_factor - 1:.2e}"])
    table(rows, ["graph", "epsilon", "P exact", "P eps", "exact s", "eps s", "max memory gap", "L", "bound (1+eps)^L-1"])


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from tensoropt_py.engine import track
from tensoropt_py.engine.random_graphs import random_chain, random_layered_dag
kind, n, k, lay, eps, method = {args!r}
if kind == "chain":
    cg = random_chain(n, k, layouts=lay, seed=11)
else:
    cg = random_layered_dag(n // 2, 2, k, layouts=lay, options=2, skip_prob=0.2, seed=11)
def hwm():
    # VmHWM is the peak RSS of this process image (unlike ru_maxrss, not inherited over fork+exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = hwm()
t0 = time.perf_counter()
fr = track(cg, method=method, epsilon=eps)
sec = time.perf_counter() - t0
print(json.dumps(dict(seconds=sec, peak_mb=hwm(), base_mb=base, P=len(fr), heur=fr.n_heuristic, L=fr.epsilon_depth,
                      stored=fr.stats["stored_points"], nodes=cg.n_nodes)))
"""


def run_case(args, timeout):
    code = CHILD.format(root=ROOT, args=args)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_scale(quick):
    print("## 6. scale (threads = all cores, each case in a fresh process; peak = VmHWM of that process;"
          " layered = width-2 layered DAG with skip edges)\n")
    if quick:
        cases = [("chain", 100, 16, 4, 1e-3, "ldp"), ("chain", 100, 128, 16, 1e-3, "ldp"), ("chain", 60, 16, None, 0.0, "ldp"),
                 ("layered", 40, 16, 4, 1e-3, "ldp"), ("chain", 500, 128, 16, 1e-3, "ldp")]
        timeout = 60
    else:
        cases = [
            ("chain", 100, 16, None, 0.0, "ldp"),
            ("chain", 100, 16, 4, 0.0, "ldp"),
            ("chain", 100, 64, None, 1e-3, "ldp"),
            ("chain", 500, 16, 4, 1e-3, "ldp"),
            ("chain", 500, 64, 16, 1e-3, "ldp"),
            ("chain", 500, 128, 16, 1e-3, "ldp"),  # the target case
            ("chain", 500, 128, None, 1e-3, "ldp"),
            ("chain", 1000, 128, 16, 1e-3, "ldp"),
            ("chain", 2000, 64, 16, 1e-3, "ldp"),
            ("chain", 2000, 256, 16, 1e-3, "ldp"),
            ("layered", 100, 16, 4, 1e-3, "ldp"),
            ("layered", 100, 16, 4, 1e-3, "elimination"),
            ("layered", 100, 16, None, 1e-3, "ldp"),
            ("layered", 300, 16, 4, 1e-3, "ldp"),
        ]
        timeout = 150
    rows = []
    for c in cases:
        r = run_case(c, timeout)
        kind, n, k, lay, eps, method = c
        label = [kind, n, k, lay or "dense", eps, method]
        if r is None:
            rows.append(label + [f">{timeout}s", "", "", "", "", ""])
        elif "error" in r:
            rows.append(label + ["error: " + r["error"][:60], "", "", "", "", ""])
        else:
            rows.append(label + [f"{r['seconds']:.2f}", f"{r['peak_mb']:.0f} (+{r['peak_mb'] - r['base_mb']:.0f})", r["P"], r["heur"], r["L"], r["stored"]])
        print("  ", rows[-1], flush=True)
    print()
    table(rows, ["graph", "nodes", "K", "layouts", "epsilon", "method", "seconds", "peak MB (+over import)", "P", "heuristic", "L", "stored points"])
    print("target: 500-node chain, K=128, 16 layout classes, epsilon=1e-3 -> row 'chain | 500 | 128 | 16' (goal < 10 s)\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, < 1 min")
    ap.add_argument("--only", default="", help="comma-separated section numbers to run (default: all)")
    args = ap.parse_args(argv)
    only = {int(x) for x in args.only.split(",") if x}
    print(f"# bench_engine ({'quick' if args.quick else 'full'}), {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    t0 = time.perf_counter()
    sections = [bench_kernels, bench_ldp_vs_elim, bench_threads, bench_dense_vs_layout, bench_epsilon, bench_scale]
    for i, fn in enumerate(sections, 1):
        if not only or i in only:
            fn(args.quick)
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
