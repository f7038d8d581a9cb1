"""Local blocks of tensors under a :class:`~tensoropt_py.space.layout.Layout`.

A layout's axes (fine axes, or the merged runs of its canonical form: both are row-major
grids over devices ``0..N-1``) give every device a coordinate per axis. Along tensor
dimension ``j`` the device holds block ``idx_j`` of ``count_j`` equal blocks, where
``count_j`` is the product of the sizes of the axes sharding ``j`` and ``idx_j`` the
row-major index of the device's coordinates on those axes (lower axis = outer factor).
Partial (``P``) and replicated (``R``) axes do not restrict the block.

* :func:`region` -> ``((start, stop), ...)`` per dimension;
* :func:`shard` -> the local block of a full tensor;
* :func:`partial_pieces` -> local blocks of a *partial* layout built so that the pieces of
  the devices along the partial axes sum to the full tensor's block (for tests);
* :func:`gather_full` -> the full tensor from every rank's local block (a world all-gather;
  partial pieces are summed, replicas counted once);
* :func:`parse_layout` -> a Layout from its string form (``"layout[S0:2,R:2]"``), as plans
  store them.
"""

from __future__ import annotations

import math
import re

import torch

from ..errors import InvalidInputError
from ..space.layout import PARTIAL, REPLICATE, Layout

__all__ = ["coords", "region", "local_shape", "shard", "partial_pieces", "gather_full", "parse_layout",
           "place_coordinate"]

_RUN = re.compile(r"^(R|P|S(\d+)):(\d+)$")


def parse_layout(text: str, num_devices: int) -> Layout:
    """The :class:`Layout` printed as ``text`` (canonical runs) over ``num_devices`` devices.

    >>> str(parse_layout("layout[S0:2,R:2]", 4))
    'layout[S0:2,R:2]'
    >>> parse_layout("layout[R]", 1).num_devices
    1
    """
    text = str(text).strip()
    if not (text.startswith("layout[") and text.endswith("]")):
        raise InvalidInputError(f"not a layout: {text!r}")
    body = text[len("layout["):-1]
    if body == "R":
        sizes, place = (num_devices,), (REPLICATE,)
    else:
        sizes, place = [], []
        for item in body.split(","):
            m = _RUN.match(item.strip())
            if m is None:
                raise InvalidInputError(f"bad placement {item!r} in layout {text!r}")
            kind = m.group(1)
            place.append(REPLICATE if kind == "R" else PARTIAL if kind == "P" else int(m.group(2)))
            sizes.append(int(m.group(3)))
        sizes, place = tuple(sizes), tuple(place)
    if math.prod(sizes) != num_devices:
        raise InvalidInputError(f"layout {text!r} spans {math.prod(sizes)} devices, expected {num_devices}")
    return Layout(sizes, place)


def coords(layout: Layout, rank: int) -> tuple[int, ...]:
    """The device's coordinate on every axis of ``layout`` (row-major)."""
    out = []
    r = int(rank)
    if not 0 <= r < layout.num_devices:
        raise InvalidInputError(f"rank {rank} outside the {layout.num_devices} devices of {layout}")
    for s in reversed(layout.sizes):
        out.append(r % s)
        r //= s
    return tuple(reversed(out))


def place_coordinate(layout: Layout, rank: int, placement: int) -> tuple[int, int]:
    """``(index, count)``: row-major index of the device over the axes with ``placement``."""
    idx, cnt = 0, 1
    for c, s, p in zip(coords(layout, rank), layout.sizes, layout.place):
        if p == placement:
            idx = idx * s + c
            cnt *= s
    return idx, cnt


def region(layout: Layout, shape, rank: int) -> tuple[tuple[int, int], ...]:
    """``(start, stop)`` of the device's block along every dimension of a tensor of ``shape``."""
    shape = tuple(int(s) for s in shape)
    c = coords(layout, rank)
    out = []
    for j, n in enumerate(shape):
        idx, cnt = 0, 1
        for cc, s, p in zip(c, layout.sizes, layout.place):
            if p == j:
                idx = idx * s + cc
                cnt *= s
        if n % cnt:
            raise InvalidInputError(f"{layout} splits dimension {j} of shape {list(shape)} into {cnt} uneven blocks")
        b = n // cnt
        out.append((idx * b, (idx + 1) * b))
    for p in layout.place:
        if p >= len(shape):
            raise InvalidInputError(f"{layout} shards dimension {p} of a {len(shape)}-d tensor")
    return tuple(out)


def local_shape(layout: Layout, shape) -> tuple[int, ...]:
    """Shape of every device's local block."""
    f = layout.split_factors(len(shape))
    for j, (n, k) in enumerate(zip(shape, f)):
        if n % k:
            raise InvalidInputError(f"{layout} splits dimension {j} of shape {list(shape)} into {k} uneven blocks")
    return tuple(int(n) // k for n, k in zip(shape, f))


def _index(reg):
    return tuple(slice(a, b) for a, b in reg)


def shard(full: torch.Tensor, layout: Layout, rank: int) -> torch.Tensor:
    """The device's local block of ``full`` (a contiguous copy; partial axes hold the full block)."""
    return full[_index(region(layout, full.shape, rank))].contiguous().clone()


def partial_pieces(full: torch.Tensor, layout: Layout, rank: int, *, seed: int = 0) -> torch.Tensor:
    """A local block of ``layout`` whose pieces along the partial axes sum to ``full``'s block.

    The pieces are integer-valued random tensors (the last one the remainder), so sums are
    exact in floating point when ``full`` is integer-valued.
    """
    block = shard(full, layout, rank)
    idx, cnt = place_coordinate(layout, rank, PARTIAL)
    if cnt == 1:
        return block
    reg = region(layout, full.shape, rank)
    # the same random pieces on every device sharing the block (seeded by the block's start)
    g = torch.Generator().manual_seed(seed * 1000003 + sum((i + 1) * 7919 * a for i, (a, _) in enumerate(reg)))
    pieces = [torch.randint(-4, 5, block.shape, generator=g).to(block.dtype) for _ in range(cnt - 1)]
    if idx < cnt - 1:
        return pieces[idx]
    rest = block.clone()
    for p in pieces:
        rest -= p
    return rest


def gather_full(local: torch.Tensor, layout: Layout, shape, backend) -> torch.Tensor:
    """The full tensor on every rank from the local blocks (world all-gather; sums partial pieces)."""
    shape = tuple(int(s) for s in shape)
    n = layout.num_devices
    if backend.size != n:
        raise InvalidInputError(f"gather_full: layout over {n} devices, world has {backend.size} ranks")
    want = local_shape(layout, shape)
    if tuple(local.shape) != want:
        raise InvalidInputError(f"gather_full: local block {tuple(local.shape)} is not {want} for {layout}")
    with backend.phase("gather"):
        stacked = backend.all_gather(local.detach().contiguous(), (tuple(range(n)),))
    out = torch.zeros(shape, dtype=local.dtype, device=local.device)
    for r in range(n):
        if place_coordinate(layout, r, REPLICATE)[0] != 0:
            continue  # a replica: counted once
        out[_index(region(layout, shape, r))] += stacked[r]
    return out
