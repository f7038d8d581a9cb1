"""Tracking time on the zoo's model graphs (prints a table; no asserts).

For every (model, devices) case: CostGraph build seconds, FT-LDP track seconds
(epsilon=1e-3, defaults otherwise), frontier size, heuristic eliminations, and a few
engine counters. Each case runs in a fresh subprocess with a time limit so the script
always finishes ("timeout" is printed for cases over the limit).

Usage: python benchmarks/bench_models.py [--timeout 120] [--devices 8 16] [--models transformer ...]
       [--method ldp] [--epsilon 1e-3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    "mlp": "zoo.mlp()",
    "small_transformer": "zoo.small_transformer()",
    "transformer": "zoo.transformer()",
    "gpt2_small": "zoo.gpt2('small')",
    "vgg16": "zoo.vgg16()",
    "wide_resnet": "zoo.wide_resnet()",
    "rnn_small": "zoo.rnn(layers=2, seq_len=4)",
    "bert_large": "zoo.bert_large()",
}

_CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import tensoropt_py as to
from tensoropt_py.graph import zoo
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.engine import track
t0 = time.perf_counter()
mcg = build_cost_graph({expr}, to.Cluster.preset('v100-2x8'), {devices})
t1 = time.perf_counter()
cg = mcg.cost_graph
print(json.dumps(dict(phase="built", build_s=t1 - t0, graph=str(cg))), flush=True)
fr = track(cg, method={method!r}, epsilon={epsilon!r})
t2 = time.perf_counter()
st = fr.stats or {{}}
print(json.dumps(dict(phase="tracked", track_s=t2 - t1, points=len(fr), heuristic=fr.n_heuristic,
                      branch=fr.n_branch, depth=fr.epsilon_depth,
                      stats={{k: st.get(k) for k in ("node", "leaf", "edge", "heuristic_runs", "terms", "points")}})), flush=True)
"""


def run_case(model, devices, timeout, method, epsilon):
    code = _CHILD.format(root=ROOT, expr=MODELS[model], devices=devices, method=method, epsilon=epsilon)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        out, err, status = proc.stdout, proc.stderr, ("ok" if proc.returncode == 0 else f"rc={proc.returncode}")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, status = "", "timeout"
    res = {"model": model, "devices": devices, "status": status, "wall_s": time.perf_counter() - t0}
    for line in out.splitlines():
        if line.startswith("{"):
            res.update(json.loads(line))
    if status.startswith("rc="):
        res["error"] = (err.strip().splitlines() or [""])[-1][:200]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--devices", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--method", default="ldp")
    ap.add_argument("--epsilon", type=float, default=1e-3)
    ap.add_argument("--json", action="store_true", help="print one JSON object per case")
    args = ap.parse_args(argv)
    print(f"{'model':<18}{'dev':>4}{'status':>9}{'build_s':>9}{'track_s':>9}{'points':>8}{'heur':>6}  graph")
    for devices in args.devices:
        for model in args.models:
            r = run_case(model, devices, args.timeout, args.method, args.epsilon)
            if args.json:
                print(json.dumps(r), flush=True)
                continue
            fmt = lambda k, f: (f % r[k]) if k in r else "-"  # noqa: E731
            print(
                f"{model:<18}{devices:>4}{r['status']:>9}{fmt('build_s', '%9.2f'):>9}{fmt('track_s', '%9.2f'):>9}"
                f"{fmt('points', '%8d'):>8}{fmt('heuristic', '%6d'):>6}  {r.get('graph', '')} {r.get('error', '')}",
                flush=True,
            )


if __name__ == "__main__":
    main()
