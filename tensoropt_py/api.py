"""The public face: ``frontier()``, ``find_strategy()``, :class:`Frontier`, :class:`Profile`.

TensorOpt §4.1 (Listing 1): a user gives a model and a cluster and asks for the
fastest strategy under a memory cap (``mini_time``), the fewest devices that fit
(``mini_parallelism``) or the best time at each device count (``profiling``). All
three read the *cost frontier* of the model at a device count, which
:func:`frontier` computes (:func:`~tensoropt_py.model_frontier.compute_frontier`) and
caches: a frontier answers every memory cap, so asking again tracks nothing. Nothing
in the package imports this module; it only parses what users pass and calls down.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from .engine.track import parse_epsilon
from .errors import InfeasibleError, InvalidInputError
from .inputs import check_devices, device_counts, load_cluster, load_model, parse_memory_cap
from .cost.training import Precision, check_training_options
from .model_frontier import Frontier, Method, compute_frontier, turning_point
from .space.mesh import MeshSpace, check_meshes, resolve_meshes
from .units import MEMORY_UNITS, TIME_UNITS, describe_bytes, display_unit

__all__ = ["frontier", "find_strategy", "Frontier", "Profile", "load_model", "load_cluster", "turning_point",
           "clear_cache"]

Option = Literal["mini_time", "mini_parallelism", "profiling"]
OPTIONS = ("mini_time", "mini_parallelism", "profiling")
#: Frontiers kept in memory (least recently used dropped first).
CACHE_SIZE = 16
_CACHE: OrderedDict = OrderedDict()


def clear_cache() -> None:
    """Forget the frontiers :func:`frontier` keeps in memory.

    Examples
    --------
    >>> clear_cache()
    """
    _CACHE.clear()


@functools.cache
def _code_version() -> str:
    """A hash of the package's source: a frontier kept on disk is stale once the code that made it changes."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")) + sorted(root.rglob("*.pyx")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cache_key(graph, cluster, devices, options) -> str:
    h = hashlib.sha256()
    h.update(_code_version().encode())
    h.update(graph.fingerprint().encode())
    h.update(cluster.to_json(indent=None).encode())
    h.update(repr((devices, sorted(options.items()))).encode())
    h.update(b"memory axis: peak")  # frontiers cached before memory was the peak are not reused
    return h.hexdigest()[:24]


def frontier(
    model,
    cluster,
    devices: int | None = None,
    *,
    example_inputs=None,
    method: Method = "ldp",
    exact: bool = False,
    epsilon: float | Literal["auto"] = "auto",
    threads: int | None = None,
    optimizer: str = "adam",
    mesh_tensorflow: bool = False,
    max_configs: int | None = None,
    meshes: MeshSpace = "auto",
    cache: bool = True,
    cache_dir=None,
    progress: bool | None = None,
    recompute: bool = False,
    shard_optimizer: bool = False,
    precision: Precision = "32-true",
) -> Frontier:
    """The cost frontier of ``model`` on ``devices`` devices of ``cluster``.

    Parameters
    ----------
    model : str, Graph or torch.nn.Module
        See :func:`~tensoropt_py.inputs.load_model`.
    cluster : str or Cluster
        A preset name (see ``Cluster.presets()``), a JSON file, or a Cluster.
    devices : int, optional
        Device count (default: every device of the cluster); must be one of
        ``cluster.device_counts()``.
    example_inputs : tuple of Tensors or dict, optional
        Needed when ``model`` is a torch module.
    method : {"ldp", "elimination"}
        FT-LDP (default) or FT-Elimination.
    exact : bool
        Forbid heuristic elimination so the result is exactly the Pareto frontier
        of the cost model (can be slow on graphs that need branch elimination).
    epsilon : float or "auto"
        Thin intermediate frontiers to an epsilon-Pareto set (0 = off); ``"auto"``: exact
        until an intermediate frontier grows past thousands of points per config, then
        1e-3 (with ``exact=True``: 0). See :func:`tensoropt_py.engine.track` for the
        guarantee; ``Frontier.epsilon`` and ``Frontier.accuracy`` say what was used.
    threads : int, optional
        Worker threads of the cost graph's rescheduling searches and of the engine (None: all
        cores); the result does not depend on it.
    optimizer : {"adam", "momentum", "sgd"}
        Decides the optimizer-state memory and update time per parameter.
    mesh_tensorflow : bool
        Restrict the space to Mesh-TensorFlow's (one machine-shaped mesh for every operator).
    max_configs : int, optional
        Keep at most this many configurations per operator (the fastest); None keeps all.
    meshes : {"auto", "all", "hierarchical"}
        The device meshes an operator may use (:mod:`tensoropt_py.space.mesh`, "Mesh
        spaces"). ``"all"``: every ordered factorisation of the device count (the exact
        space; over a thousand configurations per operator past 16 devices).
        ``"hierarchical"``: the flat mesh and the two-axis meshes whose inner axis stays
        inside a machine (tens of configurations). ``"auto"``: ``"all"`` up to 16 devices,
        ``"hierarchical"`` beyond, with a :class:`~tensoropt_py.errors.SearchSpaceWarning`.
        The result's ``meshes`` says which space was searched.
    cache : bool
        Reuse a frontier computed before for the same model, cluster, devices and options
        (kept in memory for this process; see :func:`clear_cache`).
    cache_dir : str or Path, optional
        Also keep frontiers as JSON files in this folder, for later processes (the cost
        graph is rebuilt from the model, which is fast; tracking is not repeated). A file
        is only used by the same version of this package's code.
    progress : bool, Progress or None
        Report stages, elapsed time and an estimate on stderr (True), only when stderr is a
        terminal (None), never (False), or through a :class:`~tensoropt_py.progress.Progress`.
    recompute : bool
        Also offer every operator recomputation in backward (its outputs and internal saved
        tensors are not kept): less memory, more time, chosen per operator on the frontier.
    shard_optimizer : bool
        Also offer every parameter operator ZeRO-1: optimizer state sharded over the
        parameter's gradient-reducing replicas (reduce-scatter + all-gather). Needs an
        optimizer with state ("momentum", "adam").
    precision : {"32-true", "bf16-mixed"}
        ``"bf16-mixed"``: bf16 compute and activations at the device's bf16 throughput
        (the preset must have one), fp32 master weights and optimizer state.
        See :mod:`tensoropt_py.cost.training`.

    Returns
    -------
    Frontier

    Examples
    --------
    >>> import tensoropt_py as to
    >>> fr = to.frontier("mlp", "cpu-1x4", devices=4)
    >>> bool(np.all(np.diff(fr.time) < 0))
    True
    >>> to.frontier("mlp", "cpu-1x4", devices=4) is fr   # cached
    True
    >>> ext = to.frontier("mlp", "cpu-1x4", devices=4, recompute=True, shard_optimizer=True)
    >>> ext.recompute, bool(ext.time.min() <= fr.time.min() * (1 + 1e-12))  # a larger space: never slower
    (True, True)
    >>> fr.meshes, to.frontier("mlp", "cpu-1x4", devices=4, meshes="hierarchical").meshes
    ('all', 'hierarchical')
    """
    from .progress import Progress

    graph = load_model(model, example_inputs)
    cl = load_cluster(cluster)
    devices = cl.num_devices if devices is None else check_devices(devices, cl)
    training = check_training_options(recompute, shard_optimizer, precision, optimizer=optimizer, cluster=cl)
    meshes = check_meshes(meshes)
    options = dict(method=method, exact=bool(exact), epsilon=parse_epsilon(epsilon), optimizer=optimizer,
                   mesh_tensorflow=bool(mesh_tensorflow), max_configs=max_configs)
    # keyed by the space searched: "auto" shares its frontier with the space it resolves to
    key = _cache_key(graph, cl, devices, {**options, "recompute": training.recompute,
                                          "shard_optimizer": training.shard_optimizer,
                                          "precision": training.precision,
                                          "meshes": resolve_meshes(meshes, devices)})
    if cache and key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    path = None if cache_dir is None else Path(cache_dir) / f"frontier-{key}.json"
    reporter = progress if isinstance(progress, Progress) else \
        Progress(progress, prefix=f"{graph.name} on {devices} devices of {cl.name}: ")
    try:
        if path is not None and path.exists():
            from .cost.builder import build_cost_graph

            loaded = Frontier.from_json(path)
            mcg = build_cost_graph(graph, cl, devices, optimizer=optimizer, mesh_tensorflow=mesh_tensorflow,
                                   max_configs=max_configs, training=training, meshes=meshes)
            fr = replace(loaded, model_cost_graph=mcg)
        else:
            fr = compute_frontier(graph, cl, devices, threads=threads, progress=reporter, training=training,
                                  meshes=meshes, **options)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                fr.to_json(path)
    finally:
        reporter.close()
    if cache:
        _CACHE[key] = fr
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return fr


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
    epsilon: float | Literal["auto"] = "auto",
    threads: int | None = None,
    optimizer: str = "adam",
    max_configs: int | None = None,
    meshes: MeshSpace = "auto",
    refine: Literal["mcmc"] | None = None,
    budget=None,
    seed=None,
    cache: bool = True,
    cache_dir=None,
    progress: bool | None = None,
    recompute: bool = False,
    shard_optimizer: bool = False,
    precision: Precision = "32-true",
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
    example_inputs, method, exact, epsilon, threads, optimizer, max_configs, meshes, cache, cache_dir, progress
    recompute, shard_optimizer, precision
        As in :func:`frontier` (every device count's frontier is cached, so asking again
        with another cap or option costs no tracking).
    refine : {"mcmc"}, optional
        Refine the frontier's candidates under the cap with the FlexFlow simulator and
        MCMC; the plan then carries ``simulated_time`` (``time`` stays the additive estimate).
        Not available with ``profiling``.
    budget : int or str, optional
        MCMC budget: proposals (``1000`` or ``"1000"``) or wall-clock time (``"30s"``);
        default 2000 proposals.
    seed : int, optional
        MCMC seed: the same seed and an iteration budget give the same plan (a wall-clock
        budget is not reproducible).

    Returns
    -------
    Plan (mini_time, mini_parallelism) or Profile (profiling)
        A Plan's ``time`` is the additive estimate the frontier was searched with (TensorOpt
        Eq. 3); ``simulated_time`` is the same plan simulated on per-device compute and network
        streams (:func:`~tensoropt_py.soap.plan_simulator.simulate_plan`), where communication
        overlaps computation.

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
    meshes = check_meshes(meshes)
    graph = load_model(model, example_inputs)
    cl = load_cluster(cluster)
    cap = parse_memory_cap(memory_cap, cl)
    training = check_training_options(recompute, shard_optimizer, precision, optimizer=optimizer, cluster=cl)
    if refine is not None and (training.expands or training.mixed_precision):
        raise InvalidInputError(f"refine={refine!r} simulates the plain space only (the FlexFlow simulator does not cost "
                                f"recomputation, sharded optimizer state or {training.precision!r}); use refine=None "
                                f"with recompute={recompute!r}, shard_optimizer={shard_optimizer!r}, "
                                f"precision={precision!r}")
    kw = dict(method=method, exact=exact, epsilon=epsilon, threads=threads, optimizer=optimizer,
              max_configs=max_configs, meshes=meshes, cache=cache, cache_dir=cache_dir, progress=progress,
              recompute=recompute,
              shard_optimizer=shard_optimizer, precision=precision)

    if refine is not None and budget is not None:
        from .soap.refine import parse_budget

        parse_budget(budget)  # a bad budget fails before any frontier is computed
    if option == "mini_time":
        if devices is not None and (isinstance(devices, bool) or not isinstance(devices, (int, np.integer))):
            raise InvalidInputError(f"mini_time takes one device count (a positive int), got {devices!r}")
        fr = frontier(graph, cl, devices, **kw)
        plan = fr.pick(cap)
        return _refine(plan, fr, graph, cl, cap, budget, seed) if refine else _simulated(plan, graph)

    counts = device_counts(devices, cl)
    if option == "mini_parallelism":
        smallest, at = math.inf, None
        for n in counts:
            fr = frontier(graph, cl, n, **kw)
            if fr.memory.min() < smallest:
                smallest, at = float(fr.memory.min()), n
            if fr.memory.min() <= cap:
                plan = fr.pick(cap)
                return _refine(plan, fr, graph, cl, cap, budget, seed) if refine else _simulated(plan, graph)
        raise InfeasibleError(
            f"{graph.name} fits on none of the device counts {list(counts)} of {cl.name} under the memory cap of "
            f"{describe_bytes(cap)} per device; the smallest memory any strategy needs is {describe_bytes(smallest)} "
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


def _simulated(plan, graph):
    """The plan with its simulated time (compute and communication overlapping) next to the additive one."""
    from .soap.plan_simulator import simulate_plan

    return plan.with_simulated_time(simulate_plan(plan, graph).time)


def _refine(plan, fr, graph, cluster, cap, budget, seed):
    from .soap.refine import refine_plan

    return refine_plan(plan, fr, graph, cluster, memory_cap=cap, budget=budget, seed=seed)
