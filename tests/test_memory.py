"""Peak memory (tensoropt_py.cost.memory) against torch's own accounting.

Oracle: ``torch.distributed._tools.mem_tracker.MemTracker`` around one training iteration of
the executor on CPU (:func:`tensoropt_py.exec.runner.tracked_peak`), which follows every storage
torch allocates; on an H100 it matched ``torch.cuda.max_memory_allocated`` within 0.5%.
"""

import json

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.cost.memory import PHASES, MemoryModel, peak_frontier
from tensoropt_py.engine import evaluate, track
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.inputs import load_model
from tensoropt_py.plan import Plan, plan_from_choices

#: Relative tolerance of predicted vs tracked peaks on 1-device CPU plans (measured: under 0.1%).
TOLERANCE = 0.02

MODELS = [
    "mlp",
    "small_cnn",
    "small_transformer:batch=4,seq_len=64,hidden=64,vocab=1000,dropout=0.1",
    "bert_large:batch=2,seq_len=32,layers=2,hidden=64,heads=4,vocab=500,positions=32",
]


def _executor(graph, plan):
    from tensoropt_py.exec.backend import make_backend, world
    from tensoropt_py.exec.runner import Executor

    return Executor(plan, graph, make_backend("mpi", world()), seed=0)


@pytest.mark.parametrize("spec", MODELS, ids=[m.split(":")[0] for m in MODELS])
def test_peak_matches_memtracker_on_one_device(spec):
    pytest.importorskip("mpi4py")
    from tensoropt_py.exec.runner import tracked_peak

    graph = load_model(spec)
    cluster = to.Cluster.preset("cpu-1x4")
    mcg = build_cost_graph(graph, cluster, 1)
    fr = track(mcg.cost_graph)
    for i in sorted({0, len(fr.time) - 1}):  # least memory and fastest
        plan = plan_from_choices(mcg, fr.choices[i], fr.edge_choices[i], model=graph.name, cluster=cluster.name)
        ex = _executor(graph, plan)
        ex.step(0)  # optimizer state exists from here on (steady state)
        measured = tracked_peak(ex, 1)
        assert measured is not None
        assert plan.memory == pytest.approx(measured, rel=TOLERANCE), (spec, i, plan.peak_phase, plan.peak_operator)
        assert plan.peak_phase in PHASES


def test_peak_is_at_the_loss_head_for_a_large_vocabulary():
    # logits, log-probabilities and their gradient dominate: the peak is the loss's backward
    graph = load_model("gpt2:batch=2,seq_len=1024")
    mcg = build_cost_graph(graph, to.Cluster.preset("h100-4x8"), 1)
    prof = MemoryModel(mcg).profile(np.zeros(len(mcg.op_names), dtype=int))
    assert (prof.phase, prof.operator) == ("backward", "loss")
    logits = 2 * 1024 * 50257 * 4
    assert prof.transient >= 2 * logits  # the log-probabilities' and the logits' gradients
    assert prof.peak > prof.additive


def test_ground_truth_h100_peaks_within_3_percent(h100_ground_truth):
    gt = h100_ground_truth
    for name in ("gpt2", "bert_large"):
        plan = Plan.from_json(gt / f"{name}.plan.json")
        measured = json.loads((gt / f"{name}.report.json").read_text())["memory"]["measured"]
        mcg = build_cost_graph(load_model(name), to.Cluster.preset("h100-4x8"), 1)
        peak = MemoryModel(mcg).profile(plan.choices, plan.edge_choices).peak
        assert peak == pytest.approx(measured, rel=0.03), name
        assert abs(plan.memory - measured) / measured > 0.005  # the old additive prediction was further off


def test_peaks_vectorised_equal_profiles_and_frontier_is_pareto():
    fr = to.frontier("small_transformer", "cpu-1x4", devices=4)
    mm = MemoryModel(fr.model_cost_graph)
    peaks = mm.peaks(fr.choices, fr.edge_choices)
    for i in range(len(fr)):
        prof = mm.profile(fr.choices[i], fr.edge_choices[i])
        assert prof.peak == pytest.approx(peaks[i], rel=1e-12)
        assert prof.peak == pytest.approx(prof.persistent + prof.gradients + prof.saved + prof.transient, rel=1e-12)
    np.testing.assert_allclose(peaks, fr.memory, rtol=1e-12)
    assert np.all(np.diff(fr.memory) > 0) and np.all(np.diff(fr.time) < 0)
    # every point is achievable: its time is the cost graph's
    _, t = evaluate(fr.cost_graph, fr.choices, fr.edge_choices)
    np.testing.assert_allclose(t, fr.time, rtol=1e-12)


def test_peaks_of_many_strategies_are_evaluated_in_bounded_blocks(monkeypatch):
    # a frontier of tens of thousands of points must not build all its timelines at once
    import tracemalloc

    import tensoropt_py.cost.memory as memory

    mcg = build_cost_graph(load_model("small_transformer"), to.Cluster.preset("cpu-1x4"), 4)
    mm = MemoryModel(mcg)
    rng = np.random.default_rng(0)
    P = 600
    choices = np.stack([rng.integers(0, len(c), P) for c in mcg.configs], axis=1)
    edge_choices = np.zeros((P, len(mcg.edges)), dtype=np.int64)
    whole = mm.peaks(choices, edge_choices)
    row = 8 * (4 * mm.n + 2)  # bytes of one strategy's row of one timeline array
    monkeypatch.setattr(memory, "PEAK_BLOCK_BYTES", 4 * row * 16)  # blocks of 16 strategies
    tracemalloc.start()
    try:
        blocks = mm.peaks(choices, edge_choices)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(blocks, whole)
    assert peak < 4 * row * P  # all at once, the four timeline arrays alone take 4 * row * P



def test_one_strategy_timeline_is_kept_only_for_that_strategy():
    # a plan asks for its strategy's profile and live bytes in turn; asking for another in between
    # must not return the first one's
    mcg = build_cost_graph(load_model("small_transformer"), to.Cluster.preset("cpu-1x4"), 4)
    rng = np.random.default_rng(1)
    a, b = (np.array([rng.integers(0, len(c)) for c in mcg.configs]) for _ in range(2))
    mm = MemoryModel(mcg)
    live_a, prof_b, live_b = mm.live(a), mm.profile(b), mm.live(b)
    assert not np.array_equal(live_a, live_b)
    np.testing.assert_array_equal(live_a, MemoryModel(mcg).live(a))
    np.testing.assert_array_equal(live_b, MemoryModel(mcg).live(b))
    assert prof_b.peak == pytest.approx(live_b.max(), rel=1e-12)
    assert mm.peaks(np.stack([a, b])) == pytest.approx([live_a.max(), live_b.max()], rel=1e-12)


@pytest.mark.parametrize("columns", [1, 2, 3])
def test_unique_rows_equal_numpy_unique_of_the_rows(columns):
    from tensoropt_py.cost.memory import _unique_rows

    rng = np.random.default_rng(columns)
    for size in (1, 7, 300):
        cols = [rng.integers(0, rng.integers(1, 9), size) for _ in range(columns)]
        uniq, inv = _unique_rows(*cols)
        ref_uniq, ref_inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        np.testing.assert_array_equal(uniq, ref_uniq)
        np.testing.assert_array_equal(inv, np.asarray(ref_inv).ravel())

def test_peak_frontier_drops_points_dominated_by_peak():
    time = np.array([3.0, 2.0, 1.0])  # a tracked frontier (additive memory 1, 2, 3)

    class Fixed:
        def peaks(self, choices, edge_choices):
            return np.array([5.0, 4.0, 6.0])  # point 0 is dominated by point 1 once peaks count

    keep, peaks = peak_frontier(None, time, np.zeros((3, 1)), np.zeros((3, 0)), model=Fixed())
    assert keep.tolist() == [1, 2] and peaks.tolist() == [4.0, 6.0]


def test_bad_choices_are_named():
    mcg = build_cost_graph(load_model("mlp"), to.Cluster.preset("cpu-1x4"), 2)
    mm = MemoryModel(mcg)
    with pytest.raises(InvalidInputError, match="entries per strategy"):
        mm.peaks([[0]])
    bad = np.zeros(len(mcg.op_names), dtype=int)
    bad[1] = 10**6
    with pytest.raises(InvalidInputError, match=r"config 1000000 of node 1"):
        mm.profile(bad)


def test_old_plan_files_without_peak_fields_load():
    data = json.loads(to.frontier("mlp", "cpu-1x4", devices=2).plan(0).to_json())
    for key in ("peak_operator", "peak_phase", "additive_memory"):
        data.pop(key, None)
    plan = Plan.from_dict(data)
    assert plan.peak_phase == "" and plan.additive_memory is None
    assert Plan.from_json(plan.to_json()) == plan
    new = to.frontier("mlp", "cpu-1x4", devices=2).plan(0)
    back = Plan.from_json(new.to_json())
    assert back == new and back.peak_phase in PHASES and back.additive_memory > 0
    assert "peak in" in new.summary()


def _tracked(graph, plan):
    from tensoropt_py.exec.runner import tracked_peak

    ex = _executor(graph, plan)
    ex.step(0)
    return tracked_peak(ex, 1)


def test_recomputed_plans_peak_matches_memtracker_on_one_device():
    # recomputation: outputs dropped after their last forward reader, re-run from the first
    # backward read, saved tensors held to the end of backward (as the executor does)
    pytest.importorskip("mpi4py")
    from tensoropt_py.cost.training import TrainingOptions

    graph = load_model("small_transformer:batch=4,seq_len=64,hidden=64,vocab=1000")
    cluster = to.Cluster.preset("cpu-1x4")
    mcg = build_cost_graph(graph, cluster, 1, training=TrainingOptions(recompute=True))
    fr = track(mcg.cost_graph)
    counts = [sum(mcg.configs[i][k].recompute for i, k in enumerate(ch)) for ch in fr.choices]
    mm = MemoryModel(mcg)
    for i in sorted({0, int(np.argmax(counts)), len(fr.time) // 2}):
        plan = plan_from_choices(mcg, fr.choices[i], fr.edge_choices[i], model=graph.name, cluster=cluster.name)
        assert plan.memory == mm.profile(fr.choices[i], fr.edge_choices[i]).peak  # a recompute space reports the peak
        assert plan.memory == pytest.approx(_tracked(graph, plan), rel=TOLERANCE), (i, counts[i])


def test_bf16_peak_matches_memtracker_on_one_device():
    pytest.importorskip("mpi4py")
    import dataclasses

    from tensoropt_py.cost.training import TrainingOptions

    cl = to.Cluster.preset("cpu-1x4")
    cluster = dataclasses.replace(cl, device=dataclasses.replace(cl.device, dtype_flops={"bfloat16": "50GFLOPS"}))
    for spec in MODELS:
        graph = load_model(spec)
        mcg = build_cost_graph(graph, cluster, 1, training=TrainingOptions(precision="bf16-mixed"))
        fr = track(mcg.cost_graph)
        plan = plan_from_choices(mcg, fr.choices[0], fr.edge_choices[0], model=graph.name, cluster=cluster.name,
                                 precision="bf16-mixed")
        # bf16 working weights and gradients, fp32 masters (and their gradients at the step)
        assert plan.memory == pytest.approx(_tracked(graph, plan), rel=TOLERANCE), (spec, plan.peak_phase)
        assert plan.memory > plan.additive_memory  # the sum misses the step's fp32 gradients and transients


def test_gpu_bf16_charges_the_fp32_copies_autocast_keeps():
    """On a GPU, autocast runs layer norms in fp32 (their saved input and statistics are fp32
    copies) and the loss's log-softmax too (the logits' gradient is fp32 until cast); a CPU's
    autocast keeps them in bf16. Two clusters that differ only in that: the live memory at the
    loss's backward differs by those copies exactly, and nowhere by more."""
    import dataclasses

    from tensoropt_py.cost.training import TrainingOptions, autocast_fp32_copies

    graph = load_model("small_transformer:batch=4,seq_len=16,hidden=32,heads=4,layers=2,vocab=100")
    gpu = to.Cluster.preset("h100-4x8")
    cpu = dataclasses.replace(gpu, device=dataclasses.replace(gpu.device, name="cpu-" + gpu.device.name))
    assert not gpu.device.is_cpu and cpu.device.is_cpu
    bf16 = TrainingOptions(precision="bf16-mixed")
    on_gpu, on_cpu = (build_cost_graph(graph, c, 1, training=bf16) for c in (gpu, cpu))
    copies = autocast_fp32_copies(on_gpu.graph)
    assert sorted(copies) == ["h0.ln1", "h0.ln2", "h1.ln1", "h1.ln2", "ln_f"]
    tensors = on_gpu.graph.tensors
    for i, op in enumerate(on_gpu.graph.operators):  # node memory: the copies of its own tensors
        extra = sum(x * tensors[t].numel * 2 for t, x in copies.get(op.name, {}).items())
        assert np.asarray(on_gpu.node_costs[i])[:, 0] - np.asarray(on_cpu.node_costs[i])[:, 0] == \
            pytest.approx(extra), op.name
    choices = [0] * len(on_gpu.op_names)
    diff = MemoryModel(on_gpu, foreach=True).live(choices) - MemoryModel(on_cpu, foreach=True).live(choices)
    loss = next(i for i, op in enumerate(on_gpu.graph.operators) if op.kind.value == "loss")
    logits = tensors[on_gpu.graph.operators[loss].inputs[0].tensor]
    every_copy = sum(x * tensors[t].numel * 2 for d in copies.values() for t, x in d.items())
    at_loss_backward = 4 * len(choices) - 2 - 2 * loss
    assert diff[at_loss_backward] == pytest.approx(every_copy + logits.numel * 2)
    assert diff.min() >= 0 and diff.max() == pytest.approx(diff[at_loss_backward])
    # 32-true is the same on both
    plain = [build_cost_graph(graph, c, 1) for c in (gpu, cpu)]
    assert all(np.array_equal(np.asarray(x)[:, 0], np.asarray(y)[:, 0])
               for x, y in zip(plain[0].node_costs, plain[1].node_costs))


def test_sharded_state_divides_master_and_state_by_the_replicas():
    # reference: the cost graph's own sharded-state delta (cost.training) on the same configs
    from dataclasses import replace

    from tensoropt_py.cost.training import TrainingOptions

    mcg = build_cost_graph(load_model("mlp"), to.Cluster.preset("cpu-1x4"), 4,
                           training=TrainingOptions(shard_optimizer=True))
    mm = MemoryModel(mcg)
    checked = 0
    for i, cfgs in enumerate(mcg.configs):
        for k, c in enumerate(cfgs):
            if not c.shard_state or replace(c, shard_state=False) not in cfgs:
                continue  # (a plain twin may be pruned as dominated)
            plain = cfgs.index(replace(c, shard_state=False))
            drop = mcg.node_costs[i][plain][0] - mcg.node_costs[i][k][0]
            assert drop > 0
            assert mm._node(i, plain)[0] - mm._node(i, k)[0] == pytest.approx(drop, rel=1e-12)
            zero_sync, zero_kept, zero_gather, _, _ = mm._node(i, k)[7]
            # an all-gather rebuilds one group's weights; the reduce-scatter holds them and the chunk
            assert 0 < zero_gather <= mm._node(i, k)[1] and zero_gather < zero_sync
            assert 0 < zero_kept < zero_sync
            checked += 1
    assert checked > 0


def test_plans_with_the_older_timeline_load_with_one_event_per_phase():
    from tensoropt_py.cost.memory import memory_events

    plan = to.frontier("mlp", "cpu-1x4", devices=2).plan(0)
    n = len(plan.operators)
    data = json.loads(plan.to_json())
    live = data["memory_timeline"]
    old = live[:2 * n] + live[2 * n:4 * n:2] + live[4 * n:]  # one backward event per operator
    data["memory_timeline"] = old
    back = Plan.from_dict(data)
    assert len(back.memory_timeline) == len(memory_events([o.name for o in plan.operators])) == 4 * n + 1
    assert back.memory_timeline[:2 * n] == tuple(live[:2 * n]) and back.memory_timeline[-1] == live[-1]
    assert back.memory_timeline[2 * n:4 * n:2] == back.memory_timeline[2 * n + 1:4 * n:2] == tuple(old[2 * n:3 * n])
