"""Collective backends of the executor: mpi4py on CPU tensors, NCCL through ``torch.distributed``.

Every collective takes the *concurrent groups* of the step (a tuple of device-id tuples, as
in a plan's :class:`~tensoropt_py.plan.Collective` or
:func:`~tensoropt_py.space.mesh.fine_groups`); the calling rank must be in exactly one of
them and exchanges data with the members of that group, in the group's order. Sub-
communicators are created once per group and cached.

Buffer conventions (``n`` = size of the caller's group):

* :meth:`Backend.all_gather` ``x`` -> ``[n, *x.shape]`` (member ``p``'s block at ``[p]``);
* :meth:`Backend.reduce_scatter` ``[n, *c]`` -> ``c`` (the sum over members of their chunk ``[p]``
  for the caller at position ``p``);
* :meth:`Backend.all_to_all` ``[n, *c]`` -> ``[n, *c]`` (chunk ``[q]`` goes to member ``q``; the
  result's ``[p]`` came from member ``p``);
* :meth:`Backend.all_reduce` ``x`` -> sum over the group;
* :meth:`Backend.broadcast` ``x`` -> the root's ``x``.

The CPU backend moves data with mpi4py's buffer interface (``tensor.numpy()`` views,
upper-case ``Allgather``/``Allreduce``/``Reduce_scatter_block``/``Alltoall``/``Bcast``), no
pickling. Each call appends a :class:`CollectiveRecord` (kind, group, bytes, phase, seconds,
tag) to :attr:`Backend.records`; ``bytes`` follow the communication model's convention
(:mod:`tensoropt_py.cost.reschedule`): the gathered block for an all-gather, the input
block for the others. :meth:`Backend.phase` and :meth:`Backend.tag` label what follows.

:func:`make_backend` picks ``"nccl"`` when CUDA is available and ``"mpi"`` otherwise
(``backend="auto"``); forcing ``"nccl"`` without CUDA raises a clear error.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass

import torch

from ..errors import InvalidInputError, TensorOptError

__all__ = ["CollectiveRecord", "Backend", "MPIBackend", "NCCLBackend", "make_backend", "world", "BACKENDS"]

BACKENDS = ("auto", "mpi", "nccl")


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One collective this rank ran."""

    kind: str
    group: tuple[int, ...]
    nbytes: int
    phase: str
    seconds: float
    tag: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["group"] = list(self.group)
        return d


def world():
    """``MPI.COMM_WORLD`` (imports mpi4py; a clear error when it is missing)."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TensorOptError(f"the executor needs mpi4py and an MPI library (pip install mpi4py mpich): {exc}") from None
    return MPI.COMM_WORLD


def _my_group(groups, rank) -> tuple[int, ...]:
    for g in groups:
        if rank in g:
            return tuple(int(d) for d in g)
    raise InvalidInputError(f"rank {rank} is in none of the collective's groups {groups}")


class Backend:
    """Collective interface (see the module docstring); subclasses implement ``_*`` methods."""

    name = "base"

    def __init__(self, rank: int, size: int, device: torch.device):
        self.rank = int(rank)
        self.size = int(size)
        self.device = device
        self.records: list[CollectiveRecord] = []
        self._phase = "fwd"
        self._tag = ""

    # -- labels ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, phase: str):
        old = self._phase
        self._phase = phase
        try:
            yield
        finally:
            self._phase = old

    @contextlib.contextmanager
    def tag(self, tag: str):
        old = self._tag
        self._tag = tag
        try:
            yield
        finally:
            self._tag = old

    def _record(self, kind, group, nbytes, t0):
        self.records.append(CollectiveRecord(kind, group, int(nbytes), self._phase, time.perf_counter() - t0, self._tag))

    def group_of(self, groups) -> tuple[int, ...]:
        return _my_group(groups, self.rank)

    # -- collectives -----------------------------------------------------------------------------
    def all_gather(self, x: torch.Tensor, groups) -> torch.Tensor:
        g = self.group_of(groups)
        x = x.contiguous()
        if len(g) == 1:
            return x.unsqueeze(0).clone()
        t0 = self._start()
        out = self._all_gather(x, g, groups)
        self._finish()
        self._record("all_gather", g, out.numel() * out.element_size(), t0)
        return out

    def all_reduce(self, x: torch.Tensor, groups) -> torch.Tensor:
        g = self.group_of(groups)
        x = x.contiguous()
        if len(g) == 1:
            return x.clone()
        t0 = self._start()
        out = self._all_reduce(x, g, groups)
        self._finish()
        self._record("all_reduce", g, x.numel() * x.element_size(), t0)
        return out

    def reduce_scatter(self, chunks: torch.Tensor, groups) -> torch.Tensor:
        g = self.group_of(groups)
        chunks = chunks.contiguous()
        if chunks.shape[0] != len(g):
            raise InvalidInputError(f"reduce_scatter: {chunks.shape[0]} chunks for a group of {len(g)}")
        if len(g) == 1:
            return chunks[0].clone()
        t0 = self._start()
        out = self._reduce_scatter(chunks, g, groups)
        self._finish()
        self._record("reduce_scatter", g, chunks.numel() * chunks.element_size(), t0)
        return out

    def all_to_all(self, chunks: torch.Tensor, groups) -> torch.Tensor:
        g = self.group_of(groups)
        chunks = chunks.contiguous()
        if chunks.shape[0] != len(g):
            raise InvalidInputError(f"all_to_all: {chunks.shape[0]} chunks for a group of {len(g)}")
        if len(g) == 1:
            return chunks.clone()
        t0 = self._start()
        out = self._all_to_all(chunks, g, groups)
        self._finish()
        self._record("all_to_all", g, chunks.numel() * chunks.element_size(), t0)
        return out

    def broadcast(self, x: torch.Tensor, groups, root: int | None = None) -> torch.Tensor:
        """``x`` of the ``root`` device (default: the group's first member) on every member."""
        g = self.group_of(groups)
        root = g[0] if root is None else int(root)
        if root not in g:
            raise InvalidInputError(f"broadcast root {root} is not in the group {g}")
        x = x.contiguous().clone()
        if len(g) == 1:
            return x
        t0 = self._start()
        out = self._broadcast(x, g, groups, root)
        self._finish()
        self._record("broadcast", g, x.numel() * x.element_size(), t0)
        return out

    def send_recv(self, x: torch.Tensor, groups) -> torch.Tensor:
        """Every member sends ``x`` to its successor in the group and returns its predecessor's."""
        g = self.group_of(groups)
        x = x.contiguous()
        if len(g) == 1:
            return x.clone()
        t0 = self._start()
        i = g.index(self.rank)
        out = self._send_recv(x, g, groups, g[(i + 1) % len(g)], g[(i - 1) % len(g)])
        self._finish()
        self._record("send_recv", g, x.numel() * x.element_size(), t0)
        return out

    def barrier(self):
        raise NotImplementedError

    def synchronize(self):
        """Wait for the device (no-op on CPU)."""

    def _start(self):
        return time.perf_counter()

    def _finish(self):
        pass

    def close(self):
        pass


# ----------------------------------------------------------------------------------------------
# mpi4py
# ----------------------------------------------------------------------------------------------
_NUMPY_OK = {torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8,
             torch.bool, torch.int16}


def _buf(t: torch.Tensor):
    """A numpy view of a contiguous CPU tensor (bfloat16 as raw int16 for data movement)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    if t.dtype not in _NUMPY_OK:
        raise InvalidInputError(f"the MPI backend cannot move tensors of dtype {t.dtype}")
    return t.numpy()


class MPIBackend(Backend):
    """Collectives with mpi4py on CPU tensors (buffer interface, cached sub-communicators)."""

    name = "mpi"

    def __init__(self, comm=None):
        comm = world() if comm is None else comm
        super().__init__(comm.Get_rank(), comm.Get_size(), torch.device("cpu"))
        self.comm = comm
        self._subs: dict = {}

    def sub(self, g: tuple[int, ...]):
        """The communicator of group ``g`` (world ranks, in order); created collectively by its members."""
        c = self._subs.get(g)
        if c is None:
            if g == tuple(range(self.size)):
                c = self.comm
            else:
                grp = self.comm.Get_group().Incl(list(g))
                c = self.comm.Create_group(grp, tag=(hash(g) & 0x3FFF) + 1)
                grp.Free()
            self._subs[g] = c
        return c

    def _all_gather(self, x, g, groups):
        out = torch.empty((len(g),) + tuple(x.shape), dtype=x.dtype)
        self.sub(g).Allgather(_buf(x), _buf(out))
        return out

    def _reduce_op(self, x):
        from mpi4py import MPI

        if x.dtype in (torch.bfloat16, torch.bool):
            raise InvalidInputError(f"the MPI backend cannot sum tensors of dtype {x.dtype}")
        return MPI.SUM

    def _all_reduce(self, x, g, groups):
        if x.dtype == torch.bfloat16:  # MPI has no bf16 sum: add in fp32, round once (bf16-mixed runs)
            return self._all_reduce(x.float(), g, groups).to(x.dtype)
        out = torch.empty_like(x)
        self.sub(g).Allreduce(_buf(x), _buf(out), op=self._reduce_op(x))
        return out

    def _reduce_scatter(self, chunks, g, groups):
        if chunks.dtype == torch.bfloat16:
            return self._reduce_scatter(chunks.float(), g, groups).to(chunks.dtype)
        out = torch.empty(tuple(chunks.shape[1:]), dtype=chunks.dtype)
        self.sub(g).Reduce_scatter_block(_buf(chunks), _buf(out), op=self._reduce_op(chunks))
        return out

    def _all_to_all(self, chunks, g, groups):
        out = torch.empty_like(chunks)
        self.sub(g).Alltoall(_buf(chunks), _buf(out))
        return out

    def _broadcast(self, x, g, groups, root):
        self.sub(g).Bcast(_buf(x), root=g.index(root))
        return x

    def _send_recv(self, x, g, groups, dst, src):
        out = torch.empty_like(x)
        self.comm.Sendrecv(_buf(x), dst, 0, _buf(out), src, 0)
        return out

    def barrier(self):
        self.comm.Barrier()

    def close(self):
        for g, c in self._subs.items():
            if c is not self.comm:
                with contextlib.suppress(Exception):
                    c.Free()
        self._subs.clear()


# ----------------------------------------------------------------------------------------------
# NCCL via torch.distributed
# ----------------------------------------------------------------------------------------------
class NCCLBackend(Backend):
    """NCCL collectives on CUDA tensors through ``torch.distributed`` (launched under mpiexec).

    The process group is initialised over TCP at rank 0's host (exchanged with MPI); one
    GPU per rank (``local rank % device_count``). ``new_group`` is called by every rank for
    every group of a step, in order, the first time the step's groups are seen.
    """

    name = "nccl"

    def __init__(self, comm=None):
        if not torch.cuda.is_available():
            raise TensorOptError("the NCCL backend needs CUDA, which is not available on this machine; "
                                 "use --backend mpi (or auto)")
        import socket

        import torch.distributed as dist

        comm = world() if comm is None else comm
        rank, size = comm.Get_rank(), comm.Get_size()
        local = int(os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank)))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        super().__init__(rank, size, device)
        self.comm = comm
        self.dist = dist
        if not dist.is_initialized():
            addr = None
            if rank == 0:
                s = socket.socket()
                s.bind(("", 0))
                port = s.getsockname()[1]
                s.close()
                addr = (socket.gethostbyname(socket.gethostname()), port)
            addr = comm.bcast(addr, root=0)
            dist.init_process_group("nccl", init_method=f"tcp://{addr[0]}:{addr[1]}", rank=rank, world_size=size,
                                    device_id=device)
        self._groups: dict = {}

    def _pg(self, g, groups):
        key = tuple(tuple(int(d) for d in gg) for gg in groups)
        table = self._groups.get(key)
        if table is None:
            table = {}
            for gg in key:
                table[gg] = None if len(gg) == self.size else self.dist.new_group(list(gg))
            self._groups[key] = table
        return table[g]

    def _start(self):
        torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _finish(self):
        torch.cuda.synchronize(self.device)

    def _all_gather(self, x, g, groups):
        out = torch.empty((len(g),) + tuple(x.shape), dtype=x.dtype, device=x.device)
        self.dist.all_gather_into_tensor(out, x, group=self._pg(g, groups))
        return out

    def _all_reduce(self, x, g, groups):
        out = x.clone()
        self.dist.all_reduce(out, group=self._pg(g, groups))
        return out

    def _reduce_scatter(self, chunks, g, groups):
        out = torch.empty(tuple(chunks.shape[1:]), dtype=chunks.dtype, device=chunks.device)
        self.dist.reduce_scatter_tensor(out, chunks, group=self._pg(g, groups))
        return out

    def _all_to_all(self, chunks, g, groups):
        out = torch.empty_like(chunks)
        self.dist.all_to_all_single(out, chunks, group=self._pg(g, groups))
        return out

    def _broadcast(self, x, g, groups, root):
        self.dist.broadcast(x, src=root, group=self._pg(g, groups))
        return x

    def _send_recv(self, x, g, groups, dst, src):
        out = torch.empty_like(x)
        pg = self._pg(g, groups)
        ops = [self.dist.P2POp(self.dist.isend, x, dst, pg), self.dist.P2POp(self.dist.irecv, out, src, pg)]
        for work in self.dist.batch_isend_irecv(ops):
            work.wait()
        return out

    def barrier(self):
        torch.cuda.synchronize(self.device)
        self.comm.Barrier()

    def synchronize(self):
        torch.cuda.synchronize(self.device)

    def close(self):
        with contextlib.suppress(Exception):
            self.dist.destroy_process_group()


def make_backend(backend: str = "auto", comm=None) -> Backend:
    """``"mpi"``, ``"nccl"`` or ``"auto"`` (NCCL when CUDA is available, else MPI)."""
    if backend not in BACKENDS:
        raise InvalidInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "mpi"
    return NCCLBackend(comm) if backend == "nccl" else MPIBackend(comm)
