"""Executor pieces that need no MPI: layouts' local blocks, plan parsing, unsupported configurations."""

import pytest
import torch

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.exec.local_ops import UnsupportedConfigError, prepare
from tensoropt_py.exec.measure import expected_collectives, relative_error
from tensoropt_py.exec.runner import config_from_plan, reference_train, synthetic_batch
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
    plan = fr.plan(0)
    for i, (op, op_plan) in enumerate(zip(g.operators, plan.operators)):
        cfg = config_from_plan(op, op_plan)
        assert str(cfg) == op_plan.config
        assert cfg.key == mcg.configs[i][plan.choices[i]].key
    exp = expected_collectives(plan, g)
    assert sum(v for (ph, _), v in exp.items() if ph != "grad") == sum(
        1 for e in plan.edges for c in e.forward + e.backward if c.kind != "slice")
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
