"""Compute cost model: seconds to run one operator shard on one device.

By default a **roofline**: ``max(flops / peak(dtype), bytes_moved / memory_bandwidth) / efficiency
+ kernel_overhead`` with the cluster's :class:`~tensoropt_py.cluster.DeviceSpec`, where
``efficiency`` is the achieved fraction of the roofline of the operator's family on that device
(:meth:`~tensoropt_py.cluster.DeviceSpec.efficiency_for`: fitted per preset, 1.0 where unknown). When the cluster
carries a measured :class:`~tensoropt_py.cluster.ComputeTable` (from
:func:`tensoropt_py.calibrate.calibrate_compute`), a call with a ``key`` present in the
table returns the measured seconds instead.

Keys are strings the caller builds so that equal work gets equal keys, e.g.
``"linear|[64,1024]x[1024,256]|float32|fwd+bwd"`` (operator, shard shapes, dtype, pass).

Measured times on an asynchronous device (the call floor)
----------------------------------------------------------
The calibration times every operator shard alone: host dispatch (Python, autograd, kernel
launches), the device work, and a synchronisation that waits for it. On a CUDA device the
host returns from a launch before the kernel runs, so in a training step, where operators run
back to back and the device is the bottleneck, the host dispatches the next operators while
the device still works on earlier ones: the step costs the device work, and the host's
per-call time is hidden. Timed alone, a call that does no device work at all (a view, or
dropout run as the identity) still takes the host dispatch plus the synchronisation: the
**call floor** (~0.1 ms on the H100 of ``shared/ground-truth``, 48 reshapes and 48 transposes
of GPT-2 small alone add 9 ms). For a table measured on CUDA, an entry is charged its time
above that floor, ``max(t - floor, 0)`` (a measured time below the floor is timer noise on a
call without device work). The floor is the calibration's own measurement of an empty call
(``meta["call_floor"]``, :func:`tensoropt_py.calibrate.calibrate_model_compute`); tables
written before it was recorded use their fastest operator entry, an upper bound of it. On a
CPU the host *is* the device: dispatch is work the step pays, and entries are used as measured.
Entries that time the forward alone (:data:`FORWARD_KEY_SUFFIX`, what a recomputation re-runs)
have a floor of their own, an empty forward without backward (``meta["forward_call_floor"]``).
Optimizer-update entries are not reduced: on CUDA they are shares of one multi-tensor step
timed as a whole, which pays its dispatch once.

Examples
--------
>>> from tensoropt_py.cluster import Cluster
>>> cm = ComputeModel(Cluster.preset("v100-2x8"))
>>> t = cm.time(flops=2 * 64 * 1024 * 256, bytes_moved=4 * (64 * 1024 + 1024 * 256 + 64 * 256))
>>> round(t * 1e6, 2)       # compute-bound: 33.6 MFLOP / 15.7 TFLOP/s + 5 us launch
7.14
>>> round(cm.time(15.7e12, 0) , 6)     # one second of fp32 peak + overhead
1.000005
>>> round(cm.time(15.7e12, 0, dtype="float16"), 4)   # fp16 tensor cores: 125 TFLOP/s
0.1256
"""

from __future__ import annotations

import math

import numpy as np

from ..cluster import Cluster, ComputeTable, load_calibration, normalize_dtype, write_calibration
from ..errors import CalibrationError, InvalidInputError
from .optimizer import UPDATE_KEY_PREFIX

__all__ = ["ComputeModel", "call_floor", "FORWARD_KEY_SUFFIX"]


#: Suffix of a table key timing the forward pass alone (what a recomputation re-runs):
#: :func:`tensoropt_py.cost.operator_cost.forward_key`.
FORWARD_KEY_SUFFIX = "|fwd"


def call_floor(table: ComputeTable | None, forward: bool = False) -> float:
    """Seconds of a measured entry that a training step does not pay (module docstring).

    0 for tables measured on a CPU (or without a recorded device); on CUDA the recorded empty-call
    time, else the fastest operator entry. ``forward``: the floor of the entries that time the
    forward alone (:data:`FORWARD_KEY_SUFFIX`), an empty forward with no backward: the recorded
    ``forward_call_floor``, else the fastest such entry.

    Examples
    --------
    >>> call_floor(ComputeTable({"a": 2e-4, "b": 1e-4}, {"torch_device": "cuda"}))
    0.0001
    >>> call_floor(ComputeTable({"a": 2e-4}, {"torch_device": "cuda", "call_floor": 9e-5}))
    9e-05
    >>> call_floor(ComputeTable({"a": 2e-4, "a|fwd": 6e-5}, {"torch_device": "cuda"}), forward=True)
    6e-05
    >>> call_floor(ComputeTable({"a": 2e-4}, {"torch_device": "cpu"}))
    0.0
    """
    if table is None:
        return 0.0
    meta = table.meta
    if not str(meta.get("torch_device", "cpu")).startswith("cuda"):
        return 0.0
    name = "forward_call_floor" if forward else "call_floor"
    if name in meta:
        floor = meta[name]
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not math.isfinite(floor) or floor < 0:
            raise CalibrationError(f"a compute table's {name} must be finite seconds >= 0, got {floor!r}")
        return float(floor)
    ops = [t for k, t in table.items()
           if not k.startswith(UPDATE_KEY_PREFIX) and k.endswith(FORWARD_KEY_SUFFIX) == forward]
    return min(ops) if ops else 0.0


def _nonneg(value, what) -> float:
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} must be a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise InvalidInputError(f"{what} must be finite and >= 0, got {value!r}")
    return v


class ComputeModel:
    """Operator time on one device of ``cluster`` (roofline, or measured when calibrated).

    Parameters
    ----------
    cluster : Cluster
    table : ComputeTable or mapping key -> seconds, optional
        Measured times; defaults to ``cluster.compute_table``. Entries given here override the
        cluster's.

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> m = ComputeModel(Cluster.preset("cpu-1x4"), table={"relu|[8]|float32|fwd": 3e-6})
    >>> m.time(8, 64, key="relu|[8]|float32|fwd"), m.source("relu|[8]|float32|fwd")
    (3e-06, 'calibrated')
    >>> m.time(0, 0)                       # nothing to run
    0.0
    """

    def __init__(self, cluster: Cluster, table=None):
        if not isinstance(cluster, Cluster):
            raise InvalidInputError(f"ComputeModel needs a Cluster, got {type(cluster).__name__}")
        self.cluster = cluster
        base = cluster.compute_table
        if table is not None and not isinstance(table, ComputeTable):
            table = ComputeTable(table)
        if base is not None and table is not None:
            table = base.merged(table)
        self.table: ComputeTable | None = table if table is not None else base
        self.floor = call_floor(self.table)
        self.forward_floor = call_floor(self.table, forward=True)
        dev = cluster.device
        self._inv_bw = 1.0 / dev.memory_bandwidth
        self._overhead = dev.kernel_overhead
        self._inv_peak: dict = {}

    def peak_flops(self, dtype="float32") -> float:
        """Peak FLOP/s of the device for ``dtype`` (tensor-core rate when the spec has one)."""
        return self.cluster.device.flops_for(dtype)

    def _inv(self, dtype):
        inv = self._inv_peak.get(dtype)
        if inv is None:
            inv = self._inv_peak[dtype] = 1.0 / self.cluster.device.flops_for(normalize_dtype(dtype))
        return inv

    def time(self, flops: float, bytes_moved: float, key: str | None = None, dtype="float32") -> float:
        """Seconds for one operator (shard) on one device.

        Parameters
        ----------
        flops : float
            Floating-point operations (>= 0).
        bytes_moved : float
            Bytes read + written in device memory (>= 0).
        key : str, optional
            Lookup key in the measured table; used first when present.
        dtype : str, default "float32"
            Selects the peak (e.g. ``"float16"`` uses the tensor-core rate).

        Returns
        -------
        float
            ``table[key]`` if measured (less the call floor of an asynchronous device, see the
            module docstring), else ``max(flops / peak, bytes_moved / bandwidth) +
            kernel_overhead``; 0 when both ``flops`` and ``bytes_moved`` are 0 (no kernel).
        """
        if key is not None and self.table is not None:
            t = self.table.get(key)
            if t is not None:
                if key.startswith(UPDATE_KEY_PREFIX):
                    return t
                return max(t - (self.forward_floor if key.endswith(FORWARD_KEY_SUFFIX) else self.floor), 0.0)
        f = _nonneg(flops, "flops")
        b = _nonneg(bytes_moved, "bytes_moved")
        if f == 0 and b == 0:
            return 0.0
        return max(f * self._inv(dtype), b * self._inv_bw) + self._overhead

    def times(self, flops, bytes_moved, dtype="float32", family: str | None = None) -> np.ndarray:
        """Vectorised roofline :meth:`time` (no table lookup) over broadcastable arrays.

        ``family`` (an operator family, :meth:`~tensoropt_py.cluster.DeviceSpec.efficiency_for`)
        divides the roofline part by the device's achieved fraction for it.
        """
        f = np.asarray(flops, dtype=np.float64)
        b = np.asarray(bytes_moved, dtype=np.float64)
        for arr, what in ((f, "flops"), (b, "bytes_moved")):
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise InvalidInputError(f"{what} must be finite and >= 0 everywhere")
        eff = 1.0 if family is None else self.cluster.device.efficiency_for(family)
        t = np.maximum(f * self._inv(dtype), b * self._inv_bw) / eff + self._overhead
        return np.where((f == 0) & (b == 0), 0.0, t)

    def source(self, key: str | None) -> str:
        """``"calibrated"`` when ``key`` is in the measured table, else ``"roofline"``."""
        if key is not None and self.table is not None and key in self.table:
            return "calibrated"
        return "roofline"

    def save(self, path):
        """Write the measured table to calibration file ``path`` (merging an existing file's
        other sections and compute entries); returns the path."""
        if self.table is None:
            raise CalibrationError(f"nothing to save to {str(path)!r}: this ComputeModel has no measured table")
        return write_calibration(path, compute=self.table)

    @classmethod
    def load(cls, path, cluster: Cluster) -> "ComputeModel":
        """A model for ``cluster`` with the compute table of calibration file ``path``.

        Raises CalibrationError (naming the path) if the file is missing, corrupt, or has no
        compute section.
        """
        _, compute = load_calibration(path)
        if compute is None:
            raise CalibrationError(f"calibration file {str(path)!r} has no 'compute' section")
        return cls(cluster, table=compute)
