"""Plan: JSON round trip, recomputation from the cost graph, display, bad files."""

import json
from dataclasses import replace

import pytest

import tensoropt_py as to
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.engine import evaluate
from tensoropt_py.cost.memory import MemoryModel
from tensoropt_py.plan import Collective, EdgePlan, OperatorPlan, Plan


@pytest.fixture(scope="module")
def fr():
    return to.frontier("small_transformer", "cpu-1x4", devices=4)


def test_round_trip_every_point(fr, tmp_path):
    for i in range(0, len(fr), max(1, len(fr) // 15)):
        plan = fr.plan(i)
        assert Plan.from_json(plan.to_json()) == plan
        assert Plan.from_json(plan.to_json(indent=None)) == plan
        path = tmp_path / f"p{i}.json"
        plan.to_json(path)
        back = Plan.from_json(path)
        assert back == plan
        assert Plan.from_json(str(path)) == plan
        # nested types come back as the same classes, not dicts or lists
        assert all(isinstance(o, OperatorPlan) for o in back.operators)
        assert all(isinstance(e, EdgePlan) for e in back.edges)
        assert all(isinstance(c, Collective) for e in back.edges for c in e.forward + e.backward)
        assert isinstance(back.choices, tuple) and isinstance(back.operators[0].mesh, tuple)


def test_round_trip_optional_fields(fr):
    plan = replace(fr.plan(0).with_simulated_time(1.25e-3), notes=("a note",), method="tensoropt+mcmc")
    back = Plan.from_json(plan.to_json())
    assert back == plan
    assert back.simulated_time == 1.25e-3 and back.notes == ("a note",)


def test_plan_recomputes_from_cost_graph(fr):
    for i in (0, fr.turning_point, len(fr) - 1):
        plan = Plan.from_json(fr.plan(i).to_json())  # a loaded plan still names its strategy
        m, t = evaluate(fr.cost_graph, plan.choices, plan.edge_choices)
        assert plan.additive_memory == pytest.approx(m[0], rel=1e-12)
        peak = MemoryModel(fr.model_cost_graph).profile(plan.choices, plan.edge_choices)
        assert plan.memory == pytest.approx(peak.peak, rel=1e-12) and plan.memory == pytest.approx(fr.memory[i])
        assert (plan.peak_phase, plan.peak_operator) == (peak.phase, peak.operator)
        assert plan.time == pytest.approx(t[0], rel=1e-12)
        total_m = sum(o.memory for o in plan.operators) + sum(e.memory for e in plan.edges)
        total_t = sum(o.time for o in plan.operators) + sum(e.time for e in plan.edges)
        assert total_m == pytest.approx(plan.additive_memory, rel=1e-12)
        assert total_t == pytest.approx(plan.time, rel=1e-12)
        # edge times are communication: compute comes from operators only
        assert plan.communication_time == pytest.approx(
            sum(o.communication_time for o in plan.operators) + sum(e.time for e in plan.edges), rel=1e-9, abs=1e-15)


def test_plan_describes_every_operator(fr):
    plan = fr.plan(fr.turning_point)
    graph = to.api.load_model("small_transformer")
    assert [o.name for o in plan.operators] == [op.name for op in graph.operators]
    for o in plan.operators:
        for dim, axis in o.assignment:
            assert 0 <= axis < len(o.mesh)
        for tensor, tmap in o.tensor_maps:
            assert all(-1 <= a < len(o.mesh) for a in tmap)
    text = plan.table()
    assert all(o.name in text for o in plan.operators)
    assert plan.summary().startswith("Plan(small_transformer on cpu-1x4, 4 devices")
    assert "more operators" in plan.table(limit=2)


def test_plan_bad_files(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        Plan.from_json(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        Plan.from_json(bad)
    with pytest.raises(InvalidInputError, match="format"):
        Plan.from_json(json.dumps({"format": "tensoropt_py.frontier/1"}))
    with pytest.raises(InvalidInputError, match="lacks the fields"):
        Plan.from_json(json.dumps({"model": "m"}))


def test_reuse_names_are_documented(fr):
    from typing import get_args

    from tensoropt_py.plan import ReuseChoice

    names = {e.reuse for i in range(len(fr)) for e in fr.plan(i).edges}
    assert names and names <= set(get_args(ReuseChoice))
