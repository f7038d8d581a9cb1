"""Tiny Hugging Face models trained by the executor under MPI (launched by tests/test_hf_models.py).

    mpiexec -n N python -m mpi4py tests/mpi/hf_exec.py OUT.json --models llama,bert,t5,vit,mixtral

Every model (tests/mpi/hf_models.py) is imported with from_torch, its frontier on N devices of
``cpu-1x4`` is tracked, and the two ends of the frontier (plus, for a mixture of experts, the
first frontier plan that splits the experts across devices, and ``--random K`` random frontier
plans) train for a few steps; the losses
and final parameters must equal single-process training of the same graph (``reference_train``).
Any mismatch raises on the rank that saw it (python -m mpi4py then aborts the job). Rank 0
writes a JSON summary to OUT.json.
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import tensoropt_py as to
from tensoropt_py.exec.runner import reference_train, run_plan
from tensoropt_py.graph.ir import OpKind
from tensoropt_py.graph.torch_import import from_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_models  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--models", default="llama,bert,t5,vit,mixtral")
ap.add_argument("--steps", type=int, default=2)
ap.add_argument("--random", type=int, default=0, help="random frontier plans per model, besides the ends")
args = ap.parse_args()
comm = MPI.COMM_WORLD
n = comm.Get_size()
torch.set_num_threads(1)


def expert_split(graph, plan):
    """True if some MOE_EXPERTS operator of ``plan`` splits its experts."""
    ops = {op.name: op for op in graph.operators}
    return any(ops[p.name].kind is OpKind.MOE_EXPERTS and any(d == "e" for d, _ in p.assignment)
               for p in plan.operators)


def check(arch):
    module, inputs = hf_models.module(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = from_torch(module, inputs, name=arch)
    fr = to.frontier(graph, "cpu-1x4", devices=n, max_configs=8)
    plans = [("min_memory", fr.plan(0)), ("min_time", fr.plan(len(fr) - 1))]
    if hf_models.KINDS[arch] == "moe" and n > 1:
        split = [i for i in range(len(fr)) if expert_split(graph, fr.plan(i))]
        # prefer a plan whose dispatch or combine is an all-to-all over the experts' devices
        ep = next((i for i in split if any(c.kind == "all_to_all" for e in fr.plan(i).edges for c in e.forward)),
                  split[0] if split else None)
        if ep is None:
            raise AssertionError(f"{arch} on {n}: no frontier plan splits the experts")
        plans.append((f"expert_parallel[{ep}]", fr.plan(ep)))
    rng = np.random.default_rng(n)
    for i in rng.permutation(np.arange(1, max(len(fr) - 1, 1)))[: args.random]:
        plans.append((f"frontier[{int(i)}]", fr.plan(int(i))))
    out = {"kind": hf_models.KINDS[arch], "frontier_points": len(fr), "plans": []}
    ref_losses, ref_params = reference_train(graph, args.steps, seed=3, optimizer="adam", lr=1e-2)
    for name, plan in plans:
        rep = run_plan(plan, graph, args.steps, 3, backend="mpi", optimizer="adam", lr=1e-2, return_params=True,
                       warmup=0)
        if not np.allclose(rep.losses, ref_losses, rtol=1e-4, atol=1e-6):
            raise AssertionError(f"{arch} {name} on {n}: losses {rep.losses} != single process {ref_losses}")
        worst = 0.0
        for pn, ref in ref_params.items():
            if pn not in rep.params:  # constants (buffers) are not trained
                continue
            err = float((rep.params[pn] - ref).abs().max())
            worst = max(worst, err)
            if not torch.allclose(rep.params[pn], ref, rtol=1e-4, atol=2e-4):
                raise AssertionError(f"{arch} {name} on {n}: parameter {pn} differs by {err} from single process")
        out["plans"].append({"plan": name, "losses": rep.losses, "reference": ref_losses, "max_param_error": worst,
                             "expert_split": expert_split(graph, plan),
                             "collectives": sorted({c["kind"] for c in rep.collectives})})
    return out


summary = {"devices": n, "models": {m: check(m) for m in filter(None, args.models.split(","))}}
if comm.Get_rank() == 0:
    with open(args.out, "w") as fh:
        json.dump(summary, fh, indent=1)
    print("OK")
