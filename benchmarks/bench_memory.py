"""Predicted peak memory vs the executor's measured peak, for every training option, at 1/2/4 ranks.

    python benchmarks/bench_memory.py                      # 3 models x 4 spaces x 1, 2, 4 ranks (~5 min)
    python benchmarks/bench_memory.py --ranks 2 --models mlp --json out.json

For each rank count R, one ``mpiexec -n R`` launch runs this file in ``--worker`` mode. Per
model (``--models``, zoo specs) and search space (plain; ``recompute=True``;
``shard_optimizer=True``; both; bf16-mixed on ``cpu-1x4`` given a bfloat16 rate), it takes
the frontier on ``cpu-1x4`` at R devices and runs, with the executor (MPI backend), its
least-memory point, its turning point, its fastest point and the point with the most
recomputed operators, ``--steps`` steps each. Measured: the peak of live bytes over one more
step on each rank, by torch's ``MemTracker`` (:func:`tensoropt_py.exec.runner.tracked_peak`),
the largest over ranks. Predicted: the plan's memory (the peak of
:mod:`tensoropt_py.cost.memory`), and Eq. 3's additive memory beside it.

Errors are ``(predicted - measured) / measured``: a negative error is a plan that uses more
memory than it said.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

MODELS = ("mlp:batch=64", "small_cnn:batch=16",
          "small_transformer:batch=8,seq_len=128,hidden=256,heads=4,layers=2,vocab=8000")
SPACES = {"plain": {}, "recompute": {"recompute": True}, "shard": {"shard_optimizer": True},
          "recompute+shard": {"recompute": True, "shard_optimizer": True}, "bf16-mixed": {"precision": "bf16-mixed"}}


def _cluster(space):
    from tensoropt_py.cluster import Cluster

    cl = Cluster.preset("cpu-1x4")
    if space != "bf16-mixed":
        return cl
    # the CPU preset has no bf16 rate: give it one (only the search's time changes, not memory)
    return dataclasses.replace(cl, name="cpu-1x4-bf16",
                               device=dataclasses.replace(cl.device, dtype_flops={"bfloat16": "50GFLOPS"}))


def worker(argv) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--models", required=True)
    p.add_argument("--spaces", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import numpy as np

    import tensoropt_py as to
    from tensoropt_py.exec.backend import world
    from tensoropt_py.exec.runner import run_plan
    from tensoropt_py.inputs import load_model

    comm = world()
    n = comm.Get_size()
    rows = []
    for spec in a.models.split(";"):
        graph = load_model(spec)
        for space in a.spaces.split(","):
            fr = to.frontier(graph, _cluster(space), devices=n, cache=False, progress=False, **SPACES[space])
            recomputed = fr.option_usage()["recompute"]
            picks = {"least memory": 0, "turning point": fr.turning_point, "fastest": len(fr) - 1,
                     "most recomputed": int(np.argmax(recomputed))}
            seen = set()
            for label, i in picks.items():
                if i in seen or (label == "most recomputed" and not recomputed[i]):
                    continue
                seen.add(i)
                plan = fr.plan(i)
                rep = run_plan(plan, graph, a.steps, 0, backend="mpi", comm=comm)
                rows.append({"ranks": n, "model": graph.name, "space": space, "plan": label, "index": i,
                             "recomputed": int(recomputed[i]), "predicted": plan.memory, "additive": plan.additive_memory,
                             "measured": rep.memory_measured, "peak_at": f"{plan.peak_phase} {plan.peak_operator}"})
    if comm.Get_rank() == 0:
        with open(a.out, "w") as fh:
            json.dump(rows, fh)
    return 0


def run(models, spaces, ranks, steps) -> list[dict]:
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        for n in ranks:
            out = os.path.join(tmp, f"r{n}.json")
            cmd = ["mpiexec", "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker", "--models",
                   ";".join(models), "--spaces", ",".join(spaces), "--steps", str(steps), "--out", out]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0 or not os.path.exists(out):
                print(f"{n} ranks failed:\n{(proc.stderr or proc.stdout)[-2000:]}")
                continue
            rows.extend(json.load(open(out)))
    return rows


def _err(pred, meas):
    return (pred - meas) / meas


def report(rows) -> None:
    print(f"{'ranks':>5} {'model':<18} {'space':<16} {'plan':<16} {'recomputed':>10} {'predicted MB':>12} "
          f"{'measured MB':>11} {'error':>7} {'additive MB':>11} {'error':>7}  peak at")
    for r in rows:
        print(f"{r['ranks']:>5} {r['model']:<18} {r['space']:<16} {r['plan']:<16} {r['recomputed']:>10} "
              f"{r['predicted'] / 1e6:12.3f} {r['measured'] / 1e6:11.3f} {_err(r['predicted'], r['measured']):+7.2%} "
              f"{r['additive'] / 1e6:11.3f} {_err(r['additive'], r['measured']):+7.2%}  {r['peak_at']}")
    print("\nper space, over every model, rank count and plan: worst error of the peak (and of the sum)")
    for space in dict.fromkeys(r["space"] for r in rows):
        sub = [r for r in rows if r["space"] == space]
        peak = [_err(r["predicted"], r["measured"]) for r in sub]
        add = [_err(r["additive"], r["measured"]) for r in sub]
        print(f"  {space:<16} {len(sub):3d} plans: peak {min(peak):+.2%} .. {max(peak):+.2%}; "
              f"sum {min(add):+.2%} .. {max(add):+.2%}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=";".join(MODELS), help="zoo model specs separated by ';'")
    p.add_argument("--spaces", default=",".join(SPACES), help=f"comma-separated, of {', '.join(SPACES)}")
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--json")
    a = p.parse_args(argv)
    spaces = [s for s in a.spaces.split(",") if s]
    bad = [s for s in spaces if s not in SPACES]
    if bad:
        p.error(f"unknown space {bad[0]!r}; allowed: {', '.join(SPACES)}")
    rows = run([m for m in a.models.split(";") if m], spaces, [int(x) for x in a.ranks.split(",") if x], a.steps)
    report(rows)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
