"""The plan simulator runs every plan: oracles are hand-computed timelines and the additive model."""

import dataclasses

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph.zoo import mlp
from tensoropt_py.inputs import load_model
from tensoropt_py.plan import Collective
from tensoropt_py.soap.plan_simulator import simulate_plan

CLUSTER = "cpu-1x4"


@pytest.fixture(scope="module")
def st_frontier():
    return to.frontier("small_transformer", CLUSTER, devices=4, epsilon=1e-3, progress=False)


def test_one_device_without_communication_equals_the_additive_time():
    plan = to.find_strategy("small_transformer", CLUSTER, devices=1)
    sim = simulate_plan(plan, load_model("small_transformer"))
    assert plan.communication_time == 0
    assert sim.time == pytest.approx(plan.time, rel=1e-6)  # zero-time steps take 1e-12 s
    assert sim.busy(0, "compute") == pytest.approx(plan.compute_time, rel=1e-6)


def test_every_frontier_plan_runs_and_overlap_never_slows_it(st_frontier):
    graph = load_model("small_transformer")
    savings = []
    for i in range(0, len(st_frontier), max(1, len(st_frontier) // 12)):
        plan = st_frontier.plan(i)
        sim = simulate_plan(plan, graph)
        assert 0 < sim.time <= plan.time * (1 + 1e-6)
        # every device does all of its compute and its share of every collective
        for d in range(plan.devices):
            assert sim.busy(d, "compute") == pytest.approx(plan.compute_time, rel=1e-6)
        savings.append(sim.overlap_saving)
    assert max(savings) > 0  # some gradient all-reduce overlaps backward compute


def test_hand_computed_timeline_of_a_two_layer_mlp():
    """Two linear layers on 2 devices: gradient sync of the last layer overlaps the first's backward."""
    graph = mlp(batch=8, sizes=(8, 8, 4))
    plan = to.find_strategy(graph, CLUSTER, devices=2)
    # rewrite the costs: 1 s compute per operator, forward share from the graph's FLOPs,
    # 0.5 s gradient sync on operators with parameters, no rescheduling
    ops = []
    for o, op in zip(plan.operators, graph.operators):
        sync = 0.5 if op.params else 0.0
        ops.append(dataclasses.replace(o, compute_time=1.0, communication_time=sync, time=1.0 + sync))
    edges = tuple(dataclasses.replace(e, forward=(), backward=(), rederive=()) for e in plan.edges)
    plan = dataclasses.replace(plan, operators=tuple(ops), edges=edges, time=sum(o.time for o in ops))
    sim = simulate_plan(plan, graph)
    # compute is serial on each device: len(ops) seconds. Backward runs in reverse order, so the
    # sync of the first operator with parameters starts last and only the backward of the
    # operators before it (data loading: none) can hide it; the other syncs hide behind it.
    first = next(i for i, op in enumerate(graph.operators) if op.params)
    hidden = sum(op.backward_flops / (op.flops + op.backward_flops) if op.backward_flops else 0.0
                 for op in graph.operators[:first])
    expected = len(ops) + max(0.0, 0.5 - hidden)
    assert sim.time == pytest.approx(expected, rel=1e-9)
    assert sim.time < plan.time


def test_a_collective_waits_for_the_slowest_member():
    graph = mlp(batch=8, sizes=(8, 8, 4))
    plan = to.find_strategy(graph, CLUSTER, devices=2)
    ops = tuple(dataclasses.replace(o, compute_time=1.0, communication_time=0.0, time=1.0) for o in plan.operators)
    # one forward all-gather on the first edge, over both devices
    gather = Collective(kind="all_gather", groups=((0, 1),), nbytes=64.0, time=0.25)
    edges = [dataclasses.replace(e, forward=(), backward=(), rederive=()) for e in plan.edges]
    edges[0] = dataclasses.replace(edges[0], forward=(gather,))
    plan = dataclasses.replace(plan, operators=ops, edges=tuple(edges), time=len(ops) + 0.25)
    sim = simulate_plan(plan, graph)
    starts = [e.start for e in sim.events if e.label.endswith("all_gather")]
    assert len(starts) == 2 and starts[0] == starts[1]
    assert sim.time == pytest.approx(len(ops) + 0.25, rel=1e-9)  # on the critical path: nothing hides it


def test_refine_runs_when_no_candidate_has_a_soap_form(monkeypatch):
    """Plans splitting reduction dimensions have no SOAP form; refinement still simulates them."""
    from tensoropt_py.soap import refine
    from tensoropt_py.soap.config import NotSoapError

    def never(plan, graph):
        raise NotSoapError("splits a reduction dimension")

    monkeypatch.setattr(refine, "plan_to_soap", never)
    plan = to.find_strategy("small_transformer", CLUSTER, devices=4, refine="mcmc", budget=30, seed=0,
                            cache=False)
    graph = load_model("small_transformer")
    assert plan.simulated_time == pytest.approx(simulate_plan(plan, graph).time, rel=1e-12)
    assert any("SOAP form" in note for note in plan.notes)


def test_find_strategy_reports_simulated_and_additive_time():
    plan = to.find_strategy("small_transformer", CLUSTER, devices=4)
    assert plan.simulated_time == pytest.approx(simulate_plan(plan, load_model("small_transformer")).time)
    assert plan.simulated_time <= plan.time * (1 + 1e-6)


def test_plan_of_another_model_is_refused(st_frontier):
    with pytest.raises(InvalidInputError, match="another model"):
        simulate_plan(st_frontier.plan(0), load_model("mlp"))


def test_timeline_plot_draws_streams_and_measured_time(tmp_path, st_frontier):
    from tensoropt_py.plot import plot_timeline

    sim = simulate_plan(st_frontier.plan(len(st_frontier) // 2), load_model("small_transformer"))
    fig = plot_timeline(sim, devices=2, measured_time=sim.time * 1.3, path=tmp_path / "t.png")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["device 0 compute", "device 0 network", "device 1 compute", "device 1 network"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(x.startswith("measured") for x in legend) and "gradient sync" in legend
    assert (tmp_path / "t.png").stat().st_size > 1000
    with pytest.raises(InvalidInputError, match="devices"):
        plot_timeline(sim, devices=0)
    assert np.isfinite(sim.overlap_saving)
