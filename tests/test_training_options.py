"""Training options in the search space: recomputation, sharded optimizer state, bf16-mixed."""

import dataclasses
import json

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py.cli import main as cli_main
from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.cost.optimizer import state_bytes_per_param
from tensoropt_py.cost.training import TrainingOptions, check_training_options, precision_graph
from tensoropt_py.engine import track
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.exec.measure import expected_collectives
from tensoropt_py.graph import zoo
from tensoropt_py.plan import Plan

CL = Cluster.preset("cpu-1x4")


@pytest.fixture(scope="module")
def graph():
    return zoo.small_transformer(batch=4, seq_len=16, hidden=32, heads=2, layers=2, vocab=64)


@pytest.fixture(scope="module")
def builds(graph):
    return {k: build_cost_graph(graph, CL, 4, training=TrainingOptions(*k)) for k in
            [(False, False), (True, False), (False, True), (True, True)]}


def _bf16_cluster():
    return dataclasses.replace(CL, name="cpu-1x4-bf16",
                               device=dataclasses.replace(CL.device, dtype_flops={"bfloat16": "100GFLOPS"}))


def test_default_options_build_the_plain_space(graph, builds):
    plain = build_cost_graph(graph, CL, 4)
    same = builds[(False, False)]
    assert [len(c) for c in plain.configs] == [len(c) for c in same.configs]
    for a, b in zip(plain.node_costs, same.node_costs):
        np.testing.assert_array_equal(a, b)
    assert not any(c.recompute or c.shard_state for cs in plain.configs for c in cs)


def test_plain_strategies_cost_the_same_in_the_extended_space(graph, builds):
    """A strategy choosing no option costs exactly what it costs in the plain space (the "keep"
    edges move a consumer's copy from its node onto the edge, nothing else changes)."""
    plain = builds[(False, False)]
    fr = track(plain.cost_graph, method="ldp")
    for ext in (builds[(False, False)], builds[(True, False)]):  # (sharded variants may prune plain configs)
        for p in (0, len(fr.memory) // 2, len(fr.memory) - 1):
            rec = plain.decode(fr.choices[p], fr.edge_choices[p])
            row = [ext.configs[i].index(o.config) for i, o in enumerate(rec.ops)]
            r2 = ext.decode(row, fr.edge_choices[p])  # same edges, same reuse options
            assert r2.memory == pytest.approx(rec.memory) and r2.time == pytest.approx(rec.time)


def test_extended_frontier_dominates_the_plain_one_and_points_are_achievable(builds):
    plain = track(builds[(False, False)].cost_graph, method="ldp")
    for key in [(True, False), (False, True), (True, True)]:
        mcg = builds[key]
        fr = track(mcg.cost_graph, method="ldp")
        for m, t in zip(plain.memory, plain.time):
            assert np.any((fr.memory <= m * (1 + 1e-9)) & (fr.time <= t * (1 + 1e-9))), (key, m, t)
        for p in (0, len(fr.memory) // 2, len(fr.memory) - 1):
            rec = mcg.decode(fr.choices[p], fr.edge_choices[p])
            assert rec.memory == pytest.approx(fr.memory[p]) and rec.time == pytest.approx(fr.time[p])
        assert fr.memory.min() < plain.memory.min()
    rec_only = track(builds[(True, False)].cost_graph, method="ldp")
    mcg = builds[(True, False)]
    least = mcg.decode(rec_only.choices[0], rec_only.edge_choices[0])
    assert any(o.config.recompute for o in least.ops)


def test_recomputed_operator_drops_what_it_saved_and_pays_its_forward(graph, builds):
    mcg = builds[(True, False)]
    i = mcg.op_names.index("h0.mlp.gelu")
    cfgs = mcg.configs[i]
    costs = mcg.node_costs[i]
    pairs = 0
    for k, c in enumerate(cfgs):
        if not c.recompute:
            continue
        base = [j for j, d in enumerate(cfgs) if not d.recompute and d.mesh == c.mesh and d.fine == c.fine]
        if base:
            j = base[0]
            pairs += 1
            assert costs[k, 2] > costs[j, 2]  # forward run again
            assert costs[k, 0] <= costs[j, 0]  # gelu saves its input only: nothing more to keep
    assert pairs > 0
    # the edge from a recomputed producer costs no memory: its copies are recomputed
    j = [e for e, info in enumerate(mcg.edges) if info.producer == "h0.mlp.gelu"][0]
    src, dst, table = mcg.edge_tables[j]
    rec_rows = src[[k for k, c in enumerate(cfgs) if c.recompute]]
    assert np.all(table[rec_rows][..., 0, 0] == 0.0)
    stored_rows = src[[k for k, c in enumerate(cfgs) if not c.recompute]]
    assert np.any(table[stored_rows][..., 0, 0] > 0.0)  # fc2 keeps gelu's output when it is stored


def test_sharded_state_divides_optimizer_state_by_the_replicas(graph, builds):
    plain, mcg = builds[(False, False)], builds[(False, True)]
    i = mcg.op_names.index("h0.mlp.fc1")
    dp = [k for k, c in enumerate(plain.configs[i]) if str(c) == "mesh[4] map[0,-1,-1,-1]"][0]
    sh = [k for k, c in enumerate(mcg.configs[i]) if c.shard_state and str(c).startswith("mesh[4] map[0,-1,-1,-1]")]
    assert sh, [str(c) for c in mcg.configs[i]]
    w = graph.tensors[graph.operator("h0.mlp.fc1").params[0].tensor].numel
    b = graph.tensors[graph.operator("h0.mlp.fc1").params[1].tensor].numel
    state = state_bytes_per_param("adam") - 8  # weight and gradient stay whole
    saved = plain.node_costs[i][dp, 0] - mcg.node_costs[i][sh[0], 0]
    assert saved == pytest.approx((w + b) * state * (1 - 1 / 4))


def test_bf16_mixed_uses_the_bf16_rate_and_half_size_activations(graph):
    cl = _bf16_cluster()
    g16 = precision_graph(graph, "bf16-mixed")
    assert g16.tensors["h0.mlp.gelu.out" if "h0.mlp.gelu.out" in g16.tensors else
                       graph.operator("h0.mlp.gelu").outputs[0].tensor].dtype == "bfloat16"
    assert all(t.dtype == "float32" for t in g16.tensors.values() if t.role.value == "parameter")
    plain = to.frontier(graph, cl, 4, progress=False, cache=False)
    half = to.frontier(graph, cl, 4, precision="bf16-mixed", progress=False, cache=False)
    assert half.precision == "bf16-mixed" and half.plan(0).precision == "bf16-mixed"
    assert half.time.min() < plain.time.min()
    assert half.memory.min() < plain.memory.min()


@pytest.mark.parametrize("kwargs, words", [
    (dict(precision="bf16-mixed"), ["'bf16-mixed'", "bfloat16", "v100-2x8", "32-true"]),
    (dict(precision="fp8"), ["'fp8'", "32-true", "bf16-mixed"]),
    (dict(shard_optimizer=True, optimizer="sgd"), ["'sgd'", "momentum", "adam"]),
    (dict(recompute="yes"), ["recompute", "'yes'"]),
])
def test_bad_combinations_name_the_value_and_what_is_allowed(kwargs, words):
    with pytest.raises(InvalidInputError) as err:
        to.frontier("mlp", "v100-2x8", 8, progress=False, **kwargs)
    for w in words:
        assert w in str(err.value)
    with pytest.raises(InvalidInputError):
        to.find_strategy("mlp", "v100-2x8", devices=8, progress=False, **kwargs)


def test_options_are_part_of_the_cache_key():
    a = to.frontier("mlp", "cpu-1x4", 4, progress=False)
    b = to.frontier("mlp", "cpu-1x4", 4, recompute=True, progress=False)
    c = to.frontier("mlp", "cpu-1x4", 4, recompute=True, progress=False)
    assert a is not b and b is c and b.recompute and not a.recompute


def test_plan_records_options_and_round_trips(graph):
    fr = to.frontier(graph, CL, 4, recompute=True, shard_optimizer=True, progress=False)
    use = fr.option_usage()
    i = int(np.argmax(use["recompute"] + use["shard_state"]))
    plan = fr.plan(i)
    assert sum(o.recompute for o in plan.operators) == use["recompute"][i]
    assert sum(o.shard_state for o in plan.operators) == use["shard_state"][i]
    back = Plan.from_json(plan.to_json())
    assert back == plan
    assert "recompute" in plan.table() or "shard-state" in plan.table()
    # older plan JSON without the fields still loads, every option off
    d = json.loads(plan.to_json())
    for o in d["operators"]:
        o.pop("recompute"), o.pop("shard_state")
    d.pop("precision")
    old = Plan.from_dict(d)
    assert not any(o.recompute or o.shard_state for o in old.operators) and old.precision == "32-true"
    # the collectives the plan implies follow the options
    want = expected_collectives(plan, graph)
    if use["shard_state"][i]:
        assert want[("grad", "reduce_scatter")] == want[("grad", "all_gather")] > 0
    fr2 = to.Frontier.from_json(fr.to_json()) if hasattr(to, "Frontier") else None
    if fr2 is not None:
        assert fr2.recompute and fr2.shard_optimizer and fr2.precision == "32-true"


def test_cli_flags_and_show(tmp_path, capsys):
    out = tmp_path / "plan.json"
    rc = cli_main(["find", "--model", "small_transformer", "--cluster", "cpu-1x4", "--devices", "4", "--recompute",
                   "--shard-optimizer", "--memory-cap", "0.25MB", "-q", "--json", str(out)])
    assert rc == 0
    plan = Plan.from_json(out)
    assert any(o.recompute for o in plan.operators)
    capsys.readouterr()
    assert cli_main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "options" in shown and "recompute" in shown
    assert cli_main(["frontier", "--model", "mlp", "--cluster", "v100-2x8", "--devices", "8", "--precision",
                     "bf16-mixed", "-q"]) == 2
    assert "bf16-mixed" in capsys.readouterr().err


def test_plot_marks_points_using_each_lever(tmp_path, graph):
    pytest.importorskip("matplotlib")
    fr = to.frontier(graph, CL, 4, recompute=True, shard_optimizer=True, progress=False)
    fig = fr.plot(tmp_path / "f.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("recomputation" in t for t in labels)
    assert (tmp_path / "f.png").stat().st_size > 0


def test_check_training_options_defaults():
    assert check_training_options() == TrainingOptions()
    assert not TrainingOptions().expands and TrainingOptions().compute_dtype == "float32"


def test_mcmc_refinement_refuses_training_options():
    with pytest.raises(InvalidInputError, match="refine='mcmc'.*recompute=True"):
        to.find_strategy("mlp", "cpu-1x4", devices=4, recompute=True, refine="mcmc", progress=False)
