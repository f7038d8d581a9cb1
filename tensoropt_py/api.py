"""The public face: ``frontier()``, ``find_strategy()``, :class:`Frontier`, :class:`Profile`.

TensorOpt §4.1 (Listing 1): a user gives a model and a cluster and asks for the
fastest strategy under a memory cap (``mini_time``), the fewest devices that fit
(``mini_parallelism``) or the best time at each device count (``profiling``). All
three read the *cost frontier* of the model at a device count, which
:func:`frontier` computes: the model becomes a :class:`~tensoropt_py.engine.CostGraph`
(:func:`~tensoropt_py.cost.builder.build_cost_graph`) and the engine tracks it
(:func:`~tensoropt_py.engine.track`).
"""

from __future__ import annotations

import json
import math
import time as _time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Literal, Sequence

import numpy as np

from .errors import InfeasibleError, InvalidInputError
from .plan import Collective, EdgePlan, OperatorPlan, Plan
from .units import MEMORY_UNITS, TIME_UNITS, display_unit

__all__ = ["frontier", "find_strategy", "Frontier", "Profile", "load_model", "load_cluster", "turning_point"]

Option = Literal["mini_time", "mini_parallelism", "profiling"]
Method = Literal["ldp", "elimination"]
OPTIONS = ("mini_time", "mini_parallelism", "profiling")
#: TensorOpt §5.2 keeps 10% of device memory free: the default cap is memory / SAFETY_MARGIN.
SAFETY_MARGIN = 1.1
FRONTIER_FORMAT = "tensoropt_py.engine/1"


# --- inputs ------------------------------------------------------------------------------------
def load_model(model, example_inputs=None):
    """A :class:`~tensoropt_py.graph.ir.Graph` from a zoo name, a Graph, or a torch module.

    Parameters
    ----------
    model : str, Graph or torch.nn.Module
        A zoo name (see :func:`tensoropt_py.models.names`), optionally with keyword
        arguments as ``"gpt2:size=small"`` or ``"mlp:batch=64,hidden=256"``; a
        ``"package.module:factory"`` path whose factory returns a Graph or a
        ``(module, example_inputs)`` pair; a Graph; or a module (then
        ``example_inputs`` is required).
    example_inputs : Tensor, tuple of Tensors or dict, optional
        The module's example inputs (a dict: keyword inputs).
    """
    from .graph.ir import Graph

    if isinstance(model, Graph):
        return model
    if isinstance(model, str):
        return _model_from_spec(model)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise InvalidInputError("a torch.nn.Module needs example_inputs (a tuple of tensors) to be traced")
        from .graph.torch_import import from_torch

        if isinstance(example_inputs, Mapping):  # keyword inputs, e.g. {"input_ids": ..., "labels": ...}
            return from_torch(model, dict(example_inputs))
        return from_torch(model, tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,))
    raise InvalidInputError(
        f"model must be a zoo name, a Graph or a torch.nn.Module (with example_inputs); got {type(model).__name__}"
    )


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _model_from_spec(spec: str):
    """``"name"``, ``"name:key=value,..."`` (zoo) or ``"package.module:factory"``."""
    from .graph import zoo as models
    from .graph.ir import Graph

    name, _, rest = spec.partition(":")
    zoo = tuple(n for n in models.__all__ if callable(getattr(models, n)))
    if name in zoo:
        kwargs = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise InvalidInputError(f"model option {item!r} in {spec!r} must look like key=value")
            kwargs[key.strip()] = _parse_value(value.strip())
        try:
            return getattr(models, name)(**kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"bad options for zoo model {name!r}: {exc}") from None
    if not rest:
        raise InvalidInputError(f"unknown model {spec!r}; zoo models: {', '.join(zoo)} (or use package.module:factory)")
    import importlib

    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {name!r} for model {spec!r}: {exc}") from None
    factory = getattr(module, rest, None)
    if not callable(factory):
        raise InvalidInputError(f"{name!r} has no callable {rest!r} (model {spec!r})")
    made = factory()
    if isinstance(made, Graph):
        return made
    if isinstance(made, tuple) and len(made) == 2:
        return load_model(made[0], made[1])
    raise InvalidInputError(f"factory {spec!r} must return a Graph or a (module, example_inputs) pair")


def load_cluster(cluster):
    """A :class:`~tensoropt_py.cluster.Cluster` from a preset name, a JSON path, or a Cluster."""
    from .cluster import Cluster

    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, (str, Path)):
        return Cluster.load(cluster)
    raise InvalidInputError(f"cluster must be a preset name, a JSON file or a Cluster; got {type(cluster).__name__}")


def _memory_cap(cap, cluster) -> float:
    from .units import parse_bytes

    if cap is None:
        return cluster.device.memory / SAFETY_MARGIN
    value = parse_bytes(cap)
    if not value > 0:
        raise InvalidInputError(f"memory_cap must be positive, got {cap!r}")
    return float(value)


def _check_devices(devices, cluster) -> int:
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)):
        raise InvalidInputError(f"devices must be a positive int, got {devices!r}")
    devices = int(devices)
    valid = tuple(cluster.device_counts())
    if devices < 1:
        raise InvalidInputError(f"devices must be a positive int, got {devices}; valid counts on {cluster.name}: {valid}")
    if devices not in valid:
        raise InvalidInputError(f"devices={devices} is not a usable device count of {cluster.name}; valid: {valid}")
    return devices


# --- the frontier ------------------------------------------------------------------------------
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
        the cost model (no heuristic elimination and no epsilon thinning happened).
    cost_graph : CostGraph or None
        The graph the frontier was tracked on (None after :meth:`from_json`).
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
                "tensoropt_py.engine(model, cluster, devices) to get plans"
            )
        return plan_from_choices(self.model_cost_graph, self.choices[i], self.edge_choices[i],
                                 model=self.model, cluster=self.cluster, optimizer=self.optimizer,
                                 fingerprint=self.model_fingerprint)

    @property
    def plans(self) -> tuple[Plan, ...]:
        return tuple(self.plan(i) for i in range(len(self)))

    def index_under(self, memory_cap) -> int:
        """Index of the fastest point whose memory fits ``memory_cap`` (bytes or "14.5GB")."""
        from .units import parse_bytes

        cap = float(parse_bytes(memory_cap))
        fits = np.flatnonzero(self.memory <= cap)
        if fits.size == 0:
            smallest = float(self.memory.min())
            raise InfeasibleError(
                f"no strategy of {self.model} on {self.devices} devices fits under the memory cap of "
                f"{_fmt_bytes(cap)} per device; the smallest memory any strategy needs is {_fmt_bytes(smallest)}",
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

    def plot(self, path=None, **kwargs):
        """Fig. 6 style figure (see :func:`tensoropt_py.plot.plot_frontier`)."""
        from .plot import plot_frontier

        kwargs.setdefault("turning_point", self.turning_point)
        kwargs.setdefault("title", f"{self.model} on {self.cluster} ({self.devices} devices)")
        return plot_frontier(self, path=path, **kwargs)

    # --- serialisation -------------------------------------------------------------------------
    def to_json(self, path=None, *, include_plans: bool = False) -> str:
        data = {
            "format": FRONTIER_FORMAT,
            "model": self.model, "cluster": self.cluster, "devices": self.devices,
            "exact": self.exact, "epsilon": self.epsilon, "heuristic_eliminations": self.heuristic_eliminations,
            "optimizer": self.optimizer, "model_fingerprint": self.model_fingerprint,
            "memory": self.memory.tolist(), "time": self.time.tolist(),
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
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            path = Path(text_or_path)
            if not path.exists():
                raise InvalidInputError(f"frontier file {str(path)!r} does not exist")
            text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"frontier is not valid JSON: {exc}") from None
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
        )


def _fmt_bytes(nbytes: float) -> str:
    """Bytes for messages: short, but precise enough to tell a cap from the memory it misses."""
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= div:
            return f"{nbytes / div:.4g} {unit} ({nbytes:.6g} bytes)"
    return f"{nbytes:.6g} bytes"




def _fingerprint(graph) -> str:
    import hashlib

    h = hashlib.sha256()
    for op in graph.operators:
        h.update(f"{op.name}|{op.kind.value}|{[(d.name, d.size) for d in op.loop_dims]}".encode())
    for t in sorted(graph.tensors.values(), key=lambda t: t.name):
        h.update(f"{t.name}|{t.shape}|{t.dtype}|{t.role.value}".encode())
    return h.hexdigest()[:16]


def _collectives(path) -> tuple[Collective, ...]:
    if path is None:
        return ()
    out = []
    for step in path.steps:
        out.append(Collective(kind=step.kind, groups=tuple(tuple(int(d) for d in g) for g in step.groups),
                              nbytes=float(step.nbytes), time=float(step.time),
                              axes=tuple(int(a) for a in step.fine_axes), src=str(step.before), dst=str(step.after)))
    return tuple(out)


def plan_from_choices(mcg, choices, edge_choices, *, model: str, cluster: str, optimizer: str = "adam",
                      fingerprint: str = "", method: str = "tensoropt") -> Plan:
    """Decode one CostGraph strategy of ``mcg`` (a ModelCostGraph) into a :class:`Plan`."""
    record = mcg.decode(choices, edge_choices)
    graph = mcg.graph
    ops = []
    for rec in record.ops:
        op = graph.operator(rec.name)
        cfg = rec.config
        assignment = tuple((d.name, int(a)) for d, a in zip(op.loop_dims, cfg.assignment) if a >= 0)
        maps = tuple((use.tensor, tuple(int(a) for a in m)) for use, m in zip(op.uses(), cfg.tensor_maps))
        ops.append(OperatorPlan(name=rec.name, kind=op.kind.value, mesh=tuple(int(s) for s in cfg.mesh.shape),
                                assignment=assignment, tensor_maps=maps, memory=rec.memory, time=rec.time,
                                compute_time=rec.compute_time, communication_time=rec.comm_time, config=str(cfg)))
    edges = []
    for rec in record.edges:
        edges.append(EdgePlan(producer=rec.producer, consumer=rec.consumer, tensor=rec.tensor,
                              src_layout=str(rec.src), dst_layout=str(rec.dst), forward=_collectives(rec.forward),
                              backward=_collectives(rec.backward), reuse=rec.reuse, memory=rec.memory, time=rec.time,
                              rederive=_collectives(rec.rederive)))
    return Plan(model=model, cluster=cluster, devices=int(mcg.num_devices), operators=tuple(ops), edges=tuple(edges),
                memory=record.memory, time=record.time, compute_time=record.compute_time,
                communication_time=record.comm_time,
                choices=tuple(int(c) for c in np.asarray(choices).ravel()),
                edge_choices=tuple(int(c) for c in np.asarray(edge_choices).ravel()),
                model_fingerprint=fingerprint or _fingerprint(graph), optimizer=optimizer, method=method)


def frontier(
    model,
    cluster,
    devices: int | None = None,
    *,
    example_inputs=None,
    method: Method = "ldp",
    exact: bool = False,
    epsilon: float = 0.0,
    threads: int | None = None,
    optimizer: str = "adam",
    mesh_tensorflow: bool = False,
    max_configs: int | None = None,
) -> Frontier:
    """The cost frontier of ``model`` on ``devices`` devices of ``cluster``.

    Parameters
    ----------
    model : str, Graph or torch.nn.Module
        See :func:`load_model`.
    cluster : str or Cluster
        A preset name (see ``Cluster.presets()``), a JSON file, or a Cluster.
    devices : int, optional
        Device count (default: every device of the cluster); must be one of
        ``cluster.device_counts()``.
    method : {"ldp", "elimination"}
        FT-LDP (default) or FT-Elimination.
    exact : bool
        Forbid heuristic elimination so the result is exactly the Pareto frontier
        of the cost model (can be slow on graphs that need branch elimination).
    epsilon : float
        Thin intermediate frontiers to an epsilon-Pareto set (0 = off); see
        :func:`tensoropt_py.engine.track` for the guarantee.
    optimizer : {"adam", "sgd", "momentum"}
        Decides the optimizer-state memory per parameter.

    Returns
    -------
    Frontier

    Examples
    --------
    >>> import tensoropt_py as to
    >>> fr = to.frontier("mlp", "cpu-1x4", devices=4)
    >>> bool(np.all(np.diff(fr.time) < 0))
    True
    """
    from .cost.builder import build_cost_graph
    from .engine import track

    graph = load_model(model, example_inputs)
    cl = load_cluster(cluster)
    devices = cl.num_devices if devices is None else _check_devices(devices, cl)
    t0 = _time.perf_counter()
    mcg = build_cost_graph(graph, cl, devices, optimizer=optimizer, mesh_tensorflow=mesh_tensorflow,
                           max_configs=max_configs)
    t1 = _time.perf_counter()
    tracked = track(mcg.cost_graph, method=method, exact=exact, epsilon=epsilon, threads=threads)
    t2 = _time.perf_counter()
    choices = np.asarray(tracked.choices, dtype=np.int64)
    compute = np.zeros(len(tracked.memory))
    for i, costs in enumerate(mcg.node_costs):
        compute += np.asarray(costs)[choices[:, i], 2]
    time = np.asarray(tracked.time, dtype=float)
    # Any heuristic elimination, epsilon thinning, a config cap or the Mesh-TensorFlow
    # restriction make the result not the exact frontier of the model's space.
    heuristic = int(tracked.n_heuristic)
    return Frontier(
        memory=np.asarray(tracked.memory, dtype=float), time=time, compute_time=compute,
        communication_time=np.maximum(time - compute, 0.0), choices=choices,
        edge_choices=np.asarray(tracked.edge_choices, dtype=np.int64), devices=devices, model=graph.name,
        cluster=cl.name, epsilon=float(epsilon),
        exact=bool(heuristic == 0 and epsilon == 0 and not mesh_tensorflow and max_configs is None),
        heuristic_eliminations=heuristic, seconds={"build": t1 - t0, "track": t2 - t1},
        model_cost_graph=mcg, model_fingerprint=_fingerprint(graph), optimizer=optimizer,
    )


# --- find_strategy -----------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Profile:
    """Best per-iteration time at each device count (``option="profiling"``, TensorOpt Fig. 8).

    ``time[i]`` and ``memory[i]`` are NaN where nothing fits under the cap at ``devices[i]``.
    """

    devices: tuple[int, ...]
    time: np.ndarray
    memory: np.ndarray
    memory_cap: float
    model: str
    cluster: str
    plans: tuple = field(repr=False, default=())
    min_memory: np.ndarray = field(default=None, repr=False)

    def table(self) -> str:
        """Devices, best time, its memory and the least memory any strategy needs, per device count."""
        mems = [self.memory] + ([] if self.min_memory is None else [self.min_memory])
        m_unit, m_div = display_unit(np.concatenate([np.ravel(m) for m in mems]), MEMORY_UNITS[1:])
        t_unit, t_div = display_unit(self.time, TIME_UNITS[1:])
        lines = [f"{'devices':>8}  {'best time ' + t_unit:>13}  {'memory ' + m_unit:>10}"
                 + ("" if self.min_memory is None else f"  {'min memory ' + m_unit:>14}")]
        for i, d in enumerate(self.devices):
            fits = math.isfinite(self.time[i])
            t = f"{self.time[i] / t_div:>13.4f}" if fits else f"{'does not fit':>13}"
            m = f"{self.memory[i] / m_div:>10.3f}" if fits else f"{'-':>10}"
            mm = "" if self.min_memory is None else f"  {self.min_memory[i] / m_div:>14.3f}"
            lines.append(f"{d:>8}  {t}  {m}{mm}")
        return "\n".join(lines)

    def __str__(self):
        from .units import format_bytes

        return (f"Profile({self.model} on {self.cluster}, memory cap {format_bytes(self.memory_cap)} per device)\n"
                + self.table())

    def plot(self, path=None, baselines: dict | None = None, **kwargs):
        """Fig. 8 style: device count vs best time (``baselines``: name -> times per count)."""
        from .plot import plot_profile

        series = {"TensorOpt": self.time}
        series.update(baselines or {})
        from .units import format_bytes

        kwargs.setdefault("title", f"{self.model} on {self.cluster} (memory cap {format_bytes(self.memory_cap)})")
        return plot_profile(self.devices, series, path=path, **kwargs)


def find_strategy(
    model,
    cluster,
    option: Option = "mini_time",
    devices: int | Sequence[int] | None = None,
    memory_cap=None,
    *,
    example_inputs=None,
    method: Method = "ldp",
    exact: bool = False,
    epsilon: float = 0.0,
    optimizer: str = "adam",
    refine: Literal["mcmc"] | None = None,
    budget=None,
    seed=None,
):
    """Pick a strategy from the cost frontier (TensorOpt §4.1, Listing 1).

    Parameters
    ----------
    model : str, Graph or torch.nn.Module
        See :func:`load_model`.
    cluster : str or Cluster
    option : {"mini_time", "mini_parallelism", "profiling"}
        ``mini_time``: the fastest plan that fits ``memory_cap`` on ``devices``
        devices (default: all). ``mini_parallelism``: the fastest plan at the smallest
        device count (of ``cluster.device_counts()``, or of ``devices`` when a list) at
        which anything fits. ``profiling``: a :class:`Profile` of the best time per
        device count (``devices``: list, default all counts).
    memory_cap : float or str, optional
        Bytes per device or a string like ``"14.5GB"``; default device memory / 1.1.
    refine : {"mcmc"}, optional
        Refine the frontier's candidates under the cap with the FlexFlow simulator and
        MCMC; the plan then carries ``simulated_time`` (``time`` stays the additive estimate).
        Not available with ``profiling``.
    budget : int or str, optional
        MCMC budget: proposals (``1000`` or ``"1000"``) or wall-clock time (``"30s"``);
        default 2000 proposals.
    seed : int, optional
        MCMC seed: the same seed and an iteration budget give the same plan.

    Returns
    -------
    Plan (mini_time, mini_parallelism) or Profile (profiling)

    Raises
    ------
    InfeasibleError
        Nothing fits; the message gives the smallest memory any strategy needs and the cap.

    Examples
    --------
    >>> import tensoropt_py as to
    >>> plan = to.find_strategy("mlp", "cpu-1x4", option="mini_time", devices=4)
    >>> plan.devices
    4
    """
    if option not in OPTIONS:
        raise InvalidInputError(f"option must be one of {OPTIONS}, got {option!r}")
    if refine not in (None, "mcmc"):
        raise InvalidInputError(f"refine must be None or 'mcmc', got {refine!r}")
    graph = load_model(model, example_inputs)
    cl = load_cluster(cluster)
    cap = _memory_cap(memory_cap, cl)
    kw = dict(method=method, exact=exact, epsilon=epsilon, optimizer=optimizer)

    if refine is not None and budget is not None:
        from .soap.refine import parse_budget

        parse_budget(budget)  # a bad budget fails before any frontier is computed
    if option == "mini_time":
        if devices is not None and (isinstance(devices, bool) or not isinstance(devices, (int, np.integer))):
            raise InvalidInputError(f"mini_time takes one device count (a positive int), got {devices!r}")
        fr = frontier(graph, cl, devices, **kw)
        plan = fr.pick(cap)
        return _refine(plan, fr, graph, cl, cap, budget, seed) if refine else plan

    counts = _device_counts(devices, cl)
    if option == "mini_parallelism":
        smallest, at = math.inf, None
        for n in counts:
            fr = frontier(graph, cl, n, **kw)
            if fr.memory.min() < smallest:
                smallest, at = float(fr.memory.min()), n
            if fr.memory.min() <= cap:
                plan = fr.pick(cap)
                return _refine(plan, fr, graph, cl, cap, budget, seed) if refine else plan
        raise InfeasibleError(
            f"{graph.name} fits on none of the device counts {list(counts)} of {cl.name} under the memory cap of "
            f"{_fmt_bytes(cap)} per device; the smallest memory any strategy needs is {_fmt_bytes(smallest)} "
            f"(at {at} devices)",
            min_memory=smallest, memory_cap=cap,
        )
    if refine:
        raise InvalidInputError("refine='mcmc' applies to mini_time and mini_parallelism, not to profiling")

    times, mems, mins, plans = [], [], [], []
    for n in counts:
        fr = frontier(graph, cl, n, **kw)
        mins.append(float(fr.memory.min()))
        try:
            i = fr.index_under(cap)
        except InfeasibleError:
            times.append(math.nan)
            mems.append(math.nan)
            plans.append(None)
            continue
        times.append(float(fr.time[i]))
        mems.append(float(fr.memory[i]))
        plans.append(fr.plan(i))
    return Profile(devices=tuple(counts), time=np.asarray(times), memory=np.asarray(mems), memory_cap=cap,
                   model=graph.name, cluster=cl.name, plans=tuple(plans), min_memory=np.asarray(mins))


def _device_counts(devices, cluster) -> tuple[int, ...]:
    if devices is None:
        return tuple(cluster.device_counts())
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        devices = [devices]
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise InvalidInputError(f"devices must be a positive int or a list of them, got {devices!r}")
    counts = tuple(sorted({_check_devices(d, cluster) for d in devices}))
    if not counts:
        raise InvalidInputError("devices must name at least one device count")
    return counts


def _refine(plan, fr, graph, cluster, cap, budget, seed):
    from .soap.refine import refine_plan

    return refine_plan(plan, fr, graph, cluster, memory_cap=cap, budget=budget, seed=seed)
