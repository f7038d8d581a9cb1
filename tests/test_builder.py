"""CostGraph builder: data-parallel costs by hand, decode() vs evaluate(), tensor reuse, bad inputs."""

import numpy as np
import pytest

from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.builder import FORBIDDEN_TIME, build_cost_graph
from tensoropt_py.cost.comm import CommModel
from tensoropt_py.cost.compute import ComputeModel
from tensoropt_py.cost.reschedule import Rescheduler
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.engine import evaluate
from tensoropt_py.graph.builder import GraphBuilder
from tensoropt_py.graph.ir import TensorRole

CL = Cluster.preset("v100-2x8")


def mlp(batch=32, width=64, hidden=128):
    gb = GraphBuilder("mlp")
    x, y = gb.input([("x", (batch, width), "float32"), ("y", (batch,), "int64")])
    h = gb.relu(gb.linear(x, hidden, name="fc1"))
    gb.loss(gb.linear(h, 10, name="fc2"), y)
    return gb.build()


@pytest.fixture(scope="module")
def g():
    return mlp()


@pytest.fixture(scope="module")
def mcg4(g):
    return build_cost_graph(g, CL, 4)


def test_data_parallel_by_hand(g, mcg4):
    n = 4
    row = mcg4.data_parallel_choice()
    rec = mcg4.decode(row)
    for o in rec.ops:
        op = g.operator(o.name)
        sample = [i for i, d in enumerate(op.loop_dims) if d.kind.value == "sample"]
        assert o.config.split_factors()[sample[0]] == n, o
    # memory: the whole Adam state of every parameter + every kept activation / N (one copy each)
    params = sum(t.numel for t in g.parameters) * 16
    kept = {name for op in g for name in op.saved if g.tensors[name].role is not TensorRole.PARAMETER}
    acts = sum(g.tensors[name].nbytes for name in kept) / n
    assert rec.memory == pytest.approx(params + acts)
    # communication: one fused gradient all-reduce per operator with parameters, over all devices
    comm = CommModel(CL)
    group = (tuple(range(n)),)
    expected_sync = sum(
        comm.collective_time("all_reduce", sum(g.tensors[u.tensor].nbytes for u in op.params), group)
        for op in g if op.params
    )
    # plus the all-reduce of the loss, a graph output left as partial sums over the batch split
    expected_sync += comm.collective_time("all_reduce", g.tensors["loss.out"].nbytes, group)
    assert sum(o.comm_time for o in rec.ops) == pytest.approx(expected_sync)
    assert all(e.time == 0 and not e.forward.steps for e in rec.edges)  # no rescheduling under DP
    # compute: roofline of the local shard, forward + backward
    cm = ComputeModel(CL)
    fc1 = [o for o in rec.ops if o.name.endswith("fc1")][0]
    op = g.operator(fc1.name)
    moved = sum(g.tensors[u.tensor].nbytes / (n if u.tensor != op.params[0].tensor and "bias" not in u.tensor
                                              and g.tensors[u.tensor].role is not TensorRole.PARAMETER else 1)
                for u in op.uses())
    want = cm.time(op.flops / n, moved) + cm.time(op.backward_flops / n, 2 * moved)
    # plus one Adam update per (replicated) parameter: 12 flops, 7 fp32 streams per element
    want += sum(cm.time(12 * g.tensors[u.tensor].numel, 28 * g.tensors[u.tensor].numel) for u in op.params)
    assert fc1.compute_time == pytest.approx(want)


def test_decode_totals_equal_evaluate(mcg4):
    rng = np.random.default_rng(0)
    cg = mcg4.cost_graph
    for _ in range(30):
        row = np.array([rng.integers(len(c)) for c in mcg4.configs])
        erow = np.zeros(len(mcg4.edges), dtype=np.int64)
        for j, (sc, dc, table) in enumerate(mcg4.edge_tables):
            u, v = mcg4.edge_index[j]
            finite = np.flatnonzero(np.isfinite(table[sc[row[u]], dc[row[v]], :, 0]))
            erow[j] = rng.choice(finite)
        m, t = evaluate(cg, row[None], erow[None])
        rec = mcg4.decode(row, erow)
        assert rec.memory == pytest.approx(m[0]) and rec.time == pytest.approx(t[0])
        # rescheduling steps of each edge chain the two layouts
        for e in rec.edges:
            if e.forward.steps:
                assert e.forward.steps[0].before == e.src and e.forward.steps[-1].after == e.dst


def test_all_costs_nonnegative_and_counts(mcg4):
    for nc in mcg4.node_costs:
        assert np.all(nc >= 0) and np.all(np.isfinite(nc))
    for sc, dc, table in mcg4.edge_tables:
        t = table[np.isfinite(table)]
        assert np.all(t >= 0)
        assert np.all(np.isfinite(table[..., 0, :]) | np.isfinite(table[..., 1:, :]).any(-2) if table.shape[2] > 1
                      else np.isfinite(table[..., 0, :]))
    counts = mcg4.config_counts()
    assert counts[[n for n in counts if "input" in n][0]] == 1
    assert all(c >= 1 for c in counts.values())


def test_tensor_reuse_options(g, mcg4):
    # relu keeps its output and fc2 keeps its input: a 3-option edge, collapsed where layouts agree
    pairs = [(info, tab) for info, tab in zip(mcg4.edges, mcg4.edge_tables) if info.reuse == "pair"]
    assert pairs
    info, (sc, dc, table) = pairs[0]
    spec = g.tensors[info.tensor]
    for a, A in enumerate(info.src_layouts):
        for b, B in enumerate(info.dst_layouts):
            amem = A.local_numel(spec.shape) * 4
            bmem = B.local_numel(spec.shape) * 4
            if B == A.without_partial():
                assert table[a, b, 0, 0] == amem and np.all(np.isinf(table[a, b, 1:]))
            else:
                assert table[a, b, 0, 0] == amem + bmem
                assert table[a, b, 1, 0] == amem and table[a, b, 2, 0] == bmem
                assert table[a, b, 1, 1] >= table[a, b, 0, 1] and table[a, b, 2, 1] >= table[a, b, 0, 1]


def test_decode_gives_single_copy_edges_their_rederivation(g, mcg4):
    # the decoded re-derivation rebuilds the dropped copy: the consumer's from the producer's
    # ("producer_copy": the forward path again) or the producer's from the consumer's, and its
    # time is what the option charges on top of "both"
    j = next(j for j, info in enumerate(mcg4.edges) if info.reuse == "pair")
    info, (sc, dc, _) = mcg4.edges[j], mcg4.edge_tables[j]
    u, v = mcg4.edge_index[j]
    for ku in range(len(mcg4.configs[u])):
        for kv in range(len(mcg4.configs[v])):
            a, b = sc[ku], dc[kv]
            if info.dst_layouts[b] == info.src_layouts[a].without_partial():
                continue
            row = mcg4.data_parallel_choice()
            row[u], row[v] = ku, kv
            recs = {}
            for r, name in enumerate(("both", "producer_copy", "consumer_copy")):
                ec = np.zeros(len(mcg4.edges), dtype=np.int64)
                ec[j] = r
                recs[name] = mcg4.decode(row, ec).edges[j]
                assert recs[name].reuse == name
            assert recs["both"].rederive is None
            assert recs["producer_copy"].rederive == recs["producer_copy"].forward
            back = recs["consumer_copy"].rederive
            assert back.src == info.dst_layouts[b] and back.dst == info.src_layouts[a].without_partial()
            for name in ("producer_copy", "consumer_copy"):
                assert recs[name].time == pytest.approx(recs["both"].time + recs[name].rederive.time)
            return
    pytest.fail("no edge with distinct producer and consumer layouts")


def test_mesh_tensorflow_edges(g):
    mcg = build_cost_graph(g, CL, 4, mesh_tensorflow=(2, 2))
    assert all(c.mesh.shape == (2, 2) for cfgs in mcg.configs[1:] for c in cfgs)
    for info, (sc, dc, table) in zip(mcg.edges, mcg.edge_tables):
        for a, A in enumerate(info.src_layouts):
            for b, B in enumerate(info.dst_layouts):
                if B != A.without_partial():
                    assert table[a, b, 0, 1] == FORBIDDEN_TIME


def test_bad_inputs(g):
    with pytest.raises(InvalidInputError, match=r"device count 3 .*valid counts: 1, 2, 4, 8, 16"):
        build_cost_graph(g, CL, 3)
    with pytest.raises(InvalidInputError, match="optimizer 'lamb'"):
        build_cost_graph(g, CL, 4, optimizer="lamb")
    gb = GraphBuilder("odd")
    x, y = gb.input([("x", (3, 5), "float32"), ("y", (3,), "int64")])
    gb.loss(gb.linear(x, 7), y)
    with pytest.raises(InvalidInputError, match="divides no splittable dimension"):
        build_cost_graph(gb.build(), CL, 2)


def test_optimizer_changes_memory(g):
    sgd = build_cost_graph(g, CL, 2, optimizer="sgd")
    adam = build_cost_graph(g, CL, 2, optimizer="adam")
    p = sum(t.numel for t in g.parameters)
    row = sgd.data_parallel_choice()
    assert adam.decode(adam.data_parallel_choice()).memory - sgd.decode(row).memory == pytest.approx(p * 8)


# -- the fast builder (signature caches, batched move-graph rescheduling) vs the reference ------------

import dataclasses  # noqa: E402

from tensoropt_py import models  # noqa: E402


def assert_same_cost_graph(a, b):
    """Identical nodes, configs, node costs, layout classes, edge tables and decoded strategies."""
    assert a.op_names == b.op_names and a.num_devices == b.num_devices
    assert a.configs == b.configs
    assert len(a.node_costs) == len(b.node_costs)
    for x, y in zip(a.node_costs, b.node_costs):
        assert x.shape == y.shape and np.array_equal(x, y)
    assert a.edges == b.edges and a.edge_index == b.edge_index
    for ea, eb in zip(a.edges, b.edges):  # same layout objects up to their fine grid too
        for x, y in zip(ea.src_layouts + ea.dst_layouts + ea.dst_grad_layouts,
                        eb.src_layouts + eb.dst_layouts + eb.dst_grad_layouts):
            assert (x.sizes, x.place) == (y.sizes, y.place)
    assert len(a.edge_tables) == len(b.edge_tables)
    for (sa, da, ta), (sb, db, tb) in zip(a.edge_tables, b.edge_tables):
        assert np.array_equal(sa, sb) and np.array_equal(da, db)
        assert ta.shape == tb.shape and np.array_equal(ta, tb)
    for x, y in zip(a.cost_graph.node_costs, b.cost_graph.node_costs):
        assert np.array_equal(x, y)
    rng = np.random.default_rng(0)
    rows = [a.data_parallel_choice(), np.zeros(len(a.configs), dtype=np.int64)]
    rows += [np.array([rng.integers(len(c)) for c in a.configs]) for _ in range(2)]
    for row in rows:
        ra, rb = a.decode(row), b.decode(row)
        assert ra == rb  # same records, same rescheduling paths
        assert ra.time == pytest.approx(evaluate(a.cost_graph, row)[1], rel=1e-9)


@pytest.mark.parametrize("model,n,kw", [
    ("mlp", 4, {}), ("mlp", 8, {}), ("small_transformer", 4, {}), ("small_transformer", 8, {}),
    ("small_cnn", 8, {}), ("small_transformer", 8, {"mesh_tensorflow": True}),
    ("small_transformer", 8, {"max_configs": 5}), ("small_transformer", 4, {"mixed_precision": True, "optimizer": "sgd"}),
])
def test_fast_builder_equals_reference(model, n, kw):
    g = mlp() if model == "mlp" else getattr(models, model)()
    fast = build_cost_graph(g, CL, n, **kw)
    ref = build_cost_graph(g, CL, n, reference=True, **kw)
    assert_same_cost_graph(fast, ref)


def test_fast_builder_equals_reference_mixed_prime_grids():
    # 6 devices: fine grids (2, 3) and (3, 2), edges between them use the multi-grid search
    cl = dataclasses.replace(CL, devices_per_machine=3)
    g = models.small_transformer()
    assert_same_cost_graph(build_cost_graph(g, cl, 6), build_cost_graph(g, cl, 6, reference=True))


def test_fast_builder_with_python_kernel(monkeypatch):
    # without the compiled kernel the builder falls back on the pure-Python Dijkstra: same results
    import tensoropt_py.cost.reschedule as reschedule

    monkeypatch.setattr(reschedule, "_dijkstra", reschedule.dijkstra_py)
    g = models.small_transformer()
    assert_same_cost_graph(build_cost_graph(g, CL, 4), build_cost_graph(g, CL, 4, reference=True))


@pytest.mark.parametrize("threads", [1, 3])
def test_fast_builder_threads_equal_reference(threads, monkeypatch):
    # the rescheduling searches of a batch run `threads` at a time (however small), in waves
    # (small here: several per batch)
    monkeypatch.setattr(Rescheduler, "WAVE_NODES", 5000)
    monkeypatch.setattr(Rescheduler, "THREAD_MIN_EDGES", 0)
    g = models.small_transformer()
    assert_same_cost_graph(build_cost_graph(g, CL, 8, threads=threads), build_cost_graph(g, CL, 8, reference=True))


def test_builder_threads_checked(g):
    with pytest.raises(InvalidInputError, match="threads"):
        build_cost_graph(g, CL, 2, threads=0)
    with pytest.raises(InvalidInputError, match="threads"):
        build_cost_graph(g, CL, 2, threads=0, reference=True)
    with pytest.raises(InvalidInputError, match="threads sets the default rescheduler"):
        build_cost_graph(g, CL, 2, threads=2, rescheduler=Rescheduler(CommModel(CL)))
