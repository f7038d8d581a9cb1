"""Tensor layouts over fine mesh axes: shard / replicate / partial-sum per axis.

A :class:`Layout` says, for every fine axis (prime refinement of a device mesh, see
:mod:`tensoropt_py.space.mesh`), what devices along that axis hold of a tensor:

* ``S(j)`` (stored as ``j >= 0``): different blocks of tensor dimension ``j``;
* ``R`` (:data:`REPLICATE`, ``-1``): the same data;
* ``P`` (:data:`PARTIAL`, ``-2``): partial sums whose total is the tensor.

These are DTensor's ``Shard / Replicate / Partial`` placements, but per fine axis. When
several fine axes shard the same tensor dimension, the one with the lower index is the
outer factor (blocks are nested row-major), which is exactly what splitting a loop
dimension over a mesh axis (its fine axes in order) produces. Equality and hashing use the
*canonical form* (:attr:`Layout.key`): maximal runs of adjacent fine axes with the same
role (consecutive ``S(j)``, ``R`` or ``P``) merged into one run of their product size, so
layouts derived from different meshes over the same devices compare equal exactly when
every device holds the same data.

Examples
--------
>>> a = Layout((2, 2, 2), (0, 0, REPLICATE))
>>> str(a), a.split_factors(2), a.local_numel((8, 3))
('layout[S0:4,R:2]', (4, 1), 6)
>>> Layout((2, 2, 2), (0, 0, -1)) == Layout((2, 2, 2), (0, 0, -1))
True
>>> str(Layout((2, 3), (PARTIAL, 1)).without_partial())
'layout[R:2,S1:3]'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import InvalidInputError

__all__ = ["Layout", "REPLICATE", "PARTIAL", "placement_str", "use_layout"]

REPLICATE = -1
PARTIAL = -2


def placement_str(p: int) -> str:
    """``'R'``, ``'P'`` or ``'S<j>'``."""
    return "R" if p == REPLICATE else "P" if p == PARTIAL else f"S{p}"


def _runs(sizes, place):
    runs: list[list[int]] = []
    for s, p in zip(sizes, place):
        if runs and runs[-1][1] == p:
            runs[-1][0] *= s
        else:
            runs.append([s, p])
    return tuple((s, p) for s, p in runs if s > 1)


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    """Placement of one tensor on the devices of a fine-axis grid.

    Parameters
    ----------
    sizes : tuple of int
        Fine axis sizes (primes), row-major over devices ``0..prod(sizes)-1``.
    place : tuple of int
        One placement per fine axis: tensor dimension ``j >= 0`` (shard), ``-1``
        (replicate) or ``-2`` (partial sum).
    """

    sizes: tuple[int, ...]
    place: tuple[int, ...]
    key: tuple = field(init=False, repr=False)

    def __post_init__(self):
        sizes, place = tuple(map(int, self.sizes)), tuple(map(int, self.place))
        if len(sizes) != len(place):
            raise InvalidInputError(f"layout needs one placement per fine axis: sizes {sizes}, placements {place}")
        if any(p < PARTIAL for p in place):
            raise InvalidInputError(f"bad placement in {place}: use -1 (replicate), -2 (partial) or a dim >= 0")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "place", place)
        object.__setattr__(self, "key", _runs(sizes, place))

    def __eq__(self, other):
        return isinstance(other, Layout) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __str__(self):
        if not self.key:
            return "layout[R]"
        return "layout[" + ",".join(f"{placement_str(p)}:{s}" for s, p in self.key) + "]"

    __repr__ = __str__

    @property
    def num_devices(self) -> int:
        return math.prod(self.sizes)

    def split_factors(self, ndim: int) -> tuple[int, ...]:
        """Number of blocks of each of the ``ndim`` tensor dimensions."""
        f = [1] * ndim
        for s, p in zip(self.sizes, self.place):
            if p >= 0:
                if p >= ndim:
                    raise InvalidInputError(f"{self} shards dimension {p} of a {ndim}-d tensor")
                f[p] *= s
        return tuple(f)

    def shard_divisor(self) -> int:
        """Product of the sizes of the sharding fine axes (numel / local numel)."""
        return math.prod(s for s, p in zip(self.sizes, self.place) if p >= 0)

    def local_numel(self, shape) -> int:
        """Elements one device holds (a partial sum holds a full-size local block)."""
        return math.prod(shape) // self.shard_divisor()

    def fits(self, shape) -> bool:
        """Whether every sharded dimension divides exactly."""
        f = self.split_factors(len(shape)) if all(p < len(shape) for p in self.place) else None
        return f is not None and all(d % k == 0 for d, k in zip(shape, f))

    @property
    def is_partial(self) -> bool:
        return PARTIAL in self.place

    def without_partial(self) -> "Layout":
        """The same layout with every partial axis replicated (what a reduced value looks like)."""
        return Layout(self.sizes, tuple(REPLICATE if p == PARTIAL else p for p in self.place))

    def reexpress(self, sizes) -> "Layout | None":
        """The same placement over another fine-axis grid ``sizes``, or None if it has no form there.

        >>> str(Layout((2, 3), (-1, -1)).reexpress((3, 2)))
        'layout[R:6]'
        >>> Layout((2, 3), (0, -1)).reexpress((3, 2)) is None
        True
        """
        sizes = tuple(sizes)
        if math.prod(sizes) != self.num_devices:
            return None
        if sizes == self.sizes:
            return self
        place, i = [], 0
        for s, p in self.key:
            acc = 1
            while acc < s and i < len(sizes):
                acc *= sizes[i]
                place.append(p)
                i += 1
            if acc != s:
                return None
        while i < len(sizes) and sizes[i] == 1:
            place.append(REPLICATE)
            i += 1
        if i != len(sizes):
            return None
        return Layout(sizes, tuple(place))


def use_layout(fine_sizes, fine_labels, dim_of_loop, unindexed: int) -> Layout:
    """Layout of one tensor use under a fine-axis assignment of loop dimensions.

    Parameters
    ----------
    fine_sizes : tuple of int
    fine_labels : tuple of int
        Per fine axis, the index of the loop dimension it splits, or -1 (replicate).
    dim_of_loop : mapping int -> int
        Loop dimension index -> tensor dimension it is the outermost factor of, for the
        loop dimensions this use indexes.
    unindexed : int
        Placement along axes splitting a loop dimension the use does not index:
        :data:`PARTIAL` for outputs (reduction) and gradients, :data:`REPLICATE` for
        what an operator reads.

    >>> str(use_layout((2, 2), (0, 1), {0: 0}, PARTIAL))
    'layout[S0:2,P:2]'
    """
    place = []
    for lab in fine_labels:
        if lab < 0:
            place.append(REPLICATE)
        else:
            place.append(dim_of_loop.get(lab, unindexed))
    return Layout(tuple(fine_sizes), tuple(place))
