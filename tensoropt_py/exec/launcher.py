"""Which MPI rank this process is, read from the launcher's environment (no torch, no MPI initialised).

Rank logic stays a pure function of the environment, so the command line can decide that only
rank 0 prints an error without starting MPI.
"""

from __future__ import annotations

import os
import sys

__all__ = ["launcher_rank", "mpi_world", "is_rank0"]

#: Environment variables MPI launchers set on every rank (MPICH/Hydra, Open MPI, PMIx).
LAUNCHER_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launcher_rank() -> int:
    """This process's rank as its MPI launcher set it (0 outside a launcher); MPI is not initialised.

    Examples
    --------
    >>> isinstance(launcher_rank(), int)
    True
    """
    for var in LAUNCHER_RANK_VARS:
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def mpi_world():
    """COMM_WORLD when this process is one of several MPI ranks, else None.

    ``python -m mpi4py`` does not import ``mpi4py.MPI`` by itself, so a launcher's
    environment is what tells a rank apart from a plain process (which never initialises MPI).
    """
    if "mpi4py.MPI" not in sys.modules and not any(v in os.environ for v in LAUNCHER_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def is_rank0() -> bool:
    """True outside MPI and on MPI rank 0."""
    world = mpi_world()
    return world is None or world.Get_rank() == 0
