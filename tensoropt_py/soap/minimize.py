"""A generic Metropolis-Hastings minimiser (FlexFlow §6.1), knowing nothing of simulators.

Starting from ``initial``, it repeatedly proposes a candidate ``propose(current, rng)``, scores
it and accepts it with probability ``min(1, exp(-beta * (score(candidate) - score(current))))``
(FlexFlow Eq. 1 with cost = score). A score of ``inf`` (e.g. a strategy over a memory cap) is
never accepted unless the current score is ``inf`` too. It stops after ``budget`` proposals, after
``time_budget`` seconds, or when the best score has not improved for ``patience * budget``
proposals (FlexFlow §6.2: "cannot further improve the best discovered strategy for half of the
search time": ``patience=0.5``).

Hooks let a caller keep an incremental evaluator in step with the chain (the SOAP search applies
a delta simulation in ``score`` and undoes it in ``on_reject``).

Examples
--------
>>> r = minimize(0, lambda x, rng: x + int(rng.choice([-1, 1])), lambda x: (x - 7) ** 2, budget=500, seed=0)
>>> r.best, r.best_score
(7, 0.0)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .._random import as_generator
from ..errors import InvalidInputError

__all__ = ["minimize", "MinimizeResult"]


@dataclass
class MinimizeResult:
    """Outcome of :func:`minimize`.

    Attributes
    ----------
    best, best_score : the best state seen and its score
    current, current_score : where the chain ended
    iterations : proposals made
    accepted : proposals accepted
    best_iteration : proposal index at which ``best`` was found (0: the initial state)
    history : best score after each proposal (when ``record=True``)
    stop_reason : "budget", "patience" or "time"
    elapsed, best_elapsed : seconds the run took, and until ``best`` was found
    """

    best: Any
    best_score: float
    current: Any
    current_score: float
    iterations: int
    accepted: int
    best_iteration: int
    stop_reason: str
    history: list = field(default_factory=list, repr=False)
    elapsed: float = 0.0
    best_elapsed: float = 0.0


def minimize(
    initial,
    propose: Callable,
    score: Callable,
    budget: int = 1000,
    *,
    beta: float | None = None,
    seed=None,
    patience: float | None = 0.5,
    time_budget: float | None = None,
    initial_score: float | None = None,
    on_accept: Callable | None = None,
    on_reject: Callable | None = None,
    record: bool = False,
) -> MinimizeResult:
    """Minimise ``score`` by Metropolis-Hastings from ``initial``.

    Parameters
    ----------
    initial : any
        Starting state.
    propose : callable (state, rng) -> candidate
        A random neighbour of the current state (``rng`` is a numpy Generator).
    score : callable candidate -> float
        Cost to minimise; ``inf`` marks an inadmissible candidate.
    budget : int
        Maximum number of proposals (>= 0).
    beta : float, optional
        Inverse temperature. Default: ``50 / |initial score|`` (a candidate 2% worse than the
        initial cost is accepted with probability 1/e), or 1 when that is 0 or infinite.
    seed : None, int or Generator
        See :func:`tensoropt_py._random.as_generator`.
    patience : float or None
        Stop when the best has not improved for ``patience * budget`` proposals (None: never).
    time_budget : float, optional
        Wall-clock limit in seconds (not reproducible; tests use ``budget``).
    initial_score : float, optional
        Score of ``initial`` if already known (saves one call).
    on_accept, on_reject : callable candidate -> None, optional
        Called after each decision.
    record : bool
        Keep the best score after every proposal in ``history``.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise InvalidInputError(f"budget must be a non-negative int (number of proposals), got {budget!r}")
    if time_budget is not None and not time_budget > 0:
        raise InvalidInputError(f"time_budget must be positive seconds, got {time_budget!r}")
    if patience is not None and not patience > 0:
        raise InvalidInputError(f"patience must be positive or None, got {patience!r}")
    rng = as_generator(seed)
    t_start = time.perf_counter()
    best_elapsed = 0.0
    cur = initial
    cur_s = float(score(initial)) if initial_score is None else float(initial_score)
    if math.isnan(cur_s):
        raise InvalidInputError("score(initial) is NaN")
    if beta is None:
        beta = 50.0 / abs(cur_s) if cur_s != 0 and math.isfinite(cur_s) else 1.0
    elif not beta > 0:
        raise InvalidInputError(f"beta must be positive, got {beta!r}")
    best, best_s, best_it = cur, cur_s, 0
    stall_limit = None if patience is None else max(1, int(math.ceil(patience * budget)))
    deadline = None if time_budget is None else t_start + time_budget
    history = []
    accepted = 0
    it = 0
    reason = "budget"
    while it < budget:
        if deadline is not None and time.perf_counter() >= deadline:
            reason = "time"
            break
        if stall_limit is not None and it - best_it >= stall_limit:
            reason = "patience"
            break
        it += 1
        cand = propose(cur, rng)
        s = float(score(cand))
        if math.isnan(s):
            s = math.inf
        if s <= cur_s:
            ok = True
        elif s == math.inf:
            ok = False
        elif cur_s == math.inf:
            ok = True
        else:
            ok = rng.random() < math.exp(-beta * (s - cur_s))
        if ok:
            cur, cur_s = cand, s
            accepted += 1
            if on_accept is not None:
                on_accept(cand)
            if s < best_s:
                best, best_s, best_it = cand, s, it
                best_elapsed = time.perf_counter() - t_start
        elif on_reject is not None:
            on_reject(cand)
        if record:
            history.append(best_s)
    return MinimizeResult(best, best_s, cur, cur_s, it, accepted, best_it, reason, history,
                          time.perf_counter() - t_start, best_elapsed)
