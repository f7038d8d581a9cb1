"""Model zoo: parameter / FLOP closed forms, the paper's sizes, structure, and CPU execution."""

import math

import pytest
import torch

from tensoropt_py import models
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph import zoo
from tensoropt_py.graph.ir import OpKind, TensorRole
from tensoropt_py.graph.torch_ops import init_params, run_graph



GiB = 2**30


def _linear_flops(g):
    return sum(op.flops for op in g if op.kind is OpKind.LINEAR)


def _check_structure(g):
    assert g.operators[0].kind is OpKind.INPUT
    assert g.operators[-1].kind is OpKind.LOSS
    assert sum(op.kind is OpKind.INPUT for op in g) == 1
    assert g.num_parameters == sum(t.numel for t in g.tensors.values() if t.role is TensorRole.PARAMETER)
    assert g.parameter_bytes == 4 * g.num_parameters


def test_mlp_closed_form():
    g = zoo.mlp(batch=16, sizes=(20, 30, 5))
    _check_structure(g)
    assert g.num_parameters == 20 * 30 + 30 + 30 * 5 + 5
    assert _linear_flops(g) == 2 * 16 * (20 * 30 + 30 * 5) + 16 * (30 + 5)


def test_small_cnn_closed_form():
    g = zoo.small_cnn(batch=4)
    _check_structure(g)
    assert g.num_parameters == (6 * 25 + 6) + (16 * 6 * 25 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    conv = [op.flops for op in g if op.kind is OpKind.CONV2D]
    assert conv == [2 * 4 * 6 * 28 * 28 * 25 + 4 * 6 * 28 * 28, 2 * 4 * 16 * 10 * 10 * 6 * 25 + 4 * 16 * 10 * 10]


def _gpt_params(V, P, L, D, F=None):
    F = F or 4 * D
    return V * D + P * D + L * (4 * D * D + 4 * D + 4 * D + 2 * D * F + F + D) + 2 * D


@pytest.mark.parametrize("size", ["small", "medium", "large", "xl"])
def test_gpt2_parameters(size):
    L, D, H = zoo.GPT2_SIZES[size]
    g = zoo.gpt2(size, batch=1, seq_len=4)
    assert g.num_parameters == _gpt_params(50257, 1024, L, D)
    if size == "small":
        assert g.num_parameters == 124_439_808
        N = 4
        assert _linear_flops(g) == 2 * N * (L * 12 * D * D + D * 50257) + N * L * (3 * D + D + 4 * D + D)


def test_small_transformer_and_attention_flops():
    B, S, D, H, L = 2, 8, 16, 2, 3
    g = zoo.small_transformer(batch=B, seq_len=S, hidden=D, heads=H, layers=L, vocab=30)
    _check_structure(g)
    assert g.num_parameters == _gpt_params(30, S, L, D)
    att = [op for op in g if op.kind is OpKind.ATTENTION]
    assert len(att) == L and all(op.flops == 2 * B * H * S * S * 2 * (D // H) + 5 * B * H * S * S for op in att)


def test_bert_large_parameters():
    g = zoo.bert_large(batch=1, seq_len=8)
    V, P, D, L = 30522, 512, 1024, 24
    expected = (V + P + 2) * D + 2 * D + L * (12 * D * D + 13 * D) + (D * D + D + 2 * D + V)
    assert g.num_parameters == expected == 335_174_458


def test_transformer_parameters():
    D, L, V = 64, 2, 50
    g = zoo.transformer(batch=2, src_len=3, tgt_len=4, hidden=D, heads=4, layers=L, vocab=V)
    assert g.num_parameters == V * D + L * (12 * D * D + 13 * D) + L * (16 * D * D + 19 * D)
    assert sum(op.kind is OpKind.ATTENTION for op in g) == 3 * L
    assert sum(1 for op in g if op.kind is OpKind.ATTENTION and op.attr("causal")) == L


def test_rnn_and_vgg_wrn_parameters():
    B, T, L, H, V = 2, 3, 2, 8, 11
    g = zoo.rnn(batch=B, seq_len=T, layers=L, hidden=H, vocab=V)
    assert g.num_parameters == V * H + L * (8 * H * H + 4 * H) + H * V + V
    cells = [op for op in g if op.kind is OpKind.RNN_CELL]
    assert len(cells) == L * T
    assert sum(op.flops for op in cells) == sum(
        2 * B * 4 * H * (H + (H if t else 0)) + 4 * B * H + 20 * B * H for _ in range(L) for t in range(T))
    assert zoo.vgg16(batch=1).num_parameters == 138_357_544
    # wide_resnet(width=1) is torchvision's resnet50
    assert zoo.wide_resnet(batch=1, width=1).num_parameters == 25_557_032
    assert zoo.wide_resnet(batch=1, depth=101, width=1).num_parameters == 44_549_160


PAPER = {
    "rnn": zoo.rnn,
    "wide_resnet": zoo.wide_resnet,
    "transformer": zoo.transformer,
    "vgg16": zoo.vgg16,
    "transformer_s": zoo.transformer_s,
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_scale(name):
    """Parameter bytes within 10% of TensorOpt Table 1 / Table 4 (GB read as GiB), and the
    single-device memory estimate printed next to Table 1's "Memory" column.

    Our estimate is ``params x (1 weight + 1 gradient + 2 Adam states) + saved activations``;
    the paper's column is much lower for the RNN (126 GB for 108 GB of weights: it cannot
    include gradients and Adam state) and for WideResNet at batch 256 on 224x224 images (our
    saved activations alone are ~180 GiB), so only a loose sanity bound is asserted.
    """
    g = PAPER[name]()
    gib = g.parameter_bytes / GiB
    paper = zoo.PAPER_PARAMETER_GIB[name]
    mem = g.memory_estimate() / GiB
    print(f"\n{name}: {g.num_parameters:,} params = {gib:.2f} GiB (paper {paper}); memory estimate {mem:.1f} GiB "
          f"(paper {zoo.PAPER_MEMORY_GIB.get(name, '-')}); {len(g)} ops")
    assert abs(gib - paper) / paper < 0.10
    assert g.parameter_bytes * 4 < g.memory_estimate() < 10 * g.parameter_bytes * 4 + 500 * GiB
    assert math.isfinite(g.flops) and g.flops > 0
    assert all(g.parameter_users().values())  # every parameter is read by some operator
    _check_structure(g)
    assert all(op.loop_dims[0].size == 256 for op in g if op.kind is OpKind.INPUT)


def test_models_namespace_and_bad_args():
    assert models.gpt2 is zoo.gpt2 and models.transformer is zoo.transformer
    with pytest.raises(InvalidInputError, match="size"):
        zoo.gpt2("huge")
    with pytest.raises(InvalidInputError, match="batch"):
        zoo.mlp(batch=0)
    with pytest.raises(InvalidInputError, match="depth"):
        zoo.wide_resnet(depth=34)


SMALL = [
    (lambda: zoo.mlp(batch=4, sizes=(8, 6, 3)), {"x": torch.randn(4, 8), "labels": torch.randint(0, 3, (4,))}),
    (lambda: zoo.small_cnn(batch=2), {"x": torch.randn(2, 1, 28, 28), "labels": torch.randint(0, 10, (2,))}),
    (lambda: zoo.small_transformer(dropout=0.1),
     {"input_ids": torch.randint(0, 100, (4, 16)), "labels": torch.randint(0, 100, (4, 16))}),
    (lambda: zoo.rnn(batch=2, seq_len=3, layers=2, hidden=8, vocab=10),
     {"input_ids": torch.randint(0, 10, (2, 3)), "labels": torch.randint(0, 10, (2, 3))}),
    (lambda: zoo.wide_resnet(batch=2, width=2, base=4, image_size=32, num_classes=10),
     {"images": torch.randn(2, 3, 32, 32), "labels": torch.randint(0, 10, (2,))}),
    (lambda: zoo.transformer(batch=2, src_len=4, tgt_len=5, hidden=32, heads=4, layers=1, vocab=50),
     {"src_ids": torch.randint(0, 50, (2, 4)), "tgt_ids": torch.randint(0, 50, (2, 5)),
      "labels": torch.randint(0, 50, (2, 5))}),
]


@pytest.mark.parametrize("make,data", SMALL)
def test_small_models_run(make, data):
    g = make()
    params = init_params(g, seed=0)
    out = run_graph(g, data, params, training=True)
    for t in g.tensors.values():
        if t.name in out:
            assert tuple(out[t.name].shape) == t.shape, t
            assert str(out[t.name].dtype).removeprefix("torch.") == t.dtype, t
    loss = out[g.outputs[-1]]
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for n, p in params.items() if g.tensors[n].role is TensorRole.PARAMETER]
    assert all(gr is not None for gr in grads)
