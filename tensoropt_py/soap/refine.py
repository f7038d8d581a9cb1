"""Refining frontier plans with the task-graph simulator and MCMC (``find_strategy(refine="mcmc")``).

The frontier's additive cost model cannot see computation overlapping communication
or operators running concurrently on different devices; the simulators can. The
refinement simulates the frontier's plans under the memory cap
(:func:`~tensoropt_py.soap.plan_simulator.simulate_plan`, which runs any plan), seeds
FlexFlow's MCMC search with those that have a SOAP form, simulates MCMC's best again in
mesh form, and returns the plan (in mesh form, the form the executor runs) with the least
simulated time, ``simulated_time`` set.

Conversion rules (:func:`plan_to_soap`): a mesh config splitting loop dimension ``d`` over
mesh axis ``a`` becomes SOAP degree ``mesh[a]`` on ``d``; SOAP has no redundant
computation, so a mesh axis that splits nothing places one task per replica group, on
the group's first device. Configs splitting a reduction dimension have no SOAP form.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from ..errors import InvalidInputError
from .config import NotSoapError, SoapStrategy, from_split_factors

__all__ = ["plan_to_soap", "soap_to_choices", "refine_plan", "parse_budget"]


def _partition_devices(mesh, split_axes):
    """Devices of the partitions of a mesh config (row-major over ``split_axes``), first replica each."""
    n = math.prod(mesh)
    first = {}
    for device in range(n):
        coords = np.unravel_index(device, mesh)
        key = tuple(int(coords[a]) for a in split_axes)
        first.setdefault(key, device)
    return tuple(first[k] for k in itertools.product(*(range(mesh[a]) for a in split_axes)))


def plan_to_soap(plan, graph) -> SoapStrategy:
    """The SOAP strategy of a mesh-form :class:`~tensoropt_py.plan.Plan` (raises NotSoapError)."""
    configs = []
    by_name = {o.name: o for o in plan.operators}
    for op in graph.operators:
        o = by_name.get(op.name)
        if o is None:
            raise InvalidInputError(f"the plan has no config for operator {op.name!r}")
        assignment = sorted(o.assignment, key=lambda da: da[1])  # partition numbering follows mesh axes
        factors = [(d, int(o.mesh[a])) for d, a in assignment]
        devices = _partition_devices(tuple(o.mesh), [a for _, a in assignment])
        configs.append(from_split_factors(op, factors, devices))
    return SoapStrategy(tuple(configs))


def soap_to_choices(strategy: SoapStrategy, mcg, fallback=None) -> np.ndarray | None:
    """CostGraph config indices closest to a SOAP strategy.

    For every operator, a config with the same split factor on every loop dimension is
    taken, preferring one whose partitions sit on the same devices, then one with the
    same partition order. SOAP places unsplit operators on single devices, which mesh
    form replicates instead. An operator with no config of equal factors (pruned from the
    frontier's space, or data loading, which is fixed to data parallelism) takes the
    SOAP-expressible config sharing most split factors with it, else ``fallback[i]``; with
    neither the result is None.
    """
    choices = np.zeros(len(mcg.op_names), dtype=np.int64)
    index = {name: i for i, name in enumerate(mcg.op_names)}
    for op, cfg in zip(mcg.graph.operators, strategy):
        i = index[op.name]
        wanted = {d: k for d, k in cfg.degrees if k > 1}
        order = [d for d, k in cfg.degrees if k > 1]
        best, best_rank = None, 3
        nearest, nearest_shared = None, -1
        for k, candidate in enumerate(mcg.configs[i]):
            factors = {d.name: f for d, f in zip(op.loop_dims, candidate.split_factors()) if f > 1}
            if factors != wanted:
                shared = sum(1 for d, f in factors.items() if wanted.get(d) == f)
                if shared > nearest_shared and _soap_expressible(op, factors):
                    nearest, nearest_shared = k, shared
                continue
            axes = sorted((a, d.name) for d, a in zip(op.loop_dims, candidate.assignment) if a >= 0)
            same_order = [name for _, name in axes] == order
            same_devices = same_order and _partition_devices(
                tuple(candidate.mesh.shape), [a for a, _ in axes]) == tuple(cfg.devices)
            rank = 0 if same_devices else 1 if same_order else 2
            if rank < best_rank:
                best, best_rank = k, rank
        if best is None:
            best = nearest if nearest is not None else None if fallback is None else int(fallback[i])
            if best is None:
                return None
        choices[i] = best
    return choices


def _soap_expressible(op, factors) -> bool:
    """Whether SOAP can split ``op`` by ``factors`` (no reduction or unsplittable dimension)."""
    parts = math.prod(factors.values())
    try:
        from_split_factors(op, sorted(factors.items()), tuple(range(parts)))
    except NotSoapError:
        return False
    return True


def parse_budget(budget) -> tuple[int, float | None]:
    """``(iterations, seconds)`` from ``1000`` or ``"1000"`` (iterations) or ``"30s"`` (wall-clock seconds).

    A bare integer, or a string of digits (as typed on the command line), counts MCMC
    proposals; anything with a unit (or a float) is a wall-clock duration.

    >>> parse_budget(500), parse_budget("500"), parse_budget("2min")
    ((500, None), (500, None), (1000000000, 120.0))
    """
    if budget is None:
        return 2000, None
    if isinstance(budget, str) and budget.strip().isdigit():
        budget = int(budget.strip())
    if isinstance(budget, (int, np.integer)) and not isinstance(budget, bool):
        if budget < 1:
            raise InvalidInputError(f"budget must be a positive iteration count or a duration, got {budget!r}")
        return int(budget), None
    from ..units import parse_time

    seconds = parse_time(budget)
    return 10**9, float(seconds)


def refine_plan(plan, fr, graph, cluster, *, memory_cap, budget=None, seed=None, candidates: int = 8):
    """Refine ``plan`` (the mini_time pick of frontier ``fr``) by simulation and MCMC.

    Returns the plan (in mesh form) with the least simulated time among the frontier's
    plans under ``memory_cap`` and the MCMC result when the latter has a mesh form;
    ``time`` stays the additive estimate, ``simulated_time`` is the simulator's.

    Parameters
    ----------
    plan : Plan
        The frontier's pick under the cap.
    fr : Frontier
        The model-level frontier ``plan`` came from.
    graph : Graph
    cluster : Cluster
    memory_cap : float
        Bytes per device (parsed by the caller).
    budget : int or str, optional
        See :func:`parse_budget`.
    seed : int, optional
        MCMC seed (see :func:`tensoropt_py._random.as_generator`).
    candidates : int
        Frontier plans under the cap simulated as starting points.
    """
    from ..baselines import best_edge_options
    from ..plan import plan_from_choices
    from .plan_simulator import simulate_plan
    from .search import _cap, search

    memory_cap = _cap(memory_cap)

    iterations, seconds = parse_budget(budget)
    devices = fr.devices
    fits = np.flatnonzero(fr.memory <= memory_cap)
    picks = sorted(set(np.linspace(0, len(fits) - 1, min(candidates, len(fits))).round().astype(int).tolist()))
    # Every candidate is scored by simulating the plan itself (partial sums, reuse and all);
    # the SOAP-expressible ones also seed FlexFlow's MCMC search.
    scored = []  # (simulated time, plan)
    seeds = []
    for j in picks:
        p = plan if fits[j] == fr.index_under(memory_cap) else fr.plan(int(fits[j]))
        scored.append((simulate_plan(p, graph).time, p))
        try:
            seeds.append(plan_to_soap(p, graph))
        except NotSoapError:
            pass
    notes = []
    if not seeds:
        notes.append("no candidate under the cap has a SOAP form (they split reduction dimensions); "
                     "MCMC started from data parallelism and random strategies")
    best_strategy, _ = search(graph, cluster, devices, memory_cap=memory_cap, budget=iterations, seed=seed,
                              initial=tuple(seeds), time_budget=seconds)
    mcg = fr.model_cost_graph
    choices = soap_to_choices(best_strategy, mcg, fallback=plan.choices)
    found = plan_from_choices(mcg, choices, best_edge_options(mcg, choices), model=fr.model, cluster=fr.cluster,
                              optimizer=fr.optimizer, fingerprint=fr.model_fingerprint, method="tensoropt+mcmc")
    if found.memory > memory_cap:
        notes.append(f"MCMC's best in mesh form needs {found.memory / 1e9:.3f} GB per device, over the cap")
    else:
        scored.append((simulate_plan(found, graph).time, found))
    sim_time, chosen = min(scored, key=lambda s: s[0])
    return replace(chosen, simulated_time=float(sim_time), notes=chosen.notes + tuple(notes))
