"""Device meshes and their refinement into prime *fine axes*.

A :class:`Mesh` is an ordered factorisation of the device count ``N`` (TensorOpt §2.1:
``[4]``, ``[2, 2]``...). Devices ``0..N-1`` are laid out on it row-major, so the *last*
mesh axis varies fastest: with the machine-major device numbering of
:class:`~tensoropt_py.cluster.Cluster`, the trailing axes stay inside a machine and the
order of the axes decides which communication crosses the network.

Every mesh axis of size ``m`` is refined into the prime factors of ``m`` (ascending), the
*fine axes*; the fine axes of a mesh are again a row-major grid over the same devices.
Placements expressed per fine axis do not depend on how fine axes were grouped into mesh
axes, which is what lets configurations and tensor layouts from different meshes be
compared (``mesh[2,8]`` with its second axis replicating and ``mesh[2,2,4]`` with its two
last axes replicating put every device on the same data).

Examples
--------
>>> m = Mesh((2, 4))
>>> str(m), m.fine_sizes, m.fine_of_axis
('mesh[2,4]', (2, 2, 2), ((0,), (1, 2)))
>>> fine_groups((2, 2, 2), (0,))
((0, 4), (1, 5), (2, 6), (3, 7))
>>> [str(m) for m in meshes(4)]
['mesh[4]', 'mesh[2,2]']

Mesh spaces
-----------
The configuration space is spanned by the meshes each operator may use (the ``meshes``
option of :func:`tensoropt_py.frontier`):

* ``"all"``: every ordered factorisation of ``N`` (TensorOpt's space). Configurations are
  told apart per fine axis, so the space grows with the number of prime factors of ``N``:
  the attention operators of a Llama layer have up to 3563 configurations on 32 devices.
* ``"hierarchical"``: the meshes of Megatron-LM and Alpa's two-level logical mesh, aligned
  with the machines: the flat mesh ``[N]`` and every ``[N / t, t]`` whose inner axis is
  ``t`` consecutive devices inside one machine (``t > 1`` divides the devices per machine
  and ``N``). The inner axis communicates over the machine's links; the outer axis
  covers the rest. The same operator has 74 configurations on 32 devices of
  ``h100-4x8``. On one machine of up to 4 devices this is every mesh.
* ``"auto"``: ``"all"`` up to :data:`AUTO_ALL_MAX_DEVICES` devices, ``"hierarchical"``
  beyond (:func:`resolve_meshes`).

Keeping every axis inside or across machines (factorisations of the machine count
followed by factorisations of the devices per machine) would keep 2901 of those 3563
configurations: the number of mesh axes, not their alignment, is what sizes the space.
What the two-axis limit costs is measured by ``benchmarks/bench_scale.py --cases
mesh_loss``: the fastest one-layer Transformer strategy on 16 devices of ``v100-2x8``
replicates across the two machines and splits two dimensions inside each
(``[2, 4, 2]``), which is 2.4% faster than the best hierarchical one.

>>> [str(m) for m in mesh_space(32, "hierarchical", 8)]
['mesh[32]', 'mesh[16,2]', 'mesh[8,4]', 'mesh[4,8]']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np

from ..errors import InvalidInputError
from ..units import parse_count

__all__ = ["Mesh", "prime_factors", "ordered_factorisations", "meshes", "fine_groups", "MeshSpace", "MESH_SPACES",
           "AUTO_ALL_MAX_DEVICES", "check_meshes", "resolve_meshes", "hierarchical_meshes", "mesh_space"]

#: Which meshes an operator may use (module docstring, "Mesh spaces").
MeshSpace = Literal["all", "hierarchical", "auto"]
MESH_SPACES = ("all", "hierarchical", "auto")
#: ``meshes="auto"`` searches every mesh up to this many devices (two machines of 8: the
#: full space of the paper's setting) and the hierarchical meshes beyond, where the full
#: space has over a thousand configurations per operator.
AUTO_ALL_MAX_DEVICES = 16


@lru_cache(maxsize=None)
def prime_factors(n: int) -> tuple[int, ...]:
    """Prime factors of ``n`` in ascending order, with multiplicity.

    >>> prime_factors(12), prime_factors(1)
    ((2, 2, 3), ())
    """
    n = parse_count(n, "n")
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


@lru_cache(maxsize=None)
def ordered_factorisations(n: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered factorisation of ``n`` into factors >= 2 (``((1,),)`` for ``n == 1``).

    >>> ordered_factorisations(8)
    ((8,), (2, 4), (4, 2), (2, 2, 2))
    """
    n = parse_count(n, "device count")
    if n == 1:
        return ((1,),)
    out: list[tuple[int, ...]] = []

    def rec(rest, prefix):
        if rest == 1:
            out.append(tuple(prefix))
            return
        for f in range(2, rest + 1):
            if rest % f == 0:
                rec(rest // f, prefix + [f])

    rec(n, [])
    out.sort(key=len)  # stable: fewest axes first, then generation order
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Mesh:
    """A device mesh: an ordered factorisation of the device count.

    Parameters
    ----------
    shape : tuple of int
        Mesh axis sizes (each >= 2, or ``(1,)`` for one device); devices are row-major.

    Attributes
    ----------
    fine_sizes : tuple of int
        Prime sizes of the fine axes (each mesh axis refined, ascending primes).
    fine_of_axis : tuple of tuple of int
        The fine axes of each mesh axis.
    """

    shape: tuple[int, ...]
    fine_sizes: tuple[int, ...] = field(init=False, compare=False, repr=False)
    fine_of_axis: tuple[tuple[int, ...], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        shape = tuple(int(s) for s in self.shape)
        if not shape or any(s < 1 for s in shape) or (len(shape) > 1 and any(s < 2 for s in shape)):
            raise InvalidInputError(f"a mesh needs axis sizes >= 2 (or (1,)), got {self.shape!r}")
        object.__setattr__(self, "shape", shape)
        fine, of_axis = [], []
        for s in shape:
            ps = prime_factors(s)
            of_axis.append(tuple(range(len(fine), len(fine) + len(ps))))
            fine.extend(ps)
        object.__setattr__(self, "fine_sizes", tuple(fine))
        object.__setattr__(self, "fine_of_axis", tuple(of_axis))

    @property
    def num_devices(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self):
        return f"mesh[{','.join(map(str, self.shape))}]"


@lru_cache(maxsize=None)
def meshes(n: int) -> tuple[Mesh, ...]:
    """Every mesh over ``n`` devices (fewest axes first)."""
    return tuple(Mesh(s) for s in ordered_factorisations(n))


_every_mesh = meshes  # reachable where a parameter named after the ``meshes`` option shadows it


@lru_cache(maxsize=65536)
def fine_groups(fine_sizes: tuple[int, ...], axes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The concurrent device groups of a collective along the fine ``axes``.

    Devices that differ only in their coordinates along ``axes`` form one group; within a
    group, devices are ordered row-major over ``axes``. Groups are ordered by their
    first device.

    >>> fine_groups((2, 2), (1,))
    ((0, 1), (2, 3))
    >>> fine_groups((2, 2, 2), (0, 2))
    ((0, 1, 4, 5), (2, 3, 6, 7))
    """
    n = math.prod(fine_sizes)
    ids = np.arange(n).reshape(fine_sizes if fine_sizes else (1,))
    axes = tuple(sorted(axes))
    rest = tuple(a for a in range(len(fine_sizes)) if a not in axes)
    k = math.prod(fine_sizes[a] for a in axes)
    arr = ids.transpose(rest + axes).reshape(-1, k)
    return tuple(tuple(int(x) for x in row) for row in arr)


def check_meshes(value) -> str:
    """``value`` if it names a mesh space, else an error naming it and the valid ones.

    >>> check_meshes("auto")
    'auto'
    >>> check_meshes("flat")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: unknown mesh space 'flat'; valid: 'all', 'hierarchical', 'auto'
    """
    if not isinstance(value, str) or value not in MESH_SPACES:
        raise InvalidInputError(f"unknown mesh space {value!r}; valid: {', '.join(map(repr, MESH_SPACES))}")
    return value


def resolve_meshes(meshes: MeshSpace, n: int) -> Literal["all", "hierarchical"]:
    """The mesh space searched on ``n`` devices: ``"auto"`` resolved, the others unchanged.

    Parameters
    ----------
    meshes : {"all", "hierarchical", "auto"}
    n : int
        Device count.

    Examples
    --------
    >>> resolve_meshes("auto", 16), resolve_meshes("auto", 32), resolve_meshes("all", 64)
    ('all', 'hierarchical', 'all')
    """
    meshes = check_meshes(meshes)
    parse_count(n, "device count")
    if meshes == "auto":
        return "all" if n <= AUTO_ALL_MAX_DEVICES else "hierarchical"
    return meshes


@lru_cache(maxsize=None)
def hierarchical_meshes(n: int, devices_per_machine: int) -> tuple[Mesh, ...]:
    """The flat mesh ``[n]`` and every ``[n / t, t]`` with ``t > 1`` dividing ``n`` and ``devices_per_machine``.

    Devices are numbered machine-major and laid out row-major, so the inner axis of
    ``[n / t, t]`` groups ``t`` consecutive devices of one machine.

    Parameters
    ----------
    n : int
        Device count.
    devices_per_machine : int

    Examples
    --------
    >>> [str(m) for m in hierarchical_meshes(16, 8)]
    ['mesh[16]', 'mesh[8,2]', 'mesh[4,4]', 'mesh[2,8]']
    >>> [str(m) for m in hierarchical_meshes(4, 8)] == [str(m) for m in meshes(4)]
    True
    """
    n, d = parse_count(n, "device count"), parse_count(devices_per_machine, "devices per machine")
    inner = [t for t in range(2, n) if n % t == 0 and d % t == 0]
    return (Mesh((n,)),) + tuple(Mesh((n // t, t)) for t in inner)


def mesh_space(n: int, meshes: MeshSpace, devices_per_machine: int) -> tuple[Mesh, ...]:
    """The meshes over ``n`` devices that the mesh space ``meshes`` allows ("auto" resolved first).

    Parameters
    ----------
    n : int
        Device count.
    meshes : {"all", "hierarchical", "auto"}
    devices_per_machine : int
        Of the cluster (decides which inner axes stay inside a machine).

    Examples
    --------
    >>> len(mesh_space(32, "all", 8)), len(mesh_space(32, "auto", 8))
    (16, 4)
    """
    space = resolve_meshes(meshes, n)
    if space == "all":
        return _every_mesh(n)
    return hierarchical_meshes(n, devices_per_machine)
