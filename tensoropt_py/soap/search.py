"""FlexFlow's execution optimizer (§6): MCMC over SOAP strategies with the delta simulator.

:func:`search` runs one Metropolis-Hastings chain (:func:`~.minimize.minimize`) from each initial
candidate (the data-parallel strategy, ``num_random`` random strategies and any strategies the
caller gives, e.g. TensorOpt frontier points converted with
:func:`~.config.strategy_from_split_factors`), splitting the proposal budget equally between
them. A proposal replaces the config of one random operator by a random config of it
(FlexFlow §6.2; with probability ``neighbour_prob`` by a neighbouring config instead); the cost
is the simulated iteration time, evaluated by delta simulation on one task graph per chain
(a rejected proposal is undone by another delta step).

Memory cap: a strategy whose largest per-device memory exceeds ``memory_cap`` gets cost
``inf`` and is never accepted (a chain whose initial strategy is over the cap accepts the first
strategy under it). Every returned strategy therefore fits; when no strategy seen fits,
:class:`~tensoropt_py.errors.InfeasibleError` reports the smallest memory seen.

:func:`exhaustive` enumerates a (small) :class:`~.config.ConfigSpace` in mixed-radix Gray-code
order, so that consecutive strategies differ in one operator and each costs one delta
simulation (the oracle of the FlexFlow §8.3 comparison).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._random import as_generator
from ..errors import InfeasibleError, InvalidInputError
from .config import ConfigSpace, SoapStrategy, data_parallel
from .minimize import minimize
from .simulator import SimResult, Simulator

__all__ = ["search", "exhaustive", "SearchStats"]


class SearchStats(dict):
    """Counters of a :func:`search` run (a dict: ``proposals``, ``accepted``, ``chains``,
    ``best_chain``, ``best_iteration``, ``infeasible``, ``min_memory``, ``elapsed`` (s),
    ``time_to_best`` (s from the start of the search until the returned strategy was found))."""


def _cap(memory_cap) -> float:
    """The cap in bytes (inf for None). Callers parse user strings once, at the boundary."""
    if memory_cap is None:
        return math.inf
    if isinstance(memory_cap, bool) or not isinstance(memory_cap, (int, float, np.integer, np.floating)) \
            or not memory_cap > 0:
        raise InvalidInputError(f"memory_cap must be a positive number of bytes or None, got {memory_cap!r} "
                                "(parse sizes like '14.5GB' with tensoropt_py.units.parse_bytes)")
    return float(memory_cap)


def search(
    graph,
    cluster,
    devices=None,
    memory_cap=None,
    budget: int = 2000,
    seed=None,
    initial=(),
    *,
    space: ConfigSpace | None = None,
    placement: str = "contiguous",
    num_random: int = 1,
    include_data_parallel: bool = True,
    beta: float | None = None,
    neighbour_prob: float = 0.0,
    patience: float | None = 0.5,
    time_budget: float | None = None,
    simulator: Simulator | None = None,
    delta: bool = True,
    return_stats: bool = False,
):
    """Find a fast SOAP strategy by MCMC (FlexFlow §6).

    Parameters
    ----------
    graph : Graph
    cluster : Cluster
    devices : int, sequence of int or None
        As for :class:`~.simulator.Simulator`.
    memory_cap : float, optional
        Per-device memory limit in bytes (None: no limit).
    budget : int
        Total number of proposals, split equally between the initial candidates.
    seed : None, int or Generator
    initial : sequence of SoapStrategy
        Extra starting strategies (e.g. frontier plans).
    space : ConfigSpace, optional
        Configs to propose from (default: the full space on ``devices`` with ``placement``).
    num_random, include_data_parallel : the other initial candidates.
    beta : float, optional
        Inverse temperature in 1/seconds; default ``50 / initial time`` per chain.
    neighbour_prob : float
        Probability that a proposal is a neighbouring config rather than a random one.
    patience : float or None
        Per chain, stop after ``patience * chain budget`` proposals without improvement.
    time_budget : float, optional
        Wall-clock seconds for the whole search (split between chains); not reproducible.
    simulator : Simulator, optional
        Reuse a simulator (its caches) built for ``graph`` / ``cluster`` / ``devices``.
    delta : bool
        Evaluate proposals by delta simulation (default) or by full simulation (FlexFlow's
        baseline in Table 5; same chain, same result, slower).
    return_stats : bool
        Also return a :class:`SearchStats`.

    Returns
    -------
    (SoapStrategy, SimResult) or (SoapStrategy, SimResult, SearchStats)
    """
    sim = simulator if simulator is not None else Simulator(graph, cluster, devices)
    if sim.graph is not graph:
        raise InvalidInputError("simulator was built for another graph")
    rng = as_generator(seed)
    cap = _cap(memory_cap)
    if space is None:
        space = ConfigSpace(graph, sim.devices, placement=placement)
    if not 0.0 <= neighbour_prob <= 1.0:
        raise InvalidInputError(f"neighbour_prob must be in [0, 1], got {neighbour_prob}")
    starts: list[SoapStrategy] = []
    if include_data_parallel:
        starts.append(data_parallel(graph, sim.devices))
    for _ in range(int(num_random)):
        starts.append(space.random_strategy(rng))
    for s in initial:
        if not isinstance(s, SoapStrategy):
            raise InvalidInputError(f"initial strategies must be SoapStrategy objects, got {type(s).__name__}")
        starts.append(s)
    if not starts:
        raise InvalidInputError("no initial strategy: enable data parallel, random starts or pass initial=")
    n_ops = len(graph.operators)
    per_chain = budget // len(starts)
    extra = budget - per_chain * len(starts)
    stats = SearchStats(proposals=0, accepted=0, chains=len(starts), best_chain=-1, best_iteration=0,
                        infeasible=0, min_memory=math.inf, elapsed=0.0, time_to_best=0.0)
    best = None  # (time, strategy)
    t_search = time.perf_counter()
    for ci, start in enumerate(starts):
        st = sim.start(start)

        def cost(_st=st):
            mem = float(_st.memory.max())
            if mem < stats["min_memory"]:
                stats["min_memory"] = mem
            if mem > cap:
                stats["infeasible"] += 1
                return math.inf
            return _st.time

        move = [0, None, None]  # (operator, old config, new config) of the pending proposal

        def propose(strategy, r, _move=move):
            i = int(r.integers(n_ops))
            if neighbour_prob and r.random() < neighbour_prob:
                c = space.neighbour(i, strategy[i], r)
            else:
                c = space.random(i, r)
            _move[:] = (i, strategy[i], c)
            return strategy.replace(i, c)

        if delta:

            def score(cand, _st=st, _move=move, _cost=cost):
                _st.change(_move[0], _move[2])
                return _cost()

            def on_reject(cand, _st=st, _move=move):
                _st.change(_move[0], _move[1])

        else:
            full = [None]

            def score(cand, _full=full):
                r = sim.simulate(cand, timeline=False)
                mem = r.peak_memory
                if mem < stats["min_memory"]:
                    stats["min_memory"] = mem
                if mem > cap:
                    stats["infeasible"] += 1
                    return math.inf
                return r.time

            on_reject = None

        init_cost = cost()
        chain_budget = per_chain + (1 if ci < extra else 0)
        res = minimize(
            start,
            propose,
            score,
            budget=chain_budget,
            beta=beta,
            seed=rng,
            patience=patience,
            time_budget=None if time_budget is None else time_budget / len(starts),
            initial_score=init_cost,
            on_reject=on_reject,
        )
        stats["proposals"] += res.iterations
        stats["accepted"] += res.accepted
        if math.isfinite(res.best_score) and (best is None or res.best_score < best[0]):
            best = (res.best_score, res.best)
            stats["best_chain"] = ci
            stats["best_iteration"] = res.best_iteration
            stats["time_to_best"] = time.perf_counter() - t_search - (res.elapsed - res.best_elapsed)
    if best is None:
        raise InfeasibleError(
            f"no strategy found under the memory cap of {cap:.4g} bytes; the smallest per-device memory "
            f"seen was {stats['min_memory']:.4g} bytes",
            min_memory=stats["min_memory"],
            memory_cap=cap,
        )
    result = sim.simulate(best[1])
    stats["elapsed"] = time.perf_counter() - t_search
    if return_stats:
        return best[1], result, stats
    return best[1], result


def _gray(radices):
    """Mixed-radix reflected Gray code: yields (digit index, new value) moves from all-zeros."""
    n = len(radices)
    digits = [0] * n
    direction = [1] * n
    total = math.prod(radices)
    for _ in range(total - 1):
        # find the lowest digit that can move in its direction
        for j in range(n):
            v = digits[j] + direction[j]
            if 0 <= v < radices[j]:
                digits[j] = v
                yield j, v
                break
            direction[j] = -direction[j]


def exhaustive(sim: Simulator, space: ConfigSpace, memory_cap=None, limit: int = 1_000_000):
    """The best strategy of ``space`` by enumerating all of it (delta simulation in Gray-code order).

    Returns ``(best_time, best_strategy, count)``; ties keep the first strategy found. Raises
    InvalidInputError when the space has more than ``limit`` strategies and InfeasibleError when
    none fits under ``memory_cap``.
    """
    cap = _cap(memory_cap)
    lists = [space.enumerate(i) for i in range(len(space))]
    total = math.prod(len(c) for c in lists)
    if total > limit:
        raise InvalidInputError(f"the space has {total} strategies, more than limit={limit}")
    cur = [0] * len(lists)
    st = sim.start(SoapStrategy(tuple(c[0] for c in lists)))
    best_t, best_idx = math.inf, None
    min_mem = math.inf

    def visit():
        nonlocal best_t, best_idx, min_mem
        mem = float(st.memory.max())
        min_mem = min(min_mem, mem)
        if mem <= cap and st.time < best_t:
            best_t, best_idx = st.time, tuple(cur)

    visit()
    for j, v in _gray([len(c) for c in lists]):
        cur[j] = v
        st.change(j, lists[j][v])
        visit()
    if best_idx is None:
        raise InfeasibleError(f"no strategy of the space fits under {cap:.4g} bytes (smallest: {min_mem:.4g})",
                              min_memory=min_mem, memory_cap=cap)
    return best_t, SoapStrategy(tuple(lists[i][k] for i, k in enumerate(best_idx))), total
