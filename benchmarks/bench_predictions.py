"""Predicted vs measured peak memory and iteration time: the ground truth in shared/, then CPU ranks.

    python benchmarks/bench_predictions.py                       # ground truth + CPU at 1, 2, 4 ranks (~5 min)
    python benchmarks/bench_predictions.py --no-cpu              # ground truth only (seconds)
    python benchmarks/bench_predictions.py --ground-truth DIR --cpu-model MODEL --ranks 1,2,4 --json out.json

1. **Ground truth** (``--ground-truth``, default ``../shared/ground-truth`` next to the
   repository, every sub-folder): each ``NAME.plan.json`` with its ``NAME.report.json`` (what the
   executor measured on that machine: ``torch.cuda.max_memory_allocated`` and the median step
   time) and ``NAME.calibration.json`` (operator shards timed on the same device). The plan's
   strategy (``choices``, ``edge_choices``) is costed again by this version of the cost model on
   the plan's cluster preset, uncalibrated and with the calibration file: peak memory
   (:mod:`tensoropt_py.cost.memory`, and where it happens), Eq. 3's additive memory, and the
   additive time. The plan file's own prediction (the version that wrote it) is printed too.
2. **CPU** (``--ranks``, default 1, 2 and 4; ``--no-cpu`` skips it): at each rank count R the
   host is first calibrated ``--calibrations`` times the way the executor will run
   (``mpiexec -n R python -m mpi4py -m tensoropt_py.calibrate --model MODEL --devices R``:
   collective tables and synchronisation terms of the R ranks, operator shards timed with all R
   ranks computing at once), then the frontier of ``--cpu-model`` on ``cpu-1x4`` with the first
   calibration gives the least-memory, turning-point and fastest plans, run by the executor
   (``mpiexec -n R``, MPI backend, ``--steps`` steps; peak memory with torch's ``MemTracker``
   over one more step, :func:`tensoropt_py.exec.runner.tracked_peak`). Each plan is costed on
   the uncalibrated preset and on every calibration (median and min..max: the calibration's
   spread), beside the executor's step time and its time in collectives (waits included).

Errors are ``(predicted - measured) / measured``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DEFAULT_GT = os.path.join(os.path.dirname(ROOT), "shared", "ground-truth")
CPU_MODEL = "small_transformer:batch=8,seq_len=128,hidden=256,heads=4,layers=2,vocab=8000"


def _err(pred, meas):
    return float("nan") if not meas else (pred - meas) / meas


def ground_truth(root: str) -> list[dict]:
    """One row per ``NAME.plan.json`` with a report under ``root``'s sub-folders."""
    from tensoropt_py.cluster import Cluster
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.cost.memory import MemoryModel
    from tensoropt_py.inputs import load_model
    from tensoropt_py.plan import Plan

    rows = []
    for plan_path in sorted(glob.glob(os.path.join(root, "**", "*.plan.json"), recursive=True)):
        name = os.path.basename(plan_path)[: -len(".plan.json")]
        folder = os.path.dirname(plan_path)
        report_path = os.path.join(folder, f"{name}.report.json")
        if not os.path.exists(report_path):
            continue
        report = json.load(open(report_path))
        plan = Plan.from_json(plan_path)
        graph = load_model(name)
        cluster = Cluster.preset(plan.cluster)
        row = {"case": f"{os.path.basename(folder)}/{name}", "devices": plan.devices,
               "memory_measured": float(report["memory"]["measured"]), "time_measured": float(report["time"]["measured"]),
               "memory_plan_file": float(plan.memory), "time_plan_file": float(plan.time)}
        variants = [("uncalibrated", cluster)]
        cal = os.path.join(folder, f"{name}.calibration.json")
        if os.path.exists(cal):
            variants.append(("calibrated", cluster.with_calibration(cal)))
        for label, cl in variants:
            mcg = build_cost_graph(graph, cl, plan.devices, optimizer=plan.optimizer)
            rec = mcg.decode(plan.choices, plan.edge_choices)
            prof = MemoryModel(mcg).profile(plan.choices, plan.edge_choices)
            row[f"time_{label}"] = rec.time
            if label == "uncalibrated":
                row.update(memory_peak=prof.peak, memory_additive=prof.additive,
                           peak_at=f"{prof.phase} {prof.operator}".strip())
        rows.append(row)
    return rows


def print_ground_truth(rows):
    print("Ground truth (the plan's strategy costed again; errors vs the executor's measurement)")
    head = (f"{'case':<16} {'measured':>9} {'peak':>16} {'additive':>16} {'plan file':>16}  {'peak at':<16}"
            f" {'measured':>9} {'uncalibrated':>17} {'calibrated':>17} {'plan file':>17}")
    print(f"{'':<16} {'memory GB':^61}  {'':<16} {'time ms':^64}")
    print(head)
    for r in rows:
        gb = lambda v: f"{v / 1e9:7.2f} ({_err(v, r['memory_measured']):+6.1%})"  # noqa: E731
        ms = lambda v: f"{v * 1e3:8.1f} ({_err(v, r['time_measured']):+6.1%})"  # noqa: E731
        cal = ms(r["time_calibrated"]) if "time_calibrated" in r else f"{'-':>17}"
        print(f"{r['case']:<16} {r['memory_measured'] / 1e9:9.2f} {gb(r['memory_peak']):>16} {gb(r['memory_additive']):>16}"
              f" {gb(r['memory_plan_file']):>16}  {r['peak_at']:<16} {r['time_measured'] * 1e3:9.1f}"
              f" {ms(r['time_uncalibrated']):>17} {cal:>17} {ms(r['time_plan_file']):>17}")


# ------------------------------------------------------------------------------------------
# CPU: inside mpiexec, every rank
# ------------------------------------------------------------------------------------------
def _recost(graph, cluster, plan) -> tuple[float, float]:
    """``(time, communication time)`` of ``plan``'s strategy costed on ``cluster``."""
    from tensoropt_py.cost.builder import build_cost_graph

    rec = build_cost_graph(graph, cluster, plan.devices, optimizer=plan.optimizer).decode(plan.choices, plan.edge_choices)
    return rec.time, rec.comm_time


def worker(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", required=True)
    p.add_argument("--calibration", nargs="*", default=[])
    a = p.parse_args(argv)
    import tensoropt_py as to
    from tensoropt_py.cluster import Cluster
    from tensoropt_py.exec.backend import world
    from tensoropt_py.exec.runner import run_plan
    from tensoropt_py.inputs import load_model

    comm = world()
    n = comm.Get_size()
    graph = load_model(a.model)
    base = Cluster.preset("cpu-1x4")
    calibrated = [base.with_calibration(f) for f in a.calibration]
    # plans are picked on the first calibration when there is one (what a user who calibrated gets)
    fr = to.frontier(graph, calibrated[0] if calibrated else base, devices=n)
    rows = []
    for label, i in (("least memory", 0), ("turning point", fr.turning_point), ("fastest", len(fr) - 1)):
        if any(r["index"] == i for r in rows):
            continue
        plan = fr.plan(i)
        try:
            rep = run_plan(plan, graph, a.steps, 0, backend="mpi", comm=comm)
        except (NotImplementedError, ValueError) as exc:
            rows.append({"ranks": n, "plan": label, "index": i, "skipped": f"{type(exc).__name__}: {exc}"[:120]})
            continue
        uncal, uncal_comm = _recost(graph, base, plan)
        cal = [_recost(graph, cl, plan) for cl in calibrated]
        rows.append({"ranks": n, "plan": label, "index": i, "memory_predicted": plan.memory,
                     "memory_additive": plan.additive_memory, "peak_at": f"{plan.peak_phase} {plan.peak_operator}".strip(),
                     "memory_measured": rep.memory_measured, "time_measured": rep.time_measured,
                     "time_uncalibrated": uncal, "comm_uncalibrated": uncal_comm,
                     "time_calibrated": [t for t, _ in cal], "comm_calibrated": [c for _, c in cal],
                     "comm_measured": rep.comm_measured})
    if comm.Get_rank() == 0:
        with open(a.out, "w") as fh:
            json.dump(rows, fh)
    return 0


def _run(cmd, env) -> str | None:
    """None when ``cmd`` succeeded, else the tail of its output."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout)[-300:]


def cpu_rows(model: str, ranks, steps: int, threads: int, calibrations: int, max_log2: int) -> list[dict]:
    """Calibrate the host at each rank count (``calibrations`` times), then run the plans."""
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        for n in ranks:
            files = []
            for c in range(calibrations):
                f = os.path.join(tmp, f"cal{n}_{c}.json")
                # the same concurrent ranks as the run: compute shares the cores as it will in training
                failed = _run(["mpiexec", "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "tensoropt_py.calibrate",
                               "--model", model, "--devices", str(n), "--cluster", "cpu-1x4", "--out", f,
                               "--max-log2", str(max_log2), "--quiet"], env)
                if failed:
                    rows.append({"ranks": n, "plan": "calibration", "skipped": failed})
                    break
                files.append(f)
            out = os.path.join(tmp, f"r{n}.json")
            failed = _run(["mpiexec", "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker", "--model", model,
                           "--steps", str(steps), "--out", out, "--calibration", *files], env)
            if failed or not os.path.exists(out):
                rows.append({"ranks": n, "plan": "-", "skipped": failed})
                continue
            rows.extend(json.load(open(out)))
    return rows


def _spread(values) -> tuple[float, float, float]:
    v = sorted(values)
    return v[0], v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2]), v[-1]


def print_cpu(rows, model):
    print(f"\nCPU (cpu-1x4 preset, uncalibrated and calibrated at the run's rank count; {model})")
    print(f"{'ranks':>5} {'plan':<14} {'memory MB: predicted':>21} {'measured':>9} {'error':>7}  "
          f"{'time ms: measured':>17} {'uncalibrated':>17} {'calibrated (median)':>20} {'min..max':>17}"
          f"  {'comm ms: measured':>17} {'calibrated':>10}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['ranks']:>5} {r['plan']:<14} skipped: {r['skipped']}")
            continue
        tm = r["time_measured"]
        line = (f"{r['ranks']:>5} {r['plan']:<14} {r['memory_predicted'] / 1e6:21.2f} {r['memory_measured'] / 1e6:9.2f}"
                f" {_err(r['memory_predicted'], r['memory_measured']):+7.1%}  {tm * 1e3:17.1f}"
                f" {r['time_uncalibrated'] * 1e3:8.1f} ({_err(r['time_uncalibrated'], tm):+6.1%})")
        if r["time_calibrated"]:
            lo, med, hi = _spread(r["time_calibrated"])
            line += (f" {med * 1e3:9.1f} ({_err(med, tm):+7.1%}) {lo * 1e3:8.1f}..{hi * 1e3:<8.1f}"
                     f"  {r['comm_measured'] * 1e3:17.1f} {_spread(r['comm_calibrated'])[1] * 1e3:10.1f}")
        else:
            line += f"  {r['comm_measured'] * 1e3:17.1f}"
        print(line)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ground-truth", default=DEFAULT_GT)
    p.add_argument("--no-cpu", action="store_true")
    p.add_argument("--cpu-model", default=CPU_MODEL)
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--calibrations", type=int, default=3,
                   help="calibrations of the CPU host per rank count (their spread is printed; 0: uncalibrated only)")
    p.add_argument("--max-log2", type=int, default=24, help="largest collective size 2^i bytes calibrated")
    p.add_argument("--json")
    a = p.parse_args(argv)
    out = {}
    if os.path.isdir(a.ground_truth):
        out["ground_truth"] = ground_truth(a.ground_truth)
        print_ground_truth(out["ground_truth"])
    else:
        print(f"no ground truth folder at {a.ground_truth}")
    if not a.no_cpu:
        ranks = [int(x) for x in a.ranks.split(",") if x]
        out["cpu"] = cpu_rows(a.cpu_model, ranks, a.steps, a.threads, a.calibrations, a.max_log2)
        print_cpu(out["cpu"], a.cpu_model)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
