"""Training options under MPI (launched by tests/test_exec_training.py).

    mpiexec -n N python -m mpi4py tests/mpi/exec_training.py OUT.json [--models transformer,gpt2]

For each model: frontier plans with ``recompute=True, shard_optimizer=True`` (the two ends,
the plan using the most recomputed operators and one with sharded state and recomputation
mixed) train for a few steps; losses and final parameters must equal single-process torch,
the collectives of one iteration those the plan implies (reduce-scatter + all-gather for
sharded state; at most the plan's re-derivations of recomputed outputs), and the memory the executor measures
is recorded next to the prediction. A ``bf16-mixed`` plan (on ``cpu-1x4`` with a bf16 rate)
trains too; its losses are recorded next to the fp32 reference. Rank 0 writes OUT.json.
"""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import tensoropt_py as to
from tensoropt_py.cluster import Cluster
from tensoropt_py.engine import track
from tensoropt_py.exec.measure import collective_counts, expected_collectives
from tensoropt_py.exec.runner import reference_train, run_plan
from tensoropt_py.graph import zoo
from tensoropt_py.plan import Plan, plan_from_choices

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exec_models import MODELS  # noqa: E402
from exec_suite_records import last_records  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--models", default="transformer")
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()

comm = MPI.COMM_WORLD
n = comm.Get_size()
summary = {"devices": n, "models": {}}
LR = 1e-2


def bf16_cluster():
    cl = Cluster.preset("cpu-1x4")
    return dataclasses.replace(cl, name="cpu-1x4-bf16",
                               device=dataclasses.replace(cl.device, dtype_flops={"bfloat16": "50GFLOPS"}))


def pick(fr):
    use = fr.option_usage()
    rec, sh = use["recompute"], use["shard_state"]
    idx = {"min_memory": 0, "min_time": len(fr) - 1, "most_recomputed": int(np.argmax(rec))}
    both = np.flatnonzero((rec > 0) & (sh > 0))
    if both.size:
        idx["mixed"] = int(both[len(both) // 2])
    return idx, rec, sh


def most_recomputed(fr, graph):
    """The strategy with the most recomputed operators on the engine's additive frontier of ``fr``'s
    space: where recomputation does not lower a model's peak, no point of the (peak) frontier recomputes."""
    mcg = fr.model_cost_graph
    tr = track(mcg.cost_graph)
    counts = [sum(mcg.configs[i][k].recompute for i, k in enumerate(ch)) for ch in tr.choices]
    p = int(np.argmax(counts))
    plan = plan_from_choices(mcg, tr.choices[p], tr.edge_choices[p], model=graph.name, cluster="cpu-1x4")
    return plan, counts[p], sum(o.shard_state for o in plan.operators)


def check(name):
    graph = zoo.small_transformer() if name == "small_transformer" else MODELS[name]()
    ref, ref_params = reference_train(graph, args.steps, seed=3, optimizer="adam", lr=LR)
    fr = to.frontier(graph, "cpu-1x4", n, recompute=True, shard_optimizer=True, progress=False)
    idx, rec, sh = pick(fr)
    out = {"points": len(fr), "plans": []}
    plans = {pname: (fr.plan(i), i, int(rec[i]), int(sh[i])) for pname, i in idx.items()}
    if not rec.max():
        plan, count, sharded = most_recomputed(fr, graph)
        plans["most_recomputed"] = (plan, -1, count, sharded)
    for pname, (plan, i, recomputed, sharded) in plans.items():
        plan = Plan.from_json(plan.to_json())  # through JSON, as a user runs it
        rep = run_plan(plan, graph, args.steps, 3, backend="mpi", optimizer="adam", lr=LR, warmup=0,
                       return_params=True)
        if not np.allclose(rep.losses, ref, rtol=1e-4, atol=1e-6):
            raise AssertionError(f"{name} {pname} on {n}: losses {rep.losses} != reference {ref}")
        worst = max(float((rep.params[k] - v).abs().max()) for k, v in ref_params.items() if k in rep.params)
        if worst > 2e-4:
            raise AssertionError(f"{name} {pname} on {n}: parameters differ from the reference by {worst}")
        want = {f"{p}:{k}": v for (p, k), v in expected_collectives(plan, graph).items()}
        got = {f"{p}:{k}": v for (p, k), v in collective_counts(last_records(rep)).items()}
        # re-derivations run where autograd really saved the consumer's copy; the IR's ``saved``
        # may over-approximate (a division by a count saves nothing): at most the plan's, the rest exact
        exact = lambda d: {k: v for k, v in d.items() if not k.startswith("rederive:")}  # noqa: E731
        over = {k: v for k, v in got.items() if k.startswith("rederive:") and v > want.get(k, 0)}
        if exact(got) != exact(want) or over:
            raise AssertionError(f"{name} {pname} on {n} rank {comm.Get_rank()}: ran {got}, the plan says {want}")
        out["plans"].append({"plan": pname, "index": i, "recomputed": recomputed, "sharded": sharded,
                             "losses": rep.losses, "reference": ref, "max_param_error": worst, "collectives": got,
                             "memory": [rep.memory_predicted, rep.memory_measured]})
    fb = to.frontier(graph, bf16_cluster(), n, recompute=True, shard_optimizer=True, precision="bf16-mixed",
                     progress=False)
    plan = fb.plan(len(fb) - 1)
    rep = run_plan(plan, graph, args.steps, 3, backend="mpi", optimizer="adam", lr=LR, warmup=0)
    out["bf16"] = {"precision": plan.precision, "losses": rep.losses, "reference": ref,
                   "memory": [rep.memory_predicted, rep.memory_measured]}
    return out


for m in filter(None, args.models.split(",")):
    summary["models"][m] = check(m)
if comm.Get_rank() == 0:
    with open(args.out, "w") as fh:
        json.dump(summary, fh, indent=1)
    print("OK")
