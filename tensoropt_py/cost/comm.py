"""Communication cost model: time of a collective for a device partitioning and a size.

TensorOpt §3.2 ("Improving cost estimation accuracy") replaces *bytes / link bandwidth* by
a profile: for every device partitioning scheme (the concurrent groups a parallel
configuration creates) the time of each collective is measured at sizes 2^i, 0 <= i <= P,
and interpolated in between. :class:`CommModel` does exactly that, with two sources of tables:

* **measured** tables from :mod:`tensoropt_py.calibrate` attached to the cluster
  (:meth:`~tensoropt_py.cluster.Cluster.with_calibration`), keyed by ``(kind, signature)``
  where the signature is :func:`~tensoropt_py.cluster.group_signature`'s
  ``(group_size, devices_per_machine, concurrent_groups)``;
* otherwise a **default** table built from the latency-bandwidth model below, sampled at
  2^0 .. 2^max_log2 bytes.

Units and meaning of ``nbytes``
-------------------------------
Times are **seconds**. ``nbytes`` is the size in **bytes of the full logical tensor one group
operates on** (not the per-device shard and not the bytes on the wire):

============== =====================================================================
kind           nbytes is
============== =====================================================================
all_reduce     the tensor every member holds (input size == output size)
all_gather     the gathered result (each member contributes nbytes / g)
reduce_scatter the input before scattering (each member ends with nbytes / g)
all_to_all     the total bytes one member holds before the exchange (it sends nbytes / g
               to every member, itself included)
broadcast      the tensor the root sends
send_recv      the message each member sends to its successor in the group (a cyclic
               shift; for a pair, an exchange in both directions at once)
============== =====================================================================

``groups`` is a tuple of tuples of global device ids; every inner tuple is one group and all
groups run **concurrently** (so they contend for shared links); the result is the time until
the slowest group finishes. All groups must have the same size. A group of one device costs 0.

The latency-bandwidth model (defaults)
--------------------------------------
Collectives are modelled as hierarchical ring algorithms (what NCCL does across machines):
a group with ``d`` devices on each of ``k`` machines runs an intra-machine phase on the intra
link (``alpha_i``, ``B_i``) and an inter-machine phase on the network (``alpha_n``, ``B_n``)::

    all_reduce      2(g-k) alpha_i + 2(k-1) alpha_n + n [2(d-1)/d / B_i + 2(k-1)/k / B_n]
    reduce_scatter,
    all_gather       (g-k) alpha_i +  (k-1) alpha_n + n [ (d-1)/d / B_i +  (k-1)/k / B_n]
    all_to_all       (d-1) alpha_i +  (g-d) alpha_n + n [ (d-1)/g / B_i + d(g-d)/g / B_n]
    broadcast   ceil(log2 d) alpha_i + ceil(log2 k) alpha_n + n [1/B_i + 1/B_n]   (pipelined tree)
    send_recv   alpha (network if the group crosses machines) + n max(1/B_i, 1/min(B_n, port))

(bandwidth terms of a phase vanish when ``d == 1`` or ``k == 1``), plus one **launch cost**
per call, the device's ``kernel_overhead`` (:class:`~tensoropt_py.cluster.DeviceSpec`): a
collective is a kernel (NCCL) or a library call (MPI) with a fixed start-up cost whatever
its size, so ``all_reduce == reduce_scatter + all_gather - launch`` exactly, and the
rescheduler's shortest path (:mod:`tensoropt_py.cost.reschedule`) pays it once per
collective: a chain of small collectives is chosen only when it saves more than the extra
launches cost. Measured tables already hold it (they time whole calls). The bandwidth terms are those of the hierarchical
algorithm; the latency terms count the steps of a ring over all ``g`` members, ``2(k-1)`` of
which cross the network (NCCL's own ring latency model), so a group spread over machines never
beats the same-size group inside one. Contention:

* network: a machine's ``ports`` NICs of bandwidth ``bw`` each are crossed by ``F`` device
  flows (the devices on it that belong to any concurrent multi-machine group); each flow gets
  ``bw * min(1, ports / F)`` (its share of the NICs, at most one port), so a group with ``c``
  devices there gets ``B_n = c * bw * min(1, ports / F)``: the group's ``B_n`` is its worst
  machine's.
* intra link: when ``LinkSpec.shared`` (PCIe host uplinks, a shared memory bus) the link is a
  per-machine resource of ``ports * bandwidth``; the ``D`` devices of a machine that take part in
  intra-machine phases each get ``B_i = bandwidth * min(1, ports / D)``. NVLink (not shared)
  gives every device its own ``bandwidth``.

Adding a concurrent group therefore never makes a collective faster.

Synchronisation
---------------
A collective ends when its slowest member has arrived and the data has moved. Measured tables
start every run right after a barrier, with every member just running; in a training step a
rank reaches a collective after its own work. Where ranks share cores (more processes than
cores, or other load), a member may be descheduled when the others arrive, and they **wait**
for the scheduler to run it again; and one descheduled in the middle of a transfer stalls the
others, which **stretches** the transfer. The calibration measures both per device
partitioning (:func:`tensoropt_py.calibrate.calibrate_sync`: work, then an all-reduce, on all
ranks at once, less the work alone, against the barrier-started call) and
:class:`~tensoropt_py.cluster.CommTable` carries them (``sync_for``); every call of a group of
two or more costs ``stretch * (table or model time) + wait``. Unmeasured they are neutral
(``wait = 0``, ``stretch = 1``): devices that run one process each and start a collective when
their identical work ends arrive together.

Interpolation
-------------
For ``S[i] <= n < S[i+1]`` (found by bisection; ``S[i] = 2^i`` for default tables) the time is
linear **in bytes** between the two points: exact at every ``S[i]``, monotone in between when
the table is, and exact for any affine latency-bandwidth cost (the paper interpolates the
bandwidths; interpolating times linearly is equivalent at the points and keeps monotonicity).
Above the last point it extrapolates the last segment's slope; below the first point it returns
the first point's time (latency-bound); ``n == 0`` costs 0. Measured tables are made
non-decreasing in size (running maximum) when loaded, so timer noise never makes more bytes
cheaper.

Examples
--------
>>> from tensoropt_py.cluster import Cluster
>>> cm = CommModel(Cluster.preset("v100-2x8"))
>>> t_in = cm.collective_time("all_reduce", 2**26, ((0, 1, 2, 3, 4, 5, 6, 7),))
>>> t_x = cm.collective_time("all_reduce", 2**26, ((0, 8),))
>>> t_in < t_x
True
>>> cm.collective_time("all_reduce", 2**20, ((3,),))
0.0
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from typing import Literal

import numpy as np

from ..cluster import COLLECTIVES, Cluster, group_signature
from ..errors import InvalidInputError

__all__ = ["CommModel", "Collective", "COLLECTIVES", "normalize_groups"]

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]

_DEFAULT_MAX_LOG2 = 34


def normalize_groups(groups) -> tuple[tuple[int, ...], ...]:
    """Canonical hashable form of ``groups``: a tuple of tuples of int.

    A flat sequence of ints is one group.

    Examples
    --------
    >>> normalize_groups([[0, 1], [2, 3]]), normalize_groups((0, 1))
    (((0, 1), (2, 3)), ((0, 1),))
    """
    try:
        items = list(groups)
    except TypeError:
        raise InvalidInputError(f"groups must be a sequence of device-id sequences, got {groups!r}") from None
    if not items:
        raise InvalidInputError("groups must contain at least one group, got an empty sequence")
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items):
        items = [items]
    out = []
    for g in items:
        try:
            members = tuple(int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else _bad_id(d, groups)
                            for d in g)
        except TypeError:
            raise InvalidInputError(f"each group must be a sequence of device ids, got {g!r} in {groups!r}") from None
        out.append(members)
    return tuple(out)


def _bad_id(d, groups):
    raise InvalidInputError(f"device ids must be integers, got {d!r} in groups {groups!r}")


class _Entry:
    """One interpolation table: sizes S (bytes, increasing) and times T (seconds)."""

    __slots__ = ("group_size", "sizes", "times", "last_slope", "source", "signature", "sizes_arr", "times_arr")

    def __init__(self, group_size, sizes, times, source, signature):
        self.group_size = group_size
        self.sizes = list(sizes)
        self.times = list(times)
        self.source = source
        self.signature = signature
        if len(self.sizes) >= 2:
            self.last_slope = (self.times[-1] - self.times[-2]) / (self.sizes[-1] - self.sizes[-2])
        elif self.sizes:
            self.last_slope = self.times[-1] / self.sizes[-1]
        else:
            self.last_slope = 0.0
        self.sizes_arr = np.asarray(self.sizes, dtype=np.float64)
        self.times_arr = np.asarray(self.times, dtype=np.float64)

    def __call__(self, n: float) -> float:
        if self.group_size == 1 or n == 0:
            return 0.0
        S, T = self.sizes, self.times
        if n <= S[0]:
            return T[0]
        if n >= S[-1]:
            return T[-1] + self.last_slope * (n - S[-1])
        i = bisect_right(S, n) - 1
        s0 = S[i]
        return T[i] + (T[i + 1] - T[i]) * (n - s0) / (S[i + 1] - s0)

    def many(self, n: np.ndarray) -> np.ndarray:
        if self.group_size == 1:
            return np.zeros_like(n)
        out = np.interp(n, self.sizes_arr, self.times_arr)
        above = n > self.sizes_arr[-1]
        if above.any():
            out[above] = self.times_arr[-1] + self.last_slope * (n[above] - self.sizes_arr[-1])
        out[n == 0] = 0.0
        return out


class CommModel:
    """Time of collectives on a :class:`~tensoropt_py.cluster.Cluster` (see the module docstring).

    Parameters
    ----------
    cluster : Cluster
        Topology and links; its ``comm_table`` (if any) overrides the model per
        ``(kind, group signature)``.
    max_log2 : int, default 34
        Default tables are sampled at 2^0 .. 2^max_log2 bytes (16 GiB); larger sizes are
        extrapolated linearly (exact for the affine model).
    cache_size : int, default 2**20
        Scalar results cached per ``(kind, nbytes, groups)``; the cache is cleared when full.

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> cm = CommModel(Cluster.preset("v100-2x8"))
    >>> ar = cm.collective_time("all_reduce", 1e8, ((0, 1, 2, 3),))
    >>> rs = cm.collective_time("reduce_scatter", 1e8, ((0, 1, 2, 3),))
    >>> ag = cm.collective_time("all_gather", 1e8, ((0, 1, 2, 3),))
    >>> abs(ar - (rs + ag - cm.cluster.device.kernel_overhead)) < 1e-12   # one launch, not two
    True
    >>> us = cm.collective_times("all_reduce", [0, 2**20, 2**21], ((0, 8),)) * 1e6
    >>> [round(float(x), 1) for x in us]       # 5 us launch + 2 x 5 us latency + 2^20 B / 12 GB/s
    [0.0, 102.4, 189.8]
    """

    def __init__(self, cluster: Cluster, *, max_log2: int = _DEFAULT_MAX_LOG2, cache_size: int = 2**20):
        if not isinstance(cluster, Cluster):
            raise InvalidInputError(f"CommModel needs a Cluster, got {type(cluster).__name__}")
        if isinstance(max_log2, bool) or not isinstance(max_log2, int) or not 1 <= max_log2 <= 60:
            raise InvalidInputError(f"max_log2 must be an int in 1..60, got {max_log2!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
            raise InvalidInputError(f"cache_size must be a non-negative int, got {cache_size!r}")
        self.cluster = cluster
        self.max_log2 = max_log2
        self._sizes = [float(2**i) for i in range(max_log2 + 1)]
        self._cache: dict = {}
        self._cache_size = cache_size
        self._entries: dict = {}
        self._dpm = cluster.devices_per_machine

    # -- public API ---------------------------------------------------------------------------

    def collective_time(self, kind: Collective, nbytes: float, groups) -> float:
        """Seconds until the slowest of the concurrent ``groups`` finishes collective ``kind``.

        Parameters
        ----------
        kind : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"}
        nbytes : float
            Bytes of the full logical tensor each group operates on (see the module docstring's
            table), >= 0.
        groups : tuple of tuples of int
            Concurrent groups of global device ids, all the same size (a flat tuple is one
            group). Lists are accepted but tuples hit the cache faster.

        Returns
        -------
        float
            Seconds; 0 for groups of one device or ``nbytes == 0``.
        """
        key = (kind, nbytes, groups)
        try:
            hit = self._cache.get(key)
        except TypeError:  # unhashable (lists): normalise and retry
            groups = normalize_groups(groups)
            key = (kind, nbytes, groups)
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        tn = type(nbytes)
        if (tn is float or tn is int) and 0 <= nbytes < math.inf:
            n = nbytes
        else:
            n = _check_nbytes(nbytes)
        e = self._entries.get((kind, groups))
        t = (e if e is not None else self._entry(kind, groups))(n)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        if self._cache_size:
            self._cache[key] = t
        return t

    def collective_times(self, kind: Collective, nbytes, groups) -> np.ndarray:
        """Vectorised :meth:`collective_time` over an array of sizes (same groups).

        Returns a float64 array of the shape of ``nbytes``.
        """
        n = np.asarray(nbytes, dtype=np.float64)
        if not np.all(np.isfinite(n)) or np.any(n < 0):
            bad = n[~np.isfinite(n) | (n < 0)].ravel()[0]
            raise InvalidInputError(f"nbytes must be finite and >= 0, got {bad!r}")
        entry = self._entry(kind, _as_key(groups))
        flat = np.ascontiguousarray(n).ravel().copy()
        return entry.many(flat).reshape(n.shape)

    def timer(self, kind: Collective, groups):
        """A function ``nbytes -> seconds`` for fixed ``(kind, groups)``: the hot-loop form of
        :meth:`collective_time` (no re-hashing of ``groups``, no argument checks on ``nbytes``;
        pass finite sizes >= 0).

        Examples
        --------
        >>> from tensoropt_py.cluster import Cluster
        >>> cm = CommModel(Cluster.preset("v100-2x8"))
        >>> f = cm.timer("all_gather", ((0, 8), (1, 9)))
        >>> f(2**20) == cm.collective_time("all_gather", 2**20, ((0, 8), (1, 9)))
        True
        """
        return self._entry(kind, _as_key(groups))

    def p2p_time(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds to send ``nbytes`` from device ``src`` to device ``dst`` (0 when equal).

        Uses the intra link inside a machine, one network port across machines; this is
        ``collective_time("send_recv", nbytes, ((src, dst),))``.

        Examples
        --------
        >>> from tensoropt_py.cluster import Cluster
        >>> cm = CommModel(Cluster.preset("v100-2x8"))
        >>> cm.p2p_time(1e6, 0, 1) < cm.p2p_time(1e6, 0, 8)
        True
        """
        for d in (src, dst):
            self.cluster.machine_of(d)
        if src == dst:
            _check_nbytes(nbytes)
            return 0.0
        return self.collective_time("send_recv", nbytes, ((int(src), int(dst)),))

    def signature(self, groups) -> tuple[int, int, int]:
        """The ``(group_size, devices_per_machine, concurrent_groups)`` key of measured tables."""
        groups = self._validate_groups(_as_key(groups))
        return group_signature(groups, self.cluster.machine_of)

    def source(self, kind: Collective, groups) -> str:
        """``"calibrated"`` if a measured table is used for ``(kind, groups)``, ``"model"``
        otherwise, ``"trivial"`` for groups of one device."""
        return self._entry(kind, _as_key(groups)).source

    def table(self, kind: Collective, groups) -> tuple[np.ndarray, np.ndarray]:
        """The ``(sizes in bytes, seconds)`` table interpolated for ``(kind, groups)``."""
        e = self._entry(kind, _as_key(groups))
        return e.sizes_arr.copy(), e.times_arr.copy()

    def model_time(self, kind: Collective, nbytes: float, groups) -> float:
        """The latency-bandwidth model evaluated directly (no table, no calibration)."""
        n = _check_nbytes(nbytes)
        groups = self._validate_groups(_as_key(groups))
        _check_kind(kind)
        if len(groups[0]) == 1 or n == 0:
            return 0.0
        return max(a + b * n for a, b in self._coefficients(kind, groups))

    def clear_cache(self):
        """Forget cached results (not needed unless the cluster object was mutated)."""
        self._cache.clear()
        self._entries.clear()

    # -- internals ----------------------------------------------------------------------------

    def _entry(self, kind, groups) -> _Entry:
        key = (kind, groups)
        e = self._entries.get(key)
        if e is not None:
            return e
        _check_kind(kind)
        groups = self._validate_groups(groups)
        g = len(groups[0])
        sig = group_signature(groups, self.cluster.machine_of)
        if g == 1:
            e = _Entry(1, [1.0], [0.0], "trivial", sig)
        else:
            measured = self.cluster.comm_table.get(kind, sig) if self.cluster.comm_table is not None else None
            if measured is not None:
                sizes, seconds = measured
                times = np.maximum.accumulate(np.asarray(seconds, dtype=np.float64))
                e = _Entry(g, sizes, times.tolist(), "calibrated", sig)
            else:
                S = np.asarray(self._sizes)
                T = np.zeros_like(S)
                for a, b in set(self._coefficients(kind, groups)):
                    np.maximum(T, a + b * S, out=T)
                e = _Entry(g, self._sizes, T.tolist(), "model", sig)
            wait, stretch = self.cluster.comm_table.sync_for(sig) if self.cluster.comm_table is not None else (0.0, 1.0)
            if wait or stretch != 1.0:  # in a step: the transfer as members get descheduled, plus the wait for the last
                e = _Entry(g, e.sizes, [stretch * t + wait for t in e.times], e.source, sig)
        self._entries[(kind, groups)] = e
        return e

    def _validate_groups(self, groups):
        if not isinstance(groups, tuple) or not groups or not all(isinstance(g, tuple) for g in groups):
            groups = normalize_groups(groups)
        size = len(groups[0])
        seen = set()
        n = self.cluster.num_devices
        for g in groups:
            if len(g) != size:
                raise InvalidInputError(f"all concurrent groups must have the same size; got sizes {sorted({len(x) for x in groups})} in {groups!r}")
            if size == 0:
                raise InvalidInputError(f"groups must not be empty, got {groups!r}")
            for d in g:
                if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                    raise InvalidInputError(f"device ids must be integers, got {d!r} in groups {groups!r}")
                if not 0 <= d < n:
                    raise InvalidInputError(
                        f"device id {d!r} in groups {groups!r} is out of range for cluster {self.cluster.name!r} (0..{n - 1})")
                if d in seen:
                    raise InvalidInputError(f"device {d} appears more than once in groups {groups!r}")
                seen.add(d)
        return groups

    def _coefficients(self, kind, groups):
        """Per-group affine costs ``(a seconds, b seconds/byte)`` under the contention of ``groups``."""
        cl = self.cluster
        mof = cl.machine_of
        counts_all = [Counter(mof(d) for d in g) for g in groups]
        flows: Counter = Counter()  # devices of multi-machine groups, per machine
        intra_flows: Counter = Counter()  # devices with intra-machine traffic, per machine
        for counts in counts_all:
            if len(counts) > 1:
                flows.update(counts)
            for m, c in counts.items():
                if c > 1:
                    intra_flows[m] += c
        il, nl = cl.intra_link, cl.inter_link
        launch = cl.device.kernel_overhead  # one collective kernel launch per call
        out = []
        for counts in counts_all:
            g = sum(counts.values())
            k = len(counts)
            d = max(counts.values())
            a_i = il.latency
            if d > 1:
                b_i = il.bandwidth
                if il.shared:
                    b_i *= min(min(1.0, il.ports / intra_flows[m]) for m, c in counts.items() if c > 1)
                inv_bi = 1.0 / b_i
            else:
                inv_bi = 0.0
            if k > 1:
                p, bw = nl.ports, nl.bandwidth
                b_n = min(bw * c * min(1.0, p / flows[m]) for m, c in counts.items())
                inv_bn = 1.0 / b_n
                a_n = nl.latency
                port_inv = 1.0 / min(b_n, bw)
            else:
                inv_bn = a_n = port_inv = 0.0
            if kind == "all_reduce":
                a = 2 * (g - k) * a_i + 2 * (k - 1) * a_n
                b = 2 * (d - 1) / d * inv_bi + 2 * (k - 1) / k * inv_bn
            elif kind in ("all_gather", "reduce_scatter"):
                a = (g - k) * a_i + (k - 1) * a_n
                b = (d - 1) / d * inv_bi + (k - 1) / k * inv_bn
            elif kind == "all_to_all":
                a = (d - 1) * a_i + (g - d) * a_n
                b = (d - 1) / g * inv_bi + d * (g - d) / g * inv_bn
            elif kind == "broadcast":
                a = math.ceil(math.log2(d)) * a_i + math.ceil(math.log2(k)) * a_n
                b = inv_bi + inv_bn
            else:  # send_recv
                a = a_n if k > 1 else a_i
                b = max(inv_bi, port_inv)
            out.append((a + launch, b))
        return out


def _check_kind(kind):
    if kind not in COLLECTIVES:
        raise InvalidInputError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVES}")


def _check_nbytes(nbytes) -> float:
    if isinstance(nbytes, bool):
        raise InvalidInputError(f"nbytes must be a number of bytes, got {nbytes!r}")
    try:
        n = float(nbytes)
    except (TypeError, ValueError):
        raise InvalidInputError(f"nbytes must be a number of bytes, got {nbytes!r}") from None
    if not math.isfinite(n) or n < 0:
        raise InvalidInputError(f"nbytes must be finite and >= 0, got {nbytes!r}")
    return n


def _as_key(groups):
    try:
        hash(groups)
    except TypeError:
        return normalize_groups(groups)
    if isinstance(groups, tuple) and groups and all(isinstance(g, tuple) for g in groups):
        return groups
    return normalize_groups(groups)
