"""Collective-communication tables, timed through the executor's own backends.

Each point is the **mean** over runs of the slowest rank's time, not the median: where ranks
share cores (more processes than cores, or other load) a member is now and then descheduled in
the middle of a transfer and every member waits for it. A training step pays those
interruptions in proportion to the calls it makes, and a median would keep only the runs that
none hit (on the 2-core host of the README, an 8 MB reduce-scatter at 2 ranks: 5 ms as the
median of a table, 30 ms in one executor step).
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Iterable, Sequence

import numpy as np

from ..cluster import COLLECTIVES, CommTable, write_calibration
from ..errors import CalibrationError, InvalidInputError
from .timing import buffer_elements, check_counts, machine_ids, partition_plans

__all__ = ["calibrate_comm", "calibrate_sync", "collective_call", "DEFAULT_MAX_LOG2", "SYNC_WORK_SECONDS"]

#: Default largest size 2^22 bytes (4 MiB): a full run takes seconds on a CPU.
DEFAULT_MAX_LOG2 = 22

#: Range of the work each rank does before a collective in :func:`calibrate_sync` (seconds on an
#: idle core): from well below to above a scheduler time slice, as the operators between two
#: collectives of a training step.
SYNC_WORK_SECONDS = (1e-3, 16e-3)


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


def _synthetic_rounds(world, lo, hi, iterations, seed) -> list:
    """``iterations`` callables of log-uniform length in ``[lo, hi]`` seconds, the same on every rank."""
    import torch

    from .._random import as_generator

    # work like a step's operators: a product whose output is a fresh tensor of 0.5 MB, so that
    # memory traffic and allocation compete with the transfers as in training
    a, b = torch.full((256, 256), 0.5), torch.full((256, 512), 0.5)

    def unit():
        torch.mm(a, b).relu_()

    probe = 20
    t0 = time.perf_counter()
    for _ in range(probe):
        unit()
    per_call = max(world.allgather((time.perf_counter() - t0) / probe))  # every rank does the same work
    lengths = None
    if world.rank == 0:
        draws = np.exp(as_generator(seed).uniform(np.log(lo), np.log(hi), size=iterations))
        lengths = [max(1, round(float(w) / per_call)) for w in draws]

    def repeated(k):
        def run():
            for _ in range(k):
                unit()
        return run

    return [repeated(k) for k in world.bcast(lengths, root=0)]


def calibrate_sync(backend, world, *, iterations: int = 40, repeats: int = 5,
                   work_seconds: tuple[float, float] = SYNC_WORK_SECONDS, large_log2: int = 20,
                   work=None, seed=None) -> dict:
    """The synchronisation terms of every device partitioning: ``signature -> (wait, stretch)``.

    A training step reaches each collective after the rank's own work, not after a barrier as
    the tables' runs do. For every partitioning with groups of two or more, all ranks run
    ``iterations`` rounds of *work, then an all-reduce* over the groups, once of one float32
    and once of ``2**large_log2`` bytes, and the same work alone (all ranks at once, so all
    three share the cores alike). ``(loop - work) / iterations`` is the all-reduce's cost in
    place, ``s`` small and ``L`` large; ``b_s`` and ``b_L`` are the same calls started after a
    barrier (mean of ``repeats``, slowest rank: what the tables hold). Then

    * ``wait = max(0, s - b_s)``: members arrive apart and the first wait for the last (a wait
      is never negative: where a barrier-started call already waits longer, it is kept);
    * ``stretch = max(1, (L - wait) / b_L)``: a member descheduled in the middle of a transfer
      stalls the others, which a transfer started right after a barrier, with every member
      just running, meets less often (never below the undisturbed transfer).

    :class:`~tensoropt_py.cost.comm.CommModel` charges ``stretch * table + wait`` per call.
    On devices that each run one process, both are about neutral (0 and 1).

    The work of a round is the next of ``work``, the operators of the model to be run, when
    given (how far ranks drift apart between two collectives depends on what they run, and a
    model's operators are longer, more varied and allocate more than a synthetic product);
    otherwise it is drawn log-uniformly from ``work_seconds`` (the same sequence on every rank:
    work of one fixed length falls into step with the scheduler's time slices, which hides
    waits). The work alone
    is timed before and after the collective rounds, and their mean is used, so that a change
    of the host's load during the measurement cancels to first order.

    Must be called by every rank of ``world``.

    Parameters
    ----------
    backend : tensoropt_py.exec.backend.Backend
        The executor's backend, whose collectives are timed.
    world : mpi4py communicator
    iterations : int, default 40
        Work + collective rounds per size.
    repeats : int, default 5
        Barrier-started all-reduces per size.
    work_seconds : (float, float)
        Range of the work before each collective, in seconds on an idle core (a matrix
        product repeated).
    large_log2 : int, default 20
        The large all-reduce is ``2**large_log2`` bytes (float32 elements), 4 <= it <= 30.
    work : sequence of callables, optional
        No-argument callables, the same on every rank, run one per round in order, spread
        evenly over the sequence (each repeated when there are fewer than ``iterations``):
        e.g. the model's operator shards (:func:`tensoropt_py.calibrate.calibrate_model_compute`'s
        runners); ``work_seconds`` is then unused.
    seed : int, optional
        Seed of the work lengths (rank 0 draws them; None: fresh entropy).

    Returns
    -------
    dict
        ``group_signature -> (wait seconds, stretch)``, the same on every rank.
    """
    import torch

    check_counts(iterations, 0)
    check_counts(repeats, 0)
    try:
        lo, hi = (float(w) for w in work_seconds)
    except (TypeError, ValueError):
        raise InvalidInputError(f"work_seconds must be a (shortest, longest) pair of seconds, got {work_seconds!r}") from None
    if not 0 < lo <= hi < 1:
        raise InvalidInputError(f"work_seconds must satisfy 0 < shortest <= longest < 1 second, got {work_seconds!r}")
    if isinstance(large_log2, bool) or not isinstance(large_log2, int) or not 4 <= large_log2 <= 30:
        raise InvalidInputError(f"large_log2 must be an int in 4..30, got {large_log2!r}")
    if work is not None:
        work = list(work)
        if not work or not all(callable(f) for f in work):
            raise InvalidInputError(f"work must be a non-empty sequence of callables, got {work!r}")
    MPI = _mpi()
    rounds = _synthetic_rounds(world, lo, hi, iterations, seed) if work is None else [
        work[i * len(work) // iterations] for i in range(iterations)]
    small = torch.ones(1, dtype=torch.float32, device=backend.device)
    large = torch.ones(2**large_log2 // 4, dtype=torch.float32, device=backend.device)
    hosts = world.allgather(MPI.Get_processor_name())
    out = {}
    for groups, sig in partition_plans(world.size, machine_ids(hosts)):
        if len(groups[0]) < 2:
            continue

        def started(x, groups=groups):
            backend.all_reduce(x, groups)  # warm-up: buffers and sub-communicators exist
            samples = np.empty(repeats)
            for j in range(repeats):
                backend.barrier()
                t0 = time.perf_counter()
                backend.all_reduce(x, groups)
                backend.synchronize()
                samples[j] = time.perf_counter() - t0
            world.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)
            return float(np.mean(samples))

        def in_place(x, groups=groups):
            world.Barrier()
            t0 = time.perf_counter()
            for fn in rounds:
                fn()
                if x is not None:
                    backend.all_reduce(x, groups)
            backend.synchronize()
            return max(world.allgather(time.perf_counter() - t0)) / iterations

        b_s, b_l = started(small), started(large)
        before = in_place(None)
        s_loop, l_loop = in_place(small), in_place(large)
        alone = 0.5 * (before + in_place(None))
        s_cost, l_cost = s_loop - alone, l_loop - alone
        backend.records.clear()
        wait = max(0.0, s_cost - b_s)
        out[sig] = (wait, max(1.0, (l_cost - wait) / b_l))
    return out


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
    sync_work=None,
) -> CommTable:
    """Measure collective times for every device partitioning of the MPI ranks.

    Must be called by **every** rank of ``comm`` (collective call).

    Parameters
    ----------
    sizes_log2 : iterable of int
        Exponents i of the sizes 2^i bytes to measure (0 <= i <= 40).
    repeats : int, default 5
        Timed runs per point (mean of the slowest rank's times, see the module docstring).
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
    sync_work : sequence of callables, optional
        The work between the collectives of :func:`calibrate_sync` (its ``work``): the model's
        operators when the calibration is for a model.

    Returns
    -------
    CommTable
        The same table on every rank (sizes in bytes, seconds), with the synchronisation term
        of every partitioning (:func:`calibrate_sync`).
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
                    seconds.append(float(np.mean(samples)))
                entries[(kind, sig)] = ([2.0**i for i in sizes], seconds)
                if verbose and rank == 0:
                    print(f"  {kind:14s} groups of {g:3d} sig={sig}: 2^{sizes[0]} B {seconds[0] * 1e6:9.1f} us"
                          f" ... 2^{sizes[-1]} B {seconds[-1] * 1e6:9.1f} us", flush=True)
        sync = calibrate_sync(be, world, repeats=repeats, large_log2=min(max(sizes[-1], 4), 20), work=sync_work)
        if verbose and rank == 0:
            for sig, (wait, stretch) in sorted(sync.items()):
                print(f"  synchronisation sig={sig}: wait {wait * 1e6:9.1f} us per collective, transfers x{stretch:.2f}",
                      flush=True)
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
    meta["sync_work"] = "synthetic" if sync_work is None else "model operators"
    table = CommTable(entries, meta, sync)
    if out is not None and rank == 0:
        write_calibration(out, comm=table)
    return table
