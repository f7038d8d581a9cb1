"""Executor checks run under MPI (launched by tests/test_exec_*.py).

    mpiexec -n N python -m mpi4py tests/mpi/exec_suite.py OUT.json [--models mlp,transformer,cnn] [--pairs 8x12]

1. ``--pairs``: every layout pair of the given shapes over the job's fine axes is rescheduled
   (forward paths from the Rescheduler, and the same paths round-tripped through plan JSON)
   and compared with slicing the full tensor (partial layouts: pieces summing to the tensor).
2. ``--models``: data-parallel, ToFu, OptCNN and SOYBEAN baseline plans, the frontier's two ends, the
   first frontier plans keeping a single copy of a tensor (re-derived in backward) and random
   frontier plans of small models run for a few steps; losses and final parameters are
   compared with single-process torch, and the edge, re-derivation and gradient collectives
   of one iteration with those the plan implies.

Any mismatch raises on the rank that saw it (python -m mpi4py then aborts the job). Rank 0
writes a JSON summary to OUT.json.
"""

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

import tensoropt_py as to
from tensoropt_py.plan import _collectives
from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.comm import CommModel
from tensoropt_py.cost.reschedule import Rescheduler
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.exec.backend import MPIBackend
from tensoropt_py.exec.local_ops import UnsupportedConfigError
from tensoropt_py.exec.measure import collective_counts, expected_collectives
from tensoropt_py.exec.reschedule_exec import run_steps, steps_from_collectives, steps_from_path
from tensoropt_py.exec.runner import reference_train, run_plan
from tensoropt_py.exec.shard import gather_full, partial_pieces, shard
from tensoropt_py.space.layout import Layout
from tensoropt_py.space.mesh import prime_factors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exec_models import MODELS  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--models", default="")
ap.add_argument("--pairs", default="")
ap.add_argument("--random", type=int, default=2, help="random frontier plans per model")
ap.add_argument("--steps", type=int, default=2)
args = ap.parse_args()

comm = MPI.COMM_WORLD
be = MPIBackend(comm)
n = be.size
summary = {"devices": n, "pairs": {}, "models": {}}


def check_pairs(shape):
    fine = prime_factors(n) if n > 1 else ()
    rs = Rescheduler(CommModel(Cluster.preset("cpu-1x4")))
    full = torch.randint(-50, 50, shape, generator=torch.Generator().manual_seed(len(shape))).float()
    options = [-2, -1] + list(range(len(shape)))
    layouts = []
    for place in itertools.product(options, repeat=len(fine)):
        lay = Layout(fine, place)
        if lay.fits(shape) and lay not in layouts:
            layouts.append(lay)
    pairs = partial_pairs = 0
    kinds = set()
    for src, dst in itertools.product(layouts, layouts):
        try:
            path = rs.path(shape, "float32", src, dst)
        except InvalidInputError:
            continue  # unreachable (into a partial layout)
        pairs += 1
        partial_pairs += src.is_partial
        kinds.update(s.kind for s in path.steps)
        x = partial_pieces(full, src, be.rank, seed=pairs)
        want = None if dst.is_partial else shard(full, dst, be.rank)
        for steps in (steps_from_path(path), steps_from_collectives(_collectives(path), n)):
            got = run_steps(x, steps, shape, be.rank, be)
            ok = torch.equal(gather_full(got, dst, shape, be), full)
            if want is not None:
                ok = ok and torch.equal(got, want)
            if not ok:
                raise AssertionError(f"rank {be.rank}: {src} -> {dst} via {path} gave a wrong block for {list(shape)}")
    return {"pairs": pairs, "partial_sources": partial_pairs, "layouts": len(layouts), "kinds": sorted(kinds)}


def plans_of(graph, k_random, seed=0):
    """(name, plan, optimizer) to run: the baselines, single-copy reuse plans, random frontier points."""
    from tensoropt_py import baselines

    fr = to.frontier(graph, "cpu-1x4", devices=n)
    mcg = fr.model_cost_graph
    cl = Cluster.preset("cpu-1x4")
    out = [("data_parallel", baselines.data_parallel(cost_graph=mcg, cluster=cl), "adam"),
           ("tofu", baselines.tofu(cost_graph=mcg, cluster=cl), "sgd"),
           ("optcnn", baselines.optcnn(cost_graph=mcg, cluster=cl), "adam"),
           ("min_memory", fr.plan(0), "sgd"), ("min_time", fr.plan(len(fr) - 1), "adam")]
    try:  # SOYBEAN's tiling decoded into our configurations (MLPs and CNNs; power-of-two device counts)
        out.append(("soybean", baselines.soybean(cost_graph=mcg, cluster=cl), "adam"))
    except InvalidInputError:
        pass
    plans = [fr.plan(i) for i in range(len(fr))]
    for reuse in ("producer_copy", "consumer_copy"):  # the tensor-reuse choices that drop a copy
        with_it = [i for i, p in enumerate(plans) if any(e.reuse == reuse and e.rederive for e in p.edges)]
        if with_it:
            out.append((f"{reuse}[{with_it[0]}]", plans[with_it[0]], "adam"))
    rest = list(range(1, len(fr) - 1))
    rng = np.random.default_rng(seed + n)
    for k, i in enumerate(rng.permutation(rest)[:k_random]):
        out.append((f"frontier[{int(i)}]", plans[int(i)], ("adam", "sgd")[k % 2]))
    return out, len(fr)


def check_model(name):
    graph = MODELS[name]()
    plans, npoints = plans_of(graph, args.random)
    res = {"frontier_points": npoints, "plans": []}
    for pname, plan, opt in plans:
        lr = 1e-2 if opt == "adam" else 5e-2
        ref_losses, ref_params = reference_train(graph, args.steps, seed=3, optimizer=opt, lr=lr)
        t0 = time.perf_counter()
        try:
            rep = run_plan(plan, graph, args.steps, 3, backend="mpi", optimizer=opt, lr=lr, return_params=True,
                           warmup=0)
        except UnsupportedConfigError as exc:
            res["plans"].append({"plan": pname, "unsupported": str(exc)})
            continue
        seconds = time.perf_counter() - t0
        if not np.allclose(rep.losses, ref_losses, rtol=1e-4, atol=1e-6):
            raise AssertionError(f"{name} {pname} on {n}: losses {rep.losses} != reference {ref_losses}")
        worst = 0.0
        for pn, ref in ref_params.items():
            if pn not in rep.params:
                continue
            err = float((rep.params[pn] - ref).abs().max())
            worst = max(worst, err)
            if not torch.allclose(rep.params[pn], ref, rtol=1e-4, atol=2e-4 if opt == "adam" else 1e-5):
                raise AssertionError(f"{name} {pname} on {n}: parameter {pn} differs by {err} from the reference")
        want = expected_collectives(plan, graph)
        got = {f"{p}:{k}": v for (p, k), v in collective_counts(_last_records(rep)).items()}
        wanted = {f"{p}:{k}": v for (p, k), v in want.items()}
        if got != wanted:
            raise AssertionError(f"{name} {pname} on {n} rank {be.rank}: ran {got}, the plan says {wanted}")
        res["plans"].append({"plan": pname, "optimizer": opt, "plan_optimizer": plan.optimizer,
                             "reuse": sorted({e.reuse for e in plan.edges}), "losses": rep.losses, "reference": ref_losses,
                             "max_param_error": worst, "collectives": got, "seconds": seconds,
                             "time": [rep.time_predicted, rep.time_measured],
                             "memory": [rep.memory_predicted, rep.memory_measured],
                             "communication_time": [rep.comm_predicted, rep.comm_measured]})
    return res


def _last_records(rep):
    from tensoropt_py.exec.backend import CollectiveRecord

    return [CollectiveRecord(c["kind"], tuple(c["group"]), c["nbytes"], c["phase"], c["seconds"], c["tag"])
            for c in rep.collectives]


for s in filter(None, args.pairs.split(",")):
    shape = tuple(int(d) for d in s.split("x"))
    summary["pairs"][s] = check_pairs(shape)
for m in filter(None, args.models.split(",")):
    summary["models"][m] = check_model(m)
if be.rank == 0:
    with open(args.out, "w") as fh:
        json.dump(summary, fh, indent=1)
    print("OK")
