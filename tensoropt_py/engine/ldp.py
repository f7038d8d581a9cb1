"""Linear Dynamic Programming (TensorOpt Alg. 3) on the marked chains.

For a chain ``o_1 - o_2 - ... - o_n`` the cumulative frontier is
``CF(o_i, p) = reduce(union_k CF(o_{i-1}, k) x F(e, k, p) x F(o_i, p))``: exactly
folding ``o_{i-1}`` into ``o_i`` (:func:`~tensoropt_py.elimination.node_elimination.fold_leaf`),
which already exploits layouts (configs of ``o_{i-1}`` sharing an output layout are
reduced together once, then combined per layout pair, then ``F(o_i, p)`` is added per
config, lazily). Line 9 (``reduce(union_k CF(o_n, k))``) is a detach. Backpointers are
the provenance of every table; unroll walks them back.
"""

from __future__ import annotations

from ..elimination.heuristic_elimination import shrink_costly
from ..elimination.node_elimination import detach, elimination_work, fold_leaf

__all__ = ["ldp"]


def ldp(g, chain, heuristic="weighted", max_step_work=float("inf")):
    """Run LDP along ``chain`` (node ids of a simple path in working graph ``g``).

    A step whose estimated work (:func:`~tensoropt_py.elimination.node_elimination.elimination_work`)
    exceeds ``max_step_work`` folds the node on its best configs, as many as fit, or fixes its
    config, chosen by ``heuristic``
    (:func:`~tensoropt_py.elimination.heuristic_elimination.shrink_costly`).

    Returns the one-cell table of the chain's frontier (also appended to ``g.detached``).
    """
    for a, b in zip(chain, chain[1:]):
        if set(g.adj[a]) != {b}:  # pragma: no cover - guarded by the marking invariant
            raise RuntimeError(f"LDP: node {a} is not a chain link to {b} (neighbours {sorted(g.adj[a])})")
        if elimination_work(g, a) > max_step_work and shrink_costly(g, a, heuristic, max_step_work):
            continue  # fixed: gone
        fold_leaf(g, a)
    if g.adj[chain[-1]]:  # pragma: no cover
        raise RuntimeError(f"LDP: chain end {chain[-1]} still has neighbours {sorted(g.adj[chain[-1]])}")
    return detach(g, chain[-1])
