"""The result of tracking a cost graph: :class:`TrackedFrontier`.

Its own module so that :mod:`.cost_graph` (brute force) and :mod:`.track` both build it
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrackedFrontier"]


@dataclass(frozen=True, slots=True, eq=False)
class TrackedFrontier:
    """The cost frontier of a CostGraph with the strategy of every point.

    Attributes
    ----------
    memory, time : ndarray of float64, shape (P,)
        Memory ascending, time strictly descending.
    choices : ndarray of int64, shape (P, n_nodes)
        Config index of every node, per point.
    edge_choices : ndarray of int64, shape (P, n_edges)
        Chosen option of every edge (order of ``cg.edges``; 0 where R == 1).
    method : str
        ``"ldp"``, ``"elimination"`` or ``"brute_force"``.
    exact : bool
    epsilon : float
    epsilon_depth : int
        L, the largest number of epsilon-thinning steps along any derivation (0 if epsilon = 0).
    n_heuristic : int
        Number of heuristic steps: eliminations that fix a node's config, and restrictions
        of a node to its best configs for the work cap (0 means the frontier is exact up to
        epsilon).
    n_branch : int
        Number of branch eliminations.
    seconds : float
        Wall-clock time of the run.
    stats : dict
        More counters (eliminations of each kind, kernel calls, points produced...).
    """

    memory: np.ndarray
    time: np.ndarray
    choices: np.ndarray
    edge_choices: np.ndarray
    method: str
    exact: bool
    epsilon: float
    epsilon_depth: int
    n_heuristic: int
    n_branch: int
    seconds: float
    stats: dict = None

    def __len__(self):
        return int(self.memory.shape[0])

    @property
    def memory_bound_factor(self):
        """``(1 + epsilon) ** epsilon_depth``: the proven bound on the memory loss."""
        return float((1.0 + self.epsilon) ** self.epsilon_depth)

    def points(self):
        """``(P, 2)`` array of (memory, time)."""
        return np.stack([self.memory, self.time], axis=1)

    def __str__(self):
        return (
            f"TrackedFrontier(points={len(self)}, method={self.method!r}, exact={self.exact}, "
            f"epsilon={self.epsilon:g}, heuristic={self.n_heuristic}, seconds={self.seconds:.3g})"
        )

    __repr__ = __str__
