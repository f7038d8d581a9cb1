"""The public API: find_strategy's three options, Frontier, turning_point, bad input, refine="mcmc".

Oracles: the exact frontier of small models (checked here against brute-force enumeration
of every strategy), and each option's definition restated independently of the code.
"""

import dataclasses
import math

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py import api
from tensoropt_py.errors import InfeasibleError, InvalidInputError
from tensoropt_py.inputs import SAFETY_MARGIN
from tensoropt_py.cost.memory import MemoryModel, peak_frontier
from tensoropt_py.engine import brute_force_frontier, evaluate

CLUSTER = "cpu-1x4"


@pytest.fixture(scope="module")
def fr_mlp():
    return to.frontier("mlp", CLUSTER, devices=4, exact=True)


@pytest.fixture(scope="module")
def fr_cnn():
    return to.frontier("small_cnn", CLUSTER, devices=4, exact=True)


@pytest.fixture(scope="module")
def mlp_frontiers():
    """Exact frontiers of mlp at every device count of the cluster."""
    return {n: to.frontier("mlp", CLUSTER, devices=n, exact=True) for n in (1, 2, 4)}


def _caps(memory):
    """Caps across the range: exactly at each point, between consecutive points, above the top."""
    m = np.unique(memory)
    mids = (m[:-1] + m[1:]) / 2
    return [float(c) for c in np.concatenate([m, mids, [m[-1] * 1.5]])]


def _best_under(memory, time, cap):
    """Reference mini_time: the least time among points with memory <= cap (None if none)."""
    fits = memory <= cap
    if not fits.any():
        return None
    return float(time[fits].min())


def _peak_brute_force(fr):
    """The brute-force (additive) frontier with each point's memory replaced by its peak, Pareto-filtered."""
    bf = brute_force_frontier(fr.cost_graph)
    keep, peaks = peak_frontier(fr.model_cost_graph, bf.time, bf.choices, bf.edge_choices)
    return dataclasses.replace(bf, memory=peaks, time=np.asarray(bf.time)[keep],
                               choices=np.asarray(bf.choices)[keep], edge_choices=np.asarray(bf.edge_choices)[keep])


# --- the frontier itself -------------------------------------------------------------------------
def test_exact_frontier_matches_brute_force(fr_mlp):
    bf = _peak_brute_force(fr_mlp)
    np.testing.assert_allclose(fr_mlp.memory, bf.memory, rtol=1e-12)
    np.testing.assert_allclose(fr_mlp.time, bf.time, rtol=1e-12)
    assert fr_mlp.exact


def test_frontier_is_sorted_and_achievable(fr_cnn):
    assert len(fr_cnn) > 3
    assert np.all(np.diff(fr_cnn.memory) >= 0) and np.all(np.diff(fr_cnn.time) < 0)
    m, t = evaluate(fr_cnn.cost_graph, fr_cnn.choices, fr_cnn.edge_choices)
    peaks = MemoryModel(fr_cnn.model_cost_graph).peaks(fr_cnn.choices, fr_cnn.edge_choices)
    np.testing.assert_allclose(peaks, fr_cnn.memory, rtol=1e-12)
    assert np.all(np.isfinite(m))
    np.testing.assert_allclose(t, fr_cnn.time, rtol=1e-12)
    np.testing.assert_allclose(fr_cnn.compute_time + fr_cnn.communication_time, fr_cnn.time, rtol=1e-12)


def test_exact_flag_reports_heuristic_elimination(monkeypatch):
    """A run that used heuristic elimination must not claim to be the exact frontier."""
    import tensoropt_py.engine as engine

    real = engine.track

    def heuristic_track(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), n_heuristic=3)

    monkeypatch.setattr(engine, "track", heuristic_track)
    fr = to.frontier("mlp", CLUSTER, devices=4, cache=False)
    assert fr.heuristic_eliminations == 3
    assert not fr.exact


def test_exact_flag_false_with_config_cap_or_epsilon():
    assert not to.frontier("mlp", CLUSTER, devices=4, max_configs=2).exact
    assert not to.frontier("mlp", CLUSTER, devices=4, epsilon=0.01).exact


def test_frontier_json_round_trip(fr_cnn, tmp_path):
    path = tmp_path / "fr.json"
    text = fr_cnn.to_json(path)
    for back in (api.Frontier.from_json(text), api.Frontier.from_json(path), api.Frontier.from_json(str(path))):
        for name in ("memory", "time", "compute_time", "communication_time", "choices", "edge_choices"):
            np.testing.assert_array_equal(getattr(back, name), getattr(fr_cnn, name), err_msg=name)
        assert back.choices.dtype.kind == "i"
        assert (back.devices, back.model, back.cluster, back.exact) == (4, "small_cnn", CLUSTER, True)
        assert back.turning_point == fr_cnn.turning_point
        assert back.index_under(fr_cnn.memory[3]) == 3
        with pytest.raises(InvalidInputError, match="without its cost graph"):
            back.plan(0)


def test_frontier_from_json_bad_input(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        api.Frontier.from_json(tmp_path / "missing.json")
    with pytest.raises(InvalidInputError, match="format"):
        api.Frontier.from_json('{"format": "something else"}')
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        api.Frontier.from_json("{not json")


def test_plans_recompute_from_cost_graph(fr_cnn):
    """Each point's plan costs equal evaluate() on the cost graph, and its parts add up."""
    for i in range(len(fr_cnn)):
        plan = fr_cnn.plan(i)
        m, t = evaluate(fr_cnn.cost_graph, plan.choices, plan.edge_choices)
        assert plan.additive_memory == pytest.approx(m[0], rel=1e-12)
        assert plan.time == pytest.approx(t[0], rel=1e-12)
        assert plan.memory == pytest.approx(fr_cnn.memory[i], rel=1e-12)
        assert plan.time == pytest.approx(fr_cnn.time[i], rel=1e-12)
        assert plan.compute_time == pytest.approx(fr_cnn.compute_time[i], rel=1e-12)
        ops_m = sum(o.memory for o in plan.operators) + sum(e.memory for e in plan.edges)
        ops_t = sum(o.time for o in plan.operators) + sum(e.time for e in plan.edges)
        assert ops_m == pytest.approx(plan.additive_memory, rel=1e-12)
        assert ops_t == pytest.approx(plan.time, rel=1e-12)
        assert sum(o.compute_time for o in plan.operators) == pytest.approx(plan.compute_time, rel=1e-12)
        assert plan.compute_time + plan.communication_time == pytest.approx(plan.time, rel=1e-12)
        assert len(plan.operators) == len(fr_cnn.cost_graph.node_costs)
        assert len(plan.edges) == len(fr_cnn.cost_graph.edges)
        assert all(math.prod(o.mesh) == 4 for o in plan.operators)
    with pytest.raises(InvalidInputError, match="out of range"):
        fr_cnn.plan(len(fr_cnn))


def test_table_and_str(fr_cnn):
    text = fr_cnn.table(mark=2, limit=10)
    assert "<- picked" in text and "(turning point)" in text
    assert "memory kB" in text.splitlines()[0]  # small model: kB, not 0.000 GB
    assert "small_cnn" in str(fr_cnn)


# --- mini_time -----------------------------------------------------------------------------------
def test_mini_time_is_fastest_point_under_cap(fr_mlp):
    bf = _peak_brute_force(fr_mlp)  # every strategy of the additive frontier, by peak memory
    for cap in _caps(fr_mlp.memory):
        plan = to.find_strategy("mlp", CLUSTER, option="mini_time", devices=4, memory_cap=cap, exact=True)
        assert plan.memory <= cap
        assert plan.time == pytest.approx(_best_under(bf.memory, bf.time, cap), rel=1e-12)
        i = fr_mlp.index_under(cap)
        assert plan.time == pytest.approx(fr_mlp.time[i], rel=1e-12)
        assert plan.memory == pytest.approx(fr_mlp.memory[i], rel=1e-12)


def test_pick_on_a_larger_frontier(fr_cnn):
    for cap in _caps(fr_cnn.memory):
        plan = fr_cnn.pick(cap)
        assert plan.memory <= cap
        assert plan.time == pytest.approx(_best_under(fr_cnn.memory, fr_cnn.time, cap), rel=1e-12)
    # strings with units
    cap = fr_cnn.memory[len(fr_cnn) // 2]
    assert fr_cnn.index_under(f"{cap}") == fr_cnn.index_under(cap)


def test_mini_time_below_minimum_is_infeasible(fr_mlp):
    cap = float(fr_mlp.memory.min()) * 0.9
    with pytest.raises(InfeasibleError) as info:
        to.find_strategy("mlp", CLUSTER, option="mini_time", devices=4, memory_cap=cap)
    err = info.value
    assert err.min_memory == pytest.approx(fr_mlp.memory.min(), rel=1e-12)
    assert err.memory_cap == pytest.approx(cap)
    msg = str(err)
    assert f"{fr_mlp.memory.min():.6g} bytes" in msg and f"{cap:.6g} bytes" in msg
    assert "\n" not in msg
    # just below the minimum is still infeasible, exactly at it is not
    below = np.nextafter(fr_mlp.memory.min(), 0)
    with pytest.raises(InfeasibleError):
        fr_mlp.index_under(below)
    assert fr_mlp.index_under(fr_mlp.memory.min()) == 0


def test_mini_time_default_cap_uses_device_memory():
    cl = to.Cluster.preset(CLUSTER)
    plan = to.find_strategy("mlp", cl, option="mini_time", devices=4)
    fr = to.frontier("mlp", cl, devices=4)
    assert plan.time == pytest.approx(fr.time[fr.index_under(cl.device.memory / SAFETY_MARGIN)])


# --- mini_parallelism ----------------------------------------------------------------------------
def test_mini_parallelism_is_smallest_fitting_count(mlp_frontiers):
    counts = sorted(mlp_frontiers)
    mins = {n: float(mlp_frontiers[n].memory.min()) for n in counts}
    assert mins[1] > mins[2] > mins[4]  # so that each count is the answer for some cap
    caps = sorted({c for n in counts for c in _caps(mlp_frontiers[n].memory)})
    for cap in caps[:: max(1, len(caps) // 12)] + [mins[1], mins[2], mins[4]]:
        fitting = [n for n in counts if mins[n] <= cap]
        if not fitting:
            continue
        plan = to.find_strategy("mlp", CLUSTER, option="mini_parallelism", memory_cap=cap, exact=True)
        assert plan.devices == fitting[0]
        below = [n for n in counts if n < plan.devices]
        for n in below:  # the count below does not fit
            with pytest.raises(InfeasibleError):
                mlp_frontiers[n].index_under(cap)
        fr = mlp_frontiers[plan.devices]
        assert plan.time == pytest.approx(fr.time[fr.index_under(cap)], rel=1e-12)
        assert plan.memory <= cap


def test_mini_parallelism_restricted_counts_and_infeasible(mlp_frontiers):
    cap = float(mlp_frontiers[1].memory.min())  # fits on 1 device, but 1 is not offered
    plan = to.find_strategy("mlp", CLUSTER, option="mini_parallelism", devices=[4, 2], memory_cap=cap)
    assert plan.devices == 2
    cap = float(mlp_frontiers[4].memory.min()) * 0.5
    with pytest.raises(InfeasibleError) as info:
        to.find_strategy("mlp", CLUSTER, option="mini_parallelism", memory_cap=cap)
    assert info.value.min_memory == pytest.approx(min(f.memory.min() for f in mlp_frontiers.values()), rel=1e-12)
    assert "at 4 devices" in str(info.value)


# --- profiling -----------------------------------------------------------------------------------
def test_profiling_agrees_with_mini_time(mlp_frontiers):
    cap = float(mlp_frontiers[2].memory[len(mlp_frontiers[2]) // 2])  # fits on 2 and 4, not on 1
    prof = to.find_strategy("mlp", CLUSTER, option="profiling", devices=[1, 2, 4], memory_cap=cap, exact=True)
    assert prof.devices == (1, 2, 4)
    assert prof.memory_cap == cap
    for i, n in enumerate(prof.devices):
        try:
            plan = to.find_strategy("mlp", CLUSTER, option="mini_time", devices=n, memory_cap=cap, exact=True)
        except InfeasibleError as exc:
            assert math.isnan(prof.time[i]) and math.isnan(prof.memory[i])
            assert prof.plans[i] is None
            assert prof.min_memory[i] == pytest.approx(exc.min_memory, rel=1e-12)
            continue
        assert prof.time[i] == pytest.approx(plan.time, rel=1e-12)
        assert prof.memory[i] == pytest.approx(plan.memory, rel=1e-12)
        assert prof.plans[i].time == pytest.approx(plan.time, rel=1e-12)
    assert math.isnan(prof.time[0]) and np.isfinite(prof.time[1:]).all()
    text = str(prof)
    assert "does not fit" in text and "best time" in text


# --- turning point -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "memory, time, expected",
    [
        ([1, 2, 3, 4], [10, 2, 1.5, 1.2], 1),  # sharp knee at the second point
        ([1, 2, 10], [10, 2, 1], 1),  # an L: the corner
        ([1, 5, 6, 7], [10, 9, 1, 0.5], 2),  # the corner is late
        ([1, 2, 3, 4], [4, 3, 2, 1], 3),  # straight line: no knee, min-time end
        ([1, 2, 3], [3.0, 2.9, 1.0], 2),  # concave: no point below the chord, min-time end
        ([1, 2], [2, 1], 1),  # fewer than three points
        ([5], [1], 0),
    ],
)
def test_turning_point_hand_made(memory, time, expected):
    assert api.turning_point(memory, time) == expected
    # invariant under the units of either axis
    assert api.turning_point(np.asarray(memory, float) * 1e9, np.asarray(time, float) * 1e-3) == expected


def test_turning_point_property_and_bad_input(fr_cnn):
    assert fr_cnn.turning_point == api.turning_point(fr_cnn.memory, fr_cnn.time)
    assert 0 <= fr_cnn.turning_point < len(fr_cnn)
    with pytest.raises(InvalidInputError):
        api.turning_point([1, 2, 3], [3, 2])
    with pytest.raises(InvalidInputError):
        api.turning_point([], [])


# --- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(option="fastest"), "option must be one of"),
        (dict(refine="annealing"), "refine must be"),
        (dict(devices=0), "positive"),
        (dict(devices=-4), "positive"),
        (dict(devices=3), "valid"),
        (dict(devices=True), "positive int"),
        (dict(devices="4"), "positive int"),
        (dict(devices=[2, 4]), "one device count"),
        (dict(option="profiling", devices=[1, 3]), "valid"),
        (dict(option="profiling", devices=[]), "at least one"),
        (dict(option="profiling", devices="1,2"), "list"),
        (dict(memory_cap="0GB"), "0GB"),
        (dict(memory_cap="abc"), "abc"),
        (dict(memory_cap=-1e6), "-1000000"),
        (dict(memory_cap="16gb"), "16gb"),
        (dict(refine="mcmc", budget=0), "budget"),
        (dict(refine="mcmc", budget="soon"), "soon"),
        (dict(option="profiling", refine="mcmc"), "profiling"),
    ],
)
def test_find_strategy_bad_input(kwargs, match):
    kwargs = {"option": "mini_time", "devices": 4, **kwargs}
    with pytest.raises(InvalidInputError, match=match):
        to.find_strategy("mlp", CLUSTER, **kwargs)


def test_load_model_and_cluster_bad_input():
    with pytest.raises(InvalidInputError, match="unknown model 'nope'.*mlp"):
        api.load_model("nope")
    with pytest.raises(InvalidInputError, match="key=value"):
        api.load_model("mlp:batch")
    with pytest.raises(InvalidInputError, match="bad options"):
        api.load_model("mlp:colour=red")
    with pytest.raises(InvalidInputError, match="Graph or a torch"):
        api.load_model(42)
    with pytest.raises(InvalidInputError, match="cpu-1x4"):
        api.load_cluster("no-such-preset")
    with pytest.raises(InvalidInputError):
        to.frontier("mlp", CLUSTER, devices=8)


def test_load_model_forms():
    g = api.load_model("mlp:batch=16")
    assert api.load_model(g) is g
    assert api.load_model("tensoropt_py.graph.zoo:mlp").name == "mlp"
    import torch

    module = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with pytest.raises(InvalidInputError, match="example_inputs"):
        api.load_model(module)
    graph = api.load_model(module, (torch.randn(4, 8),))
    fr = to.frontier(graph, CLUSTER, devices=2)
    assert len(fr) >= 1

    class Keyword(torch.nn.Module):  # a module called with keyword inputs, as HF models are
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 3)

        def forward(self, features=None, labels=None):
            return torch.nn.functional.cross_entropy(self.lin(features), labels)

    kw = api.load_model(Keyword(), {"labels": torch.tensor([0, 2, 1, 1]), "features": torch.randn(4, 8)})
    assert {t for t in kw.tensors if kw.tensors[t].role.value == "input"} == {"features", "labels"}


# --- refine="mcmc" -------------------------------------------------------------------------------
def test_refine_mcmc_is_reproducible_and_keeps_additive_time(fr_mlp):
    kw = dict(option="mini_time", devices=4, refine="mcmc", budget=40, seed=3)
    plan = to.find_strategy("mlp", CLUSTER, **kw)
    assert isinstance(plan, to.Plan)
    assert plan.simulated_time is not None and math.isfinite(plan.simulated_time) and plan.simulated_time > 0
    m, t = evaluate(fr_mlp.cost_graph, plan.choices, plan.edge_choices)  # same model, same cost graph
    assert plan.time == pytest.approx(t[0], rel=1e-12)
    assert plan.additive_memory == pytest.approx(m[0], rel=1e-12)
    assert plan.memory == pytest.approx(MemoryModel(fr_mlp.model_cost_graph).peaks(plan.choices, plan.edge_choices)[0])
    assert to.find_strategy("mlp", CLUSTER, **kw) == plan
    assert "simulated" in plan.summary()
    assert to.Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("budget", [200, 500])
def test_refine_maps_mcmc_results_without_an_exact_mesh_config(budget):
    # On the CNN, MCMC's best SOAP strategy has split factors that no kept mesh config has for
    # some operators (the frontier's space prunes them); refinement must still return a
    # simulated plan under the cap rather than give up.
    plan = to.find_strategy("small_cnn", CLUSTER, devices=4, refine="mcmc", budget=budget, seed=0)
    assert plan.simulated_time is not None and plan.simulated_time > 0
    assert plan.memory <= to.Cluster.preset(CLUSTER).device.memory / 1.1


def test_frontier_cache_answers_again_without_tracking(monkeypatch, tmp_path):
    """A second question on the same model, cluster, devices and options tracks nothing (memory and disk)."""
    import tensoropt_py.engine as engine

    api.clear_cache()
    calls = []
    real = engine.track
    monkeypatch.setattr(engine, "track", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = to.frontier("mlp", CLUSTER, devices=4, cache_dir=tmp_path)
    plans = [to.find_strategy("mlp", CLUSTER, devices=4, memory_cap=float(m), cache_dir=tmp_path)
             for m in first.memory]
    assert len(calls) == 1
    assert [p.time for p in plans] == pytest.approx(list(first.time))
    other = to.frontier("mlp", CLUSTER, devices=4, epsilon=0.01)  # other options: tracked again
    assert len(calls) == 2 and other is not first
    api.clear_cache()  # a new process: the disk copy answers, the cost graph is rebuilt for plans
    again = to.frontier("mlp", CLUSTER, devices=4, cache_dir=tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.glob("frontier-*.json"))) == 1
    np.testing.assert_array_equal(again.choices, first.choices)
    assert again.plan(0).time == pytest.approx(first.plan(0).time)



def test_frontier_reports_the_epsilon_the_engine_ended_with(monkeypatch):
    """epsilon="auto" (the default) that turned thinning on: not exact, and the accuracy says so."""
    import importlib

    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "AUTO_EPSILON_CELL_POINTS", 1)
    fr = to.frontier("mlp", CLUSTER, devices=4, cache=False)
    assert fr.epsilon == 1e-3 and not fr.exact and "epsilon=0.001" in fr.accuracy
    exact = to.frontier("mlp", CLUSTER, devices=4, cache=False, exact=True)
    assert exact.epsilon == 0.0 and exact.exact


def test_frontier_accuracy_counts_its_heuristic_steps_in_words():
    """The accuracy line (printed by the CLI and on the plot) names the heuristic steps with
    the right number: "1 heuristic step", "3 heuristic steps", nothing where there are none."""
    import dataclasses

    fr = dataclasses.replace(to.frontier("mlp", CLUSTER, devices=4, cache=False, exact=True), exact=False)
    assert "heuristic" not in fr.accuracy
    assert "1 heuristic step (configs fixed or dropped)" in dataclasses.replace(fr, heuristic_eliminations=1).accuracy
    assert "3 heuristic steps (configs fixed or dropped)" in dataclasses.replace(fr, heuristic_eliminations=3).accuracy


def test_frontier_says_where_the_fastest_points_memory_among_ties_is_not_proven(monkeypatch, tmp_path):
    """The fastest anchor's tie of least time past the tie solve's reach (here: every anchor
    said so): the frontier says so, in its accuracy and its JSON."""
    import importlib

    track_mod = importlib.import_module("tensoropt_py.engine.track")
    solve = track_mod._screened_optimum

    def tied(*args, **kwargs):
        found = solve(*args, **kwargs)
        return found._replace(ties="the fastest strategies tie") if isinstance(found, track_mod._Optimum) else found

    monkeypatch.setattr(track_mod, "_screened_optimum", tied)
    monkeypatch.setattr(track_mod, "_ANCHORS_IN_PROCESS", False)  # a process would not see the patch
    fr = to.frontier("small_cnn", CLUSTER, devices=4, epsilon=1e-3, cache=False)
    assert fr.fastest_ties and "strategies tie for the least time" in fr.accuracy
    assert api.Frontier.from_json(fr.to_json(tmp_path / "f.json")).fastest_ties
    monkeypatch.undo()
    fr = to.frontier("small_cnn", CLUSTER, devices=4, epsilon=1e-3, cache=False)
    assert not fr.fastest_ties and "strategies tie" not in fr.accuracy
    assert not api.Frontier.from_json(fr.to_json(tmp_path / "f.json")).fastest_ties


def test_frontier_says_how_far_a_fastest_point_out_of_exact_reach_may_be(monkeypatch, tmp_path):
    """A graph too wide for the exact fastest strategy: the frontier reports its fastest
    point's gap to a proven lower bound (in its accuracy and its JSON)."""
    import importlib

    from tensoropt_py.engine.screen import lower_bounds, relaxation_bounds

    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "AUTO_EPSILON_CELL_POINTS", 1)
    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.scalar"), "MAX_FACTOR_ENTRIES", 1)
    monkeypatch.setattr(importlib.import_module("tensoropt_py.engine.track"), "_ANCHORS_IN_PROCESS", False)
    fr = to.frontier("mlp", CLUSTER, devices=4, cache=False)
    # measured against a bound at least as tight as the relaxation's (a window bound may prove it)
    bound = lower_bounds(relaxation_bounds(fr.model_cost_graph.cost_graph, [0.0]))[0]
    assert -1e-12 <= fr.fastest_gap <= fr.time.min() / bound - 1 + 1e-12
    assert "lower bound" in fr.accuracy
    back = api.Frontier.from_json(fr.to_json(tmp_path / "f.json"))
    assert back.fastest_gap == fr.fastest_gap
    monkeypatch.undo()
    assert to.frontier("mlp", CLUSTER, devices=4, cache=False).fastest_gap is None  # exact optima: no gap
