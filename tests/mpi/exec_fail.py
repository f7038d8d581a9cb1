"""A run in which rank 1 fails in the middle of step 1: the whole job must end non-zero with its message.

    mpiexec -n 2 python -m mpi4py tests/mpi/exec_fail.py PLAN.json
"""

import sys
from pathlib import Path

from mpi4py import MPI

from tensoropt_py.exec import local_ops
from tensoropt_py.exec.runner import main

sys.path.insert(0, str(Path(__file__).resolve().parent))

if MPI.COMM_WORLD.Get_rank() == 1:
    calls = {"n": 0}
    original = local_ops.LocalOp.run

    def failing(self, inputs, params):
        calls["n"] += 1
        if calls["n"] > 6:  # in the second step
            raise RuntimeError("deliberate failure on rank 1")
        return original(self, inputs, params)

    local_ops.LocalOp.run = failing

sys.exit(main([sys.argv[1], "--model", "exec_models:mlp", "--steps", "4"]))
