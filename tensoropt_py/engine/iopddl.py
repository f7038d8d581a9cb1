"""Problems of the IOPDDL sharding contest (ASPLOS 2025) as cost graphs with interval usages.

A problem file (JSON, optionally gzip-compressed) holds::

    {"problem": {"name": ...,
                 "nodes": {"intervals": [[start, end], ...],   # live on start <= t < end
                           "costs": [[cost per strategy], ...],
                           "usages": [[usage per strategy], ...]},
                 "edges": {"nodes": [[u, v], ...],
                           "costs": [[cost of (s_u, s_v) at s_u * K_v + s_v], ...]},
                 "usage_limit": L}}                              # optional

and asks for one strategy per node minimising the summed node and edge costs while the
summed usage of the nodes live at any step stays within ``usage_limit``. Costs of 1e18 mark
forbidden strategies and pairs. That is :func:`~tensoropt_py.engine.peak.min_time_under_peak`
on a :class:`~tensoropt_py.engine.cost_graph.CostGraph` whose time is the contest's cost, with
an :class:`~tensoropt_py.engine.peak.IntervalUsage`: :func:`read_iopddl` builds both,
:func:`solve_iopddl` solves, :func:`solution_cost` scores a solution the way the contest does,
and :func:`write_iopddl` writes a problem (tests, benchmarks).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InfeasibleError, InvalidInputError
from .cost_graph import CostGraph
from .peak import IntervalUsage, PeakOptimum, evaluate_peak, min_time_under_peak
from .track import default_max_memory

__all__ = ["IopddlProblem", "read_iopddl", "write_iopddl", "solution_cost", "solve_iopddl"]


@dataclass(frozen=True, slots=True, eq=False)
class IopddlProblem:
    """One IOPDDL problem.

    Attributes
    ----------
    name : str
    cost_graph : CostGraph
        Node ``i``'s configs are its strategies, with (memory, time) = (usage, cost); an
        edge's table holds the pair costs as time (memory 0).
    usage : IntervalUsage
        The live intervals and per-strategy usages.
    usage_limit : float
        The largest allowed peak of summed live usages (``inf`` when the file has none).
    """

    name: str
    cost_graph: CostGraph
    usage: IntervalUsage
    usage_limit: float

    def __str__(self):
        return (f"IOPDDL {self.name!r}: {self.cost_graph.n_nodes} nodes, {self.cost_graph.n_edges} edges, "
                f"usage limit {self.usage_limit:g}")


def _load(source):
    if isinstance(source, dict):
        return source
    path = Path(source)
    if not path.is_file():
        raise InvalidInputError(f"IOPDDL problem file {str(path)!r} does not exist")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{str(path)!r} is not a readable IOPDDL JSON file: {exc}") from None


def _field(d, key, where):
    if not isinstance(d, dict) or key not in d:
        raise InvalidInputError(f"IOPDDL problem: {where} has no {key!r} entry")
    return d[key]


def _numbers(values, what):
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(f"IOPDDL problem: {what} must be a list of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidInputError(f"IOPDDL problem: {what} must be a non-empty list of numbers")
    return arr


def read_iopddl(source) -> IopddlProblem:
    """Read an IOPDDL problem (a ``.json`` or ``.json.gz`` path, or the parsed dict).

    Parameters
    ----------
    source : str, Path or dict

    Returns
    -------
    IopddlProblem

    Raises
    ------
    InvalidInputError
        Naming the entry: a missing file or key, a node whose costs and usages differ in
        length, an edge that does not join two nodes or whose cost list is not ``K_u * K_v``
        long, a node index out of range.

    Examples
    --------
    >>> p = read_iopddl({"problem": {"name": "tiny",
    ...     "nodes": {"intervals": [[0, 2], [1, 3]], "costs": [[2, 1], [2, 1]], "usages": [[1, 3], [1, 3]]},
    ...     "edges": {"nodes": [[0, 1]], "costs": [[0, 0, 0, 0]]}, "usage_limit": 4}})
    >>> str(p)
    "IOPDDL 'tiny': 2 nodes, 1 edges, usage limit 4"
    """
    data = _field(_load(source), "problem", "the file")
    name = str(data.get("name", "")) if isinstance(data, dict) else ""
    nodes = _field(data, "nodes", "problem")
    intervals = _field(nodes, "intervals", "problem.nodes")
    costs = _field(nodes, "costs", "problem.nodes")
    usages = _field(nodes, "usages", "problem.nodes")
    n = len(intervals)
    if len(costs) != n or len(usages) != n:
        raise InvalidInputError(f"IOPDDL problem: {n} intervals but {len(costs)} cost lists and "
                                f"{len(usages)} usage lists; need one of each per node")
    try:
        iv = np.asarray(intervals, dtype=np.int64).reshape(n, 2)
    except (TypeError, ValueError):
        raise InvalidInputError("IOPDDL problem: every node interval must be a pair of integers [start, end]") from None
    node_costs, node_usage = [], []
    for i in range(n):
        c = _numbers(costs[i], f"the costs of node {i}")
        u = _numbers(usages[i], f"the usages of node {i}")
        if c.shape != u.shape:
            raise InvalidInputError(f"IOPDDL problem: node {i} has {c.size} costs but {u.size} usages")
        node_costs.append(np.stack([u, c], axis=1))
        node_usage.append(u)
    edges = data.get("edges", {"nodes": [], "costs": []})
    pairs = _field(edges, "nodes", "problem.edges")
    pair_costs = _field(edges, "costs", "problem.edges")
    if len(pairs) != len(pair_costs):
        raise InvalidInputError(f"IOPDDL problem: {len(pairs)} edges but {len(pair_costs)} edge cost lists")
    cg_edges = []
    for e, (ends, ec) in enumerate(zip(pairs, pair_costs)):
        if len(ends) != 2:
            raise InvalidInputError(f"IOPDDL problem: edge {e} joins {len(ends)} nodes {list(ends)}; "
                                    f"only edges between two nodes are supported")
        u, v = (int(x) for x in ends)
        for x in (u, v):
            if not 0 <= x < n:
                raise InvalidInputError(f"IOPDDL problem: edge {e} names node {x}, out of range 0..{n - 1}")
        ku, kv = node_costs[u].shape[0], node_costs[v].shape[0]
        c = _numbers(ec, f"the costs of edge {e}")
        if c.size != ku * kv:
            raise InvalidInputError(f"IOPDDL problem: edge {e} ({u}, {v}) has {c.size} costs; its nodes have "
                                    f"{ku} x {kv} = {ku * kv} strategy pairs")
        table = np.zeros((ku, kv, 2))
        table[:, :, 1] = c.reshape(ku, kv)
        cg_edges.append((u, v, table))
    limit = data.get("usage_limit")
    limit = math.inf if limit is None else float(limit)
    if not limit >= 0:
        raise InvalidInputError(f"IOPDDL problem: usage_limit must be a number >= 0, got {data.get('usage_limit')!r}")
    return IopddlProblem(name=name, cost_graph=CostGraph(node_costs, cg_edges),
                         usage=IntervalUsage(iv[:, 0], iv[:, 1], node_usage), usage_limit=limit)


def _sentinel(x):
    """A cost as the file holds it: forbidden (+inf in the engine) back to the contest's 1e18."""
    return 1e18 if not np.isfinite(x) else float(x)


def write_iopddl(problem: IopddlProblem, path) -> None:
    """Write ``problem`` as an IOPDDL JSON file (gzip-compressed when ``path`` ends in ``.gz``).

    Parameters
    ----------
    problem : IopddlProblem
        Its cost graph must have one option per edge (the file has no edge options).
    path : str or Path
    """
    cg = problem.cost_graph
    nodes = {"intervals": [[int(s), int(e)] for s, e in zip(problem.usage.start, problem.usage.end)],
             "costs": [[_sentinel(x) for x in c[:, 1]] for c in cg.node_costs],
             "usages": [[float(x) for x in u] for u in problem.usage.usage]}
    pairs, pair_costs = [], []
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        if tab.shape[2] != 1:
            raise InvalidInputError(f"edge {e} has {tab.shape[2]} options; an IOPDDL file holds one cost per pair")
        pairs.append([int(u), int(v)])
        pair_costs.append([_sentinel(x) for x in tab[smap][:, dmap, 0, 1].ravel()])
    data = {"problem": {"name": problem.name, "nodes": nodes, "edges": {"nodes": pairs, "costs": pair_costs}}}
    if math.isfinite(problem.usage_limit):
        data["problem"]["usage_limit"] = problem.usage_limit
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        json.dump(data, fh)


def solution_cost(problem: IopddlProblem, solution) -> float:
    """The contest's score of ``solution`` (one strategy index per node): its total cost.

    Raises
    ------
    InvalidInputError
        For a solution of the wrong length or a strategy index out of range.
    InfeasibleError
        When it uses a forbidden strategy or pair, or its peak usage exceeds the limit.
    """
    peak, cost = evaluate_peak(problem.cost_graph, problem.usage, np.atleast_2d(solution))
    if not np.isfinite(cost[0]):
        raise InfeasibleError("the solution uses a forbidden strategy or strategy pair (cost 1e18)")
    if peak[0] > problem.usage_limit:
        raise InfeasibleError(f"the solution peaks at usage {peak[0]:g}, over the limit {problem.usage_limit:g}",
                              memory_cap=problem.usage_limit)
    return float(cost[0])


def solve_iopddl(problem: IopddlProblem, *, max_nodes: int = 1000, iterations: int = 50,
                 max_memory: float | None = None) -> PeakOptimum:
    """The cheapest solution found within the usage limit, with a proven lower bound.

    Parameters
    ----------
    problem : IopddlProblem
    max_nodes, iterations : int
        Branch-and-bound nodes and subgradient steps per node
        (:func:`~tensoropt_py.engine.peak.min_time_under_peak`); ``max_nodes=1`` solves the
        root relaxation only (large problems).
    max_memory : float or None
        Bytes the exact Lagrangian solver's tables may take (8 per entry; a wider problem
        raises ``InvalidInputError``); None: 60% of the memory available now.

    Returns
    -------
    PeakOptimum
        ``choices`` is the solution, ``time`` its cost, ``gap`` its distance to the bound.

    Examples
    --------
    >>> p = read_iopddl({"problem": {"name": "tiny",
    ...     "nodes": {"intervals": [[0, 2], [1, 3]], "costs": [[2, 1], [2, 1]], "usages": [[1, 3], [1, 3]]},
    ...     "edges": {"nodes": [[0, 1]], "costs": [[0, 0, 0, 0]]}, "usage_limit": 4}})
    >>> r = solve_iopddl(p)
    >>> r.choices.tolist(), r.time, r.optimal
    ([0, 1], 3.0, True)
    """
    if not isinstance(problem, IopddlProblem):
        raise InvalidInputError(f"problem must be an IopddlProblem, got {type(problem).__name__}")
    if max_memory is None:
        max_memory = default_max_memory()
    elif isinstance(max_memory, bool) or not isinstance(max_memory, (int, float)) or not max_memory >= 8:
        raise InvalidInputError(f"max_memory must be a number of bytes >= 8 or None, got {max_memory!r}")
    return min_time_under_peak(problem.cost_graph, problem.usage, problem.usage_limit,
                               max_nodes=max_nodes, iterations=iterations, max_entries=int(max_memory // 8))
