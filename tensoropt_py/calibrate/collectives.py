"""Collective-communication tables, timed through the executor's own backends."""

from __future__ import annotations

import datetime as _dt
import time
from typing import Iterable, Sequence

import numpy as np

from ..cluster import COLLECTIVES, CommTable, write_calibration
from ..errors import CalibrationError, InvalidInputError
from .timing import buffer_elements, check_counts, machine_ids, partition_plans

__all__ = ["calibrate_comm", "collective_call", "DEFAULT_MAX_LOG2"]

#: Default largest size 2^22 bytes (4 MiB): a full run takes seconds on a CPU.
DEFAULT_MAX_LOG2 = 22


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise CalibrationError(f"communication calibration needs mpi4py and an MPI library (pip install mpi4py mpich): {exc}") from None
    return MPI


def collective_call(backend, kind: str, nbytes: int, groups):
    """A no-argument callable running collective ``kind`` of ``nbytes`` over ``groups`` as the executor does.

    Parameters
    ----------
    backend : tensoropt_py.exec.backend.Backend
        The executor's backend (its per-call work is part of what is timed).
    kind : str
        One of :data:`~tensoropt_py.cluster.COLLECTIVES`.
    nbytes : int
        The full logical tensor of a group (see :mod:`tensoropt_py.cost.comm`); float32
        elements when it is a multiple of 4 bytes, bytes otherwise.
    groups : tuple of tuple of int
        The device partitioning; every rank is in one group.
    """
    import torch

    if kind not in COLLECTIVES:
        raise InvalidInputError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVES}")
    g = len(groups[0])
    itemsize = 4 if nbytes >= 4 and nbytes % 4 == 0 else 1
    dtype = torch.float32 if itemsize == 4 else torch.uint8
    ns, _ = buffer_elements(kind, nbytes, g, itemsize)
    # reduce-scatter and all-to-all send one chunk per member; the others one block
    shape = (g, ns // g) if kind in ("reduce_scatter", "all_to_all") else (ns,)
    x = torch.ones(shape, dtype=dtype, device=backend.device)
    call = getattr(backend, kind)

    def run():
        call(x, groups)
        backend.records.clear()

    return run


def calibrate_comm(
    sizes_log2: Iterable[int] = range(0, DEFAULT_MAX_LOG2 + 1),
    *,
    repeats: int = 5,
    warmup: int = 2,
    backend: str = "auto",
    collectives: Sequence[str] = COLLECTIVES,
    comm=None,
    out=None,
    verbose: bool = False,
) -> CommTable:
    """Measure collective times for every device partitioning of the MPI ranks.

    Must be called by **every** rank of ``comm`` (collective call).

    Parameters
    ----------
    sizes_log2 : iterable of int
        Exponents i of the sizes 2^i bytes to measure (0 <= i <= 40).
    repeats : int, default 5
        Timed runs per point (median of the slowest rank's times).
    warmup : int, default 2
        Untimed runs per point.
    backend : {"auto", "mpi", "nccl"}
    collectives : sequence of str
        Subset of :data:`~tensoropt_py.cluster.COLLECTIVES`; ``send_recv`` is measured for
        groups of two or more.
    comm : mpi4py communicator, optional
        Defaults to ``MPI.COMM_WORLD``; one rank per device.
    out : path, optional
        Rank 0 writes the table to this calibration file (keeping its compute section).
    verbose : bool
        Rank 0 prints progress.

    Returns
    -------
    CommTable
        The same table on every rank (sizes in bytes, seconds).
    """
    MPI = _mpi()
    world = comm if comm is not None else MPI.COMM_WORLD
    sizes = sorted(set(int(i) for i in sizes_log2))
    if not sizes or sizes[0] < 0 or sizes[-1] > 40:
        raise InvalidInputError(f"sizes_log2 must be non-empty integers in 0..40, got {sizes}")
    check_counts(repeats, warmup)
    bad = [k for k in collectives if k not in COLLECTIVES]
    if bad or not collectives:
        raise InvalidInputError(f"unknown collectives {bad}; expected a non-empty subset of {COLLECTIVES}")
    from ..exec.backend import make_backend

    be = make_backend(backend, comm=world)
    rank, size = world.rank, world.size
    hosts = world.allgather(MPI.Get_processor_name())
    machines = machine_ids(hosts)
    plans = partition_plans(size, machines)
    entries = {}
    t_start = time.perf_counter()
    try:
        for groups, sig in plans:
            g = len(groups[0])
            for kind in collectives:
                if kind == "send_recv" and g == 1:
                    continue
                seconds = []
                for i in sizes:
                    fn = collective_call(be, kind, 2**i, groups)
                    for _ in range(warmup):
                        be.barrier()
                        fn()
                    samples = np.empty(repeats)
                    for j in range(repeats):
                        be.barrier()
                        t0 = time.perf_counter()
                        fn()
                        be.synchronize()
                        samples[j] = time.perf_counter() - t0
                    world.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)  # slowest rank per run
                    seconds.append(float(np.median(samples)))
                entries[(kind, sig)] = ([2.0**i for i in sizes], seconds)
                if verbose and rank == 0:
                    print(f"  {kind:14s} groups of {g:3d} sig={sig}: 2^{sizes[0]} B {seconds[0] * 1e6:9.1f} us"
                          f" ... 2^{sizes[-1]} B {seconds[-1] * 1e6:9.1f} us", flush=True)
    finally:
        be.close()
    meta = {
        "backend": be.name,
        "world_size": size,
        "machines": len(set(machines)),
        "hosts": sorted(set(hosts)),
        "repeats": repeats,
        "warmup": warmup,
        "sizes_log2": sizes,
        "seconds_taken": round(time.perf_counter() - t_start, 3),
        "mpi": MPI.Get_library_version().splitlines()[0].strip() if rank == 0 else "",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    meta = world.bcast(meta, root=0)
    table = CommTable(entries, meta)
    if out is not None and rank == 0:
        write_calibration(out, comm=table)
    return table
