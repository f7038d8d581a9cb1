"""Cluster topology: devices, links, presets and measured (calibration) tables.

A :class:`Cluster` is ``machines`` machines of ``devices_per_machine`` identical devices
(:class:`DeviceSpec`). Devices inside a machine talk over ``intra_link``, machines over
``inter_link`` (both :class:`LinkSpec`). Global device ids are row-major: device ``i`` lives on
machine ``i // devices_per_machine``.

All quantities are base SI units stored as floats: bytes, bytes/s, FLOP/s, seconds
(see :mod:`tensoropt_py.units`; constructors also accept strings such as ``"16GiB"``).

Measured tables (TensorOpt §3.2 "Improving cost estimation accuracy") are held in
:class:`CommTable` (collective times per device partitioning and size 2^i) and
:class:`ComputeTable` (operator times by key); they are produced by
:mod:`tensoropt_py.calibrate`, stored in a *calibration file* (JSON, see
:func:`load_calibration`) and attached with :meth:`Cluster.with_calibration`. The models
that use them live in :mod:`tensoropt_py.cost.comm` and :mod:`tensoropt_py.cost.compute`.

Examples
--------
>>> cl = Cluster.preset("v100-2x8")
>>> cl.num_devices, cl.machine_of(9), cl.device_counts()
(16, 1, (1, 2, 4, 8, 16))
>>> Cluster.from_json(cl.to_json()) == cl
True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from .errors import CalibrationError, InvalidInputError
from .units import (format_bytes, format_flops, format_rate, format_time, parse_bytes, parse_count, parse_flops, parse_rate,
                    parse_time)

__all__ = [
    "DeviceSpec",
    "LinkSpec",
    "Cluster",
    "CommTable",
    "ComputeTable",
    "COLLECTIVES",
    "group_signature",
    "normalize_dtype",
    "load_calibration",
    "write_calibration",
]

LinkKind = Literal["nvlink", "pcie", "infiniband", "ethernet", "shared_memory"]
LINK_KINDS = ("nvlink", "pcie", "infiniband", "ethernet", "shared_memory")

#: Collective kinds understood by the communication model and the calibration files.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")

CALIBRATION_FORMAT = "tensoropt_py-calibration"
CALIBRATION_VERSION = 1

_DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "tfloat32": "tfloat32", "tf32": "tfloat32",
    "float64": "float64", "fp64": "float64", "double": "float64", "f64": "float64",
    "float8": "float8", "fp8": "float8", "float8_e4m3fn": "float8", "float8_e5m2": "float8",
    "int8": "int8",
}


def normalize_dtype(dtype) -> str:
    """Canonical dtype name: ``"fp16"``, ``"half"``, ``torch.float16`` -> ``"float16"``.

    Examples
    --------
    >>> normalize_dtype("bf16"), normalize_dtype("torch.float32"), normalize_dtype("tf32")
    ('bfloat16', 'float32', 'tfloat32')
    """
    name = str(dtype).lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    try:
        return _DTYPE_ALIASES[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown dtype {dtype!r}; expected one of {sorted(set(_DTYPE_ALIASES))}"
        ) from None


def _positive_int(value, what):
    return parse_count(value, what)


# --------------------------------------------------------------------------------------------
# Device and link specs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One accelerator (or CPU "device").

    Parameters
    ----------
    name : str
        Human-readable model name, e.g. ``"V100-SXM2-16GB"``.
    memory : float or str
        Usable device memory in **bytes** (``"16GiB"`` accepted).
    peak_flops : float or str
        Peak dense **fp32** (non-tensor-core) throughput in **FLOP/s**.
    memory_bandwidth : float or str
        Device memory bandwidth in **bytes/s**.
    kernel_overhead : float or str, default 5e-6
        Fixed cost per operator (kernel launch + framework dispatch) in **seconds**.
    dtype_flops : mapping dtype -> FLOP/s, optional
        Peak throughput for other dtypes (tensor cores): e.g. ``{"float16": 125e12}``. Keys are
        normalised with :func:`normalize_dtype`; stored as a sorted tuple of pairs so the spec
        stays hashable.
    efficiency : mapping operator family -> fraction in (0, 1], optional
        Achieved fraction of the roofline per operator family (``"linear"``, ``"attention"``,
        ``"unary:gelu"``...: an operator kind, or kind and function for elementwise ones; see
        :meth:`efficiency_for`): the compute model divides an operator's roofline time (without
        the launch overhead) by it. Missing families run at the roofline (1.0). Stored as a
        sorted tuple of pairs.

    Examples
    --------
    >>> d = DeviceSpec("toy", "1GiB", "1TFLOPS", "100GB/s", "5us", {"fp16": "8 TFLOPS"})
    >>> d.memory, d.flops_for("half"), d.flops_for("float32")
    (1073741824.0, 8000000000000.0, 1000000000000.0)
    """

    name: str
    memory: float
    peak_flops: float
    memory_bandwidth: float
    kernel_overhead: float = 5e-6
    dtype_flops: tuple = ()
    efficiency: tuple = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInputError(f"DeviceSpec.name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "memory", parse_bytes(self.memory))
        object.__setattr__(self, "peak_flops", parse_flops(self.peak_flops))
        object.__setattr__(self, "memory_bandwidth", parse_rate(self.memory_bandwidth))
        object.__setattr__(self, "kernel_overhead", parse_time(self.kernel_overhead, allow_zero=True))
        items = self.dtype_flops.items() if isinstance(self.dtype_flops, Mapping) else self.dtype_flops
        try:
            pairs = {normalize_dtype(k): parse_flops(v) for k, v in items}
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInputError):
                raise
            raise InvalidInputError(
                f"DeviceSpec.dtype_flops must map dtype names to FLOP/s, got {self.dtype_flops!r}"
            ) from None
        object.__setattr__(self, "dtype_flops", tuple(sorted(pairs.items())))
        items = self.efficiency.items() if isinstance(self.efficiency, Mapping) else self.efficiency
        try:
            eff = {str(k): float(v) for k, v in items}
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"DeviceSpec.efficiency must map operator families to fractions, got {self.efficiency!r}") from None
        bad = {k: v for k, v in eff.items() if not 0.0 < v <= 1.0}
        if bad:
            raise InvalidInputError(f"DeviceSpec.efficiency values must be in (0, 1], got {bad}")
        object.__setattr__(self, "efficiency", tuple(sorted(eff.items())))

    @property
    def is_cpu(self) -> bool:
        """Whether the device is a CPU (its name starts with ``"cpu"``): torch runs it with the
        CPU's defaults (single-tensor optimizer steps, the CPU's autocast policy)."""
        return str(self.name).lower().startswith("cpu")

    def flops_for(self, dtype="float32") -> float:
        """Peak FLOP/s for ``dtype``: its ``dtype_flops`` entry, else ``peak_flops`` (fp32)."""
        name = normalize_dtype(dtype)
        for k, v in self.dtype_flops:
            if k == name:
                return v
        return self.peak_flops

    def efficiency_for(self, family: str) -> float:
        """Achieved fraction of the roofline for operator ``family`` (``"unary:gelu"`` falls back
        to ``"unary"``); 1.0 when the spec has none."""
        table = dict(self.efficiency)
        if family in table:
            return table[family]
        return table.get(str(family).split(":", 1)[0], 1.0)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "memory": self.memory,
            "peak_flops": self.peak_flops,
            "memory_bandwidth": self.memory_bandwidth,
            "kernel_overhead": self.kernel_overhead,
            "dtype_flops": dict(self.dtype_flops),
            "efficiency": dict(self.efficiency),
        }


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A communication link as the cost model sees it.

    Parameters
    ----------
    kind : {"nvlink", "pcie", "infiniband", "ethernet", "shared_memory"}
    bandwidth : float or str
        Effective **bytes/s per direction** that one device (intra link) or one network port
        (inter link) sustains in a collective: the "bus bandwidth" nccl-tests reports, not the
        line rate. ``"100Gb/s"`` style strings are accepted.
    latency : float or str
        **Seconds** per algorithm step (one message hop), 0 allowed.
    ports : int, default 1
        Independent channels a machine has on this link; the machine's aggregate capacity is
        ``ports * bandwidth`` and one device gets at most ``bandwidth``. Inter-machine links:
        network ports (NICs) per machine. Shared intra links: host uplinks or memory channels.
        Ignored for non-shared links.
    shared : bool, optional
        Whether the devices of a machine share the link's ``ports * bandwidth`` (PCIe behind
        host uplinks, a shared memory bus: True) or each device has its own lanes
        (NVLink/NVSwitch: False). Default: False for ``"nvlink"``, True otherwise.
        Inter-machine links are always shared through their ports.

    Examples
    --------
    >>> LinkSpec("infiniband", "100Gb/s", "5us").bandwidth
    12500000000.0
    >>> LinkSpec("nvlink", "130GB/s", "2us").shared, LinkSpec("pcie", "6.5GB/s", "5us").shared
    (False, True)
    """

    kind: LinkKind
    bandwidth: float
    latency: float
    ports: int = 1
    shared: bool | None = None

    def __post_init__(self):
        if self.kind not in LINK_KINDS:
            raise InvalidInputError(f"unknown link kind {self.kind!r}; expected one of {LINK_KINDS}")
        object.__setattr__(self, "bandwidth", parse_rate(self.bandwidth))
        object.__setattr__(self, "latency", parse_time(self.latency, allow_zero=True))
        _positive_int(self.ports, "LinkSpec.ports")
        if self.shared is None:
            object.__setattr__(self, "shared", self.kind != "nvlink")
        elif not isinstance(self.shared, bool):
            raise InvalidInputError(f"LinkSpec.shared must be a bool or None, got {self.shared!r}")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "bandwidth": self.bandwidth, "latency": self.latency,
                "ports": self.ports, "shared": self.shared}


# --------------------------------------------------------------------------------------------
# Group signatures and measured tables
# --------------------------------------------------------------------------------------------


def group_signature(groups, machine_of) -> tuple[int, int, int]:
    """The *device partitioning signature* a communication table is keyed by.

    Parameters
    ----------
    groups : sequence of sequences of int
        Concurrent collective groups (global device ids), all of the same size.
    machine_of : callable int -> int
        Machine index of a device.

    Returns
    -------
    (group_size, devices_per_machine, concurrent_groups)
        ``group_size``: devices per group. ``devices_per_machine``: the most devices one group
        has on one machine (``== group_size`` for a group inside one machine; 1 when every
        member is on a different machine). ``concurrent_groups``: the most groups that have a
        device on one machine, i.e. how many collectives share a machine's links at once.

    Examples
    --------
    >>> group_signature([(0, 1), (2, 3)], lambda d: d // 8)      # two groups inside machine 0
    (2, 2, 2)
    >>> group_signature([(0, 8), (1, 9)], lambda d: d // 8)      # two groups across machines
    (2, 1, 2)
    """
    per_machine_groups: dict[int, int] = {}
    dpm = 0
    size = None
    for g in groups:
        counts: dict[int, int] = {}
        for d in g:
            m = machine_of(d)
            counts[m] = counts.get(m, 0) + 1
        dpm = max(dpm, max(counts.values()))
        for m in counts:
            per_machine_groups[m] = per_machine_groups.get(m, 0) + 1
        size = len(g)
    return (int(size), int(dpm), int(max(per_machine_groups.values())))


def _freeze_meta(meta) -> tuple:
    if meta is None:
        return ()
    if not isinstance(meta, Mapping):
        raise CalibrationError(f"calibration metadata must be a JSON object, got {meta!r}")
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in meta.items()))


class CommTable:
    """Measured collective times: ``(kind, signature) -> (sizes in bytes, seconds)``.

    Immutable and hashable. ``signature`` is :func:`group_signature`'s triple. Sizes are
    strictly increasing positive byte counts (TensorOpt measures at 2^i, 0 <= i <= P); times are
    the mean wall time of the slowest concurrent group, each run started right after a barrier.

    ``sync`` (optional) maps a signature to ``(wait seconds, stretch)``: in a training step a
    collective follows each rank's own work instead of a barrier, and costs ``stretch`` times its
    table plus ``wait`` (the wait for the slowest member;
    :func:`tensoropt_py.calibrate.calibrate_sync` measures both,
    :class:`~tensoropt_py.cost.comm.CommModel` applies them). Unmeasured: ``(0.0, 1.0)``.

    Examples
    --------
    >>> t = CommTable({("all_reduce", (2, 2, 1)): ([1, 2, 4], [1e-5, 1e-5, 1.1e-5])}, sync={(2, 2, 1): (3e-4, 1.5)})
    >>> t.get("all_reduce", (2, 2, 1))
    ((1.0, 2.0, 4.0), (1e-05, 1e-05, 1.1e-05))
    >>> t.get("all_gather", (2, 2, 1)) is None, t.sync_for((2, 2, 1)), t.sync_for((4, 4, 1))
    (True, (0.0003, 1.5), (0.0, 1.0))
    """

    __slots__ = ("_entries", "_meta", "_sync", "_hash")

    def __init__(self, entries, meta=None, sync=None):
        clean = {}
        for key, value in dict(entries).items():
            try:
                kind, sig = key
                sig = tuple(int(x) for x in sig)
                sizes, seconds = value
                sizes = tuple(float(s) for s in sizes)
                seconds = tuple(float(s) for s in seconds)
            except (TypeError, ValueError):
                raise CalibrationError(f"malformed communication table entry {key!r}: {value!r}") from None
            if kind not in COLLECTIVES or len(sig) != 3 or min(sig) < 1:
                raise CalibrationError(
                    f"bad communication table key {key!r}: expected (kind in {COLLECTIVES}, "
                    "(group_size, devices_per_machine, concurrent_groups) of positive ints)"
                )
            if not sizes or len(sizes) != len(seconds):
                raise CalibrationError(f"communication table entry {key!r}: sizes and seconds must be non-empty and of equal length")
            if any(not math.isfinite(s) or s <= 0 for s in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:])):
                raise CalibrationError(f"communication table entry {key!r}: sizes must be positive and strictly increasing, got {sizes}")
            if any(not math.isfinite(t) or t < 0 for t in seconds):
                raise CalibrationError(f"communication table entry {key!r}: times must be finite and >= 0, got {seconds}")
            clean[(kind, sig)] = (sizes, seconds)
        self._entries = clean
        self._meta = _freeze_meta(meta)
        self._sync = _clean_sync(sync)
        self._hash = None

    def get(self, kind, signature):
        """``(sizes, seconds)`` for ``(kind, signature)`` or None when not measured."""
        return self._entries.get((kind, tuple(signature)))

    def sync_for(self, signature) -> tuple[float, float]:
        """``(wait seconds, stretch)`` of the collectives of ``signature`` (``(0.0, 1.0)`` when not measured)."""
        return self._sync.get(tuple(signature), (0.0, 1.0))

    @property
    def sync(self) -> dict:
        """``signature -> (wait seconds, stretch)`` of the synchronisation terms (a copy)."""
        return dict(self._sync)

    def keys(self):
        return self._entries.keys()

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    @property
    def meta(self) -> dict:
        """Free-form metadata recorded by the calibration run (backend, world size, hosts...)."""
        return {k: json.loads(v) for k, v in self._meta}

    def __eq__(self, other):
        return (isinstance(other, CommTable) and self._entries == other._entries and self._meta == other._meta
                and self._sync == other._sync)

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((tuple(sorted(self._entries.items())), self._meta, tuple(sorted(self._sync.items()))))
        return self._hash

    def __repr__(self):
        return f"CommTable({len(self)} entries)"

    def to_dict(self) -> dict:
        entries = [
            {"collective": kind, "group_size": sig[0], "devices_per_machine": sig[1],
             "concurrent_groups": sig[2], "sizes": list(sizes), "seconds": list(seconds)}
            for (kind, sig), (sizes, seconds) in sorted(self._entries.items())
        ]
        out = {"meta": self.meta, "entries": entries}
        if self._sync:
            out["sync"] = [{"group_size": sig[0], "devices_per_machine": sig[1], "concurrent_groups": sig[2],
                            "seconds": wait, "stretch": stretch} for sig, (wait, stretch) in sorted(self._sync.items())]
        return out

    @classmethod
    def from_dict(cls, data) -> "CommTable":
        try:
            entries = {}
            for e in data["entries"]:
                sig = (e["group_size"], e["devices_per_machine"], e["concurrent_groups"])
                entries[(e["collective"], sig)] = (e["sizes"], e["seconds"])
            sync = {(e["group_size"], e["devices_per_machine"], e["concurrent_groups"]): (e["seconds"], e.get("stretch", 1.0))
                    for e in data.get("sync", ())}
            return cls(entries, data.get("meta"), sync)
        except (TypeError, KeyError, AttributeError) as exc:
            raise CalibrationError(f"malformed communication table: {exc!r}") from None


def _clean_sync(sync) -> dict:
    """Validated ``signature -> (wait, stretch)`` of :class:`CommTable`'s synchronisation terms."""
    clean = {}
    for key, value in dict(sync or {}).items():
        try:
            sig = tuple(int(x) for x in key)
            wait, stretch = (float(v) for v in value)
        except (TypeError, ValueError):
            raise CalibrationError(f"malformed synchronisation entry {key!r}: {value!r}") from None
        if (len(sig) != 3 or min(sig) < 1 or not math.isfinite(wait) or wait < 0 or not math.isfinite(stretch)
                or stretch < 1):
            raise CalibrationError(
                f"bad synchronisation entry {key!r}: {value!r} (expected a (group_size, devices_per_machine, "
                "concurrent_groups) signature of positive ints -> (wait: finite seconds >= 0, stretch: finite >= 1))")
        clean[sig] = (wait, stretch)
    return clean


class ComputeTable:
    """Measured operator times: ``key -> seconds`` (immutable, hashable).

    Keys are strings built by the cost layer, e.g. ``"linear|[64,1024]x[1024,256]|float32|fwd+bwd"``.

    Examples
    --------
    >>> t = ComputeTable({"relu|[8]|float32|fwd": 2e-6})
    >>> t.get("relu|[8]|float32|fwd"), t.get("missing")
    (2e-06, None)
    """

    __slots__ = ("_entries", "_meta", "_hash")

    def __init__(self, entries, meta=None):
        clean = {}
        for k, v in dict(entries).items():
            try:
                t = float(v)
            except (TypeError, ValueError):
                raise CalibrationError(f"compute table entry {k!r} has a non-numeric time {v!r}") from None
            if not isinstance(k, str) or not math.isfinite(t) or t < 0:
                raise CalibrationError(f"bad compute table entry {k!r}: {v!r} (keys are strings, times finite >= 0 seconds)")
            clean[k] = t
        self._entries = clean
        self._meta = _freeze_meta(meta)
        self._hash = None

    def get(self, key, default=None):
        return self._entries.get(key, default)

    def items(self):
        return self._entries.items()

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    @property
    def meta(self) -> dict:
        return {k: json.loads(v) for k, v in self._meta}

    def merged(self, other: "ComputeTable") -> "ComputeTable":
        """A table with this table's entries updated by ``other``'s."""
        return ComputeTable({**self._entries, **other._entries}, {**self.meta, **other.meta})

    def __eq__(self, other):
        return isinstance(other, ComputeTable) and self._entries == other._entries and self._meta == other._meta

    def __hash__(self):
        if self._hash is None:
            self._hash = hash((tuple(sorted(self._entries.items())), self._meta))
        return self._hash

    def __repr__(self):
        return f"ComputeTable({len(self)} entries)"

    def to_dict(self) -> dict:
        return {"meta": self.meta, "entries": dict(sorted(self._entries.items()))}

    @classmethod
    def from_dict(cls, data) -> "ComputeTable":
        try:
            return cls(data["entries"], data.get("meta"))
        except (TypeError, KeyError, AttributeError) as exc:
            raise CalibrationError(f"malformed compute table: {exc!r}") from None


def load_calibration(path) -> tuple[CommTable | None, ComputeTable | None]:
    """Read a calibration file: ``(comm_table or None, compute_table or None)``.

    The file is JSON: ``{"format": "tensoropt_py-calibration", "version": 1, "comm": {"meta":
    {...}, "entries": [{"collective", "group_size", "devices_per_machine", "concurrent_groups",
    "sizes" (bytes), "seconds"}, ...], "sync" (optional): [{"group_size", "devices_per_machine",
    "concurrent_groups", "seconds"}, ...]}, "compute": {"meta": {...}, "entries": {key: seconds}}}``;
    either section may be absent, not both.

    Raises
    ------
    CalibrationError
        Missing, unreadable, not JSON, wrong format, or malformed entries; names the path.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CalibrationError(f"cannot read calibration file {str(p)!r}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CalibrationError(f"calibration file {str(p)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise CalibrationError(
            f"calibration file {str(p)!r} is not a tensoropt_py calibration file "
            f"(expected a JSON object with \"format\": {CALIBRATION_FORMAT!r})"
        )
    if data.get("version") != CALIBRATION_VERSION:
        raise CalibrationError(f"calibration file {str(p)!r} has version {data.get('version')!r}; this library reads version {CALIBRATION_VERSION}")
    if "comm" not in data and "compute" not in data:
        raise CalibrationError(f"calibration file {str(p)!r} has neither a 'comm' nor a 'compute' section")
    try:
        comm = CommTable.from_dict(data["comm"]) if data.get("comm") is not None else None
        compute = ComputeTable.from_dict(data["compute"]) if data.get("compute") is not None else None
    except CalibrationError as exc:
        raise CalibrationError(f"calibration file {str(p)!r}: {exc}") from None
    return comm, compute


def write_calibration(path, comm: CommTable | None = None, compute: ComputeTable | None = None, *, merge=True):
    """Write a calibration file; with ``merge`` keep the other section of an existing valid file.

    Compute entries are merged key by key; a new ``comm`` section replaces the old one.
    """
    p = Path(path)
    old_comm = old_compute = None
    if merge and p.exists():
        try:
            old_comm, old_compute = load_calibration(p)
        except CalibrationError:
            old_comm = old_compute = None
    if comm is None:
        comm = old_comm
    if compute is not None and old_compute is not None:
        compute = old_compute.merged(compute)
    elif compute is None:
        compute = old_compute
    data = {"format": CALIBRATION_FORMAT, "version": CALIBRATION_VERSION}
    if comm is not None:
        data["comm"] = comm.to_dict()
    if compute is not None:
        data["compute"] = compute.to_dict()
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


# --------------------------------------------------------------------------------------------
# Cluster
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cluster:
    """A homogeneous cluster: ``machines`` x ``devices_per_machine`` devices.

    Parameters
    ----------
    name : str
    machines : int
        Number of machines (>= 1).
    devices_per_machine : int
        Devices per machine (>= 1). Device ``i`` is on machine ``i // devices_per_machine``.
    device : DeviceSpec
    intra_link : LinkSpec
        Link between devices of one machine.
    inter_link : LinkSpec or None
        Network between machines (per-port bandwidth, ``ports`` per machine). May be None only
        when ``machines == 1``.
    comm_table : CommTable, optional
        Measured collective times that override the latency-bandwidth model
        (:class:`~tensoropt_py.cost.comm.CommModel`).
    compute_table : ComputeTable, optional
        Measured operator times consulted before the roofline
        (:class:`~tensoropt_py.cost.compute.ComputeModel`).

    Examples
    --------
    >>> cl = Cluster.preset("cpu-1x4")
    >>> cl.num_devices, cl.device_counts()
    (4, (1, 2, 4))
    >>> Cluster.preset("nope")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: unknown cluster preset 'nope'; valid presets: ...
    """

    name: str
    machines: int
    devices_per_machine: int
    device: DeviceSpec
    intra_link: LinkSpec
    inter_link: LinkSpec | None
    comm_table: CommTable | None = field(default=None, compare=True)
    compute_table: ComputeTable | None = field(default=None, compare=True)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInputError(f"Cluster.name must be a non-empty string, got {self.name!r}")
        _positive_int(self.machines, "Cluster.machines")
        _positive_int(self.devices_per_machine, "Cluster.devices_per_machine")
        if not isinstance(self.device, DeviceSpec):
            raise InvalidInputError(f"Cluster.device must be a DeviceSpec, got {self.device!r}")
        if not isinstance(self.intra_link, LinkSpec):
            raise InvalidInputError(f"Cluster.intra_link must be a LinkSpec, got {self.intra_link!r}")
        if self.inter_link is None:
            if self.machines > 1:
                raise InvalidInputError(f"Cluster {self.name!r} has {self.machines} machines but no inter_link")
        elif not isinstance(self.inter_link, LinkSpec):
            raise InvalidInputError(f"Cluster.inter_link must be a LinkSpec or None, got {self.inter_link!r}")
        if self.comm_table is not None and not isinstance(self.comm_table, CommTable):
            raise InvalidInputError(f"Cluster.comm_table must be a CommTable or None, got {type(self.comm_table).__name__}")
        if self.compute_table is not None and not isinstance(self.compute_table, ComputeTable):
            raise InvalidInputError(f"Cluster.compute_table must be a ComputeTable or None, got {type(self.compute_table).__name__}")

    # -- topology -----------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        """Total number of devices, ``machines * devices_per_machine``."""
        return self.machines * self.devices_per_machine

    def machine_of(self, device: int) -> int:
        """Machine index of global device id ``device`` (row-major numbering).

        Examples
        --------
        >>> Cluster.preset("v100-2x8").machine_of(7), Cluster.preset("v100-2x8").machine_of(8)
        (0, 1)
        """
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < self.num_devices:
            try:
                import numpy as np

                if isinstance(device, np.integer) and 0 <= int(device) < self.num_devices:
                    return int(device) // self.devices_per_machine
            except ImportError:  # pragma: no cover
                pass
            raise InvalidInputError(
                f"device id {device!r} out of range for cluster {self.name!r} with {self.num_devices} devices (0..{self.num_devices - 1})"
            )
        return device // self.devices_per_machine

    def device_counts(self) -> tuple[int, ...]:
        """Device counts a plan may use: powers of two up to ``num_devices``, plus ``num_devices``.

        A plan on ``n`` devices uses devices ``0..n-1`` (filling machines in order), so these
        counts give meshes whose factors are the powers of two the model dimensions usually
        divide by, and the whole cluster even when it is not a power of two.

        Examples
        --------
        >>> dataclasses.replace(Cluster.preset("v100-2x8"), machines=3).device_counts()
        (1, 2, 4, 8, 16, 24)
        """
        n = self.num_devices
        counts = {1 << i for i in range(n.bit_length()) if (1 << i) <= n}
        counts.add(n)
        return tuple(sorted(counts))

    def group_signature(self, groups) -> tuple[int, int, int]:
        """:func:`group_signature` of ``groups`` on this cluster's machines."""
        return group_signature(groups, self.machine_of)

    # -- presets --------------------------------------------------------------------------------

    @staticmethod
    def presets() -> tuple[str, ...]:
        """Names of the built-in presets (see :func:`_preset_table` for every number's source)."""
        return tuple(_PRESETS)

    @staticmethod
    def preset(name: str) -> "Cluster":
        """A built-in cluster by name; unknown names raise InvalidInputError listing valid ones."""
        try:
            factory = _PRESETS[name]
        except (KeyError, TypeError):
            raise InvalidInputError(
                f"unknown cluster preset {name!r}; valid presets: {', '.join(_PRESETS)}"
            ) from None
        return factory()

    @classmethod
    def load(cls, path_or_name) -> "Cluster":
        """A cluster from a JSON file (written by :meth:`to_json`) or a preset name.

        Examples
        --------
        >>> Cluster.load("v100-2x8").name
        'v100-2x8'
        """
        if isinstance(path_or_name, (str, os.PathLike)):
            p = Path(path_or_name)
            if p.is_file():
                try:
                    text = p.read_text(encoding="utf-8")
                except OSError as exc:
                    raise InvalidInputError(f"cannot read cluster file {str(p)!r}: {exc}") from None
                return cls.from_json(text, source=str(p))
            if isinstance(path_or_name, str) and path_or_name in _PRESETS:
                return cls.preset(path_or_name)
        raise InvalidInputError(
            f"{str(path_or_name)!r} is neither an existing cluster JSON file nor a preset; "
            f"valid presets: {', '.join(_PRESETS)}"
        )

    # -- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "machines": self.machines,
            "devices_per_machine": self.devices_per_machine,
            "device": self.device.to_dict(),
            "intra_link": self.intra_link.to_dict(),
            "inter_link": None if self.inter_link is None else self.inter_link.to_dict(),
            "comm_table": None if self.comm_table is None else self.comm_table.to_dict(),
            "compute_table": None if self.compute_table is None else self.compute_table.to_dict(),
        }

    def to_json(self, indent: int | None = 1) -> str:
        """JSON text of the cluster (tables included); :meth:`from_json` reads it back."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data, *, source="<dict>") -> "Cluster":
        try:
            inter = data.get("inter_link")
            return cls(
                name=data["name"],
                machines=data["machines"],
                devices_per_machine=data["devices_per_machine"],
                device=DeviceSpec(**data["device"]),
                intra_link=LinkSpec(**data["intra_link"]),
                inter_link=None if inter is None else LinkSpec(**inter),
                comm_table=None if data.get("comm_table") is None else CommTable.from_dict(data["comm_table"]),
                compute_table=None if data.get("compute_table") is None else ComputeTable.from_dict(data["compute_table"]),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidInputError(f"malformed cluster description in {source}: {exc!r}") from None

    @classmethod
    def from_json(cls, text, *, source="<json>") -> "Cluster":
        """A cluster from :meth:`to_json` text (or an already-parsed dict)."""
        if isinstance(text, Mapping):
            return cls.from_dict(text, source=source)
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"cluster description {source} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInputError(f"cluster description {source} must be a JSON object")
        return cls.from_dict(data, source=source)

    # -- calibration --------------------------------------------------------------------------

    def with_calibration(self, path) -> "Cluster":
        """A copy whose models use the measured tables in calibration file ``path``.

        A section absent from the file keeps this cluster's current table. A missing or corrupt
        file raises :class:`~tensoropt_py.errors.CalibrationError` naming the path.
        """
        comm, compute = load_calibration(path)
        return dataclasses.replace(
            self,
            comm_table=comm if comm is not None else self.comm_table,
            compute_table=compute if compute is not None else self.compute_table,
        )

    def __str__(self):
        d = self.device
        parts = [
            f"{self.name}: {self.machines} x {self.devices_per_machine} {d.name} "
            f"({format_bytes(d.memory, binary=True)}, {format_flops(d.peak_flops)} fp32)",
            f"intra {self.intra_link.kind} {format_rate(self.intra_link.bandwidth)} "
            f"+{format_time(self.intra_link.latency)}",
        ]
        if self.inter_link is not None and self.machines > 1:
            il = self.inter_link
            ports = f"{il.ports} x " if il.ports > 1 else ""
            parts.append(f"inter {il.kind} {ports}{format_rate(il.bandwidth)} +{format_time(il.latency)}")
        if self.comm_table is not None or self.compute_table is not None:
            parts.append("calibrated")
        return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------
#
# Link bandwidths are *effective* per-direction bus bandwidths (what a ring collective achieves
# per device, as nccl-tests reports "busbw"), not line rates; latencies are per algorithm step.
# Calibrate (tensoropt_py.calibrate) to replace them by measurements.
#
# Devices (NVIDIA datasheets):
#   V100-SXM2-16GB: 16 GiB HBM2, 900 GB/s, 15.7 TFLOP/s fp32, 125 TFLOP/s fp16 tensor core.
#   A100-SXM4-80GB: 80 GiB HBM2e, 2039 GB/s, 19.5 TFLOP/s fp32, 156 TF32, 312 fp16/bf16 (dense).
#   H100-SXM5-80GB: 80 GiB HBM3, 3.35 TB/s, 67 TFLOP/s fp32, 495 TF32, 989 fp16/bf16, 1979 fp8 (dense).
#   kernel_overhead 5 us: order of a CUDA kernel launch plus framework dispatch.
# Links:
#   NVLink 2.0 (DGX-1V hybrid cube mesh, 6 x 25 GB/s per V100 per direction): nccl-tests 8-GPU
#     all_reduce busbw ~130 GB/s -> 130 GB/s, 2 us/step.
#   PCIe 3.0 x16 (15.75 GB/s line rate, ~13 GB/s achievable per device), 4 x16 host uplinks shared
#     by the 8 GPUs of a machine: an 8-GPU ring gets 13 * 4/8 = 6.5 GB/s, matching TensorOpt §5.1's
#     measurement of PCIe at ~1/20 of NVLink; 5 us/step.
#   EDR InfiniBand 100 Gb/s (12.5 GB/s line rate), RDMA: ~12 GB/s effective, 5 us/step.
#   "no RDMA" (TensorOpt Fig. 7b: IB used without RDMA, TCP/IP): ~0.5 x RDMA -> 6 GB/s, 25 us/step.
#   "4x RDMA" (TensorOpt Fig. 7b, like a DGX-1 with 4 IB cards): 4 ports x 12 GB/s.
#   NVLink 3 (A100, 12 x 25 GB/s = 300 GB/s per direction, "600 GB/s" bidirectional): busbw ~230 GB/s.
#   HDR InfiniBand 200 Gb/s (25 GB/s line), 8 per DGX A100: ~23 GB/s effective each, 4 us/step.
#   NVLink 4 (H100 SXM, 18 x 25 GB/s = 450 GB/s per direction, "900 GB/s"): busbw ~360 GB/s;
#     1 us per ring step: with the 5 us launch per collective (kernel_overhead, charged by
#     cost.comm), an 8-GPU all_reduce of a few bytes costs 5 + 14 x 1 = 19 us, the order of
#     nccl-tests' small-message times on a DGX H100 (15-20 us), where 2 us per step gave 33 us.
#   NDR InfiniBand 400 Gb/s (50 GB/s line), 8 per DGX H100: ~46 GB/s effective each, 4 us/step.
#   cpu-1x4: MPI shared-memory collectives between processes, measured with this module's
#     calibration on a 2-core VM (MPICH 5, 2 ranks, 4 MiB): busbw ~2-3.5 GB/s -> 3 GB/s, ~5 us per
#     step; a memory bus that sustains two such copies at once (ports=2); one core ~50 GFLOP/s fp32
#     (AVX2 FMA, realistic for torch), ~10 GB/s memory bandwidth share, 10 us per eager torch op.

_V100 = dict(name="V100-SXM2-16GB", memory="16GiB", peak_flops="15.7TFLOPS", memory_bandwidth="900GB/s",
             kernel_overhead="5us", dtype_flops={"float16": "125TFLOPS"})
_A100 = dict(name="A100-SXM4-80GB", memory="80GiB", peak_flops="19.5TFLOPS", memory_bandwidth="2039GB/s",
             kernel_overhead="5us",
             dtype_flops={"tfloat32": "156TFLOPS", "float16": "312TFLOPS", "bfloat16": "312TFLOPS"})
# Achieved fraction of the roofline per operator family on an H100 (fp32, torch eager), fitted to
# the per-operator calibration of shared/ground-truth/h100 (NVIDIA H100 80GB HBM3, torch 2.11.0+cu130,
# 2026-11-23: gpt2 small at batch 8 x 1024 and bert_large at 32 x 512, every operator shard timed
# forward + backward): efficiency = sum of roofline times / (sum of measured - launch overheads)
# over both models' shards (per-model values in brackets): linear 0.72 [0.68, 0.73] (fp32 GEMMs
# without TF32), attention 0.31 [0.34, 0.30] (fp32 memory-efficient SDPA), layer_norm 0.40
# [0.26, 0.44], loss 0.43 [0.42, 0.45] (log-softmax + NLL, several passes), embedding 0.31
# [0.33, 0.31] (gather + scatter-add backward), gelu 0.87 [0.83, 0.88], add 0.84 [0.61, 0.91].
# Reshape, transpose and dropout are left at the roofline: the executor runs views and dropout as
# the identity, and their calibrated times (~0.1 ms per call on small shards) are the timing
# loop's floor, not work.
_H100_EFFICIENCY = {"linear": 0.72, "matmul": 0.72, "bmm": 0.72, "attention": 0.31, "layer_norm": 0.40,
                    "loss": 0.43, "embedding": 0.31, "unary:gelu": 0.87, "binary:add": 0.84}
_H100 = dict(name="H100-SXM5-80GB", memory="80GiB", peak_flops="67TFLOPS", memory_bandwidth="3350GB/s",
             kernel_overhead="5us",
             dtype_flops={"tfloat32": "495TFLOPS", "float16": "989TFLOPS", "bfloat16": "989TFLOPS",
                          "float8": "1979TFLOPS"},
             efficiency=_H100_EFFICIENCY)

_NVLINK2 = dict(kind="nvlink", bandwidth="130GB/s", latency="2us")
_PCIE3 = dict(kind="pcie", bandwidth="13GB/s", latency="5us", ports=4)
_EDR = dict(kind="infiniband", bandwidth="12GB/s", latency="5us")


def _v100(name, intra=_NVLINK2, inter=_EDR):
    return Cluster(name, 2, 8, DeviceSpec(**_V100), LinkSpec(**intra), LinkSpec(**inter))


def _preset_table():
    """name -> factory. Numbers and sources: see the comment block above this function."""
    return {
        # TensorOpt §5: 2 machines x 8 V100-16GB, NVLink inside, 100 Gb/s EDR IB (RDMA) between.
        "v100-2x8": lambda: _v100("v100-2x8"),
        # Fig. 7c: PCIe instead of NVLink inside a machine (~1/20 of NVLink).
        "v100-2x8-pcie": lambda: _v100("v100-2x8-pcie", intra=_PCIE3),
        # Fig. 7b: no RDMA (TCP/IP over the IB/100GbE NIC), ~0.5 x RDMA bandwidth.
        "v100-2x8-nordma": lambda: _v100(
            "v100-2x8-nordma", inter=dict(kind="ethernet", bandwidth="6GB/s", latency="25us")),
        # Fig. 7b: 4 x RDMA (4 EDR cards per machine, like a DGX-1).
        "v100-2x8-4xrdma": lambda: _v100("v100-2x8-4xrdma", inter=dict(_EDR, ports=4)),
        "dgx-a100-2x8": lambda: Cluster(
            "dgx-a100-2x8", 2, 8, DeviceSpec(**_A100),
            LinkSpec("nvlink", "230GB/s", "2us"), LinkSpec("infiniband", "23GB/s", "4us", ports=8)),
        "h100-4x8": lambda: Cluster(
            "h100-4x8", 4, 8, DeviceSpec(**_H100),
            LinkSpec("nvlink", "360GB/s", "1us"), LinkSpec("infiniband", "46GB/s", "4us", ports=8)),
        # 8 machines x 8 H100 (64 devices), same machines and network as h100-4x8.
        "h100-8x8": lambda: Cluster(
            "h100-8x8", 8, 8, DeviceSpec(**_H100),
            LinkSpec("nvlink", "360GB/s", "1us"), LinkSpec("infiniband", "46GB/s", "4us", ports=8)),
        # 4 CPU processes on this machine (executor tests): shared-memory MPI.
        "cpu-1x4": lambda: Cluster(
            "cpu-1x4", 1, 4,
            DeviceSpec("cpu-core", "4GiB", "50GFLOPS", "10GB/s", "10us"),
            LinkSpec("shared_memory", "3GB/s", "5us", ports=2),
            LinkSpec("ethernet", "10Gb/s", "50us")),
    }


_PRESETS = _preset_table()
