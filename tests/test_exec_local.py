"""Executor pieces that need no MPI: layouts' local blocks, plan parsing, unsupported configurations."""

import pytest
import torch

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.exec.local_ops import UnsupportedConfigError, prepare
from tensoropt_py.exec.measure import expected_collectives, relative_error
from tensoropt_py.exec.runner import reference_train, synthetic_batch
from tensoropt_py.plan import config_from_plan
from tensoropt_py.exec.shard import local_shape, parse_layout, partial_pieces, region, shard
from tensoropt_py.graph import zoo
from tensoropt_py.space.configs import enumerate_configs
from tensoropt_py.space.layout import Layout


def test_regions_tile_the_tensor():
    lay = Layout((2, 2, 2), (0, 1, 0))  # dim 0 over axes 0 and 2 (axis 0 outer), dim 1 over axis 1
    full = torch.arange(8 * 6).reshape(8, 6)
    seen = torch.zeros_like(full)
    for r in range(8):
        (a, b), (c, d) = region(lay, full.shape, r)
        assert (b - a, d - c) == local_shape(lay, full.shape) == (2, 3)
        seen[a:b, c:d] += 1
        assert torch.equal(shard(full, lay, r), full[a:b, c:d])
    assert torch.all(seen == 1)
    assert region(lay, (8, 6), 1) == ((2, 4), (0, 3))  # device 1: coords (0, 0, 1) -> block 1 of dim 0


def test_partial_pieces_sum_to_the_block():
    lay = Layout((2, 2), (-2, 1))
    full = torch.randint(-9, 9, (4, 6)).float()
    for col in (0, 1):
        ranks = [r for r in range(4) if r % 2 == col]
        total = sum(partial_pieces(full, lay, r, seed=3) for r in ranks)
        assert torch.equal(total, shard(full, lay, ranks[0]))


def test_parse_layout_round_trips():
    for lay in (Layout((2, 2), (0, -1)), Layout((2, 3), (-2, 1)), Layout((2, 2, 2), (0, 0, -1))):
        assert parse_layout(str(lay), lay.num_devices) == lay
    with pytest.raises(InvalidInputError, match="spans 4 devices"):
        parse_layout("layout[S0:4]", 2)


def test_conv_split_over_rows_is_refused_with_op_and_config():
    g = zoo.small_cnn(batch=4, image_size=12)
    conv = g.operator("conv1")
    h = [i for i, d in enumerate(conv.loop_dims) if d.name == "h"][0]
    cfg = next(c for c in enumerate_configs(conv, 2) if c.assignment[h] >= 0)
    with pytest.raises(UnsupportedConfigError, match=r"conv1.*halo") as info:
        prepare(conv, cfg, g, 0)
    assert isinstance(info.value, NotImplementedError) and str(cfg) in str(info.value)
    # a 2x2 max-pool split over rows has no halo: supported
    pool = g.operator("pool1")
    hp = [i for i, d in enumerate(pool.loop_dims) if d.name == "h"][0]
    cfgp = next(c for c in enumerate_configs(pool, 2) if c.assignment[hp] >= 0)
    prepare(pool, cfgp, g, 1)


def test_plan_configs_and_expected_collectives():
    import tensoropt_py as to

    g = zoo.mlp(batch=8, sizes=(12, 16, 6))
    fr = to.frontier(g, "cpu-1x4", devices=4)
    mcg = fr.model_cost_graph
    from tensoropt_py.engine import track
    from tensoropt_py.plan import plan_from_choices

    # the least additive-memory strategy keeps one copy of the hidden activation and re-derives
    # the other in backward (on the peak frontier the re-derivation's buffers cost more)
    add = track(mcg.cost_graph, exact=True)
    plan = plan_from_choices(mcg, add.choices[0], add.edge_choices[0], model=g.name, cluster="cpu-1x4")
    for i, (op, op_plan) in enumerate(zip(g.operators, plan.operators)):
        cfg = config_from_plan(op, op_plan)
        assert str(cfg) == op_plan.config
        assert cfg.key == mcg.configs[i][plan.choices[i]].key
    exp = expected_collectives(plan, g)
    assert sum(v for (ph, _), v in exp.items() if ph != "grad") == sum(
        1 for e in plan.edges for c in e.forward + e.backward + e.rederive if c.kind != "slice")
    assert any(e.reuse == "producer_copy" and e.rederive for e in plan.edges)
    assert exp[("rederive", "all_gather")] >= 1
    assert relative_error(2.0, 1.0) == 1.0


def test_synthetic_batch_and_reference():
    g = zoo.small_transformer(batch=2, seq_len=8, hidden=16, heads=2, layers=1, vocab=32)
    a, b = synthetic_batch(g, 1, 0), synthetic_batch(g, 1, 0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert int(a["input_ids"].max()) < 32 and int(a["labels"].max()) < 32
    losses, params = reference_train(g, 2, seed=0, optimizer="sgd", lr=0.1)
    assert len(losses) == 2 and losses[1] < losses[0] + 1.0 and "wte.weight" in params


def test_nccl_backend_is_refused_cleanly_without_cuda():
    from tensoropt_py.errors import TensorOptError
    from tensoropt_py.exec.backend import make_backend

    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the NCCL path is exercised by test_exec_mpi")
    with pytest.raises(TensorOptError, match="needs CUDA"):
        make_backend("nccl")
    with pytest.raises(InvalidInputError, match="backend must be one of"):
        make_backend("gloo")


# ----------------------------------------------------------------------------------------------
# a tiny HuggingFace GPT-2 imported with from_torch (tests/mpi/exec_models.py:gpt2)
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpt2():
    """``(graph, module)``: the executor tests' tiny GPT-2 and the torch module it was imported from."""
    import sys
    from pathlib import Path

    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "mpi"))
    try:
        import exec_models
    finally:
        sys.path.pop(0)
    module, _ = exec_models.gpt2_module()
    return exec_models.gpt2(), module


def test_gpt2_reference_trains_like_the_module(gpt2):
    # the executor's oracle (run_graph over the imported IR) follows torch training of the module
    from tensoropt_py.graph.torch_ops import init_params

    graph, module = gpt2
    losses, params = reference_train(graph, 2, seed=3, optimizer="adam", lr=1e-2)
    init = init_params(graph, seed=3)
    named = dict(module.named_parameters())
    assert set(named) == set(init)  # the tied lm_head weight is the embedding's
    with torch.no_grad():
        for name, p in named.items():
            p.copy_(init[name])
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    got = []
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        loss = module(**synthetic_batch(graph, 3, step))
        loss.backward()
        opt.step()
        got.append(float(loss.detach()))
    assert got == pytest.approx(losses, rel=1e-5)
    for name, p in named.items():
        assert torch.allclose(p.detach(), params[name], rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize("n", [2, 4])
def test_every_gpt2_config_is_exact_on_local_shards(gpt2, n):
    # every configuration of every operator, on n virtual ranks: the local outputs assemble to
    # the full operator's outputs, and the local gradients (seeded with the output gradient's
    # blocks) to the full gradients, in the layouts the configuration implies
    from tensoropt_py.exec.testing import check_local_shards
    from tensoropt_py.graph.ir import OpKind
    from tensoropt_py.graph.torch_ops import init_params, run_graph

    graph, _ = gpt2
    params = init_params(graph, seed=1)
    env = {k: v.detach() for k, v in {**params, **run_graph(graph, synthetic_batch(graph, 1, 0), params)}.items()}
    gen = torch.Generator().manual_seed(5)
    checked = 0
    for op in graph.operators:
        if op.kind in (OpKind.INPUT, OpKind.OPAQUE):
            continue
        checked += len(check_local_shards(graph, op, env, n, gen))
    assert checked > 100


def test_split_mean_loss_with_ignored_labels_raises():
    # the global number of counted labels is unknown to a shard: refused, never a wrong loss
    from tensoropt_py.errors import TensorOptError
    from tensoropt_py.graph.builder import GraphBuilder

    gb = GraphBuilder("ce")
    x, y = gb.input([("x", (4, 3), "float32"), ("y", (4,), "int64")])
    gb.loss(x, y, reduction="mean")
    g = gb.build()
    op = next(o for o in g.operators if o.kind.value == "loss")
    cfg = next(c for c in enumerate_configs(op, 2) if c.assignment[0] >= 0)
    local = prepare(op, cfg, g, 0)
    xl, yl = torch.randn(2, 3), torch.tensor([0, 2])
    part = local.run({"x": xl, "y": yl}, {})[op.outputs[0].tensor]  # this half's share of the mean over 4
    assert torch.allclose(part, torch.nn.functional.cross_entropy(xl, yl, reduction="sum") / 4)
    with pytest.raises(TensorOptError, match=r"'loss'.*ignore_index=-100"):
        local.run({"x": torch.randn(2, 3), "y": torch.tensor([0, -100])}, {})
