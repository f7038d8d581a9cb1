"""Eliminations of Frontier Tracking (TensorOpt §3.2) and the compiled combine kernel.

* :mod:`.kernels` / ``_kernels.pyx``: batched product + union + reduce of ragged frontier
  tables with provenance (the hot path), references in :mod:`.reference`;
* :mod:`.table`: frontier tables with provenance; :mod:`.working_graph`: the graph being
  simplified;
* :mod:`.node_elimination` (Eq. 4, leaf folding, detach), :mod:`.edge_elimination`
  (Eq. 5), :mod:`.branch_elimination` (Eq. 6), :mod:`.heuristic_elimination` (Eq. 7),
  :mod:`.linear_chain` (Alg. 2 marking) and :mod:`.driver` (the Alg. 2 loop).

This package knows nothing about DNNs and does not import :mod:`tensoropt_py.engine`
(which sits above it); :func:`tensoropt_py.engine.track` drives it.
"""

from .kernels import MAX_SLOTS, combine_outer, combine_ragged, reduce_ragged, resolve_threads

__all__ = ["combine_ragged", "combine_outer", "reduce_ragged", "resolve_threads", "MAX_SLOTS"]
