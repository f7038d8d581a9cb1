"""Frontier Tracking (TensorOpt Alg. 2): :func:`track` and its result :class:`TrackedFrontier`.

Guarantees
----------
* ``exact=True``: no heuristic elimination; the result is exactly the Pareto frontier of
  all strategies (one point per distinct (memory, time) pair), for both methods.
* ``exact=False``: heuristic elimination (Eq. 7) is used only where branch elimination
  would give a node more than ``max_merged_configs`` configs, or where eliminating or
  folding a node would take more than ``max_step_work`` estimated pair sums (such a node
  first keeps only its best configs, as many as fit, and is fixed only where fewer than a
  tenth would); the result is then a subset of achievable strategies that may miss parts of
  the true frontier. By default
  (``anchors="auto"``) the exact fastest and smallest strategies (:func:`min_sum`) are
  added to any result that may be approximate, so both ends of the frontier are exact.
* Every returned point is achievable: ``evaluate(cg, fr.choices, fr.edge_choices)``
  gives back ``fr.memory`` and ``fr.time`` (up to float rounding of the summation order).
* ``epsilon > 0`` (epsilon-Pareto thinning). Every reduce that unions several candidate
  lists, the product such a reduce stages first when its terms multiply more than two
  multi-point cells, and the product of the run's separate components at its end (paired
  level by level), is a *thinning step*: it keeps, of its exact frontier, a subset such that each dropped
  point (m, t) has a kept point (m', t') with ``t' < t`` and ``m' <= (1 + epsilon) m``.
  Because costs are non-negative, products and unions preserve such covers and reduce
  keeps them, so by induction: **for every point (m, t) of the frontier the same run
  would compute with epsilon = 0, the result has a point (m', t') with t' <= t and
  m' <= (1 + epsilon)^L * m**, where ``L = fr.epsilon_depth`` is the largest number of
  thinning steps along any derivation (reported per run). For FT-LDP on a chain of n
  nodes, L = n with dense edges and L <= 2n - 1 with layout edges (one thinning to merge
  the configs of a layout class, one per layout pair, one final union); in general L is
  at most the number of union-reduces and staged products performed, plus
  ``ceil(log2(components))`` for the final products. With ``exact=True`` the reference is the
  exact frontier of all strategies; with heuristic steps it is the frontier of the
  strategies that agree with the heuristic decisions of that run (the configs fixed, the
  configs kept). Returned points stay
  exactly achievable (thinning only drops points), and the minimum-time and the
  minimum-memory points of the reference are always kept (every thinning step keeps both
  ends of each cell). The measured loss is far below the bound (see
  ``benchmarks/bench_engine.py``).
* ``epsilon="auto"`` (the default unless ``exact=True``): epsilon is 0 until a combine
  outputs a cell of more than ``AUTO_EPSILON_CELL_POINTS`` points, and ``AUTO_EPSILON`` from
  the next combine on; the guarantee above holds with that epsilon, since L counts only the
  thinning steps that used it (``fr.epsilon`` is 0 when it never turned on). On a graph
  that repeats its layers (``AUTO_REPEATS`` edges or more per distinct edge cost array),
  when the exact steps alone would pass ``AUTO_EXACT_TERMS`` product terms, the run starts over
  with ``AUTO_EPSILON`` from its first step: the repeated layers are then all tracked
  alike, so each distinct one is computed once (a switch after the first layer would have
  its exact version and its thinned version both computed).
"""

from __future__ import annotations

import os
import sys
import threading
import time as _time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitTimeout
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from ..errors import InfeasibleError, InvalidInputError, MemoryLimitError
from ..units import parse_count, parse_positive
from ..elimination.kernels import check_epsilon, resolve_threads
from ..elimination.table import ExactBudgetSpent
from .algebra import frontier_indices
from .cost_graph import CostGraph, evaluate
from .result import TrackedFrontier

__all__ = ["TrackedFrontier", "track", "parse_epsilon", "DEFAULT_MAX_MERGED_CONFIGS", "DEFAULT_MAX_STEP_WORK",
           "AUTO_EPSILON", "AUTO_EPSILON_CELL_POINTS", "AUTO_EXACT_TERMS", "AUTO_REPEATS", "METHODS",
           "HEURISTIC_CHOICES"]

DEFAULT_MAX_MERGED_CONFIGS = 1024
DEFAULT_MAX_STEP_WORK = 1e9
"""With ``exact=False``, the most estimated pair sums one node elimination or fold may take
(see :func:`track`): a second or two of work. Above every step of the benchmarks' BERT,
GPT-2, VGG16 and Transformer@8; a few steps of the Transformer@16, Llama and Mixtral pass it
by up to 3.6x and keep at least a quarter of their configs; WideResNet's block steps (7 to
20 s each under a cap of 1e10) keep a tenth to three quarters, and most of the zoo RNN's
grid steps, up to 1400x over, fix their config."""
AUTO_EPSILON = 1e-3
"""The epsilon that ``epsilon="auto"`` turns on (see :func:`track`)."""
AUTO_EPSILON_CELL_POINTS = 1024
"""``epsilon="auto"`` thins once an intermediate frontier cell holds more points than this."""
AUTO_EXACT_TERMS = 30_000_000
"""``epsilon="auto"`` starts over, thinned from the start, once its exact steps pass this
many product terms (a few seconds of work), on graphs that repeat their layers."""
AUTO_REPEATS = 3.0
"""Edges per distinct edge cost array from which a graph counts as repeating its layers."""
_MAX_DEGRADED_EPSILON = 0.1
METHODS = ("ldp", "elimination")
HEURISTIC_CHOICES = ("auto", "min_memory", "weighted")


def parse_epsilon(epsilon):
    """``epsilon`` of :func:`track` checked: ``"auto"`` or a finite float >= 0.

    Parameters
    ----------
    epsilon : float or "auto"
        The value to check.

    Returns
    -------
    float or "auto"

    Raises
    ------
    InvalidInputError
        For anything else (a negative or non-finite number, another string).

    Examples
    --------
    >>> parse_epsilon("auto"), parse_epsilon(1e-3), parse_epsilon(0)
    ('auto', 0.001, 0.0)
    """
    if isinstance(epsilon, str):
        if epsilon == "auto":
            return "auto"
        try:
            epsilon = float(epsilon)
        except ValueError:
            raise InvalidInputError(f"epsilon must be 'auto' or a finite float >= 0, got {epsilon!r}") from None
    return check_epsilon(epsilon)


def _validate(cg, method, exact, epsilon, threads, max_merged_configs, heuristic):
    if not isinstance(cg, CostGraph):
        raise InvalidInputError(f"cg must be a CostGraph, got {type(cg).__name__}")
    if method not in METHODS:
        raise InvalidInputError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(exact, (bool, np.bool_)):
        raise InvalidInputError(f"exact must be a bool, got {exact!r}")
    eps = parse_epsilon(epsilon)
    threads = resolve_threads(threads)
    parse_count(max_merged_configs, "max_merged_configs")
    if heuristic not in HEURISTIC_CHOICES:
        raise InvalidInputError(f"heuristic must be one of {HEURISTIC_CHOICES}, got {heuristic!r}")
    return eps, threads


def default_max_memory():
    """60% of the memory available now (``MemAvailable`` on Linux; 8 GiB if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * 0.6)
    except OSError:  # pragma: no cover - not Linux
        pass
    return 8 << 30  # pragma: no cover


def leaf_bytes(cg):
    """Bytes the leaf tables of ``cg`` need (one point per node config and per edge
    layout pair and option, with offsets; edges sharing a cost array share their leaf):
    the floor of any run's memory."""
    from ..elimination.table import table_key

    total = 0
    for c in cg.node_costs:
        total += 24 * c.shape[0]
    seen = set()
    for _, _, _, _, tab in cg._norm:
        key = table_key(tab)
        if key in seen:
            continue
        seen.add(key)
        A, B, R, _ = tab.shape
        total += A * B * (16 * R + 8 + (2 * R if R > 1 else 1))
    return int(total)


def edges_per_table(cg):
    """Edges of ``cg`` per distinct edge cost array (1.0: no two edges share one; a model
    whose layers repeat shares their tables)."""
    from ..elimination.table import table_key

    if cg.n_edges == 0:
        return 1.0
    return cg.n_edges / len({table_key(tab) for _, _, _, _, tab in cg._norm})


def build_working_graph(cg, epsilon=0.0, threads=1, max_bytes=None, switch=None):
    """The working graph of ``cg`` (leaf tables for every node and edge; parallel edges
    already merged by edge elimination). ``switch``: see :class:`~tensoropt_py.elimination.table.Context`.
    Internal; used by :func:`track` and the tests."""
    from ..elimination.table import Context
    from ..elimination.working_graph import WEdge, WGraph

    ctx = Context(epsilon, threads, max_bytes, switch)
    g = WGraph(ctx)
    for i, c in enumerate(cg.node_costs):
        K = c.shape[0]
        g.add_node(i, K, [(ctx.node_leaf(i, c), np.arange(K))])
    for e, (u, v, smap, dmap, tab) in enumerate(cg._norm):
        leaf = ctx.edge_leaf(e, tab)
        g.add_edge(WEdge(u, v, smap, dmap, leaf, tab.shape[1]))
    return g


def finish(g, n_nodes, n_edges):
    """Product of the detached frontiers of ``g`` (all nodes gone) and unroll.

    Returns ``(final_table, choices, edge_choices)``."""
    from .unroll import unroll

    assert not g.nodes, "internal error: nodes left after tracking"
    # a product of two frontiers of p and q points may keep up to p * q of them: it thins like
    # any other reduce (when the run thins), and the products pair up level by level, so a
    # point passes log2(components) of these thinning steps, not one per component
    level = list(g.detached)
    while len(level) > 1:
        pairs = [g.ctx.combine([a, b], np.array([0, 1]), np.array([[0, 0]]), thin=True)
                 for a, b in zip(level[0::2], level[1::2])]
        level = pairs + level[len(pairs) * 2:]
    final = level[0]
    choices, edge_choices = unroll(g.ctx, final, n_nodes, n_edges)
    if choices.size and choices.min() < 0:  # pragma: no cover - would be an engine bug
        raise RuntimeError("internal error: unroll did not reach every node")
    return final, choices, edge_choices


class _Progress:
    """Rate-limited progress reports of a tracking run (see ``track(progress=...)``)."""

    def __init__(self, callback, n_nodes, every=0.5):
        self.callback = callback
        self.n = max(n_nodes, 1)
        self.every = every
        self.t0 = _time.perf_counter()
        self.last = -1e9
        self.run = 1

    def report(self, stage, left, points, force=False):
        now = _time.perf_counter()
        if not force and now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.t0
        done = self.n - left
        est = elapsed * left / done if done > 0 and stage == "eliminate" else None
        self.callback(dict(stage=stage, run=self.run, nodes_left=int(left), nodes=self.n,
                           points=int(points), elapsed_s=elapsed, estimate_left_s=est))


def _run(cg, method, exact, eps, threads, max_merged_configs, heuristic, fork=False, max_bytes=None, progress=None,
         switch=None, max_step_work=float("inf"), on_heuristic=None, on_first=None):
    """One tracking run. With ``fork`` (``heuristic="auto"``), the state just before the
    first heuristic elimination is snapshotted; the snapshot is then resumed with the
    ``"weighted"`` heuristic (the run itself uses ``heuristic``), which gives exactly what
    a second full run would, without redoing the shared prefix. ``switch``: turn epsilon
    on mid-run (see :class:`~tensoropt_py.elimination.table.Context`). Returns a list of one
    or two results ``(mem, time, choices, edge_choices, depth, stats)``; ``stats["epsilon"]``
    is the epsilon in force at the end. A :class:`MemoryLimitError` carries that epsilon too
    (``exc.epsilon``). ``on_heuristic(ctx)``: called once, before the first heuristic
    elimination; ``on_first(mem)``: called with the first run's memories when a second run
    follows."""
    g = None
    try:
        g = build_working_graph(cg, eps, threads, max_bytes, switch)
        return _simplify_and_finish(cg, g, method, exact, max_merged_configs, heuristic, fork, progress,
                                    max_step_work, on_heuristic, on_first)
    except MemoryLimitError as exc:
        exc.epsilon = eps if g is None else g.ctx.epsilon
        raise


def _simplify_and_finish(cg, g, method, exact, max_merged_configs, heuristic, fork, progress, max_step_work,
                         on_heuristic=None, on_first=None):
    from ..elimination.driver import simplify

    ctx = g.ctx
    snap = []

    def heuristic_hook(gg, marker):
        if on_heuristic is not None:
            on_heuristic(ctx)
        if fork:
            fork_hook(gg, marker)

    def fork_hook(gg, marker):
        h = gg.snapshot()
        for tab in ctx.tables:
            tab.pinned = True
        snap.append((h, marker.copy(h) if marker is not None else None))

    step = None
    if progress is not None:
        def step(gg):
            progress.report("eliminate", len(gg.nodes), ctx.stats["points"])

    chains = simplify(g, method, exact, max_merged_configs, heuristic, cg.topological_order,
                      on_heuristic=heuristic_hook if fork or on_heuristic is not None else None, on_step=step,
                      max_step_work=max_step_work)
    if progress is not None:
        progress.report("finish", len(g.nodes), ctx.stats["points"], force=True)
    cap = np.inf if exact else max_step_work
    results = [_finish_run(cg, g, chains, heuristic, cap)]
    if snap:
        if on_first is not None:
            on_first(results[0][0])
        h, marker = snap[0]
        for tab in ctx.tables:
            tab.pinned = False
        if progress is not None:
            progress.run = 2
            progress.report("resume with the weighted heuristic", len(h.nodes), ctx.stats["points"], force=True)
        chains = simplify(h, method, exact, max_merged_configs, "weighted", cg.topological_order, marker=marker,
                          on_step=step, max_step_work=max_step_work)
        results.append(_finish_run(cg, h, chains, "weighted", cap))
    return results


def _finish_run(cg, g, chains, heuristic, max_step_work):
    from .ldp import ldp

    ctx = g.ctx
    n_ldp = 0
    for chain in chains:
        ldp(g, chain, heuristic, max_step_work)
        n_ldp += len(chain) - 1
    # product of the finished components (and of heuristic leftovers), then unroll
    final, choices, edge_choices = finish(g, cg.n_nodes, cg.n_edges)
    stats = dict(g.stats)
    stats.update(ctx.stats)
    stats["ldp_steps"] = n_ldp
    stats["chains"] = len(chains)
    stats["stored_points"] = int(sum(t.n_points for t in ctx.tables))
    stats["peak_table_bytes"] = int(ctx.peak_bytes)
    stats["epsilon"] = ctx.epsilon
    mem, tim = final.mem.copy(), final.time.copy()
    for tab in (final, *g.detached):  # unrolled: what only they reach may be collected (not a snapshot's)
        tab.release()
    ok = np.isfinite(mem) & np.isfinite(tim)  # forbidden costs are +inf: never returned
    if not ok.all():
        mem, tim, choices, edge_choices = mem[ok], tim[ok], choices[ok], edge_choices[ok]
    return mem, tim, choices, edge_choices, final.depth, stats


def _union(mem, tim, ch, ech, mem2, tim2, ch2, ech2):
    """Reduced union of two frontiers with their strategies; also the kept indices."""
    mem_all = np.concatenate([mem, mem2])
    tim_all = np.concatenate([tim, tim2])
    keep = frontier_indices(mem_all, tim_all)
    return mem_all[keep], tim_all[keep], np.concatenate([ch, ch2])[keep], np.concatenate([ech, ech2])[keep], keep


_SCREEN_TOL = 1e-9  # relaxation bounds and evaluated costs are summed in different orders
_OPTIMUM_MAX_WORK = 2e9  # terms one exact optimum may sum (min_sum's max_work: a few seconds)
_TIE_MAX_WORK = 5e7  # terms the smallest of the fastest, (time, memory) in order, may sum (a quarter second)


def _entries(max_bytes):
    """Largest factor (entries) an exact optimum may build within ``max_bytes``: a few
    factors of that many float64 may be alive at once."""
    from .scalar import MAX_FACTOR_ENTRIES

    return max(1, min(MAX_FACTOR_ENTRIES, max_bytes // 64))


def _bounds_row(rb, lam):
    """The row of relaxation bounds ``rb`` for ``lam`` (one of ``rb.lams``; inf: memory, the last)."""
    return -1 if np.isinf(lam) else [float(x) for x in rb.lams].index(float(lam))


@dataclass(frozen=True, slots=True)
class _Refusal:
    """Why an exact optimum was not solved: :func:`min_sum`'s message, the least ``max_entries``
    that would have let its refused step pass (inf: refused for its work, whatever the entries),
    and the screening limit of the graph it refused (inf: the whole graph)."""

    message: str
    entries: float
    limit: float

    def __str__(self):
        return self.message


class _Optimum(NamedTuple):
    """A strategy of :func:`_screened_optimum`. ``ties``: for lam 0, why its memory is not
    proven the least of the fastest strategies' (None where it is)."""

    choices: np.ndarray
    edge_choices: np.ndarray
    ties: str | None = None


def _screened_optimum(cg, rb, lam, limit, entries, plan_entries=None):
    """The exact optimum of ``time + lam * memory`` (``lam`` 0: least time, and of the strategies
    that tie for it the least memory, :func:`~.scalar._smallest_of_fastest`, or where that was
    not solved a fastest strategy and why in ``ties``; inf: least memory, then time), an
    :class:`_Optimum`, or :func:`min_sum`'s refusal (a :class:`_Refusal`). With bounds
    ``rb`` and a finite ``limit`` (the weighted cost of an achievable strategy for that lam,
    memory for inf), it is solved on the configs whose relaxation bound allows a strategy at
    least that good: a config outside is in no optimal strategy (nor in a tie of one), so the
    optimum is the whole graph's, found on a far smaller graph. ``plan_entries`` (>= ``entries``,
    None: ``entries``): the refusal says whether that many entries would let it through."""
    from .scalar import _min_sum_within, _smallest_of_fastest, _TooWide
    from .screen import restrict

    def screened(limit):
        if rb is None or not np.isfinite(limit):
            return cg, None
        row = _bounds_row(rb, lam)
        keep = [np.flatnonzero(b[row] <= limit * (1 + _SCREEN_TOL)) for b in rb.bounds]
        if min(k.size for k in keep) == 0:  # only if the limit was not achievable: no screening
            return cg, None
        return restrict(cg, keep), keep

    def strategy(opt, keep, ties=None):
        ch = opt.choices if keep is None else np.array([k[c] for k, c in zip(keep, opt.choices)], dtype=np.int64)
        return _Optimum(ch, opt.edge_choices, ties)

    graph, keep = screened(limit)
    try:
        # a tie of least time is solved on the same steps where they sum at most _TIE_MAX_WORK terms
        opt, tied, work = _min_sum_within(graph, lam, entries, entries if plan_entries is None else plan_entries,
                                          _OPTIMUM_MAX_WORK, tie_work=_TIE_MAX_WORK)
    except _TooWide as exc:  # too wide (or too much work) for exact variable elimination
        return _Refusal(f"lam={lam:g}: {exc}", exc.entries, limit if keep is not None else np.inf)
    if not tied or opt.memory == 0:
        return strategy(opt, keep)
    # the smallest of the fastest strategies, on the configs that the least time leaves
    # possible (the Transformer@16's fastest: half the terms)
    graph, keep_tied = screened(opt.time)
    unsolved = "the fastest strategies tie; the least memory among them was not solved: "
    try:
        smallest = _smallest_of_fastest(graph, opt, entries, _TIE_MAX_WORK, _OPTIMUM_MAX_WORK)
    except _TooWide as exc:  # a fastest strategy all the same
        return strategy(opt, keep, unsolved + str(exc))
    if smallest is None:
        return strategy(opt, keep, unsolved + "a slower strategy of less memory won the weighted solve")
    return strategy(smallest, keep_tied)


def _optima(cg, lams, max_bytes, mem=None, tim=None, threads=1, background=None):
    """The exact optima of ``time + lam * memory`` (:func:`min_sum`) for the ``lam`` of
    ``lams`` whose graph is narrow enough for it (and costs at most ``_OPTIMUM_MAX_WORK``
    terms), as ``(choices, edge_choices, skipped, bounds)``: arrays with one row per such lam
    (None when there is none), the others as ``(lam, refusal message)`` pairs, and the
    relaxation bounds used to screen (None without points, or when they did not fit).

    Given achievable points ``(mem, tim)``, each is solved on the configs whose relaxation
    bound (:func:`~.screen.relaxation_bounds`) allows a strategy at least as good for its lam
    as the best of those points (:func:`_screened_optimum`). A few factors of
    ``max_entries`` float64 may be alive at once per solve: up to ``threads`` solves run at
    once where ``max_bytes`` holds that many (their large NumPy reductions overlap).
    ``background``: a :class:`_BackgroundOptima` whose bounds and optima are taken where it
    has them; what it may still hold (``held_bytes``: a thread given up) is not ``max_bytes``'s."""
    from .screen import relaxation_bounds

    finite = sorted({0.0, *(float(lam) for lam in lams if np.isfinite(lam))})

    def room():  # less what a thread given up may still hold
        return max_bytes - (0 if background is None else background.held_bytes)

    rb = None if background is None else background.bounds()
    entries = _entries(room())
    if rb is not None and rb.lams.tolist() != finite:
        rb = None
    if rb is None and mem is not None and mem.size:
        try:
            rb = relaxation_bounds(cg, finite, max_bytes=room())
        except MemoryLimitError:  # edges too large for the bounds: solve the whole graph
            rb = None

    def solve(lam):
        """``(choices, edge_choices)`` of the optimum for ``lam``, or the refusal."""
        done = None if background is None else background.optimum(lam)
        if done is not None:
            return done
        entries = _entries(room())  # it may have been given up while this waited
        limit = np.inf
        if mem is not None and mem.size:
            limit = mem.min() if np.isinf(lam) else (tim + lam * mem).min()
        refused = None if background is None or rb is not background.bounds() else background.refusal(lam)
        if refused is not None and refused.limit <= limit:
            # its graph, screened by the same bounds, holds every optimal strategy and is within
            # this one: solved here with more room, or refused again at the same step
            if refused.entries > entries:
                return refused
            limit = refused.limit
        return _screened_optimum(cg, rb, lam, limit, entries)

    workers = min(len(lams), threads, max(1, room() // (64 * entries)))
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            solved = list(pool.map(solve, lams))
    else:
        solved = [solve(lam) for lam in lams]
    chs = [r.choices for r in solved if not isinstance(r, _Refusal)]
    echs = [r.edge_choices for r in solved if not isinstance(r, _Refusal)]
    skipped = [(lam, str(r)) for lam, r in zip(lams, solved) if isinstance(r, _Refusal)]
    ties = "; ".join(r.ties for r in solved if not isinstance(r, _Refusal) and r.ties)
    if not chs:
        return None, None, skipped, rb, ties
    return np.stack(chs), np.stack(echs).reshape(len(chs), cg.n_edges), skipped, rb, ties


_BACKGROUND_SHARE = 8
"""The anchors solved beside a run (:class:`_BackgroundOptima`) hold at most this fraction of
``max_memory``; the run's tables get the rest."""
_BACKGROUND_ANCHORS = True  # False: the anchors are always solved after the run (benchmarks compare)


_ANCHORS_STARVED_SHARE = 0.25
"""While the run waits for an answer of its anchors beside it (a process's or a thread's), a
child or thread that gets less than this share of a core over a check
(``_ANCHORS_CHECK_SECONDS``; Linux, from ``/proc``) is given up, and the run solves the
anchors itself: at the least priority, other programs' work can starve the anchors once the
run has ended, where the run's own solve takes its turn with them (two CPU-bound programs on 2
cores held a Transformer@4 ``track`` with its anchors on a thread for 45.1 and 46.5 s
waiting for them, 2.6 and 4.6 s giving it up, 1.15 and 0.93 s without anchors,
``benchmarks/bench_scale.py --cases anchors_starved``)."""
_ANCHORS_CHECK_SECONDS = 0.5


def _starved(used, now):
    """Why anchors beside the run that used ``used`` then ``now`` CPU seconds over a check
    (``_ANCHORS_CHECK_SECONDS``) are given up, or None: not starved (``_ANCHORS_STARVED_SHARE``),
    or unknown (either None)."""
    if used is None or now is None or now - used >= _ANCHORS_STARVED_SHARE * _ANCHORS_CHECK_SECONDS:
        return None
    return f"no answer: starved, {now - used:.2f} s of CPU in {_ANCHORS_CHECK_SECONDS:g} s"


def _behind_the_run():
    """Lower the calling thread (an anchors' thread) to the least CPU priority, where priorities
    are per thread (Linux): it then runs on what the run leaves idle, its serial steps, instead
    of taking turns with its kernels; the run waits for it at its end, when it runs alone."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:  # a sandbox that forbids it: the same results, the anchors merely take turns
            pass


class _BackgroundOptima:
    """The anchors of :func:`track` (the exact fastest and smallest strategies) solved on a
    thread of their own while the run tracks the frontier, once the run is known to need them:
    in an anchors' process (:class:`_AnchorsProcess`), or in the run's own where
    ``_ANCHORS_IN_PROCESS`` says so.

    The fastest is screened (:func:`_screened_optimum`) by the time of the relaxation's own
    best strategy (each node at the config of least bound, each edge at its best option), which
    needs no frontier; the smallest by the least memory of the first heuristic run's frontier,
    once :meth:`smallest_below` hands it over. Everything here holds at most ``budget`` bytes
    (bounds and factors; a step that would need more is left to the foreground, which has
    the whole of ``max_memory`` once the run's tables are gone). Both screenings keep every
    optimal strategy, so these are the whole graph's optima (the foreground's may be other
    strategies of the same costs). An end refused here keeps its refusal (:meth:`refusal`),
    and the lower bound of windows solved exactly that the descents of an end out of reach
    may need (:func:`_raise_bound`) is computed next, where the budget holds its factors.

    ``watch``: wait for an answer in checks, and give the thread up where it is starved
    (``_ANCHORS_STARVED_SHARE``; Linux): what it has not answered, the run solves after it
    (``ended`` says why). False in an anchors' process, whose parent watches it whole."""

    def __init__(self, cg, budget, threads, entries_after, watch=True):
        self.cg = cg
        self.budget = int(budget)
        self.entries_after = entries_after  # what a solve after the run may hold (its max_entries)
        self._durations = []  # of the jobs that ran (appended from the pool's threads)
        self.used = []  # what was taken from here: "fastest", "smallest", "fastest_bound", "smallest_bound"
        self._refusals = {}  # lam -> _Refusal of its end
        self._window_bounds = {}  # lam -> the job computing window_bound(cg, lam)
        self._stop = False
        self.ended = None  # why the thread was given up, before close()
        self._watch = watch and sys.platform.startswith("linux")
        self._workers = []  # the native ids of the pool's threads, as they start
        self._pool = ThreadPoolExecutor(1 if threads < 4 else 2, thread_name_prefix="tensoropt-anchors",
                                        initializer=self._started)
        self._bounds = self._pool.submit(self._timed, self._relaxation)
        self._solved = {0.0: self._pool.submit(self._timed, self._fastest)}

    @property
    def seconds(self):
        """Seconds its jobs took, summed."""
        return float(sum(self._durations))

    @property
    def held_bytes(self):
        """What it may still hold that the run does not know of: its whole share once given up
        (its job running ends by itself, at its next step)."""
        return self.budget if self.ended else 0

    def _started(self):
        self._workers.append(threading.get_native_id())
        _behind_the_run()

    def _threads_cpu(self):
        """CPU seconds its threads have used, together (None where ``/proc`` does not say)."""
        used = [_cpu_seconds(os.getpid(), tid) for tid in list(self._workers)]
        return None if None in used else sum(used)

    def _result(self, job, gone=None):
        """``job.result()``; ``gone`` where the job was dropped, or where it has not ended and
        the thread is given up, before or while waiting for it (watched: starved)."""
        while True:
            if self.ended and not job.done():
                return gone
            watched = self._watch and not job.done()
            used = self._threads_cpu() if watched else None
            try:
                return job.result(timeout=_ANCHORS_CHECK_SECONDS if watched else None)
            except CancelledError:  # dropped by close(), or once the thread was given up
                return gone
            except WaitTimeout:
                pass
            why = _starved(used, self._threads_cpu())
            if why is not None:
                self.ended = f"the anchors' thread was given up ({why}); the anchors were solved after the run"
                self._stop = True  # its job running ends at its next step
                self._pool.shutdown(wait=False, cancel_futures=True)

    def _timed(self, job, *args):
        if self._stop:
            return None
        t0 = _time.perf_counter()
        try:
            return job(*args)
        finally:
            self._durations.append(_time.perf_counter() - t0)

    def _relaxation(self):
        from .screen import relaxation_bounds

        try:
            return relaxation_bounds(self.cg, [0.0], max_bytes=self.budget)
        except MemoryLimitError:
            return None

    def _fastest(self):
        rb = self._bounds.result()
        if rb is None:
            return None
        choices, edge_choices = _relaxation_strategies(self.cg, rb, [0.0])
        return self._solve(rb, 0.0, float(evaluate(self.cg, choices, edge_choices)[1][0]))

    def _smallest(self, limit):
        rb = self._bounds.result()
        return None if rb is None else self._solve(rb, np.inf, limit)

    def _solve(self, rb, lam, limit):
        if self._stop or not np.isfinite(limit):
            return None
        try:
            solved = _screened_optimum(self.cg, rb, lam, limit, _entries(self.budget),
                                       max(_entries(self.budget), self.entries_after))
        except InfeasibleError:  # the foreground reports it
            return None
        if isinstance(solved, _Refusal):
            from .screen import _WINDOW_BOUND_ENTRIES

            self._refusals[float(lam)] = solved
            if _entries(self.budget) >= _WINDOW_BOUND_ENTRIES:  # its windows' factors fit the share
                self._window_bounds[float(lam)] = self._pool.submit(self._timed, self._window_bound, lam)
            return None
        return solved

    def _window_bound(self, lam):
        from .screen import window_bound

        return window_bound(self.cg, lam)

    def smallest_below(self, mem):
        """Start solving the smallest strategy, screened by the least of achievable memories ``mem``."""
        if np.inf not in self._solved and mem.size:
            self._solved[np.inf] = self._pool.submit(self._timed, self._smallest, float(mem.min()))

    def bounds(self):
        """The relaxation bounds (lam 0 and memory), or None where they did not fit."""
        return self._result(self._bounds)

    def optimum(self, lam):
        """``(choices, edge_choices)`` of the optimum for ``lam`` (0 or inf) once solved here,
        else None."""
        job = self._solved.get(float(lam))
        solved = None if job is None else self._result(job)
        if solved is not None:
            self.used.append("smallest" if np.isinf(lam) else "fastest")
        return solved

    def refusal(self, lam):
        """The :class:`_Refusal` of the optimum for ``lam`` where it was refused here, else None."""
        job = self._solved.get(float(lam))
        if job is not None:
            self._result(job)
        return self._refusals.get(float(lam))

    def window_bound(self, lam):
        """``(True, window_bound(cg, lam))`` where it was computed here (``lam``'s optimum
        refused), else ``(False, None)``."""
        job = self._window_bounds.get(float(lam))
        gone = object()
        value = gone if job is None else self._result(job, gone)
        if value is gone:  # none, dropped by close(), or the thread given up
            return False, None
        self.used.append("smallest_bound" if np.isinf(lam) else "fastest_bound")
        return True, value

    def close(self, wait=False):
        """Drop what has not started; ``wait``: until the job running has ended (else it ends
        by itself, the next step it would take skipped)."""
        self._stop = True
        self._pool.shutdown(wait=wait, cancel_futures=True)


_ANCHORS_IN_PROCESS = True  # False: the anchors solved beside a run are on a thread (tests that patch their steps)
_PROCESS_BASE_BYTES = 128 << 20
"""What an anchors' process holds before its budget: an interpreter with NumPy and the engine
imported (about 40 MiB measured), with room."""
_PROCESS_GREETING = b"tensoropt-anchors\n"
"""What an anchors' process writes first, once it has the graph and its jobs have started:
until then it has solved nothing, and a program that is not the Python it should be (an
embedding application's ``sys.executable``) never writes it."""
_PROCESS_MIN_LEAF_BYTES = 48 << 10
"""Graphs whose leaf tables (:func:`leaf_bytes`) are smaller solve their anchors after the run:
they track in less time than an interpreter takes to start (about 0.4 s), and a process not
solving yet when the run ends is ended anyway. Above it, a process costs little where the run
is short (it is ended then) and gains where it is not. Medians of three
(``benchmarks/bench_scale.py --cases anchors_small``, 2 threads), in a process / after the
run: the zoo Transformer on 2 devices (57 KB) 1.18 / 1.24 s, on 4 (476 KB) 1.46 / 1.62 s;
BERT-large on 2 (72 KB) 1.43 / 1.62 s, on 4 (524 KB) 1.04 / 1.50 s; GPT-2 on 2 (40 KB)
0.73 / 0.73 s, on 4 (338 KB) 0.71 / 0.74 s; VGG-16 on 4 (783 KB, a run of 0.06 s) 0.18 /
0.17 s."""


class _ChildGone(Exception):
    """An anchors' process that cannot be asked any more (it ended, or its pipe broke)."""


def _send(stream, obj):
    """Write ``obj`` to a binary ``stream`` (buffered or raw) as a pickle with its length first."""
    import pickle

    data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    for part in (len(data).to_bytes(8, "little"), data):
        view = memoryview(part)
        while view:  # a raw pipe may take part of it
            view = view[stream.write(view):]
    stream.flush()


def _read_exactly(stream, size):
    """``size`` bytes of a binary ``stream`` (buffered or raw); raises :class:`_ChildGone` at its end."""
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            raise _ChildGone("the pipe ended")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _receive(stream):
    """The next object :func:`_send` wrote to ``stream``; raises :class:`_ChildGone` at its end."""
    import pickle

    return pickle.loads(_read_exactly(stream, int.from_bytes(_read_exactly(stream, 8), "little")))


def _cpu_seconds(pid, tid=None):
    """CPU seconds the process ``pid`` has used, its threads together, or its thread of native
    id ``tid`` alone (None where ``/proc`` does not say: not Linux, or ended)."""
    try:
        with open(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _serve_anchors():
    """The anchors' process of :class:`_AnchorsProcess`: on stdin the graph (a pickle), then
    ``(budget, threads, entries_after)`` for its :class:`_BackgroundOptima`, then calls
    ``(reply, name, args)`` of its methods (``args`` None: an attribute), each answered on
    stdout where ``reply`` is true, as ``(ok, value or exception, seconds, used)``. It ends at
    the end of stdin, whatever job is running."""
    import pickle

    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers on the pipe
    try:
        os.nice(19)  # runs on what the run leaves idle
    except (AttributeError, OSError):  # not POSIX, or forbidden: the same results
        pass
    try:
        cg = _receive(requests)
        beside = _BackgroundOptima(cg, *_receive(requests), watch=False)
        answers.write(_PROCESS_GREETING)
        answers.flush()
        while True:
            reply, name, args = _receive(requests)
            try:
                value = getattr(beside, name)
                ok, value = True, value if args is None else value(*args)
            except Exception as exc:  # the parent raises it, as a thread's job would
                ok, value = False, exc
            if reply:
                try:
                    answer = pickle.dumps((ok, value, beside.seconds, tuple(beside.used)),
                                          protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as exc:  # an exception that does not pickle
                    answer = (False, RuntimeError(f"{value!r} ({exc})"), beside.seconds, tuple(beside.used))
                _send(answers, answer)
    except (_ChildGone, OSError):  # the parent closed it, or is gone
        pass
    finally:
        os._exit(0)  # the pool's job running, if any, is dropped


class _AnchorsProcess:
    """A :class:`_BackgroundOptima` in a process of its own, behind the same methods.

    The anchors' jobs run Python between their kernels; on a thread they hold the lock the
    run needs between its own (the Transformer@16's default ``track``, medians of four: 8.2 s
    with them on a thread, 7.1 s without, 7.4 s in a process, ``benchmarks/bench_scale.py
    --cases transformer16_anchors_process``). A child process has a lock of its own and runs
    at the least CPU priority, on what the run leaves idle. It is started by
    :mod:`subprocess` (multiprocessing's spawn would run an unguarded ``__main__`` of the
    user's again), sent the graph as a pickle on its stdin, and asked over pipes
    (:func:`_serve_anchors`), one call at a time. A child that has not written
    ``_PROCESS_GREETING`` when first asked (once the run has ended) has solved nothing: it is
    ended, and the run solves the anchors at once instead of waiting for an interpreter to
    start. So is one starved while a call waits for its answer (``_ANCHORS_STARVED_SHARE``).
    ``budget`` (the share of ``max_memory`` held for it) covers the interpreter
    (``_PROCESS_BASE_BYTES``), the graph's pickle on both sides and the child's copy of the
    graph; the rest is the child's budget. Raises :class:`_ChildGone` where that rest is under
    half the share, or where no process starts: the anchors are then solved after the run.
    What a child that cannot be asked any more has not answered, the run solves after it."""

    def __init__(self, cg, budget, threads, entries_after):
        import pickle
        import queue
        import subprocess

        self.budget = int(budget)
        graph = pickle.dumps(cg, protocol=pickle.HIGHEST_PROTOCOL)
        own = self.budget - _PROCESS_BASE_BYTES - 3 * len(graph)
        if own < self.budget // 2 or not sys.executable:
            raise _ChildGone(f"{own} bytes would be left of {self.budget}")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        code = (f"import sys; sys.path.insert(0, {root!r}); import importlib; "
                "importlib.import_module('tensoropt_py.engine.track')._serve_anchors()")
        try:
            # unbuffered: waiting for an answer watches the pipe itself (no bytes held in a buffer)
            self._child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        except OSError as exc:
            raise _ChildGone(str(exc)) from exc
        self._seconds, self._used = 0.0, ()
        self._bounds = self._unasked = object()
        self._gone = False
        self.ended = None  # why the child could not be asked any more, before close()
        self._lock = threading.Lock()  # one call at a time: answers come in order
        # a thread of its own writes to the child: the graph takes the child's start to be read
        self._outbox = queue.SimpleQueue()
        for message in (graph, (own, threads, entries_after)):
            self._outbox.put(message)
        threading.Thread(target=self._write, name="tensoropt-anchors-pipe", daemon=True).start()
        self._greeted = False

    def _wait_for_answer(self):
        """Return once the child has written something; raises :class:`_ChildGone` where it is
        starved first (``_ANCHORS_STARVED_SHARE``). Where the pipe cannot be watched (not
        POSIX), it returns at once, and the read waits."""
        import select

        if os.name != "posix":
            return
        pipe = self._child.stdout
        while True:
            used = _cpu_seconds(self._child.pid)
            if select.select([pipe], [], [], _ANCHORS_CHECK_SECONDS)[0]:
                return
            why = _starved(used, _cpu_seconds(self._child.pid))
            if why is not None:
                raise _ChildGone(why)

    def _solving(self):
        """Whether the child has greeted (read here, once): it has the graph and its jobs run.
        Where the pipe cannot be watched (not POSIX), the read waits for the greeting."""
        import select

        if os.name == "posix" and not select.select([self._child.stdout], [], [], 0)[0]:
            return False
        try:
            greeting = _read_exactly(self._child.stdout, len(_PROCESS_GREETING))
        except _ChildGone:  # it ended
            greeting = b""
        if greeting != _PROCESS_GREETING:
            raise _ChildGone("its interpreter did not start")
        return True

    def _write(self):
        try:
            while (message := self._outbox.get()) is not None:
                _send(self._child.stdin, message)
        except (OSError, ValueError):  # the child ended: its answers say so
            pass
        finally:
            try:
                self._child.stdin.close()
            except OSError:
                pass

    def _ask(self, name, *args, attribute=False):
        """The child's ``name(*args)`` (its attribute ``name``); raises :class:`_ChildGone`."""
        with self._lock:
            if self._gone:
                raise _ChildGone("ended before")
            self._outbox.put((True, name, None if attribute else args))
            try:
                if not self._greeted:
                    if not self._solving():  # it would take its start and the whole solve yet
                        raise _ChildGone("not solving yet when first asked")
                    self._greeted = True
                self._wait_for_answer()
                ok, value, self._seconds, self._used = _receive(self._child.stdout)
            except (_ChildGone, OSError, EOFError) as exc:
                self._child.kill()  # it cannot be asked any more: what it holds is freed
                if not self._gone:
                    self.ended = f"the anchors' process ended early ({exc}); the anchors were solved after the run"
                self._gone = True
                raise _ChildGone(str(exc)) from exc
        if not ok:
            raise value
        return value

    @property
    def seconds(self):
        """Seconds its jobs took, summed (as last reported where it cannot be asked)."""
        try:
            return float(self._ask("seconds", attribute=True))
        except _ChildGone:
            return self._seconds

    @property
    def used(self):
        """What was taken from it (as :attr:`_BackgroundOptima.used`)."""
        return list(self._used)

    held_bytes = 0  # a child that cannot be asked was ended: what it held is freed

    def smallest_below(self, mem):
        """As :meth:`_BackgroundOptima.smallest_below`, without waiting for an answer."""
        if not self._gone:
            self._outbox.put((False, "smallest_below", (np.asarray(mem, dtype=np.float64),)))

    def _answer(self, name, *args, gone=None):
        """The child's ``name(*args)``, or ``gone`` (what it has not solved) where it cannot be asked."""
        try:
            return self._ask(name, *args)
        except _ChildGone:
            return gone

    def bounds(self):
        """As :meth:`_BackgroundOptima.bounds`; the same object on every call."""
        if self._bounds is self._unasked:
            self._bounds = self._answer("bounds")
        return self._bounds

    def optimum(self, lam):
        """As :meth:`_BackgroundOptima.optimum`."""
        return self._answer("optimum", lam)

    def refusal(self, lam):
        """As :meth:`_BackgroundOptima.refusal`."""
        return self._answer("refusal", lam)

    def window_bound(self, lam):
        """As :meth:`_BackgroundOptima.window_bound`."""
        return self._answer("window_bound", lam, gone=(False, None))

    def close(self, wait=False):
        """End the child at once, whatever it was solving (``wait`` is for the thread's
        signature: what the child held is freed when this returns). A call still waiting for
        an answer then gets none."""
        self._gone = True
        self._outbox.put(None)
        self._child.kill()
        self._child.wait()
        self._child.stdout.close()


def _anchors_beside(cg, budget, threads, entries_after):
    """The anchors solved beside a run, in a process of their own (:class:`_AnchorsProcess`), or
    None where the graph is too small to gain from one (``_PROCESS_MIN_LEAF_BYTES``) or no
    process starts within ``budget``: they are then solved after the run. Not on a thread of the
    run's process: at the least priority, a thread that holds the interpreter's lock while other
    programs take the cores holds the run back with it (``_ANCHORS_IN_PROCESS`` False keeps them
    on a :class:`_BackgroundOptima` thread all the same, which sees this module's patches, for
    tests and benchmarks)."""
    if not _ANCHORS_IN_PROCESS:
        return _BackgroundOptima(cg, budget, threads, entries_after)
    if leaf_bytes(cg) < _PROCESS_MIN_LEAF_BYTES:
        return None
    try:
        return _AnchorsProcess(cg, budget, threads, entries_after)
    except _ChildGone:
        return None


def _relaxation_strategies(cg, rb, lams):
    """The relaxation's own best strategy for each lam of ``lams`` (0: time, inf: memory;
    rows of ``rb``): every node at its config of least bound, every edge at its best option
    for lam. ``(choices, edge_choices)``, one row per lam. Where the exact optimum is out of
    reach it can beat the tracked end and the descents from it (it does on the Llama-8B-shaped
    model's fastest end, ``benchmarks/bench_scale.py --cases llama``)."""
    from .polish import _best_options

    chs, echs = [], []
    for lam in lams:
        row = _bounds_row(rb, lam)
        choices = np.array([int(np.argmin(b[row])) for b in rb.bounds], dtype=np.int64)
        edge_choices = np.full(cg.n_edges, -1, dtype=np.int64)
        _best_options(cg, choices, edge_choices, lam)
        chs.append(choices)
        echs.append(edge_choices)
    return np.stack(chs), np.stack(echs).reshape(len(chs), cg.n_edges)


def _end(mem, tim, lam):
    """Index of the frontier point that is best for ``lam``: 0, the fastest; inf, the smallest."""
    return int(np.argmin(mem if np.isinf(lam) else tim))


def _add_anchors(cg, mem, tim, ch, ech, stats, strict, max_bytes, threads=1, background=None):
    """Union the fastest and the smallest strategy (exact, :func:`min_sum`) into a frontier.

    Where an exact optimum is out of reach, the descents of :func:`_descents` are united in
    instead, and ``stats["end_gaps"]`` says how far the returned end may be from the optimum:
    its excess over a lower bound (the relaxation's, raised by :func:`_raise_bound` where that
    does not prove the end), ``"fastest"`` in time, ``"smallest"`` in memory."""
    from ..errors import InfeasibleError as _Infeasible
    from .screen import lower_bounds

    t0 = _time.perf_counter()
    try:
        ach, aech, skipped, rb, ties = _optima(cg, (0.0, np.inf), max_bytes, mem, tim, threads, background)
    except _Infeasible:
        stats["anchors"] = "infeasible"
        return mem, tim, ch, ech
    n_exact = 0 if ach is None else ach.shape[0]
    stats["anchors"] = f"skipped: {skipped[0][1]}" if not n_exact else 0
    if ties:
        stats["anchor_ties"] = ties
    weights = []
    if skipped:
        if strict:
            raise InvalidInputError("; ".join(why for _, why in skipped))
        stats["anchors_skipped"] = "; ".join(why for _, why in skipped)
        if mem.size:
            bound = np.zeros(2) if rb is None else lower_bounds(rb)[[0, -1]]
            if rb is not None:  # the relaxation's own best strategies join first: descents may start there
                rch, rech = _relaxation_strategies(cg, rb, [lam for lam, _ in skipped])
                rm, rt = evaluate(cg, rch, rech)
                n_before = mem.size
                mem, tim, ch, ech, keep = _union(mem, tim, ch, ech, rm, rt, rch, rech)
                stats["relaxation_points"] = int((keep >= n_before).sum())
            dch, dech, weights = _descents(cg, mem, tim, ch, ech, [lam for lam, _ in skipped], bound, background)
            ach = dch if ach is None else np.concatenate([ach, dch])
            aech = dech if aech is None else np.concatenate([aech, dech])
    if ach is not None:
        am, at = evaluate(cg, ach, aech)
        n0 = mem.size
        before = {lam: float((tim + lam * mem).min()) for lam in weights}
        mem, tim, ch, ech, keep = _union(mem, tim, ch, ech, am, at, ach, aech)
        if n_exact:
            stats["anchors"] = int(((keep >= n0) & (keep < n0 + n_exact)).sum())  # exact points that were missing
        if skipped:
            stats["descent_points"] = int((keep >= n0 + n_exact).sum())  # points the descents added
        if before:  # the largest relative fall of min(time + lam * memory) over the weights
            stats["descent_gain"] = max(1 - float((tim + lam * mem).min()) / value for lam, value in before.items())
    if skipped and mem.size:
        gaps = {}
        for lam, _ in skipped:
            if np.isinf(lam):
                gaps["smallest"] = _gap(mem.min(), bound[1])
            else:
                gaps["fastest"] = _gap(tim.min(), bound[0])
        stats["end_gaps"] = gaps
    stats["anchor_seconds"] = _time.perf_counter() - t0
    return mem, tim, ch, ech


def _raise_bound(cg, bound, lam, background=None):
    """Raise the lower bound of the least time (lam = 0: ``bound[0]``) or of the least memory
    (lam = inf: ``bound[1]``), in place, to :func:`~.screen.window_bound`'s where that is higher
    (taken from ``background``, a :class:`_BackgroundOptima`, where it was computed there)."""
    from .screen import window_bound

    done, windows = (False, None) if background is None else background.window_bound(lam)
    if not done:
        windows = window_bound(cg, lam)
    row = 1 if np.isinf(lam) else 0
    if windows is not None:
        bound[row] = max(bound[row], windows)


def _gap(value, bound):
    """Relative excess of ``value`` over a lower ``bound`` of it."""
    return float(value / bound - 1) if bound > 0 else (0.0 if value == 0 else float("inf"))


def _proven(cg, choices, edge_choices, lam, bound):
    """Whether lower bounds ``bound`` (``(time, memory)``) prove a strategy optimal for
    ``lam`` (0: its time, inf: its memory)."""
    m, t = evaluate(cg, choices, edge_choices)
    value, least = (m[0], bound[1]) if np.isinf(lam) else (t[0], bound[0])
    return bool(value <= least * (1 + _SCREEN_TOL))


def _descents(cg, mem, tim, ch, ech, ends, bound, background=None):
    """Strategies improved by local search (:mod:`.polish`) from a frontier whose exact optima
    are out of reach, where the heuristic eliminations such graphs need leave room: from its
    end for each lam of ``ends`` (0: the fastest, inf: the smallest), by descent, then, unless
    the lower bounds ``bound`` (``(time, memory)``) prove it optimal, windows re-solved exactly
    and descent again; and from its points best for ``_DESCENT_WEIGHTS`` weights spread over its
    slopes, by descent. Where the bound given does not prove a descended end, it is first
    raised in place (:func:`_raise_bound`, from ``background`` where it was computed there),
    which costs about as much as a descent, so an end the cheap bound proves never pays for it.
    Returns ``(choices, edge_choices, weights)``."""
    from .polish import descend, descend_many, reoptimize_windows

    slopes = -np.diff(tim) / np.diff(mem)
    slopes = slopes[np.isfinite(slopes) & (slopes > 0)]
    weights = [float(lam) for lam in np.geomspace(slopes.min(), slopes.max(), _DESCENT_WEIGHTS)] if slopes.size else []
    lams = list(ends) + weights
    starts = [_end(mem, tim, lam) for lam in ends] + [int(np.argmin(tim + lam * mem)) for lam in weights]
    dch, dech = descend_many(cg, ch[starts], ech[starts], lams)  # all the descents at once
    for r, lam in enumerate(ends):
        c, e = dch[r], dech[r]
        if not _proven(cg, c, e, lam, bound):
            _raise_bound(cg, bound, lam, background)
        if not _proven(cg, c, e, lam, bound):
            c, e, _ = reoptimize_windows(cg, c, e, lam)
            dch[r], dech[r] = descend(cg, c, e, lam)
    return dch, dech, weights


_DESCENT_WEIGHTS = 8  # weights across the frontier's slopes whose best points descend (ends out of exact reach)
_WIDEN_ROUNDS = 4  # local-move widenings of the candidate configs (each a small exact track)
_MOVE_SAMPLE = 64  # frontier strategies moved from per widening
_SWEEP_WEIGHTS = 4  # exact optima of time + lam * memory whose configs join the candidates


def _run_candidates(cg, per_weight, kwargs, max_bytes):
    """Track ``cg`` restricted to promising configs (see ``track(candidates=...)``).

    Candidates, in three steps: the ``per_weight`` configs of least relaxation bound for each
    weight of a grid (:mod:`.screen`); the configs of the exact optima of ``time + lam *
    memory`` (:func:`min_sum`) for ``lam`` spread over the slopes of the frontier found so far,
    and for ``lam = 0`` and ``inf``; then, while some one-node move from a frontier strategy
    lands outside the region the frontier dominates, its config. The optima themselves are
    united into the result. Returns ``(mem, time, choices, edge_choices, depth, stats, bounds,
    keep)``."""
    from .screen import improving_moves, lam_grid, relaxation_bounds, restrict, top_configs

    t0 = _time.perf_counter()
    rb = relaxation_bounds(cg, lam_grid(cg, 12), max_bytes=max_bytes)
    keep = top_configs(rb, per_weight)
    stats = {"bounds_seconds": _time.perf_counter() - t0}

    def run(keep):
        fr = track(restrict(cg, keep), anchors=False, **kwargs)
        ch = np.stack([keep[i][fr.choices[:, i]] for i in range(cg.n_nodes)], axis=1)
        return fr, ch

    try:
        fr, ch = run(keep)
        slopes = -np.diff(fr.time) / np.diff(fr.memory)
        slopes = slopes[np.isfinite(slopes) & (slopes > 0)]
    except InfeasibleError:  # the bounds' favourites never fit together: the optima will
        fr, slopes = None, rb.lams[1:]
    lams = [0.0, np.inf]
    if slopes.size:
        lams += list(np.geomspace(slopes.min(), 10 * slopes.max(), _SWEEP_WEIGHTS))
    t0 = _time.perf_counter()
    och, oech, skipped, _, ties = _optima(cg, lams, max_bytes, *((None, None) if fr is None else (fr.memory, fr.time)),
                                         threads=kwargs["threads"])
    if och is None:  # too wide for exact elimination: candidates from the bounds only
        stats["anchors"] = f"skipped: {skipped[0][1]}"
    elif skipped:
        stats["anchors_skipped"] = "; ".join(why for _, why in skipped)
    if ties:  # the fastest optimum's configs are a fastest strategy's, maybe not the smallest's
        stats["anchor_ties"] = ties
    stats["anchor_seconds"] = _time.perf_counter() - t0
    if och is not None:
        keep = [np.union1d(k, och[:, i]) for i, k in enumerate(keep)]
        fr, ch = run(keep)
    elif fr is None:
        raise InfeasibleError("no strategy among the candidate configs avoids forbidden costs, and the graph is "
                              "too wide for the exact optima that would widen them; track without candidates")
    rounds = 1
    while rounds <= _WIDEN_ROUNDS:
        pick = np.unique(np.round(np.linspace(0, len(fr) - 1, min(len(fr), _MOVE_SAMPLE))).astype(np.int64))
        moves = improving_moves(cg, ch[pick], fr.edge_choices[pick], fr.memory[pick], fr.time[pick], fr.memory, fr.time)
        grown = [np.union1d(k, m) for k, m in zip(keep, moves)]
        if sum(g.size for g in grown) == sum(k.size for k in keep):
            break
        keep = grown
        fr, ch = run(keep)
        rounds += 1
    ech = fr.edge_choices
    if och is not None:
        # one summation order for every point, so that a strategy found twice is one point
        n0 = ch.shape[0]
        ch = np.concatenate([ch, och])
        ech = np.concatenate([ech, oech])
        mem, tim = evaluate(cg, ch, ech)
        mem, tim, ch, ech, kept = _union(mem[:n0], tim[:n0], ch[:n0], ech[:n0], mem[n0:], tim[n0:], ch[n0:], ech[n0:])
        stats["anchors"] = int((kept >= n0).sum())
    else:
        mem, tim = fr.memory, fr.time
    stats = {**fr.stats, **stats}
    stats.update(candidate_configs=int(sum(k.size for k in keep)), candidate_rounds=rounds, epsilon=fr.epsilon,
                 sweep_weights=len(lams))
    return mem, tim, ch, ech, fr.epsilon_depth, stats, rb, keep


def _certify(cg, rb, keep, mem, tim, stats):
    """Count the configs outside ``keep`` that the bounds cannot rule out (0: proven exact)."""
    from .screen import screen_out

    drop = screen_out(rb, mem, tim)
    unproven = 0
    for i, d in enumerate(drop):
        outside = np.ones(d.shape[0], dtype=bool)
        outside[keep[i]] = False
        unproven += int((outside & ~d).sum())
    stats["unproven_configs"] = unproven
    return unproven


def track(
    cg: CostGraph,
    method: Literal["ldp", "elimination"] = "ldp",
    exact: bool = False,
    epsilon: float | Literal["auto"] = "auto",
    threads: int | None = None,
    max_merged_configs: int = DEFAULT_MAX_MERGED_CONFIGS,
    max_step_work: float | None = None,
    heuristic: Literal["auto", "min_memory", "weighted"] = "auto",
    anchors: Literal["auto"] | bool = "auto",
    max_memory: int | None = None,
    on_memory_limit: Literal["epsilon", "raise"] = "epsilon",
    progress=None,
    candidates: int | None = None,
) -> TrackedFrontier:
    """Track the cost frontier of a CostGraph (TensorOpt Alg. 2, FT).

    Parameters
    ----------
    cg : CostGraph
    method : {"ldp", "elimination"}
        ``"ldp"``: FT-LDP, eliminate down to linear chains (Alg. 2 marking) and run LDP
        (Alg. 3). ``"elimination"``: FT-Elimination, eliminate everything (down to two
        nodes, then enumerate).
    exact : bool
        True: never use heuristic elimination (branch elimination instead, however large);
        the result is exactly the Pareto frontier (up to ``epsilon``).
    epsilon : float >= 0 or "auto"
        Epsilon-Pareto thinning of intermediate frontiers (0 = off); see the module
        docstring for the proven bound ``(1 + epsilon) ** L`` on the memory loss.
        ``"auto"`` (with ``exact=True``: 0): no thinning until an intermediate frontier cell
        holds more than ``AUTO_EPSILON_CELL_POINTS`` (1024) points, then ``AUTO_EPSILON``
        (1e-3) for every later step. Deep models make the exact frontier of their first
        layers grow to 1e5 points per cell, which no user reads and which costs minutes;
        the run reports the epsilon it ended with (``fr.epsilon``), the depth L counts only
        the thinned steps, and ``stats["epsilon_from_combine"]`` says where thinning began.
        On a graph that repeats its layers (``AUTO_REPEATS``: 3 or more edges per distinct
        edge cost array), when the exact steps would pass ``AUTO_EXACT_TERMS`` (3e7) product
        terms, the run starts over thinned from its first step (``stats["auto_exact_attempt"]``:
        the combine that would have passed them, which is not run, the terms with it, and the
        seconds given up).
    threads : int or None
        Worker threads for the per-config work, and exact optima solved at once (None = all
        cores). The result does not depend on it, but for one case: where strategies of
        different memory tie for the least time, the exact fastest strategy the anchors add
        is one of them, and which one may change with the graph it is solved on (the anchors
        solved beside the run are screened by another limit than those solved after it).
    max_merged_configs : int
        With ``exact=False``, the largest config count a branch elimination may create
        before heuristic elimination is used instead.
    max_step_work : float > 0 or None
        With ``exact=False``, the most pair sums a node elimination or fold (an LDP step
        too) is estimated to take: the node's configs, times its neighbours' configs and
        the mean points per cell of every frontier a term sums. A costlier node keeps only
        its best configs, as many as fit (ranked by the least ``time + lam * memory`` each
        brings over a range of ``lam``, interleaved with their Pareto layers), and is
        eliminated on them; where fewer than a
        tenth of its configs would fit, its config is fixed instead (heuristic
        elimination). Both count as heuristic steps and in ``stats["work_capped"]``, a
        restriction also in ``stats["work_restricted"]``. ``inf``: no limit. None (the
        default): ``DEFAULT_MAX_STEP_WORK``, or no limit with ``candidates``, which already
        keeps few configs per operator.
    heuristic : {"auto", "min_memory", "weighted"}
        Config choice of heuristic elimination; ``"auto"`` runs both when any heuristic
        elimination was needed and keeps the reduced union of the two frontiers (the
        state just before the first heuristic elimination is snapshotted and resumed
        with ``"weighted"``, so the shared prefix is computed once).

    anchors : {"auto", True, False}
        Union into the result the exact single-objective optima of :func:`min_sum`: the
        fastest strategy (``lam = 0``) and the smallest one (``lam = inf``), so that an
        approximate frontier still contains (or dominates) both ends. ``"auto"``: only
        when the result may be approximate (a heuristic elimination was used, or
        ``epsilon > 0``). ``False``: not added, unless the heuristic eliminations left no
        strategy without forbidden costs: they are then solved all the same
        (``stats["anchors_after_empty"]``), so that a graph with a feasible strategy raises
        :class:`~tensoropt_py.errors.InfeasibleError` only where they are out of exact reach
        (its message then names the heuristic eliminations). Each is solved on the configs
        that relaxation bounds (:func:`~.screen.relaxation_bounds`) leave possible for a
        strategy at least as fast (as small) as the result's end, which gives the whole
        graph's optimum on a graph often narrow enough for :func:`min_sum` where the whole one
        is not; one that is still too wide, or would sum more than 2e9 terms (a few seconds),
        is skipped (``True``: raises). Where several strategies share the least time, the
        fastest anchor is the one of least memory among them: a second solve where the first
        finds such a tie, time, then memory, compared in order where that sums at most 5e7
        terms (about a quarter second), else time + a weight of memory too small to trade
        time for it (its memory then the least within about 1e-7). Where a slower strategy of
        less memory wins that solve, the anchor is a fastest strategy, and
        ``stats["anchor_ties"]`` says that its memory is not proven the least of them.
        ``stats["anchors"]`` says what happened
        (``stats["anchors_skipped"]``: why an optimum is missing). For an end so skipped the
        relaxation's own best strategy (every node at its config of least bound) joins the
        frontier first (``stats["relaxation_points"]``: how many it kept then), then the end is
        improved by local search from the frontier's end (:mod:`.polish`: descent, and windows
        of 40 operators re-solved exactly unless a bound proves the end), as are the points
        best for 8 weights across the frontier's slopes (by descent), and
        ``stats["end_gaps"]`` bounds how far the end may still be from the optimum: its
        relative excess over lower bounds of the relaxation and of windows solved exactly
        (:func:`~.screen.window_bound`) (``"fastest"``: time, ``"smallest"``: memory; 0
        proves it optimal). With ``threads`` above 1, once the run is known to need them
        (epsilon turned on by the exact start given up or asked for, or a first heuristic
        elimination), they are solved beside the run while it goes on: the fastest screened
        by the time of the relaxation's own best strategy, the smallest by the least memory of
        the first heuristic run. They run in a process of their own at the least CPU priority
        (its Python does not hold the run's interpreter lock; ``stats["anchors_beside_in"]``),
        but after the run where the graph is small (leaf tables under 48 KiB: starting the
        process would cost more than it hides) or the process would not fit its share. It
        holds at most an eighth of ``max_memory``, its interpreter and its copy of the graph
        included (the run the rest; not after a run stopped at ``max_memory``);
        ``stats["anchors_beside"]`` names the ends it solved (``stats["anchor_background_seconds"]``:
        its seconds), the others are solved after the run as above, as are all of them where the
        process ended early, had not started solving when the run ended, or, starved by other
        programs, got too little CPU to answer (``stats["anchors_beside_ended"]`` says why). An
        end it was refused is tried again after the run only where the whole ``max_memory``
        gives the step refused enough room (on the graph it was refused on when that is the
        smaller), and the windows' lower bound of that end is computed there next
        (``"fastest_bound"``, ``"smallest_bound"`` in ``stats["anchors_beside"]`` where the
        descents used it).

    max_memory : int or None
        Bytes the frontier tables may hold (None: 60% of the memory available at the
        start, :func:`default_max_memory`). Checked after every combine step, and within
        one: the compiled kernel's buffers may take only what the tables leave, so a step
        that would not fit stops before it takes the memory.
    on_memory_limit : {"epsilon", "raise"}
        What happens when a run would exceed ``max_memory``: ``"epsilon"`` retries with
        a 10x larger epsilon (starting at 1e-3, at most 0.1; the run's
        ``epsilon`` and ``memory_bound_factor`` report the bound that holds), then raises;
        ``"raise"`` raises :class:`~tensoropt_py.errors.MemoryLimitError` at once.

    progress : callable or None
        Called (at most every 0.5 s, and at each stage change) with a dict: ``stage``
        (``"eliminate"``, ``"finish"``, ...), ``run`` (2 while resuming with the weighted
        heuristic), ``nodes_left``, ``nodes``, ``points`` (frontier points produced so far),
        ``elapsed_s`` and ``estimate_left_s`` (linear in the nodes eliminated; None when
        unknown).
    candidates : int or None
        None: track the whole graph. An int ``r``: track only promising configs (for
        every weight ``lam`` of a grid, the ``r`` configs of least lower bound of
        ``time + lam * memory`` on a spanning-forest relaxation, see :mod:`.screen`),
        widened while one-node moves from frontier strategies improve the frontier; much
        faster on wide graphs, approximate. ``stats["unproven_configs"]`` counts the
        configs left out that the bounds could not prove useless (0: the result is the exact
        frontier, provided the restricted runs used no heuristic elimination and no
        epsilon). The exact optima it adds make both ends exact whatever ``anchors`` says.

    Returns
    -------
    TrackedFrontier

    Notes
    -----
    Epsilon guarantee: for every point (m, t) of the exact frontier (``exact=True``) the
    result has a point (m', t') with ``t' <= t`` and
    ``m' <= (1 + epsilon) ** fr.epsilon_depth * m`` (``fr.memory_bound_factor``); see the
    module docstring for the proof sketch and the value of L.

    Raises
    ------
    InvalidInputError
        For a bad method, epsilon, threads, max_merged_configs, max_step_work or heuristic.
    InfeasibleError
        When every strategy uses a forbidden cost (see :class:`CostGraph`).
    MemoryLimitError
        When the tables would exceed ``max_memory`` (after the epsilon retries).

    Examples
    --------
    >>> import numpy as np
    >>> nodes = [np.array([[1.0, 4.0], [4.0, 1.0]])] * 3
    >>> edges = [(0, 1, np.zeros((2, 2, 2))), (1, 2, np.zeros((2, 2, 2)))]
    >>> fr = track(CostGraph(nodes, edges), exact=True)
    >>> fr.memory.tolist(), fr.time.tolist()
    ([3.0, 6.0, 9.0, 12.0], [12.0, 9.0, 6.0, 3.0])
    >>> fr.choices.sum(axis=1).tolist()  # how many nodes use their fast config
    [0, 1, 2, 3]
    """
    eps, threads = _validate(cg, method, exact, epsilon, threads, max_merged_configs, heuristic)
    if max_step_work is None:
        max_step_work = DEFAULT_MAX_STEP_WORK if candidates is None else float("inf")
    max_step_work = parse_positive(max_step_work, "max_step_work", allowed="a number > 0 (inf: no limit) or None")
    switch = None
    if eps == "auto":
        eps = 0.0
        budget = AUTO_EXACT_TERMS if edges_per_table(cg) >= AUTO_REPEATS else np.inf
        switch = None if exact else (AUTO_EPSILON, AUTO_EPSILON_CELL_POINTS, budget)
    if progress is not None and not callable(progress):
        raise InvalidInputError(f"progress must be a callable or None, got {type(progress).__name__}")
    if anchors not in ("auto", True, False):
        raise InvalidInputError(f"anchors must be 'auto', True or False, got {anchors!r}")
    if on_memory_limit not in ("epsilon", "raise"):
        raise InvalidInputError(f"on_memory_limit must be 'epsilon' or 'raise', got {on_memory_limit!r}")
    if max_memory is None:
        max_memory = default_max_memory()
    else:
        parse_positive(max_memory, "max_memory", allowed="a positive number of bytes or None")
    t0 = _time.perf_counter()
    if candidates is not None:
        parse_count(candidates, "candidates", allow_none=True)
        kwargs = dict(method=method, exact=exact, epsilon=eps if switch is None else "auto", threads=threads,
                      max_merged_configs=max_merged_configs, max_step_work=max_step_work, heuristic=heuristic,
                      max_memory=max_memory,
                      on_memory_limit=on_memory_limit, progress=progress)
        mem, tim, ch, ech, depth, stats, rb, keep = _run_candidates(cg, int(candidates), kwargs, int(max_memory))
        _certify(cg, rb, keep, mem, tim, stats)
        return TrackedFrontier(
            memory=mem, time=tim, choices=ch, edge_choices=ech, method=method, exact=bool(exact),
            epsilon=stats.get("epsilon", eps), epsilon_depth=int(depth), n_heuristic=int(stats["heuristic"]),
            n_branch=int(stats["branch"]), seconds=_time.perf_counter() - t0, stats=stats,
        )
    need = leaf_bytes(cg)
    if need > max_memory:
        raise MemoryLimitError(
            f"the leaf tables of this cost graph alone need {need / 2**20:.1f} MiB (its edge tables: "
            f"{cg.n_edges} edges, up to {max(cg.n_configs)} configs per node), more than max_memory = "
            f"{max_memory / 2**20:.1f} MiB; fewer configs per operator (max_configs), candidates=r, or more memory is needed",
            used_bytes=need,
            limit_bytes=int(max_memory),
        )
    first = "min_memory" if heuristic in ("auto", "min_memory") else "weighted"
    retries = []
    exact_attempt = None
    background = []  # the anchors beside the run (_anchors_beside), once started
    declined = []  # not empty once _anchors_beside declined: they are solved after the run

    def solve_anchors_beside(ctx=None):
        """Start solving the anchors beside the run (the run is known to need them);
        ``ctx``: the run under way, which then gives up the share they hold where it can. Not
        once a run has stopped at ``max_memory``: the runs then need all of it."""
        if background or declined or retries or threads < 2 or anchors is False or not _BACKGROUND_ANCHORS:
            return
        budget = int(max_memory) // _BACKGROUND_SHARE
        if ctx is not None and ctx.max_bytes - ctx.used_bytes() < budget:
            return
        beside = _anchors_beside(cg, budget, threads, _entries(int(max_memory)))
        if beside is None:
            declined.append(True)
            return
        if ctx is not None:
            ctx.max_bytes -= budget
        background.append(beside)

    def first_run_done(mem):
        if background:
            background[0].smallest_below(mem)

    try:
        while True:
            if eps > 0 or anchors is True:
                solve_anchors_beside()
            try:
                runs = _run(cg, method, bool(exact), eps, threads, int(max_merged_configs), first,
                            fork=heuristic == "auto",
                            max_bytes=int(max_memory) - (background[0].budget if background else 0),
                            progress=None if progress is None else _Progress(progress, cg.n_nodes), switch=switch,
                            max_step_work=max_step_work, on_heuristic=solve_anchors_beside, on_first=first_run_done)
                break
            except ExactBudgetSpent as exc:
                exact_attempt = dict(combines=exc.combines, terms=exc.terms, seconds=_time.perf_counter() - t0)
                eps = AUTO_EPSILON
                switch = None
            except MemoryLimitError as exc:
                if on_memory_limit == "raise" or exc.epsilon >= _MAX_DEGRADED_EPSILON:
                    raise
                if background:  # the retries get the whole of max_memory: what it holds is freed first
                    background.pop().close(wait=True)
                retries.append((exc.epsilon, exc.used_bytes))
                eps = min(_MAX_DEGRADED_EPSILON, max(1e-3, exc.epsilon * 10))
                switch = None
        mem, tim, ch, ech, depth, stats = runs[0]
        eps = max(r[5]["epsilon"] for r in runs)
        n_heur = stats["heuristic"]
        if len(runs) > 1:
            mem2, tim2, ch2, ech2, depth2, stats2 = runs[1]
            n_first = mem.size
            mem, tim, ch, ech, keep = _union(mem, tim, ch, ech, mem2, tim2, ch2, ech2)
            depth = max(depth, depth2)
            stats["heuristic_runs"] = 2
            stats["points_from_weighted"] = int((keep >= n_first).sum())
            for key in ("peak_table_bytes", "collected_bytes", "stored_points"):  # both runs share one registry
                if key in stats2:
                    stats[key] = stats2[key]
        if anchors is True or (anchors == "auto" and (n_heur > 0 or eps > 0)):
            mem, tim, ch, ech = _add_anchors(cg, mem, tim, ch, ech, stats, strict=anchors is True,
                                             max_bytes=int(max_memory), threads=threads,
                                             background=background[0] if background else None)
        elif mem.size == 0 and n_heur:
            # the heuristic eliminations left only strategies with forbidden costs; the exact
            # optima find a feasible strategy where there is one, so the error below is true
            mem, tim, ch, ech = _add_anchors(cg, mem, tim, ch, ech, stats, strict=False,
                                             max_bytes=int(max_memory), threads=threads)
            stats["anchors_after_empty"] = True
        else:
            stats["anchors"] = "off"
        if background:
            stats["anchors_beside"] = tuple(sorted(background[0].used))
            stats["anchors_beside_in"] = "process" if isinstance(background[0], _AnchorsProcess) else "thread"
            if background[0].ended:
                stats["anchors_beside_ended"] = background[0].ended
            stats["anchor_background_seconds"] = background[0].seconds
    finally:
        if background:
            background[0].close()
    if exact_attempt is not None:
        stats["auto_exact_attempt"] = exact_attempt  # the exact start given up for thinning from the first step
    if retries:
        stats["memory_limit_retries"] = retries  # (epsilon, bytes held) of every stopped run
    if mem.size == 0:
        why = (
            f" with the configs fixed by {n_heur} heuristic elimination(s) (the exact optima were "
            f"{stats['anchors']}); exact=True searches all strategies"
            if n_heur and stats.get("anchors") != "infeasible"
            else ""
        )
        raise InfeasibleError(
            f"every strategy of this cost graph uses a forbidden cost (>= FORBIDDEN_COST or +inf){why}"
        )
    return TrackedFrontier(
        memory=mem,
        time=tim,
        choices=ch,
        edge_choices=ech,
        method=method,
        exact=bool(exact),
        epsilon=eps,
        epsilon_depth=int(depth),
        n_heuristic=int(n_heur),
        n_branch=int(stats["branch"]),
        seconds=_time.perf_counter() - t0,
        stats=stats,
    )
