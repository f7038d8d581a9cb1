"""Memory as a peak over live intervals: min_time_under_peak and peak_frontier against brute force."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensoropt_py.engine import (
    CostGraph,
    IntervalUsage,
    brute_force_peak_frontier,
    evaluate,
    evaluate_peak,
    min_sum,
    min_time_under_peak,
    peak_frontier,
)
from tensoropt_py.engine.peak import _fastest_options, _MinSumPlan
from tensoropt_py.engine.random_graphs import (
    random_cyclic_graph,
    random_interval_usage,
    random_sparse_cyclic_graph,
)
from tensoropt_py.errors import InfeasibleError, InvalidInputError


def _problem(seed):
    """A small cyclic graph with 1e18 sentinels and random live intervals (about a third of
    its limits need branching when nothing is enumerated)."""
    cg = random_cyclic_graph(n_nodes=7, max_k=3, edge_prob=0.4, forbidden_prob=0.08, max_options=1 + seed % 2,
                             seed=seed)
    usage = random_interval_usage(cg, max_span=5, empty_prob=0.1, seed=seed)
    return cg, usage


def _limits(bf):
    """Every frontier peak, the midpoints between them and one below the least peak."""
    mids = [(a + b) / 2 for a, b in zip(bf.peak[:-1], bf.peak[1:])]
    return [*bf.peak.tolist(), *mids, float(bf.peak[0]) - 1.0]


def _check_strategy(cg, usage, r):
    """The reported costs are the strategy's own, and it keeps to the limit."""
    peak, tim = evaluate_peak(cg, usage, r.choices, r.edge_choices)
    assert peak[0] == r.peak and tim[0] == r.time
    assert evaluate(cg, r.choices, r.edge_choices)[1][0] == r.time
    assert r.peak <= r.limit
    assert r.lower_bound <= r.time and 0.0 <= r.gap <= 1.0
    if r.optimal:
        assert r.gap <= 1e-9 * (1 + 1e-6)  # the default rtol (up to rounding)


@st.composite
def _intervals(draw):
    n = draw(st.integers(1, 7))
    start = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    span = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    usage = [draw(st.lists(st.integers(0, 20), min_size=1, max_size=3)) for _ in range(n)]
    choice = [draw(st.integers(0, len(u) - 1)) for u in usage]
    return start, [s + d for s, d in zip(start, span)], usage, choice


@given(_intervals())
def test_compressed_loads_match_every_step(case):
    # the kept (maximal) steps must give the same peak as summing at every raw step
    start, end, usage, choice = case
    u = IntervalUsage(start, end, [np.array(x, dtype=float) for x in usage])
    direct = max(
        [sum(usage[i][choice[i]] for i in range(len(start)) if start[i] <= t < end[i]) for t in range(0, 15)]
    )
    cg = CostGraph([np.zeros((len(x), 2)) for x in usage], [])
    peak, tim = evaluate_peak(cg, u, choice)
    assert peak[0] == direct and tim[0] == 0.0
    assert u.n_steps <= len(start)
    assert np.all(u.lo <= u.hi)


@pytest.mark.parametrize("seed", range(25))
def test_min_time_under_peak_equals_brute_force(seed):
    cg, usage = _problem(seed)
    bf = brute_force_peak_frontier(cg, usage)
    if len(bf) == 0:
        with pytest.raises(InfeasibleError):
            min_time_under_peak(cg, usage, np.inf)
        return
    for limit in _limits(bf):
        fits = bf.peak <= limit
        # max_enumerate=1 leaves every subproblem to the Lagrangian branch and bound
        for max_enumerate in (4096, 1):
            if not fits.any():
                with pytest.raises(InfeasibleError, match="proven"):
                    min_time_under_peak(cg, usage, limit, max_enumerate=max_enumerate, iterations=20)
                continue
            r = min_time_under_peak(cg, usage, limit, max_enumerate=max_enumerate, iterations=20)
            assert r.optimal
            assert r.time == bf.time[fits].min()
            assert r.lower_bound <= r.time
            _check_strategy(cg, usage, r)


def test_a_step_load_holds_only_the_usages_live_there():
    # a running sum over the steps would leave the rounding of a huge usage that has ended
    # in the next step's load: 1e17 + 3.3 - 1e17 is 0 or 16, not 3.3
    u = IntervalUsage([0, 1, 1], [1, 2, 2], [[1e17, 1.0], [3.3, 0.1], [0.25]])
    assert u.loads(np.array([[0, 0, 0], [1, 0, 0]])).tolist() == [[1e17, 3.3 + 0.25], [1.0, 3.3 + 0.25]]


def test_loads_in_chunks_equal_loads_at_once(monkeypatch):
    cg = random_cyclic_graph(n_nodes=7, max_k=3, seed=3, integer_costs=False)
    usage = random_interval_usage(cg, max_span=4, seed=3)
    assert usage._live is not None  # non-integer usages: sums over the live nodes
    choices = np.random.default_rng(3).integers(0, np.array(cg.n_configs), size=(50, cg.n_nodes))
    whole = usage.loads(choices)
    monkeypatch.setattr("tensoropt_py.engine.peak._LOAD_CHUNK_ENTRIES", 7)
    np.testing.assert_array_equal(usage.loads(choices), whole)
    np.testing.assert_array_equal(np.concatenate([usage.loads(c[None, :]) for c in choices]), whole)


@given(_intervals(), st.integers(0, 2**32 - 1))
def test_loads_of_float_usages_depend_on_the_live_usages_alone(case, seed):
    # strategies that differ only in nodes not live at a step load it the same, and a larger
    # usage never gives a smaller load (what the solver's proofs of infeasibility rely on)
    start, end, usage, choice = case
    rng = np.random.default_rng(seed)
    u = IntervalUsage(start, end, [np.array(x, dtype=float) * rng.uniform(0.9, 1.1) * 1e9 for x in usage])
    x = np.array(choice)
    for t, first in enumerate(u.steps.tolist()):
        other = x.copy()
        off = [i for i in range(len(start)) if not start[i] <= first < end[i]]
        for i in off:
            other[i] = rng.integers(len(usage[i]))
        assert u.loads(np.stack([x, other]))[:, t].tolist() == [u.loads(x[None, :])[0, t]] * 2
    larger = x.copy()
    for i in range(len(start)):
        larger[i] = int(np.argmax(u.usage[i]))
    assert np.all(u.loads(larger[None, :]) >= u.loads(x[None, :]))


@pytest.mark.parametrize("seed", range(30))
def test_non_integer_usages_at_the_frontiers_own_peaks(seed):
    # usages that are not whole bytes: sums round, and a limit equal to a frontier point's
    # peak (the natural question: that point's memory or less) must admit that point
    cg = random_cyclic_graph(n_nodes=6, max_k=3, edge_prob=0.4, forbidden_prob=0.05, max_options=1 + seed % 2,
                             seed=seed, integer_costs=False)
    usage = random_interval_usage(cg, max_span=3, empty_prob=0.2, seed=seed)
    bf = brute_force_peak_frontier(cg, usage)
    if len(bf) == 0:
        return
    fr = peak_frontier(cg, usage, max_enumerate=1 + 4095 * (seed % 2), iterations=20)
    assert fr.exact
    np.testing.assert_array_equal(fr.peak, bf.peak)
    np.testing.assert_array_equal(fr.time, bf.time)
    for limit in bf.peak.tolist():
        r = min_time_under_peak(cg, usage, limit, max_enumerate=1, iterations=20)
        assert r.optimal and r.time == bf.time[bf.peak <= limit].min()
        _check_strategy(cg, usage, r)


@pytest.mark.parametrize("seed", range(25))
def test_peak_frontier_equals_brute_force(seed):
    cg, usage = _problem(100 + seed)
    bf = brute_force_peak_frontier(cg, usage)
    if len(bf) == 0:
        with pytest.raises(InfeasibleError):
            peak_frontier(cg, usage)
        return
    for max_enumerate in (4096, 1):
        fr = peak_frontier(cg, usage, max_enumerate=max_enumerate, iterations=20)
        assert fr.exact
        np.testing.assert_array_equal(fr.peak, bf.peak)
        np.testing.assert_array_equal(fr.time, bf.time)
        peak, tim = evaluate_peak(cg, usage, fr.choices, fr.edge_choices)
        np.testing.assert_array_equal(peak, fr.peak)
        np.testing.assert_array_equal(tim, fr.time)


@pytest.mark.parametrize("seed", range(10))
def test_lower_bound_never_exceeds_optimum(seed):
    # a root-only search (no branching, few subgradient steps) still gives a true bound
    cg, usage = _problem(200 + seed)
    bf = brute_force_peak_frontier(cg, usage)
    if len(bf) == 0:
        return
    for limit in _limits(bf)[:-1]:
        best = bf.time[bf.peak <= limit].min()
        try:
            r = min_time_under_peak(cg, usage, limit, max_nodes=1, iterations=5, max_enumerate=1)
        except InfeasibleError as exc:
            assert "not proven" in str(exc)
            continue
        assert r.lower_bound <= best <= r.time
        _check_strategy(cg, usage, r)


@pytest.mark.parametrize("seed", range(8))
def test_elimination_plan_equals_min_sum(seed):
    # the Lagrangian solver (fixed elimination plan) against min_sum on the same costs
    cg = random_cyclic_graph(n_nodes=7, max_k=4, edge_prob=0.6, forbidden_prob=0.05, seed=seed)
    rng = np.random.default_rng(seed)
    tables = [(u, v, tab[..., 1].min(axis=2)[np.ix_(smap, dmap)]) for u, v, smap, dmap, tab in cg._norm]
    plan = _MinSumPlan(cg.n_configs, tables, max_entries=10**6)
    for _ in range(3):
        unary = [c[:, 1] + rng.integers(0, 5, size=c.shape[0]) * 2.0**-10 for c in cg.node_costs]
        ref = CostGraph([np.stack([np.zeros_like(x), x], axis=1) for x in unary], cg.edges)
        try:
            expected = min_sum(ref, 0.0)
        except InfeasibleError:
            assert plan.solve(unary) is None
            continue
        choices, value = plan.solve(unary)
        assert value == pytest.approx(expected.value, rel=1e-12)
        # its choices reach that value with every edge at its fastest option
        assert evaluate(ref, choices, _fastest_options(ref, choices[None, :]))[1][0] == pytest.approx(value, rel=1e-12)


def test_large_sparse_graph_gives_feasible_strategy_and_bound():
    cg = random_sparse_cyclic_graph(150, 3, forbidden_prob=0.05, seed=4, integer_costs=True)
    usage = random_interval_usage(cg, max_span=12, seed=4)
    fastest = min_sum(cg, 0.0)
    top = evaluate_peak(cg, usage, fastest.choices)[0][0]
    r = min_time_under_peak(cg, usage, 0.8 * top, max_nodes=1, iterations=30)
    _check_strategy(cg, usage, r)
    assert r.time >= fastest.time
    assert r.n_nodes_explored == 1 and r.n_oracle_calls >= 1
    with pytest.raises(InvalidInputError, match="dense .* too wide"):
        min_time_under_peak(cg, usage, 0.8 * top, max_entries=100)


def test_too_wide_for_elimination():
    # a 4-clique of 10-config nodes: 600 edge entries, but a 10**4-entry elimination table
    rng = np.random.default_rng(0)
    nodes = [np.stack([np.zeros(10), rng.integers(1, 9, 10) * 1.0], axis=1) for _ in range(4)]
    edges = [(a, b, np.zeros((10, 10, 2))) for a in range(4) for b in range(a + 1, 4)]
    cg = CostGraph(nodes, edges)
    usage = IntervalUsage([0] * 4, [1] * 4, [np.arange(10.0)] * 4)
    with pytest.raises(InvalidInputError, match=r"eliminating node \d+ needs a table .* too wide"):
        min_time_under_peak(cg, usage, 10.0, max_entries=1000, max_enumerate=1)
    r = min_time_under_peak(cg, usage, 10.0)
    bf = brute_force_peak_frontier(cg, usage)
    assert r.optimal and r.peak <= 10.0 and r.time == bf.time[bf.peak <= 10.0].min()


def test_no_live_node_and_no_limit():
    cg = random_cyclic_graph(5, seed=1)
    usage = IntervalUsage([3] * 5, [3] * 5, [np.ones(k) for k in cg.n_configs])
    assert usage.n_steps == 0
    fr = peak_frontier(cg, usage)
    assert fr.exact and len(fr) == 1 and fr.peak[0] == 0.0
    assert fr.time[0] == min_sum(cg, 0.0).time
    r = min_time_under_peak(cg, usage, 0.0)
    assert r.optimal and r.time == fr.time[0]


def test_every_strategy_forbidden():
    node = np.array([[1.0, 1.0], [2.0, 0.5]])
    cg = CostGraph([node, node], [(0, 1, np.full((2, 2, 2), 1e18))])
    usage = IntervalUsage([0, 0], [1, 1], [[1.0, 1.0], [1.0, 1.0]])
    with pytest.raises(InfeasibleError, match="proven"):
        min_time_under_peak(cg, usage, np.inf)
    with pytest.raises(InfeasibleError, match="forbidden"):
        peak_frontier(cg, usage)
    assert len(brute_force_peak_frontier(cg, usage)) == 0


def test_interval_usage_bad_input():
    with pytest.raises(InvalidInputError, match="start has 2 entries but end has 1"):
        IntervalUsage([0, 1], [2], [[1.0], [1.0]])
    with pytest.raises(InvalidInputError, match=r"node 1: live interval \[5, 2\) ends before it starts"):
        IntervalUsage([0, 5], [1, 2], [[1.0], [1.0]])
    with pytest.raises(InvalidInputError, match="usage has 1 entries"):
        IntervalUsage([0, 1], [1, 2], [[1.0]])
    with pytest.raises(InvalidInputError, match="node 0, config 1 is nan"):
        IntervalUsage([0], [1], [[1.0, np.nan]])
    with pytest.raises(InvalidInputError, match="node 0, config 0 is -1.0"):
        IntervalUsage([0], [1], [[-1.0]])
    with pytest.raises(InvalidInputError, match="node 0, config 0 is inf"):
        IntervalUsage([0], [1], [[np.inf]])
    with pytest.raises(InvalidInputError, match="start must hold integers"):
        IntervalUsage([0.5], [1], [[1.0]])
    with pytest.raises(InvalidInputError, match="non-empty 1-d"):
        IntervalUsage([0], [1], [[]])
    cg = CostGraph([np.zeros((2, 2))], [])
    with pytest.raises(InvalidInputError, match="usage describes 2 nodes but the cost graph has 1"):
        IntervalUsage([0, 0], [1, 1], [[1.0, 1.0], [1.0]]).check(cg)
    with pytest.raises(InvalidInputError, match="node 0 has 3 configs but the cost graph's node 0 has K=2"):
        evaluate_peak(cg, IntervalUsage([0], [1], [[1.0, 2.0, 3.0]]), [0])
    with pytest.raises(InvalidInputError, match="usage must be an IntervalUsage"):
        min_time_under_peak(cg, "usage", 1.0)


def test_solver_bad_options():
    cg, usage = _problem(0)
    for bad in (-1.0, float("nan"), "x"):
        with pytest.raises(InvalidInputError, match="limit must be a number of bytes >= 0"):
            min_time_under_peak(cg, usage, bad)
    for name in ("max_nodes", "iterations", "max_enumerate", "max_entries"):
        with pytest.raises(InvalidInputError, match=f"{name} must be an integer >= 1, got 0"):
            min_time_under_peak(cg, usage, 1e9, **{name: 0})
    with pytest.raises(InvalidInputError, match="rtol must be a float in"):
        min_time_under_peak(cg, usage, 1e9, rtol=1.0)
    with pytest.raises(InvalidInputError, match="max_points must be an integer >= 1"):
        peak_frontier(cg, usage, max_points=0)
    with pytest.raises(InvalidInputError, match="CostGraph"):
        peak_frontier("graph", usage)
    with pytest.raises(InvalidInputError, match="more than max_strategies=2"):
        brute_force_peak_frontier(cg, usage, max_strategies=2)
    with pytest.raises(InvalidInputError, match=r"choices\[:, 0\] must be in"):
        evaluate_peak(cg, usage, [99] * cg.n_nodes)


def test_max_points_stops_early_and_says_not_exact():
    cg, usage = _problem(3)
    bf = brute_force_peak_frontier(cg, usage)
    fr = peak_frontier(cg, usage, max_points=1)
    assert not fr.exact and len(fr) == 1 and fr.n_solves == 1
    assert fr.time[0] == bf.time[-1]


def test_generators_are_seeded_and_check_input():
    cg = random_sparse_cyclic_graph(20, 3, seed=5)
    a, b = random_interval_usage(cg, seed=7), random_interval_usage(cg, seed=7)
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    assert all(np.array_equal(x, y) for x, y in zip(a.usage, b.usage))
    assert not cg.acyclic
    with pytest.raises(InvalidInputError, match="window must be an integer >= 2"):
        random_sparse_cyclic_graph(10, 2, window=1)
    with pytest.raises(InvalidInputError, match="chord_prob must be in"):
        random_sparse_cyclic_graph(10, 2, chord_prob=1.5)
    with pytest.raises(InvalidInputError, match="max_span must be an integer >= 1"):
        random_interval_usage(cg, max_span=0)
    with pytest.raises(InvalidInputError, match="empty_prob must be in"):
        random_interval_usage(cg, empty_prob=-0.1)
