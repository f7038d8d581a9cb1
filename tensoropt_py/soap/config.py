"""SOAP parallelization configurations (FlexFlow §4, Table 2).

A :class:`SoapConfig` of an operator gives a *degree* (number of equal parts) for some of its
parallelizable loop dimensions and the device of every resulting task. The operator is cut
into ``prod(degrees)`` tasks; task ``k`` is the ``k``-th partition in **row-major order over
the dimensions in the order they are listed in** ``degrees`` (the last listed dimension
varies fastest) and runs on ``devices[k]``. Dimensions not listed have degree 1.

Parallelizable dimensions (:func:`parallel_dims`) are the operator's loop dimensions of kind
SAMPLE, ATTRIBUTE or PARAMETER (FlexFlow Table 2) that are ``splittable``, index every output
(splitting a dimension an output does not index would leave partial sums: that is a
reduction, which the SOAP space does not contain) and are the *outermost* loop dimension of
every tensor dimension they take part in (an inner factor of a merged dimension cannot be cut
into contiguous pieces). A degree must divide the dimension's size (equal partitions).

A :class:`SoapStrategy` is one config per operator, aligned with ``graph.operators``.

:class:`ConfigSpace` draws random configs (FlexFlow §6.2 proposals), neighbours (one degree
doubled/halved or the device block shifted) and enumerates small spaces for exhaustive
search; it can be restricted to explicit per-operator config lists.

Examples
--------
>>> c = SoapConfig((("b", 2), ("o", 2)), (0, 1, 2, 3))
>>> str(c), c.parts
('b2.o2@0-3', 4)
>>> str(SoapConfig((), (5,)))
'1@5'
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from ..errors import InvalidInputError
from ..graph.ir import DimKind, Graph, Operator

__all__ = [
    "SoapConfig",
    "SoapStrategy",
    "NotSoapError",
    "parallel_dims",
    "data_parallel",
    "data_parallel_config",
    "from_split_factors",
    "strategy_from_split_factors",
    "ConfigSpace",
]


class NotSoapError(InvalidInputError):
    """A parallelization (e.g. a frontier config) that the SOAP space cannot express.

    Raised by :func:`from_split_factors` when a config splits a reduction dimension, an
    unsplittable dimension, or an inner factor of a merged tensor dimension.
    """


def _fmt_devices(devices: tuple[int, ...]) -> str:
    if len(devices) > 1 and all(b == a + 1 for a, b in zip(devices, devices[1:])):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


@dataclass(frozen=True, slots=True)
class SoapConfig:
    """One operator's SOAP configuration.

    Parameters
    ----------
    degrees : tuple of (dim name, degree) pairs
        Degree (> 1) of each split loop dimension; entries of degree 1 are dropped. The order
        fixes the partition numbering (row-major, last entry fastest).
    devices : tuple of int
        Device of each task, ``len(devices) == prod(degrees)``. Repeats are allowed (two tasks
        on one device run one after the other).
    """

    degrees: tuple[tuple[str, int], ...]
    devices: tuple[int, ...]

    def __post_init__(self):
        try:
            pairs = tuple((str(d), int(k)) for d, k in self.degrees)
        except (TypeError, ValueError):
            raise InvalidInputError(f"SoapConfig.degrees must be (dim, degree) pairs, got {self.degrees!r}") from None
        for (d, k), (_, k_raw) in zip(pairs, self.degrees):
            if k < 1 or k != k_raw:
                raise InvalidInputError(f"SoapConfig degree of {d!r} must be a positive int, got {k_raw!r}")
        names = [d for d, _ in pairs]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"SoapConfig.degrees repeats a dimension: {names}")
        pairs = tuple((d, k) for d, k in pairs if k > 1)
        devices = tuple(int(x) for x in self.devices)
        if any(x < 0 for x in devices):
            raise InvalidInputError(f"SoapConfig.devices must be non-negative ids, got {self.devices!r}")
        parts = math.prod(k for _, k in pairs)
        if len(devices) != parts:
            raise InvalidInputError(
                f"SoapConfig with degrees {dict(pairs)} has {parts} tasks but {len(devices)} devices {devices}"
            )
        object.__setattr__(self, "degrees", pairs)
        object.__setattr__(self, "devices", devices)

    @property
    def parts(self) -> int:
        """Number of tasks, ``prod(degrees)``."""
        return len(self.devices)

    def degree(self, dim: str) -> int:
        """Degree of loop dimension ``dim`` (1 when not split)."""
        for d, k in self.degrees:
            if d == dim:
                return k
        return 1

    def __str__(self):
        deg = ".".join(f"{d}{k}" for d, k in self.degrees) or "1"
        return f"{deg}@{_fmt_devices(self.devices)}"


@dataclass(frozen=True, slots=True)
class SoapStrategy:
    """A SOAP config for every operator of a graph, in ``graph.operators`` order."""

    configs: tuple[SoapConfig, ...]

    def __post_init__(self):
        configs = tuple(self.configs)
        for c in configs:
            if not isinstance(c, SoapConfig):
                raise InvalidInputError(f"SoapStrategy.configs must hold SoapConfig objects, got {c!r}")
        object.__setattr__(self, "configs", configs)

    def __len__(self):
        return len(self.configs)

    def __getitem__(self, i):
        return self.configs[i]

    def __iter__(self):
        return iter(self.configs)

    def replace(self, index: int, config: SoapConfig) -> "SoapStrategy":
        """A copy with operator ``index``'s config replaced."""
        c = list(self.configs)
        c[index] = config
        return SoapStrategy(tuple(c))

    def __str__(self):
        return "[" + " | ".join(map(str, self.configs)) + "]"

# ------------------------------------------------------------------------------------------------
# Parallelizable dimensions
# ------------------------------------------------------------------------------------------------

_PARALLEL_KINDS = (DimKind.SAMPLE, DimKind.ATTRIBUTE, DimKind.PARAMETER)


def _split_problem(op: Operator, dim: str) -> str | None:
    """Why loop dim ``dim`` of ``op`` cannot be split in the SOAP space (None when it can)."""
    try:
        ld = op.loop_dim(dim)
    except KeyError:
        return f"operator {op.name!r} has no loop dimension {dim!r} (has {[d.name for d in op.loop_dims]})"
    if ld.kind not in _PARALLEL_KINDS:
        return f"dimension {dim!r} of {op.name!r} is a {ld.kind.value} dimension (SOAP splits only sample/attribute/parameter)"
    if not ld.splittable:
        return f"dimension {dim!r} of {op.name!r} is not splittable"
    for use in op.outputs:
        if dim not in use.loop_dims():
            return f"output {use.tensor!r} of {op.name!r} does not index {dim!r} (splitting it gives partial sums)"
    for use in op.uses():
        for group in use.dims:
            if dim in group and group[0] != dim:
                return f"{dim!r} is an inner factor of a merged dimension of {use.tensor!r} in {op.name!r}"
    return None


def parallel_dims(op: Operator) -> tuple[str, ...]:
    """Names of the SOAP-parallelizable loop dimensions of ``op``, in loop order."""
    return tuple(d.name for d in op.loop_dims if _split_problem(op, d.name) is None)


def check_config(op: Operator, config: SoapConfig, devices: Iterable[int] | None = None):
    """Raise InvalidInputError (NotSoapError for a non-SOAP split) if ``config`` does not fit ``op``."""
    for d, k in config.degrees:
        why = _split_problem(op, d)
        if why is not None:
            raise NotSoapError(why)
        size = op.loop_dim(d).size
        if size % k:
            raise InvalidInputError(f"degree {k} of {op.name!r}.{d} does not divide its size {size}")
    if devices is not None:
        allowed = set(devices)
        bad = [x for x in config.devices if x not in allowed]
        if bad:
            raise InvalidInputError(f"config {config} of {op.name!r} uses devices {bad} outside {sorted(allowed)}")


def _sample_dim(op: Operator) -> str | None:
    for d in parallel_dims(op):
        if op.loop_dim(d).kind is DimKind.SAMPLE:
            return d
    return None


def data_parallel_config(op: Operator, devices: Sequence[int]) -> SoapConfig:
    """Split the sample dimension over as many of ``devices`` as its size allows (largest divisor).

    Operators without a parallelizable sample dimension run on ``devices[0]``.
    """
    devices = tuple(devices)
    d = _sample_dim(op)
    if d is None:
        return SoapConfig((), devices[:1])
    size = op.loop_dim(d).size
    k = max(k for k in range(1, len(devices) + 1) if size % k == 0)
    return SoapConfig(((d, k),), devices[:k])


def data_parallel(graph: Graph, devices: Sequence[int]) -> SoapStrategy:
    """The data-parallel strategy: every operator split along its sample dimension over ``devices``."""
    devices = tuple(devices)
    if not devices:
        raise InvalidInputError("data_parallel needs at least one device")
    return SoapStrategy(tuple(data_parallel_config(op, devices) for op in graph.operators))


def from_split_factors(op: Operator, factors, devices: Sequence[int]) -> SoapConfig:
    """Convert a mesh-form config (split factor per loop dimension + ordered devices) to SOAP.

    Parameters
    ----------
    op : Operator
    factors : mapping or sequence of (dim name, factor)
        Split factor of each loop dimension (missing or 1: not split). The order gives the
        partition numbering (row-major, last fastest), as in :class:`SoapConfig`.
    devices : sequence of int
        Ordered devices of the mesh. With exactly ``P = prod(factors)`` devices, task ``k``
        runs on ``devices[k]``. With ``r * P`` devices (mesh axes used by no split: the
        computation is replicated, which SOAP does not do), task ``k`` runs on
        ``devices[k * r]`` (the first replica when the replicated mesh axes are innermost);
        pass exactly ``P`` devices to choose the placement yourself.

    Raises
    ------
    NotSoapError
        When a factor > 1 is on a reduction, unsplittable or inner-merged dimension (the
        frontier's config space has these; the SOAP space has not).
    InvalidInputError
        Unknown dimension, factor not dividing the size, or a device count that is not a
        multiple of the number of parts.
    """
    items = list(factors.items()) if isinstance(factors, Mapping) else [tuple(x) for x in factors]
    pairs = []
    for d, k in items:
        if isinstance(k, bool) or not isinstance(k, (int,)) or k < 1:
            raise InvalidInputError(f"split factor of {op.name!r}.{d} must be a positive int, got {k!r}")
        if k == 1:
            continue
        try:
            size = op.loop_dim(d).size
        except KeyError:
            raise InvalidInputError(
                f"operator {op.name!r} has no loop dimension {d!r} (has {[x.name for x in op.loop_dims]})"
            ) from None
        why = _split_problem(op, d)
        if why is not None:
            raise NotSoapError(f"not expressible in SOAP: {why}")
        if size % k:
            raise InvalidInputError(f"split factor {k} of {op.name!r}.{d} does not divide its size {size}")
        pairs.append((d, k))
    parts = math.prod(k for _, k in pairs)
    devices = tuple(int(x) for x in devices)
    if not devices or len(devices) % parts:
        raise InvalidInputError(
            f"{op.name!r}: {len(devices)} devices is not a positive multiple of the {parts} parts of {dict(pairs)}"
        )
    r = len(devices) // parts
    return SoapConfig(tuple(pairs), devices[::r])


def strategy_from_split_factors(graph: Graph, configs) -> SoapStrategy:
    """:func:`from_split_factors` for every operator.

    ``configs``: a sequence aligned with ``graph.operators`` or a mapping op name -> config, each
    config a ``(factors, devices)`` pair. Raises :class:`NotSoapError` naming the first operator
    whose config SOAP cannot express.
    """
    if isinstance(configs, Mapping):
        missing = [op.name for op in graph.operators if op.name not in configs]
        if missing:
            raise InvalidInputError(f"no config for operators {missing}")
        configs = [configs[op.name] for op in graph.operators]
    configs = list(configs)
    if len(configs) != len(graph.operators):
        raise InvalidInputError(f"{len(configs)} configs for {len(graph.operators)} operators")
    return SoapStrategy(tuple(from_split_factors(op, f, d) for op, (f, d) in zip(graph.operators, configs)))


# ------------------------------------------------------------------------------------------------
# Config space: random proposals, neighbours, enumeration
# ------------------------------------------------------------------------------------------------


def _divisors(n: int, cap: int) -> list[int]:
    return [k for k in range(1, min(n, cap) + 1) if n % k == 0]


class ConfigSpace:
    """The SOAP configs of every operator of ``graph`` on ``devices``.

    Parameters
    ----------
    graph : Graph
    devices : sequence of int
        Device ids the strategies may use (tasks of one operator go to distinct devices).
    placement : {"contiguous", "any"}
        ``"contiguous"`` (FlexFlow's proposals): the tasks of an operator run on a block of
        consecutive entries of ``devices``, starting anywhere. ``"any"``: any ordered choice of
        distinct devices (a far larger space).
    max_degree : int, optional
        Cap on the total degree of an operator (default: ``len(devices)``).
    choices : sequence (aligned with graph.operators) or mapping op name -> configs, optional
        Restrict operators to explicit config lists (others keep the full space). Used for
        exhaustive-search checks (FlexFlow §8.3) and to pin operators.
    """

    def __init__(self, graph: Graph, devices, placement: str = "contiguous", max_degree=None, choices=None):
        if placement not in ("contiguous", "any"):
            raise InvalidInputError(f"placement must be 'contiguous' or 'any', got {placement!r}")
        self.graph = graph
        self.devices = tuple(int(d) for d in devices)
        if not self.devices:
            raise InvalidInputError("ConfigSpace needs at least one device")
        self.placement = placement
        self.max_degree = len(self.devices) if max_degree is None else int(max_degree)
        self._degree_sets: list[list[tuple[tuple[str, int], ...]]] = []
        for op in graph.operators:
            dims = parallel_dims(op)
            opts = [[(d, k) for k in _divisors(op.loop_dim(d).size, self.max_degree)] for d in dims]
            combos = []
            for combo in itertools.product(*opts):
                if math.prod(k for _, k in combo) <= min(self.max_degree, len(self.devices)):
                    combos.append(tuple((d, k) for d, k in combo if k > 1))
            self._degree_sets.append(combos)
        self._by_parts = []
        for combos in self._degree_sets:
            by = {}
            for c in combos:
                by.setdefault(math.prod(k for _, k in c), []).append(c)
            self._by_parts.append(sorted(by.items()))
        self.choices: list[tuple[SoapConfig, ...] | None] = [None] * len(graph.operators)
        if choices is not None:
            if isinstance(choices, Mapping):
                unknown = set(choices) - {op.name for op in graph.operators}
                if unknown:
                    raise InvalidInputError(f"choices name unknown operators {sorted(unknown)}")
                items = [(graph.index(n), c) for n, c in choices.items()]
            else:
                choices = list(choices)
                if len(choices) != len(graph.operators):
                    raise InvalidInputError(f"{len(choices)} choice lists for {len(graph.operators)} operators")
                items = list(enumerate(choices))
            for i, cs in items:
                if cs is None:
                    continue
                cs = tuple(cs)
                if not cs:
                    raise InvalidInputError(f"empty choice list for operator {graph.operators[i].name!r}")
                for c in cs:
                    check_config(graph.operators[i], c, self.devices)
                self.choices[i] = cs

    def __len__(self):
        return len(self.graph.operators)

    def _place(self, parts: int, rng) -> tuple[int, ...]:
        n = len(self.devices)
        if self.placement == "contiguous":
            s = int(rng.integers(n - parts + 1))
            return self.devices[s : s + parts]
        idx = rng.permutation(n)[:parts]
        return tuple(self.devices[i] for i in idx)

    def random(self, index: int, rng) -> SoapConfig:
        """A random config of operator ``index``: a random total degree (uniform over the achievable
        ones), random degrees with that total, random placement."""
        if self.choices[index] is not None:
            cs = self.choices[index]
            return cs[int(rng.integers(len(cs)))]
        by = self._by_parts[index]
        parts, combos = by[int(rng.integers(len(by)))]
        deg = combos[int(rng.integers(len(combos)))]
        return SoapConfig(deg, self._place(parts, rng))

    def random_strategy(self, rng) -> SoapStrategy:
        return SoapStrategy(tuple(self.random(i, rng) for i in range(len(self))))

    def neighbours(self, index: int, config: SoapConfig) -> list[SoapConfig]:
        """Configs one step from ``config``: one degree moved to the next smaller/larger divisor
        (devices: the same block start, clamped), or the device block shifted by one."""
        if self.choices[index] is not None:
            return [c for c in self.choices[index] if c != config]
        op = self.graph.operators[index]
        out = []
        n = len(self.devices)
        pos = {d: i for i, d in enumerate(self.devices)}
        start = pos.get(config.devices[0], 0)
        cur = dict(config.degrees)
        for d in parallel_dims(op):
            divs = _divisors(op.loop_dim(d).size, self.max_degree)
            j = divs.index(cur.get(d, 1)) if cur.get(d, 1) in divs else 0
            for jj in (j - 1, j + 1):
                if 0 <= jj < len(divs):
                    new = dict(cur)
                    new[d] = divs[jj]
                    order = [x for x, _ in config.degrees] + [x for x in parallel_dims(op) if x not in cur]
                    deg = tuple((x, new[x]) for x in order if new.get(x, 1) > 1)
                    parts = math.prod(k for _, k in deg)
                    if parts > min(n, self.max_degree):
                        continue
                    s = min(start, n - parts)
                    out.append(SoapConfig(deg, self.devices[s : s + parts]))
        if self.placement == "contiguous":
            p = config.parts
            for s in (start - 1, start + 1):
                if 0 <= s <= n - p:
                    out.append(SoapConfig(config.degrees, self.devices[s : s + p]))
        else:
            used = set(config.devices)
            free = [d for d in self.devices if d not in used]
            for k in range(config.parts):
                for f in free[:2]:
                    devs = list(config.devices)
                    devs[k] = f
                    out.append(SoapConfig(config.degrees, tuple(devs)))
        return [c for c in dict.fromkeys(out) if c != config]

    def neighbour(self, index: int, config: SoapConfig, rng) -> SoapConfig:
        nb = self.neighbours(index, config)
        if not nb:
            return config
        return nb[int(rng.integers(len(nb)))]

    def enumerate(self, index: int) -> tuple[SoapConfig, ...]:
        """Every config of operator ``index`` (use only for small spaces)."""
        if self.choices[index] is not None:
            return self.choices[index]
        out = []
        n = len(self.devices)
        for deg in self._degree_sets[index]:
            parts = math.prod(k for _, k in deg)
            if self.placement == "contiguous":
                for s in range(n - parts + 1):
                    out.append(SoapConfig(deg, self.devices[s : s + parts]))
            else:
                for devs in itertools.permutations(self.devices, parts):
                    out.append(SoapConfig(deg, devs))
        return tuple(out)

    def size(self) -> int:
        """Number of strategies in the space (product of per-operator config counts)."""
        return math.prod(len(self.enumerate(i)) for i in range(len(self)))
