"""One-GPU check of the training options: predicted vs measured memory and time.

    mpiexec -n 1 python -m mpi4py benchmarks/gpu_training_options.py [--model gpt2:size=small,batch=4,seq_len=512]

Runs, on ``h100-4x8`` at 1 device, the fastest plan of the plain space, the least-memory plan
with recomputation, and both again in bf16-mixed; prints the executor's report next to the
plan (CUDA memory is ``torch.cuda.max_memory_allocated``).
"""

import argparse
import gc

import torch

import tensoropt_py as to
from tensoropt_py.exec.runner import run_plan
from tensoropt_py.inputs import load_model

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="gpt2:size=small,batch=4,seq_len=512")
ap.add_argument("--cluster", default="h100-4x8")
ap.add_argument("--steps", type=int, default=4)
args = ap.parse_args()
g = load_model(args.model)
print(f"{g.name}: {torch.cuda.get_device_name(0)}", flush=True)
for prec in ("32-true", "bf16-mixed"):
    fr = to.frontier(g, args.cluster, 1, recompute=True, precision=prec, progress=False)
    use = fr.option_usage()["recompute"]
    for label, i in (("fastest", len(fr) - 1), ("least memory", 0)):
        plan = fr.plan(i)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        rep = run_plan(plan, g, args.steps, 0, backend="nccl", optimizer="adam", lr=1e-4, warmup=1)
        if base:
            print(f"(note: {base / 1e9:.3f} GB allocated before this run)")
        print(f"{prec:>10} {label:<13} recomputed ops {int(use[i]):>3}  memory predicted {rep.memory_predicted / 1e9:7.3f} GB "
              f"measured {rep.memory_measured / 1e9:7.3f} GB ({rep.memory_measured / rep.memory_predicted - 1:+.1%})  "
              f"time predicted {rep.time_predicted * 1e3:8.2f} ms measured {rep.time_measured * 1e3:8.2f} ms  "
              f"losses {[round(x, 4) for x in rep.losses]}", flush=True)
