"""Frontier algebra (TensorOpt §3.1): reduce (Alg. 1), product, union, epsilon thinning.

A *frontier* here is an ``(P, 2)`` float64 array of (memory, time) points.  After
:func:`reduce` it is sorted by memory ascending with time strictly descending, one point
per distinct cost pair: that is the Pareto-minimal subset of the input.

The batched/ragged hot path (many small frontiers combined and reduced per cell) is
:func:`combine_ragged`, backed by the compiled kernel ``_kernels.combine_kernel``;
:func:`reduce_ragged` reduces many unsorted sets at once. Pure references of both are in
:mod:`tensoropt_py.elimination.reference` (re-exported as
:mod:`tensoropt_py.engine.reference`). The kernel lives in ``elimination/`` because
the eliminations are its main user and ``elimination/`` sits below ``frontier/`` in the
package layering.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidInputError
from ..elimination.kernels import MAX_SLOTS, check_epsilon, combine_ragged, reduce_ragged, resolve_threads

__all__ = [
    "reduce",
    "product",
    "union",
    "thin",
    "combine_ragged",
    "reduce_ragged",
    "resolve_threads",
    "MAX_SLOTS",
]


def _as_points(points, name="points"):
    arr = np.asarray(points, dtype=np.float64)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise InvalidInputError(f"{name} must have shape (P, 2) (memory, time), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InvalidInputError(f"{name}[{bad[0]}, {bad[1]}] is {arr[bad[0], bad[1]]}; costs must be finite")
    return arr


def frontier_indices(mem, tim):
    """Indices kept by Alg. 1 (vectorised): sort by (memory, time, index), keep strict time records.

    The one Pareto reduce of (memory, time) arrays in the engine: memory ascending, time
    strictly descending, the first of identical points kept."""
    n = mem.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(n), tim, mem))
    t = tim[order]
    prev_min = np.minimum.accumulate(np.concatenate([[np.inf], t[:-1]]))
    return order[t < prev_min]


def reduce(points, return_index=False):
    """Reduce a set of (memory, time) points to its cost frontier (Algorithm 1).

    Parameters
    ----------
    points : array_like, shape (P, 2)
        Columns (memory, time); finite values.
    return_index : bool
        Also return the indices of the kept input points.

    Returns
    -------
    frontier : ndarray, shape (Q, 2)
        Memory ascending, time strictly descending; each kept point is not dominated by
        any input point, and every input point is weakly dominated by a kept one.
    index : ndarray of int64, shape (Q,)
        Only when ``return_index``. Among identical points the first one is kept.

    Examples
    --------
    >>> reduce([[3, 1], [1, 3], [2, 3], [2, 2]]).tolist()
    [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]
    """
    arr = _as_points(points)
    idx = frontier_indices(arr[:, 0], arr[:, 1])
    out = arr[idx]
    return (out, idx) if return_index else out


def product(a, b, return_index=False):
    """Reduced Cartesian product of two frontiers: every pair's costs summed, then reduced.

    Parameters
    ----------
    a, b : array_like, shape (P, 2) and (Q, 2)
    return_index : bool
        Also return an ``(R, 2)`` array of the (index in a, index in b) pair of each point.

    Returns
    -------
    frontier : ndarray, shape (R, 2)

    Examples
    --------
    >>> product([[1, 2], [2, 1]], [[0, 0]]).tolist()
    [[1.0, 2.0], [2.0, 1.0]]
    >>> product([[1, 2], [2, 1]], [[1, 2], [2, 1]]).tolist()
    [[2.0, 4.0], [3.0, 3.0], [4.0, 2.0]]
    """
    a = _as_points(a, "a")
    b = _as_points(b, "b")
    sums = (a[:, None, :] + b[None, :, :]).reshape(-1, 2)
    idx = frontier_indices(sums[:, 0], sums[:, 1])
    out = sums[idx]
    if return_index:
        return out, np.stack([idx // max(b.shape[0], 1), idx % max(b.shape[0], 1)], axis=1)
    return out


def union(*frontiers, return_index=False):
    """Reduced union of any number of frontiers.

    Parameters
    ----------
    *frontiers : array_like, each (P_i, 2)
    return_index : bool
        Also return an ``(R, 2)`` array of (which input, index in that input).

    Returns
    -------
    frontier : ndarray, shape (R, 2)

    Examples
    --------
    >>> union([[1, 3]], [[2, 2], [3, 3]]).tolist()
    [[1.0, 3.0], [2.0, 2.0]]
    """
    if not frontiers:
        raise InvalidInputError("union needs at least one frontier")
    arrs = [_as_points(f, f"frontiers[{i}]") for i, f in enumerate(frontiers)]
    allp = np.concatenate(arrs, axis=0)
    idx = frontier_indices(allp[:, 0], allp[:, 1])
    out = allp[idx]
    if return_index:
        which = np.repeat(np.arange(len(arrs)), [a.shape[0] for a in arrs])
        starts = np.concatenate([[0], np.cumsum([a.shape[0] for a in arrs])])
        return out, np.stack([which[idx], idx - starts[which[idx]]], axis=1)
    return out


def thin(points, epsilon, return_index=False):
    """Epsilon-thin a frontier: keep a subset that (1+epsilon)-covers it in memory.

    Every dropped point (m, t) has a kept point (m', t') with ``t' < t`` and
    ``m' <= (1 + epsilon) * m``; the minimum-time and the minimum-memory points are always kept.

    Parameters
    ----------
    points : array_like, shape (P, 2)
        A frontier (it is reduced first if it is not one).
    epsilon : float >= 0

    Examples
    --------
    >>> thin([[1.0, 3.0], [1.05, 2.5], [1.1, 2.0], [2.0, 1.0]], 0.1).tolist()
    [[1.0, 3.0], [1.1, 2.0], [2.0, 1.0]]
    """
    epsilon = check_epsilon(epsilon)
    arr, idx = reduce(points, return_index=True)
    if epsilon == 0 or arr.shape[0] <= 1:
        return (arr, idx) if return_index else arr
    off, m, t, prov = combine_ragged(
        [(np.array([0, arr.shape[0]]), arr[:, 0], arr[:, 1])], [0, 1], [[0]], epsilon=epsilon
    )
    keep = idx[prov[:, 0]]
    out = np.stack([m, t], axis=1)
    return (out, keep) if return_index else out


