"""Operator cost (Eq. 1): parameter state, saved shards, roofline compute, gradient all-reduce groups."""

import pytest

from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.comm import CommModel
from tensoropt_py.cost.compute import ComputeModel
from tensoropt_py.cost.operator_cost import OperatorCoster
from tensoropt_py.cost.optimizer import state_bytes_per_param, update_work
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph.ir import DimKind, LoopDim, Operator, OpKind, TensorRole, TensorSpec, TensorUse
from tensoropt_py.space.configs import enumerate_configs

CL = Cluster.preset("v100-2x8")
B, K, N = 64, 256, 512
OP = Operator("fc", OpKind.LINEAR,
              (LoopDim("b", B, DimKind.SAMPLE), LoopDim("k", K, DimKind.REDUCTION), LoopDim("n", N, DimKind.PARAMETER)),
              inputs=(TensorUse("x", (("b",), ("k",))),), params=(TensorUse("w", (("k",), ("n",))),),
              outputs=(TensorUse("y", (("b",), ("n",))),), flops=2 * B * K * N, backward_flops=4 * B * K * N,
              saved=("x", "w"))
T = {"x": TensorSpec("x", (B, K)), "y": TensorSpec("y", (B, N)), "w": TensorSpec("w", (K, N), role=TensorRole.PARAMETER)}


def by_str(cfgs, s):
    return [i for i, c in enumerate(cfgs) if str(c) == s][0]


@pytest.mark.parametrize("opt,per", [("sgd", 8), ("momentum", 12), ("adam", 16)])
def test_costs_by_hand(opt, per):
    cfgs = enumerate_configs(OP, 8)
    c = OperatorCoster(CL, optimizer=opt).costs(OP, T, cfgs)
    comm, cm = CommModel(CL), ComputeModel(CL)
    # model parallel over n on 8 devices: w sharded, x whole (saved), no gradient sync
    i = by_str(cfgs, "mesh[8] map[-1,-1,0]")
    assert c.memory[i] == K * N / 8 * per + B * K * 4
    assert c.comm_time[i] == 0
    moved = (B * K + K * N / 8 + B * N / 8) * 4
    uf, ub = update_work(opt)  # the optimizer update of the local weight shard
    assert c.compute_time[i] == pytest.approx(cm.time(2 * B * K * N / 8, moved) + cm.time(4 * B * K * N / 8, 2 * moved)
                                              + cm.time(uf * K * N / 8, ub * K * N / 8))
    # mesh [2,4]: batch over the first axis (devices 0-3 vs 4-7), n over the second: all-reduce w over b's groups
    i = by_str(cfgs, "mesh[2,4] map[0,-1,1]")
    assert c.comm_time[i] == pytest.approx(
        comm.collective_time("all_reduce", K * N / 4 * 4, ((0, 4), (1, 5), (2, 6), (3, 7))))
    # replicating axes repeat the work and need no reduction
    i = by_str(cfgs, "mesh[2,4] map[0,-1,-1]")
    assert c.comm_time[i] == pytest.approx(comm.collective_time("all_reduce", K * N * 4, ((0, 4), (1, 5), (2, 6), (3, 7))))
    assert c.compute_time[i] == pytest.approx(cm.time(2 * B * K * N / 2, (B * K / 2 + K * N + B * N / 2) * 4)
                                              + cm.time(4 * B * K * N / 2, 2 * (B * K / 2 + K * N + B * N / 2) * 4)
                                              + cm.time(uf * K * N, ub * K * N))
    assert state_bytes_per_param(opt) == per


def test_exclude_saved_and_bad_optimizer():
    cfgs = enumerate_configs(OP, 2)
    full = OperatorCoster(CL).costs(OP, T, cfgs)
    ex = OperatorCoster(CL).costs(OP, T, cfgs, exclude_saved=("x",))
    assert (full.memory - ex.memory == full.saved_memory).all() and (ex.saved_memory == 0).all()
    with pytest.raises(InvalidInputError, match="unknown optimizer 'rmsprop'"):
        OperatorCoster(CL, optimizer="rmsprop")


@pytest.mark.parametrize("devices", [1, 4])
def test_shared_rnn_weights_are_charged_once(devices):
    # Every LSTM cell of a layer reads the same weights over the time steps: under data
    # parallelism the parameter state (weights, gradients, Adam's m and v) is held once per
    # device, not once per time step.
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.graph import zoo

    graph = zoo.rnn(batch=8, seq_len=5, layers=2, hidden=32, vocab=50)
    assert max(len(u) for u in graph.parameter_users().values()) == 5  # the test needs shared weights
    cluster = Cluster.preset("cpu-1x4")
    mcg = build_cost_graph(graph, cluster, devices)
    coster = OperatorCoster(cluster)
    readers = {p: len(u) for p, u in graph.parameter_users().items()}
    choice = mcg.data_parallel_choice()
    total = 0.0
    for i, name in enumerate(mcg.op_names):
        op = graph.operator(name)
        total += coster.costs(op, graph.tensors, [mcg.configs[i][choice[i]]], readers=readers).param_memory[0]
    expected = graph.num_parameters * state_bytes_per_param("adam", "float32")
    assert total == pytest.approx(expected, rel=1e-12)


def test_graph_output_left_partial_pays_its_all_reduce():
    # The loss is a scalar no operator reads: under a batch split it is a partial sum on every
    # device, and no edge reduces it. Its all-reduce is owed by the loss operator (comm time),
    # under exactly the configurations that leave it partial.
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.graph import zoo

    graph = zoo.mlp(batch=8, sizes=(12, 16, 6))
    assert "loss.out" in graph.outputs and not graph.consumers("loss.out")
    cluster = Cluster.preset("cpu-1x4")
    comm = CommModel(cluster)
    op = graph.operator("loss")
    cfgs = enumerate_configs(op, 4)
    coster = OperatorCoster(cluster, comm=comm)
    free = coster.costs(op, graph.tensors, cfgs)
    owed = coster.costs(op, graph.tensors, cfgs, reduce_outputs=("loss.out",))
    dp = by_str(cfgs, "mesh[4] map[0,-1]")  # batch over all 4 devices: partial over all of them
    assert owed.comm_time[dp] - free.comm_time[dp] == pytest.approx(
        comm.collective_time("all_reduce", 4, ((0, 1, 2, 3),)))
    assert owed.comm_time[dp] > 0
    half = by_str(cfgs, "mesh[2,2] map[1,-1]")  # batch over the inner axis: partial over pairs (0,1), (2,3)
    assert owed.comm_time[half] - free.comm_time[half] == pytest.approx(
        comm.collective_time("all_reduce", 4, ((0, 1), (2, 3))))
    rep = by_str(cfgs, "mesh[4] map[-1,-1]")  # replicated: the loss is whole everywhere
    assert owed.comm_time[rep] == free.comm_time[rep] == 0
    # the cost graph charges it: the loss node's data-parallel comm time is that all-reduce
    mcg = build_cost_graph(graph, cluster, 4)
    i = mcg.op_names.index("loss")
    k = mcg.data_parallel_choice()[i]
    assert mcg.node_costs[i][k][3] == pytest.approx(comm.collective_time("all_reduce", 4, ((0, 1, 2, 3),)))


def test_efficiency_divides_the_roofline_part_only():
    import dataclasses

    from tensoropt_py.cost.compute import ComputeModel

    base = Cluster.preset("h100-4x8")
    plain = dataclasses.replace(base, device=dataclasses.replace(base.device, efficiency={}))
    f, b = 2e12, 1e9
    t_plain = ComputeModel(plain).times(f, b, family="linear")
    t_eff = ComputeModel(base).times(f, b, family="linear")
    over = base.device.kernel_overhead
    assert base.device.efficiency_for("linear") < 1
    assert t_eff - over == pytest.approx((t_plain - over) / base.device.efficiency_for("linear"), rel=1e-12)
    assert ComputeModel(base).times(f, b, family="reshape") == pytest.approx(t_plain, rel=1e-12)


def test_uncalibrated_h100_time_of_the_ground_truth_within_20_percent(h100_ground_truth):
    import json

    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.inputs import load_model
    from tensoropt_py.plan import Plan

    gt = h100_ground_truth
    for name in ("gpt2", "bert_large"):
        plan = Plan.from_json(gt / f"{name}.plan.json")
        measured = json.loads((gt / f"{name}.report.json").read_text())["time"]["measured"]
        rec = build_cost_graph(load_model(name), Cluster.preset("h100-4x8"), 1).decode(plan.choices, plan.edge_choices)
        assert rec.time == pytest.approx(measured, rel=0.20), name


def test_forward_times_is_the_forward_pass_costs_charges():
    """What a recomputation re-runs: the forward pass as :meth:`costs` charges it, the family's
    efficiency included (a forward-only operator's forward is its whole compute); with a
    table, the measured forward alone, else the measured total in the roofline's proportion."""
    from dataclasses import replace

    from tensoropt_py.cost.operator_cost import config_compute_keys, forward_key

    h100 = Cluster.preset("h100-4x8")
    assert h100.device.efficiency_for("linear") < 1  # else the efficiency would go unchecked
    fwd_only = replace(OP, params=(), saved=("x",), backward_flops=0)
    cfgs = enumerate_configs(fwd_only, 4)
    oc = OperatorCoster(h100)
    assert oc.forward_times(fwd_only, T, cfgs) == pytest.approx(oc.costs(fwd_only, T, cfgs).compute_time, rel=1e-12)

    no_params = replace(OP, params=(), saved=("x",))
    cfgs = enumerate_configs(no_params, 4)
    roof_fwd = oc.forward_times(no_params, T, cfgs)
    roof_all = oc.costs(no_params, T, cfgs).compute_time
    assert (roof_fwd > 0).all() and (roof_fwd < roof_all).all()
    keys = config_compute_keys(no_params, T, cfgs, "float32")
    both = {key: 1e-3 * (k + 1) for k, key in enumerate(keys)}
    measured = OperatorCoster(h100, compute=ComputeModel(h100, both))  # no torch_device in the meta: no call floor
    assert measured.forward_times(no_params, T, cfgs) == pytest.approx(
        [both[key] * f / a for key, f, a in zip(keys, roof_fwd, roof_all)], rel=1e-12)
    alone = OperatorCoster(h100, compute=ComputeModel(h100, {**both, forward_key(keys[0]): 7e-5}))
    got = alone.forward_times(no_params, T, cfgs)
    assert got[0] == 7e-5 and got[1:] == pytest.approx(measured.forward_times(no_params, T, cfgs)[1:], rel=1e-12)
