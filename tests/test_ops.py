"""Operator builders: FLOPs closed forms, loop dims, saved tensors, and execution vs torch."""

import math

import pytest
import torch
import torch.nn.functional as F

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph import GraphBuilder
from tensoropt_py.graph.ir import DimKind, OpKind
from tensoropt_py.graph.torch_ops import run_operator




def _gb(*specs):
    gb = GraphBuilder()
    names = gb.input(list(specs))
    return gb, names


def _kinds(op):
    return {d.name: (d.kind, d.splittable) for d in op.loop_dims}


def test_linear():
    gb, (x,) = _gb(("x", (4, 5, 8), "float32"))
    y = gb.linear(x, 16)
    op = gb.operators[-1]
    N, I, O = 20, 8, 16
    assert op.flops == 2 * N * I * O + N * O and op.backward_flops == 4 * N * I * O + N * O
    assert op.saved == (x,)
    k = _kinds(op)
    assert k["b"][0] is DimKind.SAMPLE and k["i"][0] is DimKind.REDUCTION and k["o"][0] is DimKind.PARAMETER
    w, b = torch.randn(16, 8), torch.randn(16)
    xv = torch.randn(4, 5, 8)
    out = run_operator(op, {x: xv}, {op.params[0].tensor: w, op.params[1].tensor: b})
    assert torch.allclose(out[y], F.linear(xv, w, b))
    gb.linear(x, 16, bias=False, name="nobias")
    assert gb.operators[-1].flops == 2 * N * I * O


def test_matmul_bmm_broadcast():
    gb, (a, b) = _gb(("a", (2, 3, 4, 5), "float32"), ("b", (2, 3, 5, 6), "float32"))
    y = gb.matmul(a, b)
    op = gb.operators[-1]
    assert op.flops == 2 * 6 * 4 * 5 * 6 and op.backward_flops == 2 * op.flops
    assert set(op.saved) == {a, b}
    av, bv = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 5, 6)
    assert torch.allclose(run_operator(op, {a: av, b: bv}, {})[y], av @ bv)
    with pytest.raises(InvalidInputError, match="bmm"):
        gb.bmm(a, b)


def test_attention():
    B, H, S, D = 2, 3, 5, 4
    gb, (q, k, v) = _gb(*[(n, (B, H, S, D), "float32") for n in "qkv"])
    y = gb.attention(q, k, v, causal=True)
    op = gb.operators[-1]
    s = B * H * S * S
    assert op.flops == 2 * s * 2 * D + 5 * s
    assert op.backward_flops == 2 * s * D + 4 * s * 2 * D + 4 * s
    assert set(op.saved) == {q, k, v, y, op.outputs[1].tensor}
    kd = _kinds(op)
    assert kd["b"] == (DimKind.SAMPLE, True) and kd["k"] == (DimKind.REDUCTION, False) and kd["d"][1] is False
    vals = {n: torch.randn(B, H, S, D) for n in (q, k, v)}
    out = run_operator(op, vals, {})
    ref = F.scaled_dot_product_attention(vals[q], vals[k], vals[v], is_causal=True)
    assert torch.allclose(out[y], ref, atol=1e-6)
    assert out[op.outputs[1].tensor].shape == (B, H, S)


def test_conv2d_and_spatial_indexing():
    gb, (x,) = _gb(("x", (2, 4, 8, 8), "float32"))
    y = gb.conv2d(x, 6, 3, stride=2, padding=1)
    op = gb.operators[-1]
    assert gb.shape(y) == (2, 6, 4, 4)
    mac = 2 * 6 * 4 * 4 * 4 * 3 * 3
    assert op.flops == 2 * mac + 2 * 6 * 16 and op.backward_flops == 4 * mac + 2 * 6 * 16
    assert op.inputs[0].dims[2] == ("h", "sh")  # input rows 8 = 4 output rows x stride 2
    kd = _kinds(op)
    assert kd["h"] == (DimKind.ATTRIBUTE, True) and kd["kh"] == (DimKind.REDUCTION, False)
    assert kd["c"][0] is DimKind.REDUCTION and kd["o"][0] is DimKind.PARAMETER and kd["n"][0] is DimKind.SAMPLE
    w, b = torch.randn(6, 4, 3, 3), torch.randn(6)
    xv = torch.randn(2, 4, 8, 8)
    out = run_operator(op, {x: xv}, {op.params[0].tensor: w, op.params[1].tensor: b})
    assert torch.allclose(out[y], F.conv2d(xv, w, b, stride=2, padding=1), atol=1e-5)
    gb.conv2d(x, 4, 5, groups=2, name="grouped")  # 8 -> 4 rows: own unsplittable input dim
    op = gb.operators[-1]
    assert op.inputs[0].dims[2] == ("ih",) and _kinds(op)["g"][0] is DimKind.PARAMETER


def test_pool_saved():
    gb, (x,) = _gb(("x", (2, 3, 8, 8), "float32"))
    y = gb.max_pool2d(x, 2)
    op = gb.operators[-1]
    assert op.flops == 2 * 3 * 4 * 4 * 4 and set(op.saved) == {x, op.outputs[1].tensor}
    xv = torch.randn(2, 3, 8, 8)
    assert torch.equal(run_operator(op, {x: xv}, {})[y], F.max_pool2d(xv, 2))
    g = gb.avg_pool2d(y, output_size=1)
    assert gb.shape(g) == (2, 3, 1, 1) and gb.operators[-1].saved == (y,)


@pytest.mark.parametrize("fn,saves", [("relu", "out"), ("gelu", "in"), ("tanh", "out"), ("sigmoid", "out"),
                                      ("silu", "in"), ("neg", None)])
def test_unary_saved(fn, saves):
    gb, (x,) = _gb(("x", (4, 6), "float32"))
    y = gb.unary(x, fn)
    op = gb.operators[-1]
    assert op.saved == {"out": (y,), "in": (x,), None: ()}[saves]
    xv = torch.randn(4, 6)
    ref = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu,
           "neg": torch.neg}[fn](xv)
    assert torch.allclose(run_operator(op, {x: xv}, {})[y], ref)


def test_dropout_mask():
    gb, (x,) = _gb(("x", (4, 6), "float32"))
    y = gb.dropout(x, 0.5)
    op = gb.operators[-1]
    mask = op.outputs[1].tensor
    assert op.saved == (mask,) and gb.dtype_of(mask) == "bool"
    out = run_operator(op, {x: torch.ones(4, 6)}, {}, training=True)
    assert torch.equal(out[y] != 0, out[mask])
    with pytest.raises(InvalidInputError, match="dropout"):
        gb.dropout(x, 1.5)


def test_binary_broadcast_and_param():
    gb, (a, b) = _gb(("a", (4, 5, 6), "float32"), ("b", (4, 1, 6), "float32"))
    y = gb.mul(a, b)
    op = gb.operators[-1]
    assert op.inputs[1].dims == (("b",), (), ("d2",)) and set(op.saved) == {a, b}
    av, bv = torch.randn(4, 5, 6), torch.randn(4, 1, 6)
    assert torch.allclose(run_operator(op, {a: av, b: bv}, {})[y], av * bv)
    p = gb.parameter("scale", (6,))
    gb.add(a, p)
    op = gb.operators[-1]
    assert op.saved == () and op.params[0].tensor == "scale" and _kinds(op)["d2"][0] is DimKind.PARAMETER


def test_layer_norm_and_softmax():
    gb, (x,) = _gb(("x", (2, 3, 8), "float32"))
    y = gb.layer_norm(x)
    op = gb.operators[-1]
    assert _kinds(op)["d2"][1] is False and _kinds(op)["b"][1] is True
    assert op.saved == (x, op.outputs[1].tensor, op.outputs[2].tensor)
    w, b = torch.randn(8), torch.randn(8)
    xv = torch.randn(2, 3, 8)
    out = run_operator(op, {x: xv}, {op.params[0].tensor: w, op.params[1].tensor: b})
    assert torch.allclose(out[y], F.layer_norm(xv, (8,), w, b), atol=1e-5)
    s = gb.softmax(x, dim=1)
    op = gb.operators[-1]
    assert op.saved == (s,) and _kinds(op)["d1"][1] is False


def test_batch_norm():
    gb, (x,) = _gb(("x", (4, 3, 5, 5), "float32"))
    y = gb.batch_norm(x)
    op = gb.operators[-1]
    assert [gb.role(u.tensor).value for u in op.params] == ["parameter", "parameter", "constant", "constant"]
    assert _kinds(op)["n"] == (DimKind.SAMPLE, True) and _kinds(op)["c"][0] is DimKind.PARAMETER
    xv = torch.randn(4, 3, 5, 5)
    prm = {u.tensor: v for u, v in zip(op.params, (torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)))}
    out = run_operator(op, {x: xv}, prm, training=True)
    assert torch.allclose(out[y], F.batch_norm(xv, None, None, training=True), atol=1e-5)


def test_embedding_partial_sum_dim():
    gb, (ids,) = _gb(("ids", (2, 7), "int64"))
    y = gb.embedding(ids, 50, 16)
    op = gb.operators[-1]
    v = op.loop_dim("v")
    assert v.kind is DimKind.PARAMETER and v.splittable
    assert "v" not in op.outputs[0].loop_dims()  # split vocab -> partial sums
    assert op.saved == (ids,) and op.backward_flops == 2 * 7 * 16 and gb.shape(y) == (2, 7, 16)


def test_rnn_cell_matches_torch():
    B, I, H = 3, 5, 4
    gb, (x, h, c) = _gb(("x", (B, I), "float32"), ("h", (B, H), "float32"), ("c", (B, H), "float32"))
    hn, cn = gb.rnn_cell(x, h, c, H)
    op = gb.operators[-1]
    assert op.flops == 2 * B * 4 * H * (I + H) + 4 * B * H + 20 * B * H
    assert set(op.saved) == {x, h, c, cn, op.outputs[2].tensor}
    cell = torch.nn.LSTMCell(I, H)
    prm = {op.params[0].tensor: cell.weight_ih.detach().reshape(4, H, I),
           op.params[1].tensor: cell.weight_hh.detach().reshape(4, H, H),
           op.params[2].tensor: (cell.bias_ih + cell.bias_hh).detach().reshape(4, H)}
    vals = {x: torch.randn(B, I), h: torch.randn(B, H), c: torch.randn(B, H)}
    out = run_operator(op, vals, prm)
    rh, rc = cell(vals[x], (vals[h], vals[c]))
    assert torch.allclose(out[hn], rh, atol=1e-6) and torch.allclose(out[cn], rc, atol=1e-6)


def test_reshape_merged_dims():
    B, S, H, D = 2, 3, 4, 5
    gb, (x,) = _gb(("x", (B, S, H * D), "float32"))
    y = gb.reshape(x, (B, S, H, D))
    op = gb.operators[-1]
    assert len(op.loop_dims) == 4 and op.inputs[0].dims[2] == op.outputs[0].dims[2] + op.outputs[0].dims[3]
    assert gb.batch_axis(y) == 0 and op.loop_dims[0].kind is DimKind.SAMPLE
    assert gb.reshape(y, (B, S, H, D)) == y  # identity folded
    z = gb.reshape(x, (B, S * H * D))
    assert gb.operators[-1].outputs[0].dims[1] == ("r1_0", "r1_1") or len(gb.operators[-1].outputs[0].dims[1]) >= 1
    gb2, (w,) = _gb(("w", (6, 4), "float32"))
    gb2.reshape(w, (4, 6))  # no common refinement: separate unsplittable dims
    assert all(not d.splittable for d in gb2.operators[-1].loop_dims if d.kind is not DimKind.SAMPLE)
    assert gb.shape(z) == (B, S * H * D)


def test_transpose_concat_split_loss():
    gb, (x, lab) = _gb(("x", (2, 3, 4), "float32"), ("lab", (2, 3), "int64"))
    t = gb.transpose(x, (0, 2, 1))
    assert gb.shape(t) == (2, 4, 3) and gb.batch_axis(t) == 0
    a, b = gb.split(x, [1, 3], dim=2)
    c = gb.concat([b, a], dim=2)
    op = gb.operators[-1]
    assert op.kind is OpKind.CONCAT and not op.loop_dim("cat").splittable
    xv = torch.randn(2, 3, 4)
    sp = run_operator(gb.operators[-2], {x: xv}, {})
    out = run_operator(op, sp, {})
    assert torch.equal(out[c], torch.cat([xv[..., 1:], xv[..., :1]], 2))
    loss = gb.loss(x, lab)
    op = gb.operators[-1]
    assert gb.shape(loss) == () and not op.loop_dim("c").splittable and op.loop_dim("b").splittable
    assert op.saved == (lab, op.outputs[1].tensor)
    lv = torch.randint(0, 4, (2, 3))
    out = run_operator(op, {x: xv, lab: lv}, {})
    assert torch.allclose(out[loss], F.cross_entropy(xv.reshape(6, 4), lv.reshape(6)))


def test_reduce_and_expand():
    gb, (x,) = _gb(("x", (2, 3, 4), "float32"))
    m = gb.reduce(x, [-1], "mean", keepdim=True)
    op = gb.operators[-1]
    assert op.outputs[0].dims[2] == () and op.loop_dim("d2").kind is DimKind.REDUCTION
    e = gb.expand(m, (2, 3, 4))
    xv = torch.randn(2, 3, 4)
    mv = run_operator(op, {x: xv}, {})[m]
    assert torch.allclose(run_operator(gb.operators[-1], {m: mv}, {})[e], xv.mean(-1, keepdim=True).expand(2, 3, 4))
    assert math.prod(gb.shape(e)) == 24
