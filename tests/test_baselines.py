"""Baselines against the exact frontier: each baseline's space is a subset of ours.

So on a small model whose frontier is exact, every baseline plan must be weakly dominated
by some frontier point; OptCNN (minimum time) must reach the frontier's minimum time, ToFu
(minimum memory over a restricted space) cannot go below the frontier's minimum memory, and
every point of the Mesh-TensorFlow frontier is weakly dominated by ours.

Dominance is checked on the cost graph's additive costs (TensorOpt Eq. 3, what every planner
here optimises): ``Frontier.memory`` and ``Plan.memory`` are peaks (tensoropt_py.cost.memory),
``Plan.additive_memory`` the sum.
"""

from types import SimpleNamespace

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py import baselines as bl
from tensoropt_py.engine import evaluate, track

RTOL = 1e-9

CASES = [("mlp", "cpu-1x4", 4), ("small_cnn", "cpu-1x4", 4), ("small_cnn", "cpu-1x4", 2), ("mlp", "v100-2x8", 8)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{c}-{d}" for m, c, d in CASES])
def case(request):
    model, cluster, devices = request.param
    fr = to.frontier(model, cluster, devices=devices, exact=True)
    assert fr.exact
    cl = to.Cluster.preset(cluster)
    plans = bl.all_baselines(fr.model_cost_graph, cl, exact=True)
    additive = track(fr.cost_graph, exact=True)  # the frontier of Eq. 3's sums
    ref = SimpleNamespace(memory=additive.memory, time=additive.time, cost_graph=fr.cost_graph)
    return ref, plans, (model, cluster, devices)


def _dominated(fr, memory, time):
    """Some frontier point with memory <= and time <= (up to rounding)."""
    tol_m = RTOL * max(abs(memory), 1.0)
    ok = (fr.memory <= memory + tol_m) & (fr.time <= time * (1 + RTOL))
    return bool(ok.any())


def test_all_baselines_present(case):
    fr, plans, _ = case
    assert set(plans) == {"data parallel", "OptCNN", "ToFu", "SOYBEAN"}
    assert [p.method for p in plans.values()] == ["data_parallel", "optcnn", "tofu", "soybean"]


def test_every_baseline_is_weakly_dominated(case):
    fr, plans, _ = case
    for name, plan in plans.items():
        assert _dominated(fr, plan.additive_memory, plan.time), (name, plan.additive_memory, plan.time)


def test_baseline_costs_recompute(case):
    fr, plans, _ = case
    for name, plan in plans.items():
        m, t = evaluate(fr.cost_graph, plan.choices, plan.edge_choices)
        assert plan.additive_memory == pytest.approx(m[0], rel=1e-12), name
        assert plan.time == pytest.approx(t[0], rel=1e-12), name


def test_optcnn_reaches_minimum_time(case):
    fr, plans, _ = case
    assert plans["OptCNN"].time == pytest.approx(fr.time.min(), rel=RTOL)


def test_tofu_memory_not_below_frontier(case):
    fr, plans, _ = case
    assert plans["ToFu"].additive_memory >= fr.memory.min() * (1 - RTOL)


def test_data_parallel_splits_the_batch(case):
    fr, plans, (model, _, devices) = case
    graph = to.api.load_model(model)
    for o in plans["data parallel"].operators:
        op = graph.operator(o.name)
        sample = [d.name for d in op.loop_dims if d.kind.name == "SAMPLE"]
        if sample and op.loop_dims[[d.name for d in op.loop_dims].index(sample[0])].size % devices == 0:
            axes = dict(o.assignment)
            assert sample[0] in axes and o.mesh[axes[sample[0]]] == devices, o


def test_mesh_tensorflow_frontier_is_dominated(case):
    fr, _, (model, cluster, devices) = case
    mtf = bl.mesh_tensorflow(model, cluster, devices, exact=True)
    assert len(mtf) >= 1
    assert np.all(np.isfinite(mtf.time))
    mem, tim = evaluate(mtf.cost_graph, mtf.choices, mtf.edge_choices)
    for m, t in zip(mem, tim):
        assert _dominated(fr, m, t), (m, t)


def test_baselines_standalone_match_prebuilt():
    """Called with (model, cluster, devices) they cost the same as on a prebuilt cost graph."""
    fr = to.frontier("mlp", "cpu-1x4", devices=4, exact=True)
    cl = to.Cluster.preset("cpu-1x4")
    for fn in (bl.data_parallel, bl.optcnn, bl.tofu, bl.soybean):
        a = fn("mlp", "cpu-1x4", 4)
        b = fn(cluster=cl, cost_graph=fr.model_cost_graph)
        assert a.choices == b.choices and a.time == pytest.approx(b.time, rel=1e-12), fn.__name__


def test_restrict_cost_graph_keeps_absent_options_absent():
    """memory_scale=0 must not turn +inf (absent option) into NaN."""
    import warnings

    fr = to.frontier("mlp", "cpu-1x4", devices=4)
    keep = [np.arange(len(c)) for c in fr.cost_graph.node_costs]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        sub = bl.restrict_cost_graph(fr.cost_graph, keep, memory_scale=0.0)
    for (_, _, e0), (_, _, e1) in zip(fr.cost_graph.edges, sub.edges):
        t0, t1 = np.asarray(getattr(e0, "table", e0)), np.asarray(getattr(e1, "table", e1))
        assert not np.isnan(t1).any()
        np.testing.assert_array_equal(np.isinf(t0[..., 0]), np.isinf(t1[..., 0]))
        assert np.all(t1[..., 0][np.isfinite(t1[..., 0])] == 0)
