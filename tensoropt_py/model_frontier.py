"""The model-level cost frontier: :class:`Frontier` and :func:`compute_frontier`.

:func:`compute_frontier` turns a parsed model graph and cluster into a
:class:`~tensoropt_py.engine.CostGraph` (:func:`~tensoropt_py.cost.builder.build_cost_graph`),
tracks it (:func:`~tensoropt_py.engine.track`) and keeps each point's strategy, so
:meth:`Frontier.plan` decodes any point into a :class:`~tensoropt_py.plan.Plan`. The public
entry is :func:`tensoropt_py.frontier` (parsing, caching); the baselines use this module directly.
"""

from __future__ import annotations

import json
import time as _time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .errors import InfeasibleError, InvalidInputError
from .plan import Plan, plan_from_choices, read_json
from .space.mesh import MeshSpace
from .units import MEMORY_UNITS, TIME_UNITS, describe_bytes, display_unit, parse_bytes

__all__ = ["Frontier", "compute_frontier", "turning_point", "Method", "FRONTIER_FORMAT"]

Method = Literal["ldp", "elimination"]
FRONTIER_FORMAT = "tensoropt_py.frontier/1"


def turning_point(memory, time) -> int:
    """Index of the frontier's turning point (TensorOpt §5.1).

    Definition: normalise memory and time to [0, 1] over the frontier's range; the
    turning point is the point farthest below the straight line joining the
    minimum-memory end to the minimum-time end (the "knee", Kneedle's criterion).
    Left of it, time drops fast as memory grows; right of it, extra memory buys little.
    With fewer than three points, or when no point lies strictly below the chord (a
    straight or concave trade-off has no knee), the minimum-time end is returned.
    Ties go to the point with less memory.

    Examples
    --------
    >>> turning_point([1, 2, 3, 4], [10, 2, 1.5, 1.2])
    1
    """
    m = np.asarray(memory, dtype=float).ravel()
    t = np.asarray(time, dtype=float).ravel()
    if m.shape != t.shape:
        raise InvalidInputError(f"memory and time must have the same length, got {m.size} and {t.size}")
    if m.size == 0:
        raise InvalidInputError("turning_point of an empty frontier")
    if m.size < 3 or not (m[-1] > m[0] and t[0] > t[-1]):
        return int(m.size - 1)
    mn = (m - m[0]) / (m[-1] - m[0])
    tn = (t - t[-1]) / (t[0] - t[-1])
    # The chord runs from (0, 1) to (1, 0): distance below it is proportional to 1 - mn - tn.
    below = 1.0 - mn - tn
    best = int(np.argmax(below))
    # No point strictly below the chord (a straight or concave trade-off): no knee.
    return best if below[best] > 1e-12 else int(m.size - 1)


@dataclass(frozen=True, eq=False)
class Frontier:
    """The cost frontier of a model on a cluster at one device count.

    Attributes
    ----------
    memory, time : ndarray (P,)
        Per device (bytes) and per iteration (seconds); memory ascending, time strictly descending.
    compute_time, communication_time : ndarray (P,)
        The two parts of ``time``.
    choices, edge_choices : ndarray (P, n_nodes), (P, n_edges)
        The CostGraph strategy of each point.
    devices : int
    model, cluster : str
    exact : bool
        True when the engine guarantees these are exactly the Pareto-optimal points of
        the cost model (no heuristic step and no epsilon thinning happened).
    heuristic_eliminations : int
        Heuristic steps of the engine: configs fixed (TensorOpt Eq. 7) or dropped for its
        work cap (:func:`~tensoropt_py.engine.track`, ``max_step_work``).
    cost_graph : CostGraph or None
        The graph the frontier was tracked on (None after :meth:`from_json`).
    memory_bound_factor : float
        With epsilon thinning, every point of the exact frontier (of the strategies the run
        considered) has a point here with no more time and at most this factor times its memory.
    recompute, shard_optimizer : bool
        Whether the space held recomputed / sharded-state configurations.
    precision : {"32-true", "bf16-mixed"}
        The training precision the costs assume (:mod:`tensoropt_py.cost.training`).
    meshes : {"all", "hierarchical"}
        The mesh space searched (:mod:`tensoropt_py.space.mesh`; ``"auto"`` resolved).
    meshes_restricted : bool
        Whether that space leaves out meshes of the full space (then ``exact`` is False).
    fastest_gap : float or None
        When the exact fastest strategy was out of reach (a graph too wide for
        :func:`~tensoropt_py.engine.min_sum`): how far the fastest point may be from it, its
        time's relative excess over a proven lower bound (0 proves it fastest). None when the
        fastest point is exact or no bound was computed.
    fastest_ties : bool
        Whether several strategies share the least time and the fastest point's memory is not
        proven the least of theirs (a slower strategy of less memory won the solve that
        weighs memory, or it was past its work limit; ``track``'s ``stats["anchor_ties"]``).
    seconds : dict
        Wall-clock seconds of each stage: ``"build"`` (the cost graph), ``"track"`` (the
        engine) and ``"peaks"`` (each tracked point's peak memory, and the points Pareto-optimal by it).
    """

    memory: np.ndarray
    time: np.ndarray
    compute_time: np.ndarray
    communication_time: np.ndarray
    choices: np.ndarray
    edge_choices: np.ndarray
    devices: int
    model: str
    cluster: str
    exact: bool = False
    epsilon: float = 0.0
    heuristic_eliminations: int = 0
    seconds: dict = field(default_factory=dict)
    model_cost_graph: Any = field(default=None, repr=False)
    model_fingerprint: str = ""
    optimizer: str = "adam"
    memory_bound_factor: float = 1.0
    recompute: bool = False
    shard_optimizer: bool = False
    precision: str = "32-true"
    meshes: str = "all"
    meshes_restricted: bool = False
    fastest_gap: float | None = None
    fastest_ties: bool = False

    @property
    def cost_graph(self):
        return None if self.model_cost_graph is None else self.model_cost_graph.cost_graph

    def __len__(self):
        return int(self.memory.shape[0])

    @property
    def turning_point(self) -> int:
        """Index of the turning point (see :func:`turning_point`)."""
        return turning_point(self.memory, self.time)

    def plan(self, i: int) -> Plan:
        """The full :class:`Plan` of frontier point ``i``."""
        if not -len(self) <= i < len(self):
            raise InvalidInputError(f"frontier point {i} out of range: the frontier has {len(self)} points")
        if self.model_cost_graph is None:
            raise InvalidInputError(
                "this frontier was loaded from JSON without its cost graph; recompute it with "
                "tensoropt_py.frontier(model, cluster, devices) to get plans"
            )
        return plan_from_choices(self.model_cost_graph, self.choices[i], self.edge_choices[i],
                                 model=self.model, cluster=self.cluster, optimizer=self.optimizer,
                                 fingerprint=self.model_fingerprint, precision=self.precision)

    def option_usage(self) -> dict:
        """Per point, how many operators are recomputed and how many shard their state.

        Returns ``{"recompute": (P,) int, "shard_state": (P,) int}`` (zeros for a plain space).

        Examples
        --------
        >>> from tensoropt_py.inputs import load_cluster, load_model
        >>> from tensoropt_py.cost.training import TrainingOptions
        >>> fr = compute_frontier(load_model("mlp"), load_cluster("cpu-1x4"), 4,
        ...                       training=TrainingOptions(recompute=True))
        >>> use = fr.option_usage()
        >>> sorted(use), use["recompute"].shape == (len(fr),)
        (['recompute', 'shard_state'], True)
        """
        rec, sh = np.zeros(len(self), dtype=np.int64), np.zeros(len(self), dtype=np.int64)
        mcg = self.model_cost_graph
        if mcg is not None and (self.recompute or self.shard_optimizer):
            for i, cfgs in enumerate(mcg.configs):
                r = np.array([c.recompute for c in cfgs], dtype=np.int64)
                z = np.array([c.shard_state for c in cfgs], dtype=np.int64)
                rec += r[self.choices[:, i]]
                sh += z[self.choices[:, i]]
        return {"recompute": rec, "shard_state": sh}

    @property
    def plans(self) -> tuple[Plan, ...]:
        return tuple(self.plan(i) for i in range(len(self)))

    def index_under(self, memory_cap) -> int:
        """Index of the fastest point whose memory fits ``memory_cap`` (bytes or "14.5GB")."""
        cap = float(parse_bytes(memory_cap))
        fits = np.flatnonzero(self.memory <= cap)
        if fits.size == 0:
            smallest = float(self.memory.min())
            raise InfeasibleError(
                f"no strategy of {self.model} on {self.devices} devices fits under the memory cap of "
                f"{describe_bytes(cap)} per device; the smallest memory any strategy needs is {describe_bytes(smallest)}",
                min_memory=smallest, memory_cap=cap,
            )
        # Time strictly decreases along the frontier: the last fitting point is the fastest.
        return int(fits[-1])

    def pick(self, memory_cap) -> Plan:
        """The fastest plan whose memory per device fits ``memory_cap``."""
        return self.plan(self.index_under(memory_cap))

    def table(self, *, mark: int | None = None, limit: int = 40) -> str:
        """The frontier as a text table (memory per device, seconds per iteration)."""
        mem_unit, mem_div = display_unit(self.memory, MEMORY_UNITS[1:])
        t_unit, t_div = display_unit(self.time, TIME_UNITS[1:])
        lines = [f"{'#':>4}  {'memory ' + mem_unit:>11}  {'time ' + t_unit:>10}  {'compute ' + t_unit:>11}  "
                 f"{'comm ' + t_unit:>10}"]
        idx = np.arange(len(self))
        tp = self.turning_point
        if len(self) > limit:  # keep both ends, the turning point and the marked point
            keep = set(np.linspace(0, len(self) - 1, limit).round().astype(int).tolist())
            keep |= {tp} | ({mark} if mark is not None else set())
            idx = np.array(sorted(keep))
        for i in idx:
            flag = ("  <- picked" if i == mark else "") + ("  (turning point)" if i == tp else "")
            lines.append(f"{i:>4}  {self.memory[i] / mem_div:>11.3f}  {self.time[i] / t_div:>10.4f}  "
                         f"{self.compute_time[i] / t_div:>11.4f}  {self.communication_time[i] / t_div:>10.4f}{flag}")
        return "\n".join(lines)

    def __str__(self):
        kind = "exact" if self.exact else "approximate"
        from .units import format_bytes, format_time

        return (f"Frontier({self.model} on {self.cluster}, {self.devices} devices: {len(self)} points, {kind}, "
                f"memory {format_bytes(self.memory.min())} - {format_bytes(self.memory.max())} per device, "
                f"time {format_time(self.time.min())} - {format_time(self.time.max())} per iteration)")

    __repr__ = __str__

    @property
    def accuracy(self) -> str:
        """Whether these are exactly the Pareto-optimal points of the cost model, and if not, why."""
        if self.exact:
            return "exact frontier of the additive cost model; memory = each point's modelled peak"
        why = []
        if self.epsilon > 0:
            why.append(f"epsilon={self.epsilon:g}, memory within {self.memory_bound_factor:.3g}x "
                       "of the exact frontier's at equal time")
        if self.heuristic_eliminations:
            steps = "step" if self.heuristic_eliminations == 1 else "steps"
            why.append(f"{self.heuristic_eliminations} heuristic {steps} (configs fixed or dropped)")
        if self.meshes_restricted:
            why.append(f"{self.meshes} meshes only")
        if self.fastest_gap is not None:
            why.append("fastest point proven fastest by a lower bound" if self.fastest_gap <= 1e-9 else
                       f"fastest point within {100 * self.fastest_gap:.2f}% of a proven lower bound")
        if self.fastest_ties:
            why.append("strategies tie for the least time: the fastest point's memory not proven the least of theirs")
        return "approximate: " + (", ".join(why) if why else "restricted space")

    def plot(self, path=None, **kwargs):
        """Fig. 6 style figure (see :func:`tensoropt_py.plot.plot_frontier`)."""
        from .plot import plot_frontier

        kwargs.setdefault("turning_point", self.turning_point)
        kwargs.setdefault("note", self.accuracy)
        kwargs.setdefault("title", f"{self.model} on {self.cluster} ({self.devices} devices)")
        if self.recompute or self.shard_optimizer:  # mark the points using each training lever
            kwargs.setdefault("options", {k: v for k, v in self.option_usage().items() if v.any()})
        return plot_frontier(self, path=path, **kwargs)

    # --- serialisation -------------------------------------------------------------------------
    def to_json(self, path=None, *, include_plans: bool = False) -> str:
        data = {
            "format": FRONTIER_FORMAT,
            "model": self.model, "cluster": self.cluster, "devices": self.devices,
            "exact": self.exact, "epsilon": self.epsilon, "heuristic_eliminations": self.heuristic_eliminations,
            "optimizer": self.optimizer, "model_fingerprint": self.model_fingerprint,
            "memory_bound_factor": self.memory_bound_factor,
            "recompute": self.recompute, "shard_optimizer": self.shard_optimizer, "precision": self.precision,
            "meshes": self.meshes, "meshes_restricted": self.meshes_restricted, "fastest_gap": self.fastest_gap,
            "fastest_ties": self.fastest_ties, "memory": self.memory.tolist(), "time": self.time.tolist(),
            "compute_time": self.compute_time.tolist(), "communication_time": self.communication_time.tolist(),
            "choices": self.choices.tolist(), "edge_choices": self.edge_choices.tolist(),
            "seconds": self.seconds,
        }
        if include_plans:
            data["plans"] = [p.to_dict() for p in self.plans]
        text = json.dumps(data)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_json(cls, text_or_path) -> "Frontier":
        data = read_json(text_or_path, "frontier")
        if not isinstance(data, dict) or data.get("format") != FRONTIER_FORMAT:
            fmt = data.get("format") if isinstance(data, dict) else None
            raise InvalidInputError(f"not a tensoropt_py frontier: format {fmt!r}, expected {FRONTIER_FORMAT!r}")
        arrays = {k: np.asarray(data[k], dtype=float) for k in ("memory", "time", "compute_time", "communication_time")}
        n = len(arrays["memory"])
        return cls(
            **arrays,
            choices=np.asarray(data["choices"], dtype=np.int64).reshape(n, -1),
            edge_choices=np.asarray(data["edge_choices"], dtype=np.int64).reshape(n, -1),
            devices=int(data["devices"]), model=data["model"], cluster=data["cluster"], exact=bool(data["exact"]),
            epsilon=float(data["epsilon"]), heuristic_eliminations=int(data["heuristic_eliminations"]),
            seconds=data.get("seconds", {}), optimizer=data.get("optimizer", "adam"),
            model_fingerprint=data.get("model_fingerprint", ""),
            memory_bound_factor=float(data.get("memory_bound_factor", 1.0)), recompute=bool(data.get("recompute", False)),
            shard_optimizer=bool(data.get("shard_optimizer", False)), precision=data.get("precision", "32-true"),
            meshes=data.get("meshes", "all"), meshes_restricted=bool(data.get("meshes_restricted", False)),
            fastest_gap=None if data.get("fastest_gap") is None else float(data["fastest_gap"]),
            fastest_ties=bool(data.get("fastest_ties", False)),
        )


def compute_frontier(graph, cluster, devices: int, *, method: Method = "ldp", exact: bool = False,
                     epsilon: float | Literal["auto"] = "auto", threads: int | None = None, optimizer: str = "adam",
                     mesh_tensorflow: bool = False, max_configs: int | None = None, progress=None,
                     training=None, meshes: MeshSpace = "auto") -> Frontier:
    """The cost frontier of a parsed model on ``devices`` devices of a parsed cluster.

    Parameters
    ----------
    graph : Graph
        The model (see :func:`tensoropt_py.inputs.load_model`).
    cluster : Cluster
    devices : int
        A checked device count (see :func:`tensoropt_py.inputs.check_devices`).
    method, exact, epsilon
        Passed to :func:`tensoropt_py.engine.track`.
    threads : int or None
        Worker threads of the build's rescheduling searches and of
        :func:`tensoropt_py.engine.track` (None: every core).
    optimizer : {"adam", "momentum", "sgd"}
        Decides the optimizer-state memory and update time per parameter.
    mesh_tensorflow : bool
        Restrict every operator to the machine-shaped mesh (the Mesh-TensorFlow baseline).
    max_configs : int, optional
        Keep at most this many configurations per operator (the fastest; None: all).
    progress : callable, optional
        Called as ``progress(stage, fraction, elapsed_seconds, detail)`` when a stage starts and
        ends (stages ``"build"``, ``"track"`` and ``"peaks"``) and while the engine tracks
        (fraction of the nodes eliminated, points so far).
    training : TrainingOptions, optional
        Recomputation, sharded optimizer state and precision
        (:func:`tensoropt_py.cost.training.check_training_options`); default the plain space.
    meshes : {"auto", "all", "hierarchical"}
        The meshes an operator may use (:mod:`tensoropt_py.space.mesh`): "auto" searches
        every mesh up to 16 devices and the machine-aligned ones beyond, with a
        :class:`~tensoropt_py.errors.SearchSpaceWarning`.

    Returns
    -------
    Frontier

    Examples
    --------
    >>> from tensoropt_py.inputs import load_cluster, load_model
    >>> fr = compute_frontier(load_model("mlp"), load_cluster("cpu-1x4"), 4)
    >>> fr.devices, bool(np.all(np.diff(fr.time) < 0))
    (4, True)
    """
    from .cost.builder import build_cost_graph
    from .cost.training import TrainingOptions
    from .cost.memory import peak_frontier
    from .engine import track

    training = training or TrainingOptions()
    note = progress or (lambda stage, fraction, elapsed, detail="": None)
    t0 = _time.perf_counter()
    note("build", 0.0, 0.0)
    mcg = build_cost_graph(graph, cluster, devices, optimizer=optimizer, mesh_tensorflow=mesh_tensorflow,
                           max_configs=max_configs, training=training, meshes=meshes, threads=threads)
    t1 = _time.perf_counter()
    note("build", 1.0, t1 - t0)
    note("track", 0.0, 0.0)

    def on_track(info):  # the engine's counters: the share of nodes eliminated, points so far
        nodes = max(int(info.get("nodes") or 0), 1)
        done = 1.0 - int(info.get("nodes_left", nodes)) / nodes
        note("track", min(done, 0.99), float(info.get("elapsed_s", 0.0)), f"{int(info.get('points', 0))} points")

    tracked = track(mcg.cost_graph, method=method, exact=exact, epsilon=epsilon, threads=threads,
                    progress=on_track if progress is not None else None)
    t2 = _time.perf_counter()
    note("track", 1.0, t2 - t1)
    note("peaks", 0.0, 0.0)
    # the memory axis is each strategy's peak live memory (cost.memory), not Eq. 3's sum
    keep, memory = peak_frontier(mcg, tracked.time, tracked.choices, tracked.edge_choices)
    t3 = _time.perf_counter()
    note("peaks", 1.0, t3 - t2)
    choices = np.asarray(tracked.choices, dtype=np.int64)[keep]
    edge_choices = np.asarray(tracked.edge_choices, dtype=np.int64)[keep]
    compute = np.zeros(len(keep))
    for i, costs in enumerate(mcg.node_costs):
        compute += np.asarray(costs)[choices[:, i], 2]
    time = np.asarray(tracked.time, dtype=float)[keep]
    # Any heuristic elimination, epsilon thinning, a config cap, the Mesh-TensorFlow
    # restriction or a restricted mesh space make the result not the exact frontier of the model's space.
    heuristic = int(tracked.n_heuristic)
    return Frontier(
        memory=np.asarray(memory, dtype=float), time=time, compute_time=compute,
        communication_time=np.maximum(time - compute, 0.0), choices=choices,
        edge_choices=edge_choices, devices=devices, model=graph.name,
        cluster=cluster.name, epsilon=float(tracked.epsilon),
        exact=bool(heuristic == 0 and tracked.epsilon == 0 and not mesh_tensorflow and max_configs is None
                   and not mcg.meshes_restricted),
        heuristic_eliminations=heuristic, seconds={"build": t1 - t0, "track": t2 - t1, "peaks": t3 - t2},
        model_cost_graph=mcg, model_fingerprint=graph.fingerprint(), optimizer=optimizer,
        memory_bound_factor=float(tracked.memory_bound_factor),
        recompute=training.recompute, shard_optimizer=training.shard_optimizer, precision=training.precision,
        meshes=mcg.meshes, meshes_restricted=mcg.meshes_restricted,
        fastest_gap=(tracked.stats or {}).get("end_gaps", {}).get("fastest"),
        fastest_ties=bool((tracked.stats or {}).get("anchor_ties")),
    )
