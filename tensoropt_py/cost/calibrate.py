"""Measure real communication and compute tables (TensorOpt §3.2 "Improving cost estimation accuracy").

Communication
-------------
Run under MPI, one process per device::

    mpiexec -n 4 python -m mpi4py -m tensoropt_py.cost.calibrate --out calib.json --max-log2 22

For every *device partitioning* of the ranks into equal groups (consecutive groups ``(0..g-1),
(g..2g-1), ...`` for every divisor ``g`` of the world size, plus strided groups when they give a
different :func:`~tensoropt_py.cluster.group_signature` because the ranks span several
machines), all groups run the collective **at the same time** (so contention is measured, as the
paper requires) at sizes 2^i bytes, i in ``sizes_log2``. Each point is the median over
``repeats`` runs (after ``warmup`` runs) of the slowest rank's time; every run starts after a
world barrier. ``nbytes`` means what it means in :mod:`tensoropt_py.cost.comm` (the full logical
tensor of a group); sizes smaller than one element per rank are rounded up to one element.

Backends: ``"mpi"`` times all-reduce, all-gather, reduce-scatter and all-to-all through the
executor's own MPI backend (:class:`tensoropt_py.exec.backend.MPIBackend` on CPU tensors, so
the table holds the per-call work the executor adds to mpi4py's buffer interface), and
``Bcast`` and ``Sendrecv`` with mpi4py on numpy arrays (no pickling);
``"nccl"`` uses ``torch.distributed`` with NCCL on CUDA tensors (ranks are placed on the GPUs of
their machine); ``"auto"`` picks NCCL when CUDA is available with a GPU per local rank, MPI
otherwise. Rank 0 writes the table to a calibration file (see
:func:`~tensoropt_py.cluster.load_calibration`) that
:meth:`~tensoropt_py.cluster.Cluster.with_calibration` loads. Run through ``python -m mpi4py``
so that an exception on any rank aborts all of them.

Compute
-------
:func:`calibrate_compute` times callables supplied by the cost layer (torch ops at shard
shapes) with :func:`measure` and writes the ``compute`` section of the same file format.
:func:`calibrate_model_compute` does it for a whole model: every distinct
:func:`~tensoropt_py.cost.operator_cost.compute_key` of the configurations
:func:`~tensoropt_py.cost.builder.build_cost_graph` keeps is run forward + backward with
torch on random tensors of its local shard shapes (through
:func:`tensoropt_py.exec.local_ops.prepare`, which adapts shape-carrying attributes to the
shards); the cost model then uses these times for the matching configurations. No MPI is
needed for it::

    tensoropt-py calibrate --model mlp --devices 4 --out calib.json --no-comm

Under ``mpiexec -n N`` every rank times every entry at the same moment and the slowest rank's
time is kept (``comm=``): a training step runs all devices at once, so where ranks share
cores or memory bandwidth (several processes on one CPU machine) only this reproduces it::

    mpiexec -n 4 python -m mpi4py -m tensoropt_py.cost.calibrate --model mlp --devices 4 --no-comm

Examples
--------
>>> partition_plans(4, [0, 0, 0, 0])
[(((0,), (1,), (2,), (3,)), (1, 1, 4)), (((0, 1), (2, 3)), (2, 2, 2)), (((0, 1, 2, 3),), (4, 4, 1))]
>>> color_of(3, ((0, 1), (2, 3)))
(1, 1)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import socket
import statistics
import sys
import time
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..cluster import COLLECTIVES, CommTable, ComputeTable, group_signature, write_calibration
from ..errors import CalibrationError, InvalidInputError

__all__ = [
    "measure",
    "calibrate_comm",
    "calibrate_compute",
    "calibrate_model_compute",
    "model_compute_entries",
    "partition_plans",
    "color_of",
    "machine_ids",
    "buffer_elements",
    "main",
    "DEFAULT_MAX_LOG2",
]

#: Default largest size 2^22 bytes (4 MiB): a full run takes seconds on a CPU.
DEFAULT_MAX_LOG2 = 22


# --------------------------------------------------------------------------------------------
# Pure rank logic (functions of rank, size and machine placement only)
# --------------------------------------------------------------------------------------------


def machine_ids(names: Sequence[str]) -> list[int]:
    """Machine index of every rank from its host name, numbered by first appearance.

    Examples
    --------
    >>> machine_ids(["b", "b", "a", "a"])
    [0, 0, 1, 1]
    """
    index: dict[str, int] = {}
    return [index.setdefault(n, len(index)) for n in names]


def partition_plans(world_size: int, machines: Sequence[int]) -> list[tuple[tuple[tuple[int, ...], ...], tuple[int, int, int]]]:
    """Device partitionings to measure and their signatures, in measuring order.

    For every divisor ``g`` of ``world_size`` (ascending): consecutive groups, then strided
    groups ``(j, j + s, j + 2s, ...)`` with ``s = world_size / g``; a partitioning whose
    signature was already produced is skipped.

    Parameters
    ----------
    world_size : int
    machines : sequence of int
        ``machines[r]`` is the machine index of rank ``r``.

    Examples
    --------
    >>> [sig for _, sig in partition_plans(4, [0, 0, 1, 1])]
    [(1, 1, 2), (2, 2, 1), (2, 1, 2), (4, 2, 1)]
    """
    if world_size < 1 or len(machines) != world_size:
        raise InvalidInputError(f"need one machine id per rank: world_size={world_size}, machines={list(machines)}")
    seen = set()
    plans = []
    for g in range(1, world_size + 1):
        if world_size % g:
            continue
        stride = world_size // g
        consecutive = tuple(tuple(range(c * g, (c + 1) * g)) for c in range(stride))
        strided = tuple(tuple(range(j, world_size, stride)) for j in range(stride))
        for groups in (consecutive, strided):
            sig = group_signature(groups, lambda r: machines[r])
            if sig not in seen:
                seen.add(sig)
                plans.append((groups, sig))
    return plans


def color_of(rank: int, groups) -> tuple[int, int]:
    """``(color, key)`` for ``comm.Split``: the index of the rank's group and its position in it."""
    for c, g in enumerate(groups):
        if rank in g:
            return c, g.index(rank)
    raise InvalidInputError(f"rank {rank} is in none of the groups {groups!r}")


def buffer_elements(kind: str, nbytes: int, group_size: int, itemsize: int) -> tuple[int, int]:
    """``(send elements, receive elements)`` one rank uses for ``kind`` on ``nbytes``.

    ``nbytes`` is the full logical tensor of the group (see :mod:`tensoropt_py.cost.comm`); a
    per-rank piece is at least one element.

    Examples
    --------
    >>> buffer_elements("all_gather", 1024, 4, 4), buffer_elements("reduce_scatter", 1024, 4, 4)
    ((64, 256), (256, 64))
    >>> buffer_elements("all_to_all", 2, 4, 1)
    (4, 4)
    """
    e = max(1, nbytes // itemsize)
    piece = max(1, e // group_size)
    if kind in ("all_reduce", "broadcast", "send_recv"):
        return e, e
    if kind == "all_gather":
        return piece, piece * group_size
    if kind == "reduce_scatter":
        return piece * group_size, piece
    if kind == "all_to_all":
        return piece * group_size, piece * group_size
    raise InvalidInputError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVES}")


def _itemsize(nbytes: int) -> int:
    """float32 elements when the size allows, bytes otherwise."""
    return 4 if nbytes >= 4 and nbytes % 4 == 0 else 1


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


def _check_counts(repeats, warmup):
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InvalidInputError(f"repeats must be a positive int, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InvalidInputError(f"warmup must be a non-negative int, got {warmup!r}")


def measure(fn: Callable[[], object], repeats: int = 10, warmup: int = 2, sync: Callable[[], object] | None = None,
            statistic: str = "median") -> float:
    """Wall time of ``fn()`` in seconds, after ``warmup`` untimed calls.

    ``statistic="median"`` (default) is the median call, robust to a stray interruption;
    ``"mean"`` is the whole loop's wall time per call, which keeps the interruptions: what a
    process sharing its cores with others (several ranks per core) really gets.

    Parameters
    ----------
    fn : callable
        The work (no arguments).
    repeats : int, default 10
    warmup : int, default 2
    sync : callable, optional
        Called after every ``fn()`` inside the timed region (e.g. ``torch.cuda.synchronize``).

    Examples
    --------
    >>> t = measure(lambda: sum(range(100)), repeats=5, warmup=1)
    >>> 0 < t < 1
    True
    """
    _check_counts(repeats, warmup)
    if statistic not in ("median", "mean"):
        raise InvalidInputError(f"statistic must be 'median' or 'mean', got {statistic!r}")
    for _ in range(warmup):
        fn()
        if sync is not None:
            sync()
    samples = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        samples.append(time.perf_counter() - t0)
    if statistic == "mean":
        return float((time.perf_counter() - start) / repeats)
    return float(statistics.median(samples))


def _auto_sync():
    """``torch.cuda.synchronize`` when torch is already imported and CUDA is up, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.synchronize
    return None


def calibrate_compute(entries, *, repeats: int = 10, warmup: int = 2, out=None, sync="auto", meta: Mapping | None = None,
                      comm=None) -> ComputeTable:
    """Time operators and return (and optionally write) a compute table.

    Parameters
    ----------
    entries : mapping key -> callable, or iterable of (key, callable)
        Keys as :class:`~tensoropt_py.cost.compute.ComputeModel` looks them up, e.g.
        ``"linear|[64,1024]x[1024,256]|float32|fwd+bwd"``; callables run the work once.
    repeats, warmup : int
        See :func:`measure`.
    out : path, optional
        Calibration file to write (its ``compute`` entries are merged, other sections kept).
    sync : "auto", callable or None
        Device synchronisation after each call; ``"auto"`` uses ``torch.cuda.synchronize`` when
        CUDA is initialised.
    meta : mapping, optional
        Extra metadata to record (device name, torch version...).
    comm : mpi4py communicator, optional
        Time every entry on all of its ranks at once (a barrier before each entry) and keep
        the slowest rank's time per call over the whole loop (``statistic="mean"`` of
        :func:`measure`): the load of a training step, where every device computes at the
        same time. Where processes share cores or memory bandwidth this shows; a median would
        keep only the calls no other rank interrupted. Every rank must call it; rank 0
        writes ``out``.

    Examples
    --------
    >>> t = calibrate_compute({"noop": lambda: None}, repeats=3, warmup=0)
    >>> len(t), t.get("noop") >= 0
    (1, True)
    """
    items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
    if sync == "auto":
        sync = _auto_sync()
    times = {}
    for item in items:
        try:
            key, fn = item
        except (TypeError, ValueError):
            raise InvalidInputError(f"compute entries must be (key, callable) pairs, got {item!r}") from None
        if not isinstance(key, str) or not callable(fn):
            raise InvalidInputError(f"compute entry needs a string key and a callable, got ({key!r}, {fn!r})")
        if comm is not None:
            comm.Barrier()
        if comm is None:
            times[key] = measure(fn, repeats=repeats, warmup=warmup, sync=sync)
        else:
            times[key] = max(comm.allgather(measure(fn, repeats=repeats, warmup=warmup, sync=sync,
                                                    statistic="mean")))
    info = {"repeats": repeats, "warmup": warmup, "host": socket.gethostname(),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "concurrent_ranks": 1 if comm is None else int(comm.Get_size())}
    info.update(meta or {})
    table = ComputeTable(times, info)
    if out is not None and (comm is None or comm.Get_rank() == 0):
        write_calibration(out, compute=table)
    return table


def model_compute_entries(graph, cluster, devices, *, dtype=None, mixed_precision=False):
    """Distinct compute keys of a model's kept configurations: ``{key: (op, config)}``.

    The first operator and configuration met represent a key (all of them do the same local
    work). INPUT operators (no kernel) are left out.
    """
    from ..graph.ir import OpKind
    from .builder import build_cost_graph
    from .operator_cost import compute_dtype, config_compute_keys

    mcg = build_cost_graph(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision)
    g = mcg.graph
    entries: dict = {}
    for op, cfgs in zip(g.operators, mcg.configs):
        if op.kind is OpKind.INPUT:
            continue
        dt = compute_dtype(op, g.tensors, dtype, mixed_precision)
        for cfg, key in zip(cfgs, config_compute_keys(op, g.tensors, cfgs, dt)):
            entries.setdefault(key, (op, cfg))
    return entries, g


def model_update_entries(graph, cluster, devices, *, optimizer="adam", dtype=None, mixed_precision=False):
    """Distinct optimizer-update keys of a model's kept configurations: ``{key: (shape, dtype)}``.

    One entry per local parameter shard shape (:func:`~tensoropt_py.cost.optimizer.update_key`).
    """
    from ..graph.ir import TensorRole
    from .builder import build_cost_graph
    from .optimizer import update_key

    mcg = build_cost_graph(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision, optimizer=optimizer)
    g = mcg.graph
    entries: dict = {}
    for op, cfgs in zip(g.operators, mcg.configs):
        for pi, use in enumerate(op.params):
            spec = g.tensors[use.tensor]
            if spec.role is not TensorRole.PARAMETER:
                continue
            for cfg in cfgs:
                f = cfg.layout(op, len(op.inputs) + pi).split_factors(len(spec.shape))
                shape = tuple(n // d for n, d in zip(spec.shape, f))
                entries.setdefault(update_key(optimizer, shape, spec.dtype), (shape, spec.dtype))
    return entries


def _update_runner(optimizer, shape, dtype, device):
    """A no-argument callable running one optimizer step on a parameter shard of ``shape``."""
    import torch

    from ..exec.runner import make_optimizer
    from ..graph.torch_ops import torch_dtype

    gen = torch.Generator(device="cpu").manual_seed(0)
    p = (torch.randn(shape, generator=gen) * 0.1).to(device=device, dtype=torch_dtype(dtype)).requires_grad_(True)
    p.grad = torch.randn(shape, generator=gen).to(device=device, dtype=p.dtype) * 1e-3
    opt = make_optimizer(optimizer, [p], 1e-3)
    opt.step()  # creates the state: the timed steps are steady-state updates
    return opt.step


def _operator_runner(op, cfg, graph, dtype, device):
    """A no-argument callable running ``op``'s local shard (rank 0) forward + backward."""
    import torch

    from ..exec.local_ops import prepare
    from ..graph.torch_ops import torch_dtype
    from .operator_cost import local_shapes

    lop = prepare(op, cfg, graph, 0)
    shapes = local_shapes(op, graph.tensors, cfg)
    nin, npar = len(op.inputs), len(op.params)
    fdt = torch_dtype(dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    leaves, inputs, params = [], {}, {}
    for u, (use, shp) in enumerate(zip(op.uses()[: nin + npar], shapes)):
        spec = graph.tensors[use.tensor]
        if spec.dtype in ("float32", "float16", "bfloat16", "float64"):
            t = (torch.randn(shp, generator=gen) * 0.1).to(device=device, dtype=fdt).requires_grad_(True)
            leaves.append(t)
        elif spec.dtype == "bool":
            t = torch.ones(shp, dtype=torch.bool, device=device)
        else:  # ids / labels: 0 and 1 are valid for any vocabulary or class count >= 2
            t = torch.randint(0, 2, shp, generator=gen).to(device=device, dtype=torch_dtype(spec.dtype))
        (inputs if u < nin else params)[use.tensor] = t

    def once():
        outs = lop.run(inputs, params)
        ys = [y for y in outs.values() if isinstance(y, torch.Tensor) and y.requires_grad]
        if ys and leaves:
            torch.autograd.backward(ys, [torch.ones_like(y) for y in ys])
            for t in leaves:
                t.grad = None
        return outs

    once()  # fails here (not inside the timing) when the entry cannot run
    return once


def calibrate_model_compute(graph, cluster, devices, *, repeats: int = 5, warmup: int = 2, out=None,
                            max_entries: int | None = None, dtype=None, mixed_precision: bool = False,
                            device=None, verbose: bool = False, comm=None, optimizer: str = "adam") -> ComputeTable:
    """Measure the compute table of ``graph`` on ``devices`` devices of ``cluster``.

    Builds the cost graph (:func:`~tensoropt_py.cost.builder.build_cost_graph`), collects the
    distinct :func:`~tensoropt_py.cost.operator_cost.compute_key` of every kept configuration,
    and times each operator forward + backward with torch at its local shard shapes
    (:func:`measure`). Entries that cannot run (an executor limitation, see
    :func:`tensoropt_py.exec.local_ops.prepare`, or a torch error) are skipped.

    Parameters
    ----------
    graph : Graph or str
        A graph or a zoo model name (``"mlp"``...).
    cluster : Cluster or str
        A cluster or a preset name.
    devices : int
    repeats, warmup : int
        See :func:`measure`.
    out : path, optional
        Calibration file whose ``compute`` section receives the entries (merged).
    max_entries : int, optional
        Measure at most this many keys (in model order).
    dtype, mixed_precision
        As :func:`~tensoropt_py.cost.builder.build_cost_graph` (they select the keys).
    device : str or torch.device, optional
        Where to run; default ``"cuda"`` when available, else ``"cpu"``.
    comm : mpi4py communicator, optional
        Measure on all its ranks at once, as :func:`calibrate_compute` (the CLI does so when
        run under ``mpiexec`` with several ranks).
    optimizer : {"sgd", "momentum", "adam"}
        Also time one update of this optimizer per distinct local parameter shard
        (:func:`model_update_entries`), the optimizer step of a training iteration.

    Returns
    -------
    ComputeTable
        ``meta`` records ``entries`` (measured), ``skipped`` (count), ``skipped_keys``
        (key -> reason, at most 20), ``model``, ``devices``, ``torch_device``.
    """
    import torch

    from ..cluster import Cluster

    _check_counts(repeats, warmup)
    if max_entries is not None and (isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1):
        raise InvalidInputError(f"max_entries must be a positive int or None, got {max_entries!r}")
    if isinstance(graph, str):
        from ..graph import zoo

        fn = getattr(zoo, graph, None)
        if fn is None or graph.startswith("_") or not callable(fn):
            raise InvalidInputError(f"unknown zoo model {graph!r}")
        graph = fn()
    if isinstance(cluster, str):
        cluster = Cluster.preset(cluster)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    entries, g = model_compute_entries(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision)
    items = list(entries.items())
    if max_entries is not None:
        items = items[:max_entries]
    runners, skipped = [], {}
    for key, (op, cfg) in items:
        dt = key.rsplit("|", 1)[1]
        try:
            runners.append((key, _operator_runner(op, cfg, g, dt, device)))
        except Exception as exc:  # noqa: BLE001 - any failure to run means: keep the roofline
            skipped[key] = f"{type(exc).__name__}: {exc}"
    updates = list(model_update_entries(g, cluster, devices, optimizer=optimizer, dtype=dtype,
                                        mixed_precision=mixed_precision).items())
    if max_entries is not None:
        updates = updates[:max(max_entries - len(items), 0)]
    runners += [(key, _update_runner(optimizer, shape, dt, device)) for key, (shape, dt) in updates]
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    meta = {"model": g.name, "devices": int(devices), "cluster": cluster.name, "torch_device": str(device),
            "optimizer": optimizer,
            "torch": torch.__version__, "entries": len(runners), "skipped": len(skipped),
            "skipped_keys": dict(list(skipped.items())[:20])}
    if verbose:
        print(f"timing {len(runners)} operator shards of {g.name!r} on {device} ({len(skipped)} skipped)", flush=True)
    return calibrate_compute(runners, repeats=repeats, warmup=warmup, out=out, sync=sync, meta=meta, comm=comm)


# --------------------------------------------------------------------------------------------
# Communication backends
# --------------------------------------------------------------------------------------------


class _MPIBackend:
    name = "mpi"

    def __init__(self, world):
        from mpi4py import MPI

        self.MPI = MPI
        self.world = world

    def split(self, groups):
        color, key = color_of(self.world.rank, groups)
        return self.world.Split(color, key)

    def free(self, sub):
        sub.Free()

    def barrier(self):
        self.world.Barrier()

    def op(self, kind, nbytes, sub):
        MPI = self.MPI
        g, r = sub.size, sub.rank
        itemsize = _itemsize(nbytes)
        dtype = np.float32 if itemsize == 4 else np.uint8
        ns, nr = buffer_elements(kind, nbytes, g, itemsize)
        # the executor's collectives as it calls them; byte sums (which it never runs) stay raw
        if kind in ("all_gather", "all_to_all") or (kind in ("all_reduce", "reduce_scatter") and itemsize == 4):
            return self._executor_op(kind, ns, dtype, sub)
        send = np.ones(ns, dtype=dtype)
        recv = np.zeros(nr, dtype=dtype)
        if kind == "all_reduce":
            return lambda: sub.Allreduce(send, recv, op=MPI.SUM)
        if kind == "all_gather":
            return lambda: sub.Allgather(send, recv)
        if kind == "reduce_scatter":
            return lambda: sub.Reduce_scatter_block(send, recv, op=MPI.SUM)
        if kind == "all_to_all":
            return lambda: sub.Alltoall(send, recv)
        if kind == "broadcast":
            return lambda: sub.Bcast(send, root=0)
        if kind == "send_recv":
            dst, src = (r + 1) % g, (r - 1) % g
            return lambda: sub.Sendrecv(send, dst, 0, recv, src, 0)
        raise InvalidInputError(f"unknown collective kind {kind!r}")

    def _executor_op(self, kind, ns, dtype, sub):
        """The collective as the executor calls it: its MPI backend on CPU tensors.

        The executor's per-call work (contiguous checks, output allocation, buffer views, the
        record of the call) is part of every collective it runs, so it is part of the table.
        """
        import torch

        from ..exec.backend import MPIBackend

        be = MPIBackend(sub)
        group = (tuple(range(sub.size)),)
        tdtype = torch.float32 if dtype == np.float32 else torch.uint8
        call = {"all_reduce": be.all_reduce, "all_gather": be.all_gather,
                "reduce_scatter": be.reduce_scatter, "all_to_all": be.all_to_all}[kind]
        # all-reduce and all-gather send one block; the others one chunk per member
        x = torch.ones(ns if kind in ("all_reduce", "all_gather") else (sub.size, ns // sub.size), dtype=tdtype)

        def run():
            call(x, group)
            be.records.clear()

        return run

    def sync(self):
        return None

    def close(self):
        pass


class _NCCLBackend:
    name = "nccl"

    def __init__(self, world):
        if not _cuda_plausible():  # fail fast, without importing torch
            raise CalibrationError("backend 'nccl' needs CUDA, but no NVIDIA device is visible; use backend='mpi'")
        try:
            import torch
            import torch.distributed as dist
        except ImportError as exc:  # pragma: no cover - torch is a dependency
            raise CalibrationError(f"backend 'nccl' needs torch: {exc}") from None
        if not torch.cuda.is_available():
            raise CalibrationError("backend 'nccl' needs CUDA, but torch.cuda.is_available() is False; use backend='mpi'")
        from mpi4py import MPI

        local = world.Split_type(MPI.COMM_TYPE_SHARED)
        lrank, lsize = local.rank, local.size
        local.Free()
        ndev = torch.cuda.device_count()
        if lsize > ndev:
            raise CalibrationError(f"backend 'nccl': {lsize} ranks on this machine but only {ndev} GPUs")
        torch.cuda.set_device(lrank)
        self.torch, self.dist, self.world = torch, dist, world
        addr = port = None
        if world.rank == 0:
            addr = socket.gethostbyname(socket.gethostname())
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
        addr, port = world.bcast((addr, port), root=0)
        if not dist.is_initialized():
            dist.init_process_group("nccl", init_method=f"tcp://{addr}:{port}", rank=world.rank, world_size=world.size)
            self._owns = True
        else:
            self._owns = False

    def split(self, groups):
        mine = None
        for grp in groups:  # every rank creates every group, in the same order
            pg = self.dist.new_group(list(grp))
            if self.world.rank in grp:
                mine = (pg, grp)
        return mine

    def free(self, sub):
        pg, _ = sub
        try:
            self.dist.destroy_process_group(pg)
        except Exception:  # pragma: no cover - older torch cannot destroy subgroups
            pass

    def barrier(self):
        self.torch.cuda.synchronize()
        self.world.Barrier()

    def op(self, kind, nbytes, sub):
        torch, dist = self.torch, self.dist
        pg, grp = sub
        g = len(grp)
        r = grp.index(self.world.rank)
        itemsize = _itemsize(nbytes)
        dtype = torch.float32 if itemsize == 4 else torch.uint8
        ns, nr = buffer_elements(kind, nbytes, g, itemsize)
        send = torch.ones(ns, dtype=dtype, device="cuda")
        recv = torch.zeros(nr, dtype=dtype, device="cuda")
        if kind == "all_reduce":
            return lambda: dist.all_reduce(send, group=pg)
        if kind == "all_gather":
            return lambda: dist.all_gather_into_tensor(recv, send, group=pg)
        if kind == "reduce_scatter":
            return lambda: dist.reduce_scatter_tensor(recv, send, group=pg)
        if kind == "all_to_all":
            return lambda: dist.all_to_all_single(recv, send, group=pg)
        if kind == "broadcast":
            return lambda: dist.broadcast(send, src=grp[0], group=pg)
        if kind == "send_recv":
            dst, src = grp[(r + 1) % g], grp[(r - 1) % g]

            def run():
                ops = [dist.P2POp(dist.isend, send, dst, pg), dist.P2POp(dist.irecv, recv, src, pg)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            return run
        raise InvalidInputError(f"unknown collective kind {kind!r}")

    def sync(self):
        return self.torch.cuda.synchronize

    def close(self):
        if self._owns:
            self.dist.destroy_process_group()


def _cuda_plausible() -> bool:
    """Cheap check before importing torch: an NVIDIA device node or CUDA_VISIBLE_DEVICES."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


def _pick_backend(backend, world):
    if backend not in ("mpi", "nccl", "auto"):
        raise InvalidInputError(f"unknown backend {backend!r}; expected 'mpi', 'nccl' or 'auto'")
    if backend == "auto":
        use_nccl = False
        if _cuda_plausible():
            try:
                import torch

                from mpi4py import MPI

                local = world.Split_type(MPI.COMM_TYPE_SHARED)
                lsize = local.size
                local.Free()
                use_nccl = torch.cuda.is_available() and torch.cuda.device_count() >= lsize
            except ImportError:
                use_nccl = False
        # every rank must agree
        use_nccl = world.allreduce(int(use_nccl), op=_mpi().MIN) == 1
        backend = "nccl" if use_nccl else "mpi"
    return _NCCLBackend(world) if backend == "nccl" else _MPIBackend(world)


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise CalibrationError(f"communication calibration needs mpi4py and an MPI library (pip install mpi4py mpich): {exc}") from None
    return MPI


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
    _check_counts(repeats, warmup)
    bad = [k for k in collectives if k not in COLLECTIVES]
    if bad or not collectives:
        raise InvalidInputError(f"unknown collectives {bad}; expected a non-empty subset of {COLLECTIVES}")
    be = _pick_backend(backend, world)
    rank, size = world.rank, world.size
    hosts = world.allgather(MPI.Get_processor_name())
    machines = machine_ids(hosts)
    plans = partition_plans(size, machines)
    sync = be.sync()
    entries = {}
    t_start = time.perf_counter()
    try:
        for groups, sig in plans:
            sub = be.split(groups)
            g = len(groups[0])
            for kind in collectives:
                if kind == "send_recv" and g == 1:
                    continue
                seconds = []
                for i in sizes:
                    fn = be.op(kind, 2**i, sub)
                    for _ in range(warmup):
                        be.barrier()
                        fn()
                    samples = np.empty(repeats)
                    for j in range(repeats):
                        be.barrier()
                        t0 = time.perf_counter()
                        fn()
                        if sync is not None:
                            sync()
                        samples[j] = time.perf_counter() - t0
                    world.Allreduce(MPI.IN_PLACE, samples, op=MPI.MAX)  # slowest rank per run
                    seconds.append(float(np.median(samples)))
                entries[(kind, sig)] = ([2.0**i for i in sizes], seconds)
                if verbose and rank == 0:
                    print(f"  {kind:14s} groups of {g:3d} sig={sig}: 2^{sizes[0]} B {seconds[0] * 1e6:9.1f} us"
                          f" ... 2^{sizes[-1]} B {seconds[-1] * 1e6:9.1f} us", flush=True)
            be.free(sub)
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


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mpi4py -m tensoropt_py.cost.calibrate",
        description="Measure collective-communication times for every device partitioning of the MPI ranks "
        "(run under mpiexec, one rank per device) and write a tensoropt_py calibration file.",
    )
    p.add_argument("--out", default="calibration.json", help="calibration file to write (default: calibration.json)")
    p.add_argument("--min-log2", type=int, default=0, help="smallest size 2^i bytes (default 0)")
    p.add_argument("--max-log2", type=int, default=DEFAULT_MAX_LOG2,
                   help=f"largest size 2^i bytes (default {DEFAULT_MAX_LOG2}; the paper's P)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per point, median taken (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per point (default 2)")
    p.add_argument("--backend", choices=("auto", "mpi", "nccl"), default="auto",
                   help="mpi: CPU numpy buffers; nccl: torch.distributed on CUDA; auto: nccl if usable (default)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES),
                   help=f"comma-separated subset of {','.join(COLLECTIVES)} (default: all)")
    p.add_argument("--model", default=None,
                   help="also measure operator compute times of this zoo model at its shard shapes (torch)")
    p.add_argument("--devices", type=int, default=None, help="device count the model is sharded over (with --model)")
    p.add_argument("--cluster", default=None,
                   help="cluster preset for the model's configurations (default: cpu-1x<devices>, else v100-2x8)")
    p.add_argument("--max-entries", type=int, default=None, help="measure at most this many compute keys")
    p.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="adam",
                   help="optimizer whose parameter updates are timed with --model (default adam)")
    p.add_argument("--no-comm", action="store_true", help="skip the collective measurements (no MPI needed)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return p


def _default_cluster(devices):
    from ..cluster import Cluster

    for name in (f"cpu-1x{devices}", "v100-2x8"):
        try:
            cl = Cluster.preset(name)
        except Exception:  # noqa: BLE001 - not a preset
            continue
        return cl
    raise InvalidInputError(f"no cluster preset for {devices} devices; pass --cluster")


def main(argv=None) -> int:
    """CLI entry: ``python -m mpi4py -m tensoropt_py.cost.calibrate --out table.json --max-log2 20``.

    Only rank 0 prints and writes. Returns the exit status (0).
    """
    args = _parser().parse_args(argv)
    if not 0 <= args.min_log2 <= args.max_log2 <= 40:
        raise InvalidInputError(f"need 0 <= --min-log2 <= --max-log2 <= 40, got {args.min_log2} and {args.max_log2}")
    if args.no_comm and args.model is None:
        raise InvalidInputError("--no-comm leaves nothing to measure without --model")
    if args.model is not None and args.devices is None:
        raise InvalidInputError("--model needs --devices N")
    if not args.no_comm:
        _main_comm(args)
    if args.model is not None:
        verbose = not args.quiet and _rank0()
        comm = _mpi_world()  # several ranks: all of them compute at once, as in training
        if comm is not None or _rank0():
            from ..cluster import Cluster

            cl = Cluster.preset(args.cluster) if args.cluster else _default_cluster(args.devices)
            table = calibrate_model_compute(args.model, cl, args.devices, repeats=args.repeats, warmup=args.warmup,
                                            out=args.out, max_entries=args.max_entries, verbose=verbose, comm=comm,
                                            optimizer=args.optimizer)
            if verbose:
                m = table.meta
                print(f"wrote {m['entries']} compute entries ({args.model} on {args.devices} devices of {cl.name}, "
                      f"{m['skipped']} skipped) to {args.out}", flush=True)
    return 0


#: Environment variables MPI launchers set on every rank (MPICH/Hydra, Open MPI, PMIx).
_LAUNCHER_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
_LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launcher_rank() -> int:
    """This process's rank as its MPI launcher set it (0 outside a launcher); MPI is not initialised."""
    for var in _LAUNCHER_RANK_VARS:
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def _mpi_world():
    """COMM_WORLD when this process is one of several MPI ranks, else None.

    ``python -m mpi4py`` does not import ``mpi4py.MPI`` by itself, so a launcher's
    environment is what tells a rank apart from a plain process (which never initialises MPI).
    """
    if "mpi4py.MPI" not in sys.modules and not any(v in os.environ for v in _LAUNCHER_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def _rank0() -> bool:
    """True outside MPI and on MPI rank 0."""
    world = _mpi_world()
    return world is None or world.Get_rank() == 0


def _main_comm(args):
    collectives = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
    MPI = _mpi()
    world = MPI.COMM_WORLD
    verbose = not args.quiet and world.rank == 0
    if verbose:
        print(f"calibrating {len(collectives)} collectives on {world.size} ranks, sizes 2^{args.min_log2}..2^{args.max_log2} B",
              flush=True)
    table = calibrate_comm(
        range(args.min_log2, args.max_log2 + 1),
        repeats=args.repeats,
        warmup=args.warmup,
        backend=args.backend,
        collectives=collectives,
        comm=world,
        out=args.out,
        verbose=verbose,
    )
    if verbose:
        m = table.meta
        print(f"wrote {len(table)} tables ({m['backend']}, {m['world_size']} ranks on {m['machines']} machine(s), "
              f"{m['seconds_taken']} s) to {args.out}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
