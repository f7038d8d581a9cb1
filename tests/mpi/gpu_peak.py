"""Predicted vs measured CUDA peak of 1-device plans in both precisions (``mpiexec -n 1``, GPU).

Writes ``[{precision, plan, predicted, measured}, ...]`` as JSON to ``argv[1]``: ``measured`` is
``torch.cuda.max_memory_allocated`` less what was allocated before the run, after a warm-up
matmul in each dtype has allocated cuBLAS's workspaces (which the cost model does not count).
"""

import gc
import json
import sys

import torch

import tensoropt_py as to
from tensoropt_py.exec.runner import run_plan
from tensoropt_py.inputs import load_model

MODEL = "gpt2:size=small,batch=4,seq_len=512"


def main(out):
    a = torch.ones(64, 64, device="cuda")
    (a @ a).sum().item()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        (a @ a).sum().item()
    graph = load_model(MODEL)
    rows = []
    for precision in ("32-true", "bf16-mixed"):
        fr = to.frontier(graph, "h100-4x8", 1, recompute=True, precision=precision, progress=False)
        for label, i in (("fastest", len(fr) - 1), ("least memory", 0)):
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            rep = run_plan(fr.plan(i), graph, 2, 0, backend="nccl", optimizer="adam", lr=1e-4)
            rows.append({"precision": precision, "plan": label, "predicted": rep.memory_predicted,
                         "measured": rep.memory_measured - base})
    with open(out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main(sys.argv[1])
