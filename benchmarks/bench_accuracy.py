"""Executor accuracy: predicted vs measured memory, time and communication time of frontier plans.

    python benchmarks/bench_accuracy.py                   # calibrate, then 10 plans x 2 models at 4 ranks
    python benchmarks/bench_accuracy.py --reuse-calibration --workdir /tmp/bench_accuracy

Steps:

1. **Calibrate** this machine into ``WORKDIR/calibration.json``: the collectives with
   ``mpiexec -n RANKS python -m mpi4py -m tensoropt_py.calibrate --max-log2 20``, then the
   operator compute of each model at its 4-device shard shapes with
   ``mpiexec -n RANKS python -m mpi4py -m tensoropt_py.calibrate --model NAME --devices RANKS
   --no-comm``, every rank timing each shard at the same moment and the slowest kept (merged into
   the same file; ``--lone-compute``: one process), and load ``Cluster.preset("cpu-1x4").with_calibration(...)``.
2. **Plans**: the frontier of each model on the calibrated cluster
   (:func:`tensoropt_py.api.frontier`), ``--plans`` points spread over it (one seeded random
   point per equal-count slice of the frontier, memory-ascending), each written as a plan JSON.
   The same strategies (``choices``, ``edge_choices``) are also costed with the uncalibrated
   preset (the cost graph rebuilt without the calibration, then decoded), so each plan has an
   uncalibrated and a calibrated prediction.
3. **Run**: one ``mpiexec -n RANKS`` launch per model runs all of its plans one after the other
   (this file in ``--worker`` mode calls :func:`tensoropt_py.exec.runner.run_plan`; a launch costs
   several seconds of torch import), ``--steps`` steps each, ``--seed``; rank 0 writes one report
   JSON per plan. A plan the executor cannot run is recorded and skipped; if a launch dies, the
   plans it did not finish are retried one launch each. Every process (calibration and ranks)
   gets ``OMP_NUM_THREADS=--threads`` (default 1): with torch's default of one thread per core,
   4 ranks on a 2-core machine oversubscribe it further, and the compute calibration of a lone
   process records descheduled-thread waits (~40 ms for a 0.2 ms matrix product) as compute.
4. **Print** per model the mean and max relative error |measured - predicted| / predicted of
   memory, time and communication time, uncalibrated and calibrated, then the per-plan rows.
   ``--json`` writes everything.

Measured memory on CPU ranks is the executor's own count (parameter + optimizer state bytes plus
the peak of tensors autograd saved); measured communication time is the sum of the timed
collectives of one step (forward, backward, gradient sync); times are medians over the steps after
the first (``warmup=1``), the maximum over ranks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

THREADS = 1
METRICS = (("memory", "memory"), ("time", "time"), ("comm", "communication_time"))


# ------------------------------------------------------------------------------------------
# worker: runs inside mpiexec, every rank
# ------------------------------------------------------------------------------------------
def worker(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--calibration", required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("jobs", nargs="+", help="PLAN.json:REPORT.json pairs")
    a = p.parse_args(argv)
    from tensoropt_py.inputs import load_model
    from tensoropt_py.exec.backend import world
    from tensoropt_py.exec.runner import run_plan

    comm = world()
    graph = load_model(a.model)
    for job in a.jobs:
        plan_path, report_path = job.split(":", 1)
        try:
            rep = run_plan(plan_path, graph, a.steps, a.seed, backend="mpi", calibration=a.calibration, comm=comm)
        except BaseException as exc:  # noqa: BLE001
            if getattr(exc, "_tensoropt_during_run", False):
                # one rank failed mid-run: the others may be stuck in a collective; end the job,
                # the driver retries the rest one launch each.
                print(f"rank {comm.Get_rank()}: {plan_path}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                comm.Abort(1)
            if comm.Get_rank() == 0:  # a setup error every rank agreed on: record it, go on
                with open(report_path, "w", encoding="utf-8") as fh:
                    json.dump({"error": f"{type(exc).__name__}: {exc}"}, fh)
            continue
        if comm.Get_rank() == 0:
            rep.to_json(report_path)
            print(f"  {os.path.basename(plan_path)}: time {rep.time_measured * 1e3:.2f} ms "
                  f"(pred {rep.time_predicted * 1e3:.2f}), memory {rep.memory_measured:,.0f} B "
                  f"(pred {rep.memory_predicted:,.0f})", flush=True)
        comm.Barrier()
    return 0


# ------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------
def _sh(cmd, nice):
    cmd = (["nice", "-n", str(nice)] if nice else []) + [str(c) for c in cmd]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    env = dict(os.environ)
    if THREADS:  # torch intra-op threads per process (calibration and every rank alike)
        env.update(OMP_NUM_THREADS=str(THREADS), MKL_NUM_THREADS=str(THREADS))
    r = subprocess.run(cmd, cwd=ROOT, env=env)
    print(f"  ({time.perf_counter() - t0:.1f} s, exit {r.returncode})", flush=True)
    return r.returncode


def calibrate(args, cal):
    mpi = ["mpiexec", "-n", args.ranks, sys.executable, "-m", "mpi4py"]
    if _sh(mpi + ["-m", "tensoropt_py.calibrate", "--out", cal, "--max-log2", args.max_log2, "-q"], args.nice):
        raise SystemExit("collective calibration failed")
    for model in args.models:
        # the operator shards are timed on all ranks at once (the load of a training step);
        # --lone-compute times them in one process, as on a machine with a device per rank
        launcher = [sys.executable] if args.lone_compute else mpi
        if _sh(launcher + ["-m", "tensoropt_py.calibrate", "--model", model, "--devices", args.ranks,
                           "--out", cal, "--no-comm", "--cluster", "cpu-1x4"], args.nice):
            raise SystemExit(f"compute calibration of {model} failed")


def pick(n_points, k, rng):
    """``k`` indices spread over ``range(n_points)``: one random index per equal-count slice."""
    import numpy as np

    if n_points <= k:
        return list(range(n_points))
    edges = np.linspace(0, n_points, k + 1)
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        lo, hi = int(math.ceil(lo)), int(math.ceil(hi))
        out.append(int(rng.integers(lo, max(hi, lo + 1))))
    return sorted(set(out))


def make_plans(args, cal, model):
    import numpy as np

    from tensoropt_py.api import frontier
    from tensoropt_py.inputs import load_model
    from tensoropt_py.plan import plan_from_choices
    from tensoropt_py.cluster import Cluster
    from tensoropt_py.cost.builder import build_cost_graph

    base = Cluster.preset("cpu-1x4")
    cl = base.with_calibration(cal)
    t0 = time.perf_counter()
    fr = frontier(model, cl, devices=args.ranks)
    graph = load_model(model)
    unc = build_cost_graph(graph, base, args.ranks, optimizer=fr.optimizer)
    print(f"{model}: frontier of {len(fr)} points on calibrated {cl.name} ({time.perf_counter() - t0:.1f} s), "
          f"{fr.memory.min():,.0f}-{fr.memory.max():,.0f} B, {fr.time.min() * 1e3:.3g}-{fr.time.max() * 1e3:.3g} ms",
          flush=True)
    rng = np.random.default_rng(args.seed)
    rows = []
    for i in pick(len(fr), args.plans, rng):
        plan = fr.plan(i)
        path = os.path.join(args.workdir, f"{model}_{i}.plan.json")
        plan.to_json(path)
        row = {"model": model, "index": int(i), "plan": path,
               "report": os.path.join(args.workdir, f"{model}_{i}.report.json"),
               "cal": {"memory": plan.memory, "time": plan.time, "comm": plan.communication_time},
               "mesh": sorted({"x".join(map(str, o.mesh)) for o in plan.operators})}
        try:  # the same strategy under the uncalibrated preset (same configurations, other costs)
            up = plan_from_choices(unc, fr.choices[i], fr.edge_choices[i], model=fr.model, cluster=base.name,
                                   optimizer=fr.optimizer, fingerprint=graph.fingerprint())
            same = [a.config for a in plan.operators] == [b.config for b in up.operators]
        except Exception as exc:  # noqa: BLE001
            up, same = None, False
            print(f"  {model}#{i}: uncalibrated decode failed: {exc}")
        row["uncal"] = ({"memory": up.memory, "time": up.time, "comm": up.communication_time} if same else None)
        rows.append(row)
    return rows


def run_rows(args, cal, model, rows):
    mpi = ["mpiexec", "-n", args.ranks, sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--worker",
           "--model", model, "--calibration", cal, "--steps", args.steps, "--seed", args.seed]
    todo = [r for r in rows if not os.path.exists(r["report"])]
    if todo:
        _sh(mpi + [f"{r['plan']}:{r['report']}" for r in todo], args.nice)
    for r in rows:  # a launch that died: the rest one launch each
        if not os.path.exists(r["report"]):
            if _sh(mpi + [f"{r['plan']}:{r['report']}"], args.nice) and not os.path.exists(r["report"]):
                with open(r["report"], "w", encoding="utf-8") as fh:
                    json.dump({"error": "the run aborted (see its output above)"}, fh)


def rel(measured, predicted):
    if predicted is None or measured is None:
        return float("nan")
    if predicted == 0:
        return 0.0 if measured == 0 else float("nan")
    return (measured - predicted) / predicted


def collect(rows):
    for r in rows:
        with open(r["report"], encoding="utf-8") as fh:
            rep = json.load(fh)
        if "error" in rep:
            r["error"] = rep["error"]
            continue
        r["measured"] = {m: rep[key]["measured"] for m, key in METRICS}
        for which in ("uncal", "cal"):
            pred = r[which]
            r[f"err_{which}"] = {m: rel(r["measured"][m], pred[m] if pred else None) for m, _ in METRICS}


def _stats(vals):
    vals = [abs(v) for v in vals if not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan"), 0
    return sum(vals) / len(vals), max(vals), len(vals)


def summarize(rows):
    out = {}
    for which in ("uncal", "cal"):
        for m, _ in METRICS:
            out[(which, m)] = _stats([r[f"err_{which}"][m] for r in rows if "measured" in r])
    return out


def _pct(x):
    return "n/a" if math.isnan(x) else f"{x:.0%}" if abs(x) >= 10 else f"{x:.1%}"


def _ms(s):
    return f"{s * 1e3:.3g}"


def report(all_rows):
    print()
    print("Mean / max |measured - predicted| / predicted over the plans that ran "
          "(uncalibrated cpu-1x4 -> calibrated):")
    print()
    print("| model | plans run | memory | time | communication time |")
    print("|---|---|---|---|---|")
    summary = {}
    for model, rows in all_rows.items():
        s = summarize(rows)
        summary[model] = {f"{w}_{m}": {"mean": v[0], "max": v[1], "n": v[2]} for (w, m), v in s.items()}
        ran = sum("measured" in r for r in rows)
        cells = []
        for m, _ in METRICS:
            u, c = s[("uncal", m)], s[("cal", m)]
            cells.append(f"{_pct(u[0])} / {_pct(u[1])} -> {_pct(c[0])} / {_pct(c[1])}")
        print(f"| {model} | {ran} of {len(rows)} | " + " | ".join(cells) + " |")
    print()
    for model, rows in all_rows.items():
        print(f"{model}: per plan (memory B, time ms, communication ms; predicted uncalibrated / calibrated / measured)")
        print(f"  {'#':>4} {'memory unc/cal/meas':>32} {'time unc/cal/meas':>26} {'comm unc/cal/meas':>26}  meshes")
        for r in rows:
            if "error" in r:
                print(f"  {r['index']:>4} not run: {r['error'][:120]}")
                continue
            u, c, me = r["uncal"] or {"memory": float("nan"), "time": float("nan"), "comm": float("nan")}, r["cal"], r["measured"]
            print(f"  {r['index']:>4} {u['memory']:>10,.0f} {c['memory']:>10,.0f} {me['memory']:>10,.0f} "
                  f"{_ms(u['time']):>8} {_ms(c['time']):>8} {_ms(me['time']):>8} "
                  f"{_ms(u['comm']):>8} {_ms(c['comm']):>8} {_ms(me['comm']):>8}  {','.join(r['mesh'])}")
        print()
    return summary


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--worker":
        return worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,small_transformer")
    p.add_argument("--plans", type=int, default=10, help="frontier points per model (default 10)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-log2", type=int, default=20)
    p.add_argument("--workdir", default="/tmp/bench_accuracy")
    p.add_argument("--reuse-calibration", action="store_true", help="keep WORKDIR/calibration.json if present")
    p.add_argument("--reuse-reports", action="store_true", help="keep report JSONs already in WORKDIR")
    p.add_argument("--nice", type=int, default=10, help="nice level of the subprocesses (0: none)")
    p.add_argument("--threads", type=int, default=1,
                   help="OMP/MKL threads per process, calibration and ranks alike (default 1: 4 ranks share the "
                        "cores already; 0 leaves torch's default)")
    p.add_argument("--lone-compute", action="store_true",
                   help="time the operator shards in one process instead of on all ranks at once")
    p.add_argument("--json", default=None, help="write rows and summary here")
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    global THREADS
    THREADS = args.threads
    os.makedirs(args.workdir, exist_ok=True)
    cal = os.path.join(args.workdir, "calibration.json")
    t0 = time.perf_counter()
    if not (args.reuse_calibration and os.path.exists(cal)):
        if os.path.exists(cal):
            os.remove(cal)
        calibrate(args, cal)
    all_rows = {}
    for model in args.models:
        rows = make_plans(args, cal, model)
        if not args.reuse_reports:
            for r in rows:
                if os.path.exists(r["report"]):
                    os.remove(r["report"])
        run_rows(args, cal, model, rows)
        collect(rows)
        all_rows[model] = rows
    summary = report(all_rows)
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": summary, "rows": all_rows}, fh, indent=1, allow_nan=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
