"""The frontier engine: cost graphs, frontier algebra, Frontier Tracking (TensorOpt §3).

Knows nothing about DNNs: it works on a :class:`CostGraph` (see DESIGN.md "Contracts").

* :class:`CostGraph`, :class:`LayoutEdge`: the validated input;
* :func:`reduce`, :func:`product`, :func:`union` (Alg. 1 and friends), :func:`thin`,
  and the compiled batched kernels :func:`combine_ragged`, :func:`reduce_ragged`;
* :func:`track` (FT-LDP or FT-Elimination) -> :class:`TrackedFrontier`;
* :func:`evaluate` (strategy costs), :func:`brute_force_frontier` (test oracle) and
  :func:`min_sum` (exact optimum of time + lam * memory, an independent check);
* :mod:`.random_graphs`: random chains / DAGs for tests and benchmarks.
"""

from . import random_graphs
from .algebra import combine_ragged, product, reduce, reduce_ragged, thin, union
from .cost_graph import CostGraph, LayoutEdge, brute_force_frontier, evaluate
from .scalar import ScalarOptimum, min_sum
from .track import TrackedFrontier, track

__all__ = [
    "CostGraph",
    "LayoutEdge",
    "TrackedFrontier",
    "track",
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
    "random_graphs",
]
