"""The frontier engine: cost graphs, frontier algebra, Frontier Tracking (TensorOpt §3).

Knows nothing about DNNs: it works on a :class:`CostGraph` (see DESIGN.md "Contracts").

* :class:`CostGraph`, :class:`LayoutEdge`: the validated input;
* :func:`reduce`, :func:`product`, :func:`union` (Alg. 1 and friends), :func:`thin`,
  and the compiled batched kernels :func:`combine_ragged`, :func:`reduce_ragged`;
* :func:`track` (FT-LDP or FT-Elimination) -> :class:`TrackedFrontier`;
* :func:`evaluate` (strategy costs), :func:`brute_force_frontier` (test oracle) and
  :func:`min_sum` (exact optimum of time + lam * memory, an independent check);
* :class:`IntervalUsage`, :func:`min_time_under_peak`, :func:`peak_frontier`: memory as a
  peak over live intervals instead of a sum (Lagrangian branch and bound), with
  :func:`evaluate_peak` and :func:`brute_force_peak_frontier` (test oracle);
* :mod:`.iopddl`: problem files of the IOPDDL sharding contest read into a cost graph and
  interval usages, solved and scored;
* :mod:`.screen`: lower bounds per node config on a spanning-forest relaxation, the
  configs they prove useless given known points, and the candidates of
  ``track(candidates=...)``;
* :mod:`.random_graphs`: random chains / DAGs for tests and benchmarks.
"""

from . import iopddl, random_graphs, screen
from .algebra import combine_ragged, product, reduce, reduce_ragged, thin, union
from .cost_graph import CostGraph, LayoutEdge, brute_force_frontier, evaluate
from .peak import (
    IntervalUsage,
    PeakFrontier,
    PeakOptimum,
    brute_force_peak_frontier,
    evaluate_peak,
    min_time_under_peak,
    peak_frontier,
)
from .scalar import ScalarOptimum, min_sum
from .track import TrackedFrontier, parse_epsilon, track

__all__ = [
    "CostGraph",
    "LayoutEdge",
    "TrackedFrontier",
    "track",
    "parse_epsilon",
    "evaluate",
    "reduce",
    "product",
    "union",
    "thin",
    "combine_ragged",
    "reduce_ragged",
    "brute_force_frontier",
    "min_sum",
    "ScalarOptimum",
    "IntervalUsage",
    "PeakOptimum",
    "PeakFrontier",
    "evaluate_peak",
    "brute_force_peak_frontier",
    "min_time_under_peak",
    "peak_frontier",
    "iopddl",
    "random_graphs",
    "screen",
]
