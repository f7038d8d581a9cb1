"""Pure rank logic (functions of rank, size and machine placement) and the timing loop."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable, Sequence

from ..cluster import COLLECTIVES, group_signature
from ..errors import InvalidInputError
from ..units import parse_count

__all__ = ["machine_ids", "partition_plans", "color_of", "buffer_elements", "measure", "check_counts", "auto_sync"]


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


def check_counts(repeats, warmup):
    parse_count(repeats, "repeats")
    parse_count(warmup, "warmup", least=0)


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
    check_counts(repeats, warmup)
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


def auto_sync():
    """``torch.cuda.synchronize`` when torch is already imported and CUDA is up, else None."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.synchronize
    return None
