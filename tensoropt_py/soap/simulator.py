"""FlexFlow's execution simulator (§5) for SOAP strategies on a :class:`~tensoropt_py.cluster.Cluster`.

Task graph (§5.1), built from a graph, a cluster and a :class:`~.config.SoapStrategy`:

* **Compute tasks.** Operator ``i`` with config ``c`` gets one forward task ``(0, i, k)`` per
  partition ``k`` on ``c.devices[k]`` and (except INPUT operators) one backward task
  ``(2, i, k)`` on the same device after it. Times come from
  :class:`~tensoropt_py.cost.compute.ComputeModel` on the partition's local FLOPs
  (``flops / parts``) and bytes (local regions of inputs, parameters and outputs; backward:
  those plus input and parameter gradients), at least :data:`MIN_TASK_TIME`.
* **Data movement.** For every graph edge (producer ``u``, consumer ``v``, tensor ``T``) and
  every pair of partitions whose regions of ``T`` overlap (the region a producer task writes,
  the region a consumer task reads: interval products computed from the degrees), only the
  overlapping sub-tensor moves: nothing when both tasks are on one device (a plain dependency),
  else a transfer task ``(1, e, p, q)`` of ``overlap bytes``. Backward mirrors it: the gradient
  of the overlap goes from consumer backward task ``q`` to producer backward task ``p``
  (task ``(3, e, q, p)``).
* **Connection devices.** Transfers run on communication devices (FlexFlow models every link
  as a device that runs one transfer at a time, FIFO): inside a machine, one device per
  *directed* device pair (``("link", a, b)``) when the intra link is not shared (NVLink), or
  one per machine (``("bus", m)``) when ``LinkSpec.shared`` (PCIe host bridge, shared memory);
  across machines, the sender machine's outgoing NIC port (``("nic", m, port)``, a device uses
  port ``local index % ports``), so every cross-machine transfer leaving a machine through a
  port queues on it (receive-side contention is not modelled). A transfer of ``n`` bytes takes
  ``latency + n / bandwidth`` of the link.
* **Gradient synchronisation.** A parameter shard held by several partitions on ``k > 1``
  distinct devices is all-reduced with a ring over those devices (in partition order): the
  ring's ``k`` links each carry one task ``(4, i, j, g, l)`` taking
  ``2(k-1) latency + 2(k-1)/k * shard_bytes / bandwidth`` (ring all-reduce volume per link),
  after all backward tasks of the group. Ring links crossing machines queue on the NIC like
  other transfers. A parameter shared by several operators is synchronised per operator.

Memory per device (bytes, int): for every partition on the device, each distinct parameter
shard x ``(2 + optimizer_state_factor)`` (weights, gradients, optimizer state: Adam keeps 2)
plus each distinct saved (``Operator.saved``) activation region; counted per operator
(an activation saved by two operators counts twice).

Full simulation (:meth:`Simulator.simulate`) builds the task graph from scratch and runs
FlexFlow Alg. 1; delta simulation (:class:`SimState`, :meth:`Simulator.simulate_delta`) replaces
the tasks of one operator and of its incident edges in the existing task graph and runs Alg. 2.
Both give identical timelines (see :mod:`.task_graph`).

Examples
--------
>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.soap.testing import mlp_graph
>>> g = mlp_graph(batch=64, width=256, layers=2)
>>> sim = Simulator(g, Cluster.preset("v100-2x8"), devices=4)
>>> from tensoropt_py.soap.config import data_parallel
>>> r = sim.simulate(data_parallel(g, range(4)))
>>> r.time > 0, r.per_device_memory.shape
(True, (4,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES, Graph, OpKind, TensorRole
from .config import SoapConfig, SoapStrategy, check_config
from .task_graph import TaskGraph

__all__ = ["Simulator", "SimState", "SimResult", "MIN_TASK_TIME"]

#: Every task takes at least this long (seconds): the simulation's FIFO order relies on
#: strictly positive task times (a zero-FLOP operator with no launch overhead would take 0).
MIN_TASK_TIME = 1e-9

_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class SimResult:
    """Outcome of simulating one strategy.

    Attributes
    ----------
    time : float
        Simulated per-iteration time (makespan of forward, backward and gradient sync), s.
    per_device_memory : ndarray of float
        Peak memory of each device of ``devices`` (bytes).
    devices : tuple of int
    strategy : SoapStrategy
    num_tasks : int
    timeline : dict or None
        ``task key -> (device, ready, start, end)`` when requested.
    """

    time: float
    per_device_memory: np.ndarray
    devices: tuple
    strategy: SoapStrategy
    num_tasks: int
    timeline: dict | None = field(default=None, repr=False, compare=False)

    @property
    def peak_memory(self) -> float:
        """Largest per-device memory (bytes)."""
        return float(self.per_device_memory.max()) if len(self.per_device_memory) else 0.0


class _OpPlan:
    """What an operator's degrees imply, independent of devices (cached per degrees)."""

    __slots__ = ("parts", "fwd", "bwd", "out_regions", "in_regions", "param_groups", "mem_items")


def _regions(op, use, degrees):
    """(lo, hi) int arrays [parts, ndim] of the region of ``use`` each partition touches."""
    dims = [d for d, _ in degrees]
    shape = [k for _, k in degrees] or [1]
    parts = math.prod(shape)
    idx = np.array(np.unravel_index(np.arange(parts), shape)).T if degrees else np.zeros((1, 1), dtype=np.int64)
    nd = len(use.dims)
    lo = np.zeros((parts, nd), dtype=np.int64)
    hi = np.zeros((parts, nd), dtype=np.int64)
    for j, group in enumerate(use.dims):
        extent = math.prod(op.loop_dim(x).size for x in group) if group else 1
        if group and group[0] in dims:
            a = dims.index(group[0])
            k = shape[a]
            step = extent // k
            lo[:, j] = idx[:, a] * step
            hi[:, j] = lo[:, j] + step
        else:
            hi[:, j] = extent
    return lo, hi


class Simulator:
    """Simulate SOAP strategies of ``graph`` on ``devices`` of ``cluster``.

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    devices : int, sequence of int or None
        ``n``: devices ``0..n-1``; a sequence: those device ids; None: the whole cluster.
    compute_model : object with ``time(flops, bytes_moved, key=None, dtype=...)``, optional
        Default :class:`~tensoropt_py.cost.compute.ComputeModel` of the cluster.
    optimizer_state_factor : float
        Optimizer-state bytes per parameter byte (Adam: 2).
    """

    def __init__(self, graph: Graph, cluster, devices=None, compute_model=None, optimizer_state_factor: float = 2.0):
        if not isinstance(graph, Graph):
            raise InvalidInputError(f"Simulator needs a Graph, got {type(graph).__name__}")
        self.graph = graph
        self.cluster = cluster
        n = cluster.num_devices
        if devices is None:
            devices = tuple(range(n))
        elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
            if not 1 <= devices <= n:
                raise InvalidInputError(f"devices must be in 1..{n} for cluster {cluster.name!r}, got {devices}")
            devices = tuple(range(int(devices)))
        else:
            devices = tuple(int(d) for d in devices)
            if not devices or len(set(devices)) != len(devices) or any(not 0 <= d < n for d in devices):
                raise InvalidInputError(f"devices must be distinct ids in 0..{n - 1}, got {devices}")
        self.devices = devices
        self._devpos = {d: i for i, d in enumerate(devices)}
        if compute_model is None:
            from ..cost.compute import ComputeModel

            compute_model = ComputeModel(cluster)
        self.compute_model = compute_model
        if optimizer_state_factor < 0:
            raise InvalidInputError(f"optimizer_state_factor must be >= 0, got {optimizer_state_factor}")
        self.optimizer_state_factor = float(optimizer_state_factor)
        self.edges = graph.edges()
        ops = graph.operators
        self._edge_uv = [(graph.index(u), graph.index(v), t) for u, v, t in self.edges]
        self._incident = [[] for _ in ops]
        for e, (u, v, _) in enumerate(self._edge_uv):
            self._incident[u].append(e)
            if v != u:
                self._incident[v].append(e)
        self._has_bwd = [op.kind is not OpKind.INPUT for op in ops]
        self._plans: dict = {}
        self._overlaps: dict = {}
        self._links: dict = {}
        dpm = cluster.devices_per_machine
        self._machine = {d: d // dpm for d in range(n)}

    # -- caches ---------------------------------------------------------------------------------

    def _plan(self, i: int, degrees) -> _OpPlan:
        key = (i, degrees)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        op = self.graph.operators[i]
        check_config(op, SoapConfig(degrees, (0,) * math.prod(k for _, k in degrees)))
        tensors = self.graph.tensors
        plan = _OpPlan()
        parts = math.prod(k for _, k in degrees)
        plan.parts = parts
        shapes = []
        nbytes = {}
        regions = {}
        for use in op.uses():
            lo, hi = _regions(op, use, degrees)
            regions[use.tensor] = (lo, hi)
            spec = tensors[use.tensor]
            local = [int(x) for x in (hi[0] - lo[0])]
            shapes.append(local)
            nbytes[use.tensor] = math.prod(local) * DTYPE_BYTES[spec.dtype]
        b_in = sum(nbytes[u.tensor] for u in op.inputs)
        b_par = sum(nbytes[u.tensor] for u in op.params)
        b_out = sum(nbytes[u.tensor] for u in op.outputs)
        floats = [tensors[u.tensor].dtype for u in op.outputs + op.inputs if tensors[u.tensor].dtype in _FLOAT_DTYPES]
        dtype = floats[0] if floats else "float32"  # compute dtype (int outputs: labels, token ids)
        shape_key = "x".join("[" + ",".join(map(str, s)) + "]" for s in shapes)
        cm = self.compute_model
        plan.fwd = max(MIN_TASK_TIME, float(cm.time(op.flops / parts, b_in + b_par + b_out,
                                                    key=f"{op.kind.value}|{shape_key}|{dtype}|fwd", dtype=dtype)))
        plan.bwd = max(MIN_TASK_TIME, float(cm.time(op.backward_flops / parts, 2 * (b_in + b_par) + b_out,
                                                    key=f"{op.kind.value}|{shape_key}|{dtype}|bwd", dtype=dtype)))
        plan.out_regions = {u.tensor: regions[u.tensor] for u in op.outputs}
        plan.in_regions = {u.tensor: regions[u.tensor] for u in op.inputs}
        # parameter replica groups: partitions holding the same shard
        groups = []
        for j, use in enumerate(op.params):
            if tensors[use.tensor].role is not TensorRole.PARAMETER:
                continue
            lo, hi = regions[use.tensor]
            by = {}
            for p in range(parts):
                by.setdefault((tuple(lo[p]), tuple(hi[p])), []).append(p)
            gl = [tuple(ps) for ps in by.values() if len(ps) > 1]
            if gl:
                groups.append((j, gl, nbytes[use.tensor]))
        plan.param_groups = groups
        # memory items per partition
        f = 2.0 + self.optimizer_state_factor
        items = []
        saved = set(op.saved)
        for p in range(parts):
            it = []
            for use in op.params:
                lo, hi = regions[use.tensor]
                ident = (use.tensor, tuple(lo[p]), tuple(hi[p]))
                b = nbytes[use.tensor]
                if tensors[use.tensor].role is TensorRole.PARAMETER:
                    b = int(round(b * f))
                it.append((ident, b))
            for use in op.inputs + op.outputs:
                if use.tensor in saved:
                    lo, hi = regions[use.tensor]
                    it.append(((use.tensor, tuple(lo[p]), tuple(hi[p])), nbytes[use.tensor]))
            items.append(it)
        plan.mem_items = items
        self._plans[key] = plan
        return plan

    def _overlap(self, e: int, deg_u, deg_v):
        key = (e, deg_u, deg_v)
        ov = self._overlaps.get(key)
        if ov is not None:
            return ov
        u, v, t = self._edge_uv[e]
        lo_u, hi_u = self._plan(u, deg_u).out_regions[t]
        lo_v, hi_v = self._plan(v, deg_v).in_regions[t]
        ext = np.minimum(hi_u[:, None, :], hi_v[None, :, :]) - np.maximum(lo_u[:, None, :], lo_v[None, :, :])
        vol = np.prod(np.clip(ext, 0, None), axis=2) * DTYPE_BYTES[self.graph.tensors[t].dtype]
        ps, qs = np.nonzero(vol)
        ov = tuple((int(p), int(q), int(vol[p, q])) for p, q in zip(ps, qs))
        self._overlaps[key] = ov
        return ov

    def _link(self, a: int, b: int):
        """(comm device, latency, 1/bandwidth) of a transfer from device a to device b."""
        key = (a, b)
        r = self._links.get(key)
        if r is None:
            cl = self.cluster
            ma, mb = self._machine[a], self._machine[b]
            if ma == mb:
                ln = cl.intra_link
                dev = ("bus", ma) if ln.shared else ("link", a, b)
            else:
                ln = cl.inter_link
                port = (a % cl.devices_per_machine) % ln.ports
                dev = ("nic", ma, port)
            r = (dev, ln.latency, 1.0 / ln.bandwidth)
            self._links[key] = r
        return r

    # -- task-graph construction ------------------------------------------------------------------

    def _check(self, strategy: SoapStrategy):
        if not isinstance(strategy, SoapStrategy):
            raise InvalidInputError(f"expected a SoapStrategy, got {type(strategy).__name__}")
        if len(strategy) != len(self.graph.operators):
            raise InvalidInputError(f"strategy has {len(strategy)} configs for {len(self.graph.operators)} operators")
        for c in strategy:
            self._check_devices(c)

    def _check_devices(self, c: SoapConfig):
        pos = self._devpos
        for d in c.devices:
            if d not in pos:
                raise InvalidInputError(f"config {c} uses device {d} outside the simulator's devices {self.devices}")

    def _build_op(self, tg: TaskGraph, st: "SimState", i: int, c: SoapConfig):
        plan = self._plan(i, c.degrees)
        devs = c.devices
        add = tg.add_task
        dep = tg.add_dep
        F = [add((0, i, p), d, plan.fwd) for p, d in enumerate(devs)]
        tasks = list(F)
        if self._has_bwd[i]:
            B = [add((2, i, p), d, plan.bwd) for p, d in enumerate(devs)]
            for f, b in zip(F, B):
                dep(f, b)
            tasks += B
            for j, groups, nb in plan.param_groups:
                for g, ps in enumerate(groups):
                    ring = list(dict.fromkeys(devs[p] for p in ps))
                    k = len(ring)
                    if k < 2:
                        continue
                    preds = [B[p] for p in ps]
                    for l in range(k):
                        dev, lat, inv_bw = self._link(ring[l], ring[(l + 1) % k])
                        t = add((4, i, j, g, l), dev, max(MIN_TASK_TIME, 2 * (k - 1) * lat + 2 * (k - 1) / k * nb * inv_bw))
                        for b in preds:
                            dep(b, t)
                        tasks.append(t)
        else:
            B = None
        st.F[i] = F
        st.B[i] = B
        st.op_tasks[i] = tasks
        mem = np.zeros(len(self.devices), dtype=np.int64)
        seen = set()
        pos = self._devpos
        for p, d in enumerate(devs):
            dp = pos[d]
            for ident, b in plan.mem_items[p]:
                k = (dp, ident)
                if k not in seen:
                    seen.add(k)
                    mem[dp] += b
        st.mem[i] = mem

    def _build_edge(self, tg: TaskGraph, st: "SimState", e: int):
        u, v, _ = self._edge_uv[e]
        cu, cv = st.configs[u], st.configs[v]
        Fu, Fv, Bu, Bv = st.F[u], st.F[v], st.B[u], st.B[v]
        du, dv = cu.devices, cv.devices
        add = tg.add_task
        dep = tg.add_dep
        ov = self._overlap(e, cu.degrees, cv.degrees)
        if tg.backend == "cython":  # the compiled twin of the loop below
            from . import _simulate

            st.edge_tasks[e] = _simulate.build_edge(tg, e, ov, du, dv, Fu, Fv, Bu, Bv, self._links, self._link,
                                                    MIN_TASK_TIME)
            return
        tasks = []
        bwd = Bu is not None and Bv is not None
        for p, q, nb in ov:
            a, b = du[p], dv[q]
            if a == b:
                dep(Fu[p], Fv[q])
                if bwd:
                    dep(Bv[q], Bu[p])
                continue
            dev, lat, inv_bw = self._link(a, b)
            x = max(MIN_TASK_TIME, lat + nb * inv_bw)
            t = add((1, e, p, q), dev, x)
            dep(Fu[p], t)
            dep(t, Fv[q])
            tasks.append(t)
            if bwd:
                dev, lat, inv_bw = self._link(b, a)
                t = add((3, e, q, p), dev, max(MIN_TASK_TIME, lat + nb * inv_bw))
                dep(Bv[q], t)
                dep(t, Bu[p])
                tasks.append(t)
        st.edge_tasks[e] = tasks

    def _build(self, strategy: SoapStrategy) -> "SimState":
        st = SimState(self, strategy)
        tg = st.tg
        for i, c in enumerate(strategy.configs):
            self._build_op(tg, st, i, c)
        for e in range(len(self.edges)):
            self._build_edge(tg, st, e)
        return st

    # -- public API -----------------------------------------------------------------------------

    def simulate(self, strategy: SoapStrategy, timeline: bool = True) -> SimResult:
        """Full simulation: build the task graph from scratch, FlexFlow Alg. 1."""
        self._check(strategy)
        st = self._build(strategy)
        st.time = st.tg.simulate()
        st.memory = np.sum(st.mem, axis=0)
        return st.result(timeline)

    def start(self, strategy: SoapStrategy) -> "SimState":
        """A full simulation kept as state for :meth:`SimState.change` (delta simulation)."""
        self._check(strategy)
        st = self._build(strategy)
        st.time = st.tg.simulate()
        st.memory = np.sum(st.mem, axis=0)
        return st

    def simulate_delta(self, state: "SimState", op_index: int, new_config: SoapConfig, timeline: bool = True) -> SimResult:
        """Change operator ``op_index`` of ``state`` (in place) to ``new_config``; Alg. 2."""
        if state.sim is not self:
            raise InvalidInputError("state belongs to another Simulator")
        state.change(op_index, new_config)
        return state.result(timeline)


class SimState:
    """A simulated strategy whose operators can be changed one at a time (delta simulation).

    Attributes
    ----------
    time : float
        Makespan of the current strategy.
    memory : ndarray of int64
        Per-device memory (bytes) of the current strategy.
    """

    def __init__(self, sim: Simulator, strategy: SoapStrategy):
        n = len(sim.graph.operators)
        self.sim = sim
        self.tg = TaskGraph()
        self.configs = list(strategy.configs)
        self.F = [None] * n
        self.B = [None] * n
        self.op_tasks = [()] * n
        self.edge_tasks = [()] * len(sim.edges)
        self.mem = np.zeros((n, len(sim.devices)), dtype=np.int64)
        self.time = 0.0
        self.memory = None

    @property
    def strategy(self) -> SoapStrategy:
        return SoapStrategy(tuple(self.configs))

    def change(self, op_index: int, new_config: SoapConfig) -> float:
        """Replace operator ``op_index``'s config and re-simulate incrementally; returns the time."""
        sim = self.sim
        if not 0 <= op_index < len(self.configs):
            raise InvalidInputError(f"op_index must be in 0..{len(self.configs) - 1}, got {op_index}")
        if not isinstance(new_config, SoapConfig):
            raise InvalidInputError(f"expected a SoapConfig, got {type(new_config).__name__}")
        if new_config == self.configs[op_index]:
            return self.time
        sim._check_devices(new_config)
        sim._plan(op_index, new_config.degrees)  # validates before anything is touched
        tg = self.tg
        inc = sim._incident[op_index]
        for e in inc:
            tg.remove_tasks(self.edge_tasks[e])
        tg.remove_tasks(self.op_tasks[op_index])
        self.configs[op_index] = new_config
        old_mem = self.mem[op_index].copy()
        sim._build_op(tg, self, op_index, new_config)
        for e in inc:
            sim._build_edge(tg, self, e)
        self.memory = self.memory - old_mem + self.mem[op_index]
        self.time = tg.update()
        return self.time

    def result(self, timeline: bool = True) -> SimResult:
        return SimResult(
            time=self.time,
            per_device_memory=self.memory.astype(np.float64),
            devices=self.sim.devices,
            strategy=self.strategy,
            num_tasks=len(self.tg),
            timeline=self.tg.timeline() if timeline else None,
        )
