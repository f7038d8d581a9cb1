"""One-GPU check of the precisions and recomputation: predicted vs measured peak memory and time.

    mpiexec -n 1 python -m mpi4py benchmarks/gpu_training_options.py
    mpiexec -n 1 python -m mpi4py benchmarks/gpu_training_options.py --models gpt2 --steps 8 --calibrate

For each model, on ``--cluster`` at 1 device, the frontier with ``recompute=True`` in
``32-true`` and in ``bf16-mixed``; its fastest and least-memory plans are run by the executor
(NCCL backend, Adam) and printed as a Markdown table beside their predictions. Measured memory
is ``torch.cuda.max_memory_allocated`` less what was allocated before the run: a warm-up
matmul in each dtype first allocates cuBLAS's workspace, which the cost model does not count
(its size is printed; a handle autograd's backward thread opens adds one more, 32 MiB on an
H100, within the first run). Measured time is the executor's median step after ``--warmup`` steps.
Errors are ``(predicted - measured) / measured``. With ``--calibrate`` each model's operators are
first timed on this GPU in that precision (:func:`tensoropt_py.calibrate.calibrate_model_compute`)
and the plans are picked and predicted on the calibrated cluster too (rows marked "calibrated").
"""

import argparse
import gc
import os
import tempfile

import torch

import tensoropt_py as to
from tensoropt_py.calibrate import calibrate_model_compute
from tensoropt_py.cluster import Cluster
from tensoropt_py.exec.runner import run_plan
from tensoropt_py.inputs import load_model

ap = argparse.ArgumentParser()
ap.add_argument("--models", nargs="+", default=["gpt2:size=small,batch=4,seq_len=512", "gpt2", "bert_large"])
ap.add_argument("--cluster", default="h100-4x8")
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--warmup", type=int, default=2, help="steps left out of the time median (default 2)")
ap.add_argument("--calibrate", action="store_true", help="also plan and predict on a calibration of this GPU")
args = ap.parse_args()


def _warm_cublas():
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (a @ a).sum().item()
    torch.cuda.synchronize()


def _err(pred, meas):
    return f"{(pred - meas) / meas:+.1%}"


_warm_cublas()
workspace = torch.cuda.memory_allocated()
print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; cuBLAS workspace of this thread "
      f"{workspace / 2**20:.0f} MiB (allocated before, left out; autograd's backward thread may open one more "
      f"within a run); {args.steps} steps, median after {args.warmup}", flush=True)
print("| model | precision | cost model | plan | recomputed ops | peak predicted | measured | error | time predicted "
      "| measured | error |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
tmp = tempfile.mkdtemp()
for spec in args.models:
    g = load_model(spec)
    for prec in ("32-true", "bf16-mixed"):
        clusters = [("roofline", Cluster.preset(args.cluster))]
        if args.calibrate:
            path = os.path.join(tmp, f"{len(os.listdir(tmp))}.json")
            calibrate_model_compute(g, args.cluster, 1, out=path, device="cuda", precision=prec)
            clusters.append(("calibrated", Cluster.preset(args.cluster).with_calibration(path)))
        for model_name, cluster in clusters:
            fr = to.frontier(g, cluster, 1, recompute=True, precision=prec, progress=False)
            use = fr.option_usage()["recompute"]
            for label, i in (("fastest", len(fr) - 1), ("least memory", 0)):
                plan = fr.plan(i)
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                rep = run_plan(plan, g, args.steps, 0, backend="nccl", optimizer="adam", lr=1e-4, warmup=args.warmup)
                meas = rep.memory_measured - base
                print(f"| {spec} | {prec} | {model_name} | {label} | {int(use[i])} | {rep.memory_predicted / 1e9:.3f} GB "
                      f"| {meas / 1e9:.3f} GB | {_err(rep.memory_predicted, meas)} "
                      f"| {rep.time_predicted * 1e3:.1f} ms | {rep.time_measured * 1e3:.1f} ms "
                      f"| {_err(rep.time_predicted, rep.time_measured)} |", flush=True)
                del rep, plan
