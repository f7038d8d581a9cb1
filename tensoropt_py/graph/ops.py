"""Operator builders: one function per :class:`~tensoropt_py.graph.ir.OpKind`, plus conveniences.

Every function takes a :class:`~tensoropt_py.graph.state.GraphState` (in practice a
:class:`~tensoropt_py.graph.builder.GraphBuilder`, which has them all as methods) first, appends
one operator and returns the name of its primary output (a tuple for several).
Activations are referred to by name; a name whose role is PARAMETER or CONSTANT is
read through ``Operator.params``. FLOP counts are closed forms of the whole operator
(a multiply-add is 2 FLOPs); ``saved`` follows what PyTorch autograd keeps (see each
function). Loop-dimension kinds follow FlexFlow Table 2: the batch axis of an
activation (tracked by the builder) is SAMPLE; a dimension that indexes a weight is
PARAMETER; a dimension summed over is REDUCTION; the rest is ATTRIBUTE.

Spatial splitting of conv / pool: output rows ``h`` are a splittable ATTRIBUTE
dimension. When the input height is exactly ``stride * H_out`` the input is indexed by
the merged ``(h, sh)`` (``sh`` = the stride factor, unsplittable), so splitting ``h``
splits input and output into matching row blocks; the ``kernel - stride`` halo rows a
neighbour would need are **ignored** (the cost model may add a halo exchange). Other
input heights get their own unsplittable loop dimension (the input is then needed
whole by every device that splits ``h``).

Examples
--------
>>> from tensoropt_py.graph.builder import GraphBuilder
>>> gb = GraphBuilder()
>>> (x,) = gb.input([("x", (2, 3, 8, 8), "float32")])
>>> y = gb.conv2d(x, 4, 3, padding=1)
>>> gb.shape(y)
(2, 4, 8, 8)
>>> op = gb.operators[-1]
>>> op.flops == 2 * 2 * 4 * 8 * 8 * 3 * 3 * 3 + 2 * 4 * 8 * 8
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from ..errors import InvalidInputError
from .ir import DimKind, LoopDim, Operator, OpKind, TensorRole, TensorUse
from .state import GraphState

__all__ = [
    "input",
    "linear",
    "matmul",
    "bmm",
    "attention",
    "conv2d",
    "pool2d",
    "unary",
    "binary",
    "layer_norm",
    "batch_norm",
    "softmax",
    "embedding",
    "rnn_cell",
    "reshape",
    "transpose",
    "concat",
    "split",
    "loss",
    "reduce",
    "opaque",
    "expand",
    "pad",
    "topk",
    "moe_dispatch",
    "moe_experts",
    "moe_combine",
    # conveniences
    "relu",
    "gelu",
    "tanh",
    "sigmoid",
    "dropout",
    "add",
    "mul",
    "flatten",
    "max_pool2d",
    "avg_pool2d",
    "cross_entropy",
    "lstm_cell",
]

#: Unary functions: name -> (forward FLOPs per element, backward FLOPs per element, what autograd saves).
#: ``saves`` is "input", "output", "none" or "mask" (dropout's boolean mask, an auxiliary output).
UNARY_FUNCTIONS: dict[str, tuple[float, float, str]] = {
    "relu": (1, 1, "output"),
    "gelu": (8, 12, "input"),
    "gelu_tanh": (8, 12, "input"),
    "tanh": (4, 2, "output"),
    "sigmoid": (4, 2, "output"),
    "silu": (5, 6, "input"),
    "exp": (1, 1, "output"),
    "log": (1, 1, "input"),
    "sqrt": (1, 2, "output"),
    "rsqrt": (2, 3, "output"),
    "reciprocal": (1, 2, "output"),
    "neg": (1, 1, "none"),
    "abs": (1, 1, "input"),
    "sin": (1, 2, "input"),
    "cos": (1, 2, "input"),
    "erf": (4, 4, "input"),
    "square": (1, 2, "input"),
    "pow": (2, 3, "input"),  # attr exponent
    "mul_scalar": (1, 1, "none"),  # attr scalar
    "add_scalar": (1, 0, "none"),  # attr scalar
    "rsub_scalar": (1, 1, "none"),  # scalar - x
    "identity": (0, 0, "none"),
    "expand": (0, 0, "none"),  # broadcast to attr shape: built by expand(), input indexed by () on new axes
    "cast": (0, 0, "none"),  # attr dtype
    "dropout": (2, 1, "mask"),  # attr p
    "compare": (1, 0, "none"),  # attrs op (gt, ge, lt, le, eq, ne) and scalar: a bool tensor, no gradient
}

#: The comparisons of the UNARY ``compare`` function.
COMPARISONS = ("gt", "ge", "lt", "le", "eq", "ne")

#: Binary functions: name -> (forward FLOPs per output element, backward, which inputs autograd saves).
BINARY_FUNCTIONS: dict[str, tuple[float, float, str]] = {
    "add": (1, 1, "none"),
    "sub": (1, 1, "none"),
    "mul": (1, 2, "both"),
    "div": (1, 4, "both"),
    "maximum": (1, 1, "both"),
    "minimum": (1, 1, "both"),
    # the second operand is a boolean condition (no gradient), attr ``scalar``:
    "where": (1, 1, "second"),  # torch.where(b, a, scalar)
    "masked_fill": (1, 1, "second"),  # a.masked_fill(b, scalar)
}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _norm_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise InvalidInputError(f"{what} {axis} out of range for a {ndim}-d tensor")
    return axis % ndim if ndim else 0


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise InvalidInputError(f"{what} must be an int or a pair, got {v!r}")
    return v


def _dims_of(gb: GraphState, x: str, prefix: str = "", splittable: bool = True):
    """One loop dimension per axis of ``x``: ``b`` for its batch axis, ``<prefix>d<i>`` otherwise."""
    shape = gb.shape(x)
    bax = gb.batch_axis(x) if not gb.is_weight(x) else None
    dims, groups = [], []
    for i, n in enumerate(shape):
        if i == bax:
            name, kind = f"{prefix}b", DimKind.SAMPLE
        else:
            name, kind = f"{prefix}d{i}", DimKind.ATTRIBUTE
        dims.append(LoopDim(name, n, kind, splittable))
        groups.append((name,))
    return dims, groups


def _saved(gb: GraphState, *names) -> tuple[str, ...]:
    """Keep only activations / inputs (parameters and constants are resident anyway)."""
    out = []
    for n in names:
        if n is not None and not gb.is_weight(n) and n not in out:
            out.append(n)
    return tuple(out)


def _split_uses(gb: GraphState, uses):
    ins = tuple(u for u in uses if not gb.is_weight(u.tensor))
    prm = tuple(u for u in uses if gb.is_weight(u.tensor))
    return ins, prm


def _attrs(**kw) -> tuple:
    return tuple((k, v) for k, v in kw.items())


def _broadcast_shapes(*shapes):
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        sizes = {s[len(s) - nd + i] for s in shapes if len(s) - nd + i >= 0} - {1}
        if len(sizes) > 1:
            raise InvalidInputError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _broadcast_groups(shape, out_shape, names):
    """Index a tensor of ``shape`` broadcast to ``out_shape`` whose loop dims are ``names``."""
    off = len(out_shape) - len(shape)
    groups = []
    for i, n in enumerate(shape):
        o = out_shape[off + i]
        groups.append((names[off + i],) if n == o else ())
    return tuple(groups)


def _out_batch_axis(gb, tensors_and_offsets):
    for t, off in tensors_and_offsets:
        if t is not None and not gb.is_weight(t):
            ax = gb.batch_axis(t)
            if ax is not None:
                return ax + off
    return None


# ----------------------------------------------------------------------------------------------
# INPUT
# ----------------------------------------------------------------------------------------------
def input(gb: GraphState, specs, *, name: str = "input", batch_axes=None) -> tuple[str, ...]:
    """The data-loading operator: produces the batch (and labels) as ``TensorRole.INPUT`` tensors.

    Parameters
    ----------
    specs : sequence of (name, shape, dtype)
        Tensor names are used verbatim.
    batch_axes : sequence of int or None, optional
        The batch axis of each tensor (default 0 for all). All batch axes must have the
        same extent, which becomes the single SAMPLE loop dimension ``b``.

    Loop dims: ``b`` (SAMPLE) shared by all outputs, one ATTRIBUTE per other axis.
    FLOPs 0, nothing saved.
    """
    specs = [(n, tuple(s), d or gb.dtype) for n, s, d in specs]
    if not specs:
        raise InvalidInputError("input() needs at least one tensor")
    if batch_axes is None:
        batch_axes = [0 if len(s) else None for _, s, _ in specs]
    batch = {s[a] for (_, s, _), a in zip(specs, batch_axes) if a is not None}
    if len(batch) > 1:
        raise InvalidInputError(f"input tensors disagree on the batch size: {sorted(batch)}")
    dims = []
    if batch:
        dims.append(LoopDim("b", batch.pop(), DimKind.SAMPLE))
    outs, names = [], []
    for k, ((tname, shape, dtype), bax) in enumerate(zip(specs, batch_axes)):
        t = gb.new_tensor(tname, shape, dtype, TensorRole.INPUT, batch_axis=bax, exact=True)
        groups = []
        for i, n in enumerate(shape):
            if i == bax:
                groups.append(("b",))
            else:
                dims.append(LoopDim(f"t{k}d{i}", n, DimKind.ATTRIBUTE))
                groups.append((f"t{k}d{i}",))
        outs.append(TensorUse(t, tuple(groups)))
        names.append(t)
    gb.add_operator(Operator(gb.op_name(name), OpKind.INPUT, tuple(dims), outputs=tuple(outs)))
    return tuple(names)


# ----------------------------------------------------------------------------------------------
# LINEAR / MATMUL / BMM
# ----------------------------------------------------------------------------------------------
def linear(
    gb: GraphState,
    x: str,
    out_features: int | None = None,
    *,
    bias: bool | str = True,
    weight: str | None = None,
    weight_layout: str = "oi",
    name: str = "linear",
) -> str:
    """``y = x @ W.T + b`` over the last axis of ``x`` (``[..., I] -> [..., O]``).

    Parameters
    ----------
    out_features : int
        ``O``; may be omitted when ``weight`` is given.
    bias : bool or str
        True creates a ``[O]`` bias parameter; a string names an existing one.
    weight : str, optional
        An existing parameter (weight tying); otherwise ``<name>.weight`` is created.
    weight_layout : {"oi", "io"}
        ``"oi"``: ``W`` is ``[O, I]`` (``torch.nn.Linear``); ``"io"``: ``[I, O]`` (GPT-2's
        ``Conv1D`` / ``addmm``).

    Loop dims: leading axes (SAMPLE / ATTRIBUTE), ``i`` REDUCTION, ``o`` PARAMETER.
    FLOPs: forward ``2 N I O`` (+ ``N O`` bias), backward ``4 N I O`` (+ ``N O``), ``N`` the
    product of the leading axes. Saves ``x`` (for the weight gradient).
    """
    shape = gb.shape(x)
    if not shape:
        raise InvalidInputError(f"linear needs at least a 1-d input, {x!r} is a scalar")
    in_f = shape[-1]
    if weight_layout not in ("oi", "io"):
        raise InvalidInputError(f"weight_layout must be 'oi' or 'io', got {weight_layout!r}")
    opname = gb.op_name(name)
    if weight is None:
        if out_features is None:
            raise InvalidInputError("linear needs out_features or an existing weight")
        wshape = (out_features, in_f) if weight_layout == "oi" else (in_f, out_features)
        weight = gb.parameter(f"{opname}.weight", wshape, exact=True)
    wshape = gb.shape(weight)
    o_ax = 0 if weight_layout == "oi" else 1
    if len(wshape) != 2 or wshape[1 - o_ax] != in_f:
        raise InvalidInputError(f"linear {opname!r}: weight {gb.spec(weight)} does not match input {gb.spec(x)}")
    out_f = wshape[o_ax]
    if out_features is not None and out_features != out_f:
        raise InvalidInputError(f"linear {opname!r}: out_features={out_features} but the weight gives {out_f}")
    lead, lgroups = _dims_of(gb, x)
    lead, lgroups = lead[:-1], lgroups[:-1]
    n = math.prod(d.size for d in lead)
    dims = tuple(lead) + (LoopDim("i", in_f, DimKind.REDUCTION), LoopDim("o", out_f, DimKind.PARAMETER))
    wuse = TensorUse(weight, (("o",), ("i",)) if weight_layout == "oi" else (("i",), ("o",)))
    params = [wuse]
    if bias is True:
        bias = gb.parameter(f"{opname}.bias", (out_f,), exact=True)
    if bias:
        if gb.shape(bias) != (out_f,):
            raise InvalidInputError(f"linear {opname!r}: bias {gb.spec(bias)} must have shape ({out_f},)")
        params.append(TensorUse(bias, (("o",),)))
    y = gb.new_tensor(f"{opname}.out", shape[:-1] + (out_f,), gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(lgroups) + (("i",),))] + params)
    gb.add_operator(
        Operator(
            opname,
            OpKind.LINEAR,
            dims,
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, tuple(lgroups) + (("o",),)),),
            flops=2.0 * n * in_f * out_f + (n * out_f if bias else 0),
            backward_flops=4.0 * n * in_f * out_f + (n * out_f if bias else 0),
            saved=_saved(gb, x),
            attrs=_attrs(bias=bool(bias), weight_layout=weight_layout),
        )
    )
    return y


def _matmul(gb, a, b, kind, name):
    sa, sb = gb.shape(a), gb.shape(b)
    if len(sa) < 2 or len(sb) < 1:
        raise InvalidInputError(f"{kind.value}: operands must be at least 2-d x 1-d, got {sa} and {sb}")
    vec = len(sb) == 1
    if vec:
        sb = sb + (1,)
    if sa[-1] != sb[-2]:
        raise InvalidInputError(f"{kind.value}: inner dimensions differ: {gb.spec(a)} @ {gb.spec(b)}")
    if kind is OpKind.BMM and (len(sa) != 3 or len(sb) != 3 or sa[0] != sb[0]):
        raise InvalidInputError(f"bmm needs [B,M,K] @ [B,K,N], got {sa} and {sb}")
    batch = _broadcast_shapes(sa[:-2], sb[:-2])
    nb = len(batch)
    opname = gb.op_name(name)
    out_shape = batch + (sa[-2],) + (() if vec else (sb[-1],))
    bax = _out_batch_axis(gb, [(a, nb - (len(sa) - 2)), (b, nb - (len(sb) - 2))])
    a_bax = gb.batch_axis(a) if not gb.is_weight(a) else None
    bnames = [f"d{i}" for i in range(nb)]
    dims = []
    for i, n in enumerate(batch):
        kind_i = DimKind.SAMPLE if (bax == i) else DimKind.ATTRIBUTE
        if kind_i is DimKind.ATTRIBUTE and gb.is_weight(b) and i >= nb - (len(sb) - 2):
            kind_i = DimKind.PARAMETER
        if i == bax:
            bnames[i] = "b"
        dims.append(LoopDim(bnames[i], n, kind_i))
    m_kind = DimKind.SAMPLE if a_bax == len(sa) - 2 else DimKind.ATTRIBUTE
    n_kind = DimKind.PARAMETER if gb.is_weight(b) else DimKind.ATTRIBUTE
    dims += [LoopDim("m", sa[-2], m_kind), LoopDim("k", sa[-1], DimKind.REDUCTION), LoopDim("n", sb[-1], n_kind)]
    ga = _broadcast_groups(sa[:-2], batch, bnames) + (("m",), ("k",))
    gbb = _broadcast_groups(gb.shape(b)[:-2] if not vec else (), batch, bnames) + ((("k",),) if vec else (("k",), ("n",)))
    gy = tuple((d,) for d in bnames) + (("m",),) + (() if vec else (("n",),))
    if bax is None and m_kind is DimKind.SAMPLE:
        bax = nb
    y = gb.new_tensor(f"{opname}.out", out_shape, gb.dtype_of(a), batch_axis=bax)
    ins, prm = _split_uses(gb, [TensorUse(a, ga), TensorUse(b, gbb)])
    work = 2.0 * math.prod(batch) * sa[-2] * sa[-1] * sb[-1]
    gb.add_operator(
        Operator(
            opname,
            kind,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, gy),),
            flops=work,
            backward_flops=2 * work,
            saved=_saved(gb, a, b),
            attrs=_attrs(order=(a, b)),
        )
    )
    return y


def matmul(gb: GraphState, a: str, b: str, *, name: str = "matmul") -> str:
    """``a @ b`` with NumPy broadcasting over leading axes (``[..., M, K] @ [..., K, N]``).

    Loop dims: broadcast batch axes, ``m``, ``k`` (REDUCTION), ``n`` (PARAMETER when ``b`` is
    a weight). FLOPs ``2 batch M K N`` forward, twice that backward. Saves ``a`` and ``b``.
    """
    return _matmul(gb, a, b, OpKind.MATMUL, name)


def bmm(gb: GraphState, a: str, b: str, *, name: str = "bmm") -> str:
    """Batched ``[B, M, K] @ [B, K, N]``; same loop dims, FLOPs and saved tensors as :func:`matmul`."""
    return _matmul(gb, a, b, OpKind.BMM, name)


# ----------------------------------------------------------------------------------------------
# ATTENTION
# ----------------------------------------------------------------------------------------------
def attention(
    gb: GraphState,
    q: str,
    k: str,
    v: str,
    *,
    mask: str | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    name: str = "attention",
) -> str:
    """Fused scaled dot-product attention ``softmax(q k^T * scale + mask) v``.

    ``q`` is ``[B, H, Sq, D]``, ``k`` ``[B, H, Sk, D]``, ``v`` ``[B, H, Sk, Dv]`` (any number of
    identical leading axes), ``mask`` broadcastable to ``[B, H, Sq, Sk]`` (bool: keep where
    True; float: added).

    Loop dims: leading axes (``b`` SAMPLE, heads ``h`` ATTRIBUTE), ``q`` (query positions,
    ATTRIBUTE), ``k`` (key positions, REDUCTION, unsplittable: the softmax needs every key),
    ``d`` (REDUCTION of ``q k^T``, unsplittable: the softmax of partial scores is wrong),
    ``e`` (value width, ATTRIBUTE). Outputs: ``out [..., Sq, Dv]`` and the auxiliary
    log-sum-exp ``[..., Sq]`` (float32), which the flash-attention backward PyTorch uses keeps
    with ``q, k, v, out`` (the ``saved`` tensors).

    FLOPs (``L`` = product of leading axes; causal masking is not discounted):
    forward ``2 L Sq Sk (D + Dv) + 5 L Sq Sk`` (two matmuls, scale/mask/softmax);
    backward ``2 L Sq Sk D`` (recompute scores) ``+ 4 L Sq Sk (D + Dv)`` (dV, dP, dQ, dK)
    ``+ 4 L Sq Sk`` (softmax backward).
    """
    sq, sk, sv = gb.shape(q), gb.shape(k), gb.shape(v)
    if len(sq) < 2 or not (len(sq) == len(sk) == len(sv)):
        raise InvalidInputError(f"attention: q, k, v must have the same rank >= 2, got {sq}, {sk}, {sv}")
    if sq[:-2] != sk[:-2] or sq[:-2] != sv[:-2] or sq[-1] != sk[-1] or sk[-2] != sv[-2]:
        raise InvalidInputError(f"attention: incompatible shapes q{sq} k{sk} v{sv}")
    opname = gb.op_name(name)
    lead = sq[:-2]
    bax = gb.batch_axis(q)
    names = []
    dims = []
    for i, n in enumerate(lead):
        if i == bax:
            names.append("b")
            dims.append(LoopDim("b", n, DimKind.SAMPLE))
        else:
            nm = "h" if i == len(lead) - 1 else f"a{i}"
            names.append(nm)
            dims.append(LoopDim(nm, n, DimKind.ATTRIBUTE))
    Sq, D, Sk, Dv = sq[-2], sq[-1], sk[-2], sv[-1]
    dims += [
        LoopDim("q", Sq, DimKind.ATTRIBUTE),
        LoopDim("k", Sk, DimKind.REDUCTION, splittable=False),
        LoopDim("d", D, DimKind.REDUCTION, splittable=False),
        LoopDim("e", Dv, DimKind.ATTRIBUTE),
    ]
    lg = tuple((n,) for n in names)
    uses = [TensorUse(q, lg + (("q",), ("d",))), TensorUse(k, lg + (("k",), ("d",))), TensorUse(v, lg + (("k",), ("e",)))]
    if mask is not None:
        ms = gb.shape(mask)
        full = lead + (Sq, Sk)
        if _broadcast_shapes(ms, full) != full:
            raise InvalidInputError(f"attention: mask {gb.spec(mask)} does not broadcast to {full}")
        uses.append(TensorUse(mask, _broadcast_groups(ms, full, names + ["q", "k"])))
    out = gb.new_tensor(f"{opname}.out", lead + (Sq, Dv), gb.dtype_of(q), batch_axis=bax)
    lse = gb.new_tensor(f"{opname}.lse", lead + (Sq,), "float32", batch_axis=bax)
    L = math.prod(lead)
    s = L * Sq * Sk
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.ATTENTION,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(out, lg + (("q",), ("e",))), TensorUse(lse, lg + (("q",),))),
            flops=2.0 * s * (D + Dv) + 5.0 * s,
            backward_flops=2.0 * s * D + 4.0 * s * (D + Dv) + 4.0 * s,
            saved=_saved(gb, q, k, v, out, lse),
            attrs=_attrs(
                causal=bool(causal),
                scale=scale,
                dropout_p=float(dropout_p),
                has_mask=mask is not None,
                order=(q, k, v) + ((mask,) if mask is not None else ()),
            ),
        )
    )
    return out


# ----------------------------------------------------------------------------------------------
# CONV2D / POOL2D
# ----------------------------------------------------------------------------------------------
def _spatial(name, n_in, n_out, stride):
    """Loop dims + input group of one spatial axis (see the module docstring)."""
    out_dim = LoopDim(name, n_out, DimKind.ATTRIBUTE)
    if n_in == n_out * stride:
        if stride == 1:
            return [out_dim], (name,)
        return [out_dim, LoopDim(f"s{name}", stride, DimKind.ATTRIBUTE, splittable=False)], (name, f"s{name}")
    return [out_dim, LoopDim(f"i{name}", n_in, DimKind.ATTRIBUTE, splittable=False)], (f"i{name}",)


def _out_size(n, k, s, p, d=1, ceil=False):
    num = n + 2 * p - d * (k - 1) - 1
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def conv2d(
    gb: GraphState,
    x: str,
    out_channels: int,
    kernel_size,
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    bias: bool = True,
    weight: str | None = None,
    bias_param: str | None = None,
    name: str = "conv",
) -> str:
    """2-D convolution of ``x [N, C, H, W]`` with ``W [O, C/groups, kh, kw]`` (+ bias ``[O]``).

    Loop dims: ``n`` SAMPLE, ``g`` groups (PARAMETER, only if ``groups > 1``), ``o`` output
    channels per group (PARAMETER), ``c`` input channels per group (REDUCTION), ``h``/``w``
    output rows/columns (ATTRIBUTE, splittable, halo ignored: see the module docstring),
    stride / input-extent helpers (unsplittable), ``kh``/``kw`` (REDUCTION, unsplittable).
    FLOPs: forward ``2 N O Ho Wo (C/g) kh kw`` (+ ``N O Ho Wo`` bias); backward twice the
    multiply-adds (input and weight gradients) + ``N O Ho Wo`` for the bias. Saves ``x``.
    ``padding`` may be an int, a pair or ``"same"`` (stride 1).
    """
    xs = gb.shape(x)
    if len(xs) != 4:
        raise InvalidInputError(f"conv2d needs a 4-d [N,C,H,W] input, got {gb.spec(x)}")
    N, C, H, W = xs
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if padding == "same":
        if (sh, sw) != (1, 1):
            raise InvalidInputError("padding='same' needs stride 1")
        ph, pw = dh * (kh - 1) // 2, dw * (kw - 1) // 2
        if dh * (kh - 1) % 2 or dw * (kw - 1) % 2:
            raise InvalidInputError("padding='same' with an even kernel is not supported")
    elif padding == "valid":
        ph = pw = 0
    else:
        ph, pw = _pair(padding, "padding")
    if groups < 1 or C % groups or out_channels % groups:
        raise InvalidInputError(f"conv2d: groups={groups} must divide C={C} and out_channels={out_channels}")
    Ho, Wo = _out_size(H, kh, sh, ph, dh), _out_size(W, kw, sw, pw, dw)
    if Ho < 1 or Wo < 1:
        raise InvalidInputError(f"conv2d: kernel {kh}x{kw} does not fit input {gb.spec(x)}")
    opname = gb.op_name(name)
    cg, og = C // groups, out_channels // groups
    if weight is None:
        weight = gb.parameter(f"{opname}.weight", (out_channels, cg, kh, kw), exact=True)
    if gb.shape(weight) != (out_channels, cg, kh, kw):
        raise InvalidInputError(f"conv2d {opname!r}: weight {gb.spec(weight)} should be {(out_channels, cg, kh, kw)}")
    dims = [LoopDim("n", N, DimKind.SAMPLE)]
    gdims = ()
    if groups > 1:
        dims.append(LoopDim("g", groups, DimKind.PARAMETER))
        gdims = ("g",)
    dims += [LoopDim("o", og, DimKind.PARAMETER), LoopDim("c", cg, DimKind.REDUCTION)]
    hd, hg = _spatial("h", H, Ho, sh)
    wd, wg = _spatial("w", W, Wo, sw)
    dims += hd + wd
    dims += [LoopDim("kh", kh, DimKind.REDUCTION, splittable=False), LoopDim("kw", kw, DimKind.REDUCTION, splittable=False)]
    uses = [TensorUse(x, (("n",), gdims + ("c",), hg, wg)), TensorUse(weight, (gdims + ("o",), ("c",), ("kh",), ("kw",)))]
    if bias:
        if bias_param is None:
            bias_param = gb.parameter(f"{opname}.bias", (out_channels,), exact=True)
        uses.append(TensorUse(bias_param, (gdims + ("o",),)))
    y = gb.new_tensor(f"{opname}.out", (N, out_channels, Ho, Wo), gb.dtype_of(x), batch_axis=0)
    mac = N * out_channels * Ho * Wo * cg * kh * kw
    nb = N * out_channels * Ho * Wo if bias else 0
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.CONV2D,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, (("n",), gdims + ("o",), ("h",), ("w",))),),
            flops=2.0 * mac + nb,
            backward_flops=4.0 * mac + nb,
            saved=_saved(gb, x),
            attrs=_attrs(stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=groups, bias=bool(bias)),
        )
    )
    return y


def pool2d(
    gb: GraphState,
    x: str,
    kernel_size=None,
    stride=None,
    padding=0,
    *,
    mode: str = "max",
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    output_size=None,
    name: str = "pool",
) -> str:
    """Max or average pooling of ``x [N, C, H, W]``.

    ``output_size`` (adaptive pooling, ``mode="avg"``) replaces kernel/stride; an output of 1x1
    is global average pooling. Loop dims: ``n`` SAMPLE, ``c`` ATTRIBUTE, ``h``/``w`` output
    positions (ATTRIBUTE, splittable, halo ignored) and unsplittable stride / input-extent
    helpers. FLOPs ``N C Ho Wo kh kw`` forward and backward. Max pooling also outputs the int64
    argmax ``indices`` (auxiliary) and saves ``x`` and them; average pooling saves ``x`` (as
    PyTorch's ``avg_pool2d`` / ``adaptive_avg_pool2d`` autograd nodes do).
    """
    xs = gb.shape(x)
    if len(xs) != 4:
        raise InvalidInputError(f"pool2d needs a 4-d [N,C,H,W] input, got {gb.spec(x)}")
    if mode not in ("max", "avg"):
        raise InvalidInputError(f"pool2d mode must be 'max' or 'avg', got {mode!r}")
    N, C, H, W = xs
    if output_size is not None:
        if mode != "avg":
            raise InvalidInputError("adaptive pooling is supported for mode='avg' only")
        Ho, Wo = _pair(output_size, "output_size")
        if H % Ho or W % Wo:
            raise InvalidInputError(f"adaptive pooling to {(Ho, Wo)} needs divisible input sizes, got {(H, W)}")
        kh, kw = H // Ho, W // Wo
        sh, sw, ph, pw = kh, kw, 0, 0
    else:
        if kernel_size is None:
            raise InvalidInputError("pool2d needs kernel_size or output_size")
        kh, kw = _pair(kernel_size, "kernel_size")
        sh, sw = _pair(stride if stride is not None else (kh, kw), "stride")
        ph, pw = _pair(padding, "padding")
        Ho, Wo = _out_size(H, kh, sh, ph, 1, ceil_mode), _out_size(W, kw, sw, pw, 1, ceil_mode)
    opname = gb.op_name(name)
    dims = [LoopDim("n", N, DimKind.SAMPLE), LoopDim("c", C, DimKind.ATTRIBUTE)]
    hd, hg = _spatial("h", H, Ho, sh)
    wd, wg = _spatial("w", W, Wo, sw)
    dims += hd + wd
    y = gb.new_tensor(f"{opname}.out", (N, C, Ho, Wo), gb.dtype_of(x), batch_axis=0)
    ygroups = (("n",), ("c",), ("h",), ("w",))
    outs = [TensorUse(y, ygroups)]
    saved = [x]
    if mode == "max":
        idx = gb.new_tensor(f"{opname}.indices", (N, C, Ho, Wo), "int64", batch_axis=0)
        outs.append(TensorUse(idx, ygroups))
        saved.append(idx)
    work = float(N * C * Ho * Wo * kh * kw)
    gb.add_operator(
        Operator(
            opname,
            OpKind.POOL2D,
            tuple(dims),
            inputs=(TensorUse(x, (("n",), ("c",), hg, wg)),),
            outputs=tuple(outs),
            flops=work,
            backward_flops=work,
            saved=_saved(gb, *saved),
            attrs=_attrs(
                mode=mode,
                kernel_size=(kh, kw),
                stride=(sh, sw),
                padding=(ph, pw),
                ceil_mode=bool(ceil_mode),
                count_include_pad=bool(count_include_pad),
                output_size=None if output_size is None else (Ho, Wo),
            ),
        )
    )
    return y


# ----------------------------------------------------------------------------------------------
# elementwise
# ----------------------------------------------------------------------------------------------
def unary(gb: GraphState, x: str, fn: str, *, name: str | None = None, **attrs) -> str:
    """Elementwise ``fn(x)`` for ``fn`` in :data:`UNARY_FUNCTIONS`.

    Attributes: ``exponent`` (``pow``), ``scalar`` (``mul_scalar``/``add_scalar``/``rsub_scalar``),
    ``dtype`` (``cast``), ``p`` (``dropout``), ``approximate`` (``gelu``), ``op`` and ``scalar``
    (``compare``: ``x > scalar`` etc., a bool result). Loop dims: one per axis
    (batch SAMPLE, the rest ATTRIBUTE, all splittable). Saved: the output for relu, tanh,
    sigmoid, exp, sqrt, rsqrt, reciprocal; the input for gelu, silu, log, pow, ...; nothing for
    neg / scalar ops; dropout outputs a boolean ``mask`` (auxiliary) and saves it.
    """
    if fn not in UNARY_FUNCTIONS:
        raise InvalidInputError(f"unknown unary function {fn!r}; known: {', '.join(UNARY_FUNCTIONS)}")
    if fn == "compare" and (attrs.get("op") not in COMPARISONS or not isinstance(attrs.get("scalar"), (int, float))):
        raise InvalidInputError(f"unary compare needs op in {COMPARISONS} and a number scalar, got {attrs}")
    f_el, b_el, saves = UNARY_FUNCTIONS[fn]
    opname = gb.op_name(name or fn)
    dims, groups = _dims_of(gb, x)
    shape = gb.shape(x)
    dtype = attrs.get("dtype", gb.dtype_of(x)) if fn == "cast" else "bool" if fn == "compare" else gb.dtype_of(x)
    y = gb.new_tensor(f"{opname}.out", shape, dtype, batch_axis=gb.batch_axis(x))
    outs = [TensorUse(y, tuple(groups))]
    if fn == "dropout":
        mask = gb.new_tensor(f"{opname}.mask", shape, "bool", batch_axis=gb.batch_axis(x))
        outs.append(TensorUse(mask, tuple(groups)))
        saved = (mask,)
    else:
        saved = {"input": (x,), "output": (y,), "none": ()}[saves]
    n = math.prod(shape)
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(groups))])
    gb.add_operator(
        Operator(
            opname,
            OpKind.UNARY,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=tuple(outs),
            flops=float(f_el * n),
            backward_flops=float(b_el * n),
            saved=_saved(gb, *saved),
            attrs=_attrs(fn=fn, **attrs),
        )
    )
    return y


def expand(gb: GraphState, x: str, shape: Sequence[int], *, name: str = "expand") -> str:
    """Broadcast ``x`` to ``shape`` (``torch.expand``; -1 keeps an axis): a UNARY ``expand`` whose
    input indexes ``()`` on the broadcast axes. Identity returns ``x``. FLOPs 0."""
    xs = gb.shape(x)
    shape = list(shape)
    off = len(shape) - len(xs)
    if off < 0:
        raise InvalidInputError(f"expand: cannot expand {gb.spec(x)} to fewer dims {shape}")
    for i, n in enumerate(shape):
        if n == -1:
            shape[i] = xs[i - off]
    shape = tuple(int(n) for n in shape)
    if _broadcast_shapes(xs, shape) != shape:
        raise InvalidInputError(f"expand: {gb.spec(x)} does not broadcast to {shape}")
    if shape == xs:
        return x
    opname = gb.op_name(name)
    bax = gb.batch_axis(x) if not gb.is_weight(x) else None
    obax = None if bax is None else bax + off
    names = ["b" if i == obax else f"d{i}" for i in range(len(shape))]
    dims = tuple(LoopDim(nm, n, DimKind.SAMPLE if i == obax else DimKind.ATTRIBUTE) for i, (nm, n) in enumerate(zip(names, shape)))
    y = gb.new_tensor(f"{opname}.out", shape, gb.dtype_of(x), batch_axis=obax)
    ins, prm = _split_uses(gb, [TensorUse(x, _broadcast_groups(xs, shape, names))])
    gb.add_operator(Operator(opname, OpKind.UNARY, dims, inputs=ins, params=prm,
                             outputs=(TensorUse(y, tuple((nm,) for nm in names)),), attrs=_attrs(fn="expand", shape=shape)))
    return y


def pad(gb: GraphState, x: str, pads: Sequence[int], value: float = 0.0, *, name: str = "pad") -> str:
    """Constant padding (``torch.nn.functional.pad(x, pads, value=value)``, mode ``"constant"``).

    ``pads`` lists ``(before, after)`` pairs from the *last* axis backwards, as torch does; all
    must be >= 0 (cropping is a slice). Loop dims: the untouched axes are shared by input and
    output (batch SAMPLE, others ATTRIBUTE, splittable); a padded axis has one unsplittable loop
    dim in the input and another in the output (the extents differ). FLOPs: one per output
    element forward (the copy), one per input element backward; nothing saved.
    """
    xs = gb.shape(x)
    pads = [int(p) for p in pads]
    if len(pads) % 2 or len(pads) // 2 > len(xs):
        raise InvalidInputError(f"pad: {len(pads)} pad values for a {len(xs)}-d tensor {gb.spec(x)} "
                                "(need before/after pairs for at most every axis)")
    if any(p < 0 for p in pads):
        raise InvalidInputError(f"pad: negative pads {pads} (cropping) are not padding")
    widths = {len(xs) - 1 - i: (pads[2 * i], pads[2 * i + 1]) for i in range(len(pads) // 2)}
    widths = {ax: w for ax, w in widths.items() if w != (0, 0)}
    if not widths:
        return x
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, x)
    ogroups = list(groups)
    oshape = list(xs)
    for ax, (lo, hi) in widths.items():
        oshape[ax] = xs[ax] + lo + hi
        kind = dims[ax].kind
        dims[ax] = LoopDim(f"in{ax}", xs[ax], kind, splittable=False)
        dims.append(LoopDim(f"out{ax}", oshape[ax], kind, splittable=False))
        groups[ax] = (f"in{ax}",)
        ogroups[ax] = (f"out{ax}",)
    y = gb.new_tensor(f"{opname}.out", oshape, gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(groups))])
    gb.add_operator(Operator(opname, OpKind.PAD, tuple(dims), inputs=ins, params=prm,
                             outputs=(TensorUse(y, tuple(ogroups)),), flops=float(math.prod(oshape)),
                             backward_flops=float(math.prod(xs)), attrs=_attrs(pads=tuple(pads), value=value)))
    return y


def topk(gb: GraphState, x: str, k: int, *, name: str = "topk") -> tuple[str, str]:
    """The ``k`` largest values along the last axis and their ``int64`` indices (sorted, as
    ``torch.topk(x, k, dim=-1)``): the router of a mixture of experts.

    Loop dims: the leading axes (batch SAMPLE, others ATTRIBUTE, splittable), the last axis
    ``n`` and the output axis ``k`` (both unsplittable: a selection needs the whole row).
    FLOPs: ``n log2 k`` comparisons per row forward, the scatter of ``k`` gradients backward.
    Saves the indices (auxiliary-free: both outputs are results).
    """
    xs = gb.shape(x)
    if not xs:
        raise InvalidInputError(f"topk needs at least one axis, got {gb.spec(x)}")
    if not isinstance(k, int) or not 1 <= k <= xs[-1]:
        raise InvalidInputError(f"topk: k must be an int in [1, {xs[-1]}] for {gb.spec(x)}, got {k!r}")
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, x)
    dims[-1] = LoopDim("n", xs[-1], dims[-1].kind, splittable=False)
    groups[-1] = ("n",)
    dims.append(LoopDim("k", k, DimKind.ATTRIBUTE, splittable=False))
    og = tuple(groups[:-1]) + (("k",),)
    oshape = xs[:-1] + (k,)
    bax = gb.batch_axis(x)
    vals = gb.new_tensor(f"{opname}.values", oshape, gb.dtype_of(x), batch_axis=bax)
    idx = gb.new_tensor(f"{opname}.indices", oshape, "int64", batch_axis=bax)
    rows = math.prod(xs[:-1])
    gb.add_operator(Operator(opname, OpKind.TOPK, tuple(dims), inputs=(TensorUse(x, tuple(groups)),),
                             outputs=(TensorUse(vals, og), TensorUse(idx, og)),
                             flops=float(rows * xs[-1] * max(1.0, math.log2(k + 1))),
                             backward_flops=float(rows * (xs[-1] + k)), saved=(idx,), attrs=_attrs(k=k)))
    return vals, idx


# ----------------------------------------------------------------------------------------------
# mixture of experts: dispatch -> experts -> combine
# ----------------------------------------------------------------------------------------------
#: Activations an expert feed-forward may use (the UNARY functions the executor runs).
MOE_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")


def _moe_routing_shapes(gb, x, idx, what):
    xs, ks = gb.shape(x), gb.shape(idx)
    if len(xs) != 3 or len(ks) != 3 or xs[:2] != ks[:2]:
        raise InvalidInputError(f"{what}: tokens {gb.spec(x)} must be [groups, tokens, hidden] and the expert "
                                f"indices {gb.spec(idx)} [groups, tokens, k] with the same leading shape")
    if gb.dtype_of(idx) not in ("int64", "int32"):
        raise InvalidInputError(f"{what}: expert indices {gb.spec(idx)} must be int64 or int32")
    return xs, ks


def _token_dims(gb, x, idx):
    """Loop dims ``g`` (groups: SAMPLE when the tokens carry the batch), ``s`` and ``k``
    (tokens of a group and choices per token: unsplittable, slot positions count over the group)."""
    (G, S, _), (_, _, k) = gb.shape(x), gb.shape(idx)
    gkind = DimKind.SAMPLE if gb.batch_axis(x) == 0 else DimKind.ATTRIBUTE
    return [LoopDim("g", G, gkind), LoopDim("s", S, DimKind.ATTRIBUTE, splittable=False),
            LoopDim("k", k, DimKind.ATTRIBUTE, splittable=False)]


def moe_dispatch(gb: GraphState, x: str, indices: str, num_experts: int, capacity: int, *,
                 name: str = "moe_dispatch") -> str:
    """Send every token to the capacity slots of the experts its router chose.

    ``x [G, S, H]`` holds ``G`` groups of ``S`` tokens, ``indices [G, S, k]`` the ``k`` experts
    of every token. Output ``[G, E, C, H]``: expert ``e``'s slot ``c`` of group ``g`` holds the
    ``c``-th token (in order of token, then choice) of the group routed to ``e``; tokens beyond
    the capacity ``C`` are dropped (``C = S`` drops none: an expert gets a token at most once),
    unused slots are zeros.

    Loop dims: ``g`` (SAMPLE), ``s``, ``k``, ``c`` (unsplittable), ``e`` and ``h`` (ATTRIBUTE,
    splittable). Splitting ``e`` is expert parallelism: a device fills the slots of its experts
    from all tokens of its groups, and the gradient of ``x`` is a partial sum over the experts.
    The all-to-all of expert parallelism is the rescheduling of this output from a split over
    ``g`` to a split over ``e`` (and back for :func:`moe_combine`). FLOPs: one per routed
    element (a copy) forward and backward; saves the indices.
    """
    xs, ks = _moe_routing_shapes(gb, x, indices, "moe_dispatch")
    G, S, H = xs
    for what, v, hi in (("num_experts", num_experts, None), ("capacity", capacity, S)):
        if not isinstance(v, int) or v < 1 or (hi is not None and v > hi):
            raise InvalidInputError(f"moe_dispatch: {what} must be an int in [1, {hi or 'inf'}], got {v!r}")
    E, C = num_experts, capacity
    opname = gb.op_name(name)
    dims = _token_dims(gb, x, indices) + [LoopDim("e", E, DimKind.ATTRIBUTE), LoopDim("c", C, DimKind.ATTRIBUTE, False),
                                          LoopDim("h", H, DimKind.ATTRIBUTE)]
    y = gb.new_tensor(f"{opname}.out", (G, E, C, H), gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    routed = G * min(S * ks[2], E * C) * H
    gb.add_operator(Operator(
        opname, OpKind.MOE_DISPATCH, tuple(dims),
        inputs=(TensorUse(x, (("g",), ("s",), ("h",))), TensorUse(indices, (("g",), ("s",), ("k",)))),
        outputs=(TensorUse(y, (("g",), ("e",), ("c",), ("h",))),),
        flops=float(routed), backward_flops=float(routed), saved=_saved(gb, indices),
        attrs=_attrs(num_experts=E, capacity=C, expert_offset=0)))
    return y


def moe_experts(gb: GraphState, x: str, up: str, down: str, *, activation: str = "silu", gated: bool = True,
                transposed: bool = False, tokens: int | None = None, name: str = "moe_experts") -> str:
    """The experts' feed-forward on their capacity slots: ``down_e(act(gate_e x) * up_e x)``.

    ``x [G, E, C, H]`` (from :func:`moe_dispatch`); ``up`` is ``[E, 2I, H]`` (``[gate; up]``
    concatenated, ``gated=True``) or ``[E, I, H]`` (``act(up_e x)``, ``gated=False``); ``down`` is
    ``[E, H, I]``; ``transposed=True`` stores them as ``[E, H, 2I]`` / ``[E, I, H]`` (x @ W). Output
    ``[G, E, C, H]`` plus the auxiliary ``[G, E, C, 2I]`` (or ``I``) up-projection kept for backward.

    Loop dims: ``g`` (SAMPLE), ``e`` (PARAMETER: splitting it is expert parallelism, every device
    holds the weights of its experts), ``c`` (ATTRIBUTE, slots are independent), ``h`` and ``i``
    (unsplittable: ``h`` is both the reduction of the up-projection and the output of the down
    one). FLOPs count the routed tokens only (``tokens``, default every slot: a grouped GEMM skips
    empty slots): ``2 R H (2I) + 2 R I H`` plus the gating, backward twice the matmuls.
    """
    xs = gb.shape(x)
    if len(xs) != 4:
        raise InvalidInputError(f"moe_experts: x {gb.spec(x)} must be [groups, experts, capacity, hidden]")
    G, E, C, H = xs
    if activation not in MOE_ACTIVATIONS:
        raise InvalidInputError(f"moe_experts: activation {activation!r} not supported; allowed: {MOE_ACTIVATIONS}")
    us, ds = gb.shape(up), gb.shape(down)
    width = us[2] if transposed else us[1]
    inter = width // 2 if gated else width
    want_up = (E, H, width) if transposed else (E, width, H)
    want_down = (E, inter, H) if transposed else (E, H, inter)
    if us != want_up or ds != want_down or (gated and width % 2):
        raise InvalidInputError(f"moe_experts: weights {gb.spec(up)} and {gb.spec(down)} do not fit {E} experts of "
                                f"hidden size {H} (want up {want_up}, down {want_down}, gated={gated}, "
                                f"transposed={transposed})")
    opname = gb.op_name(name)
    dims = [LoopDim("g", G, DimKind.SAMPLE if gb.batch_axis(x) == 0 else DimKind.ATTRIBUTE),
            LoopDim("e", E, DimKind.PARAMETER), LoopDim("c", C, DimKind.ATTRIBUTE),
            LoopDim("h", H, DimKind.REDUCTION, splittable=False), LoopDim("i", inter, DimKind.PARAMETER, splittable=False)]
    wgroup = ("two", "i") if gated else ("i",)
    if gated:
        dims.append(LoopDim("two", 2, DimKind.PARAMETER, splittable=False))
    up_use = TensorUse(up, (("e",), ("h",), wgroup) if transposed else (("e",), wgroup, ("h",)))
    down_use = TensorUse(down, (("e",), ("i",), ("h",)) if transposed else (("e",), ("h",), ("i",)))
    y = gb.new_tensor(f"{opname}.out", xs, gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    ws = gb.new_tensor(f"{opname}.proj", (G, E, C, width), gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    R = G * E * C if tokens is None else int(tokens)
    mm = 2.0 * R * H * width + 2.0 * R * inter * H
    gb.add_operator(Operator(
        opname, OpKind.MOE_EXPERTS, tuple(dims), inputs=(TensorUse(x, (("g",), ("e",), ("c",), ("h",))),),
        params=(up_use, down_use),
        outputs=(TensorUse(y, (("g",), ("e",), ("c",), ("h",))), TensorUse(ws, (("g",), ("e",), ("c",), wgroup))),
        flops=mm + 6.0 * R * inter, backward_flops=2 * mm + 12.0 * R * inter, saved=_saved(gb, x, ws),
        attrs=_attrs(activation=activation, gated=bool(gated), transposed=bool(transposed))))
    return y


def moe_combine(gb: GraphState, y: str, indices: str, weights: str, num_tokens: int | None = None, *,
                name: str = "moe_combine") -> str:
    """Bring the experts' outputs back to the tokens: ``out[g, s] = sum_j w[g, s, j] y[g, e_j, c_j]``.

    ``y [G, E, C, H]`` (from :func:`moe_experts`), ``indices``/``weights [G, S, k]`` (the router's
    choices and their weights); the slot ``c_j`` of every choice is the one :func:`moe_dispatch`
    gave it (a dropped token contributes zero). Output ``[G, S, H]``.

    Loop dims: ``g`` (SAMPLE), ``s``, ``k``, ``c`` (unsplittable), ``e`` (REDUCTION: split, every
    device sums the contributions of its experts, a partial sum), ``h`` (ATTRIBUTE). FLOPs: 2 per
    routed element forward, 4 backward; saves ``y``, the indices and the weights.
    """
    ys = gb.shape(y)
    if len(ys) != 4:
        raise InvalidInputError(f"moe_combine: expert outputs {gb.spec(y)} must be [groups, experts, capacity, hidden]")
    G, E, C, H = ys
    ks, ws = gb.shape(indices), gb.shape(weights)
    if len(ks) != 3 or ks != ws or ks[0] != G:
        raise InvalidInputError(f"moe_combine: indices {gb.spec(indices)} and weights {gb.spec(weights)} must both be "
                                f"[{G}, tokens, k]")
    S, k = ks[1], ks[2]
    opname = gb.op_name(name)
    gkind = DimKind.SAMPLE if gb.batch_axis(y) == 0 or gb.batch_axis(weights) == 0 else DimKind.ATTRIBUTE
    dims = [LoopDim("g", G, gkind), LoopDim("s", S, DimKind.ATTRIBUTE, False), LoopDim("k", k, DimKind.ATTRIBUTE, False),
            LoopDim("e", E, DimKind.REDUCTION), LoopDim("c", C, DimKind.ATTRIBUTE, False), LoopDim("h", H, DimKind.ATTRIBUTE)]
    out = gb.new_tensor(f"{opname}.out", (G, S, H), gb.dtype_of(y), batch_axis=0 if gkind is DimKind.SAMPLE else None)
    routed = G * min(S * k, E * C) * H
    gb.add_operator(Operator(
        opname, OpKind.MOE_COMBINE, tuple(dims),
        inputs=(TensorUse(y, (("g",), ("e",), ("c",), ("h",))), TensorUse(indices, (("g",), ("s",), ("k",))),
                TensorUse(weights, (("g",), ("s",), ("k",)))),
        outputs=(TensorUse(out, (("g",), ("s",), ("h",))),),
        flops=2.0 * routed, backward_flops=4.0 * routed, saved=_saved(gb, y, indices, weights),
        attrs=_attrs(num_experts=E, capacity=C, expert_offset=0)))
    return out


def relu(gb, x, *, name=None):
    """``unary(x, "relu")``: saves its output."""
    return unary(gb, x, "relu", name=name)


def gelu(gb, x, *, approximate: str = "none", name=None):
    """``unary(x, "gelu")``: saves its input."""
    return unary(gb, x, "gelu", name=name, approximate=approximate)


def tanh(gb, x, *, name=None):
    return unary(gb, x, "tanh", name=name)


def sigmoid(gb, x, *, name=None):
    return unary(gb, x, "sigmoid", name=name)


def dropout(gb, x, p: float = 0.1, *, name=None):
    """``unary(x, "dropout", p=p)``: outputs a boolean mask (auxiliary, saved)."""
    if not 0.0 <= p < 1.0:
        raise InvalidInputError(f"dropout probability must be in [0, 1), got {p}")
    return unary(gb, x, "dropout", name=name, p=float(p))


def binary(gb: GraphState, a: str, b: str, fn: str = "add", *, name: str | None = None, **attrs) -> str:
    """Elementwise ``fn(a, b)`` with NumPy broadcasting (``fn`` in :data:`BINARY_FUNCTIONS`).

    Either operand may be a parameter (bias add, scale): its loop dimensions become PARAMETER.
    Broadcast axes of an operand are indexed by ``()``. FLOPs: forward one per output element,
    backward 1 (add/sub: the broadcast reductions), 2 (mul), 4 (div) per output element.
    Saves nothing for add/sub, both operands for mul/div/maximum/minimum (activations only).
    ``where`` (``torch.where(b, a, scalar)``) and ``masked_fill`` (``a.masked_fill(b, scalar)``)
    take a boolean ``b`` and the attribute ``scalar``; they save ``b`` and give ``a``'s dtype.
    """
    if fn not in BINARY_FUNCTIONS:
        raise InvalidInputError(f"unknown binary function {fn!r}; known: {', '.join(BINARY_FUNCTIONS)}")
    if fn in ("where", "masked_fill"):
        if "scalar" not in attrs:
            raise InvalidInputError(f"binary {fn!r} needs the attribute scalar (the fill value)")
        if gb.dtype_of(b) != "bool":
            raise InvalidInputError(f"binary {fn!r}: the condition {gb.spec(b)} must be a bool tensor")
    sa, sb = gb.shape(a), gb.shape(b)
    out_shape = _broadcast_shapes(sa, sb)
    nd = len(out_shape)
    bax = _out_batch_axis(gb, [(a, nd - len(sa)), (b, nd - len(sb))])
    names = ["b" if i == bax else f"d{i}" for i in range(nd)]
    ga = _broadcast_groups(sa, out_shape, names)
    gbb = _broadcast_groups(sb, out_shape, names)
    pdims = set()
    for t, g in ((a, ga), (b, gbb)):
        if gb.is_weight(t):
            pdims |= {d for grp in g for d in grp}
    dims = []
    for i, n in enumerate(out_shape):
        kind = DimKind.SAMPLE if i == bax else (DimKind.PARAMETER if names[i] in pdims else DimKind.ATTRIBUTE)
        dims.append(LoopDim(names[i], n, kind))
    opname = gb.op_name(name or fn)
    dtype = gb.dtype_of(a) if not gb.is_weight(a) or gb.is_weight(b) else gb.dtype_of(b)
    if fn in ("where", "masked_fill"):
        dtype = gb.dtype_of(a)
    y = gb.new_tensor(f"{opname}.out", out_shape, dtype, batch_axis=bax)
    f_el, b_el, saves = BINARY_FUNCTIONS[fn]
    n = math.prod(out_shape)
    uses = [TensorUse(a, ga), TensorUse(b, gbb)]
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.BINARY,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, tuple((nm,) for nm in names)),),
            flops=float(f_el * n),
            backward_flops=float(b_el * n),
            saved=_saved(gb, a, b) if saves == "both" else _saved(gb, b) if saves == "second" else (),
            attrs=_attrs(fn=fn, order=(a, b), **attrs),
        )
    )
    return y


def add(gb, a, b, *, name=None):
    """``binary(a, b, "add")`` (residual add, bias add)."""
    return binary(gb, a, b, "add", name=name)


def mul(gb, a, b, *, name=None):
    return binary(gb, a, b, "mul", name=name)


# ----------------------------------------------------------------------------------------------
# normalisation / softmax / reductions
# ----------------------------------------------------------------------------------------------
def layer_norm(
    gb: GraphState,
    x: str,
    normalized_ndim: int = 1,
    *,
    eps: float = 1e-5,
    affine: bool = True,
    bias: bool = True,
    weight: str | None = None,
    bias_param: str | None = None,
    rms: bool = False,
    name: str = "layer_norm",
) -> str:
    """Layer normalisation over the last ``normalized_ndim`` axes (RMSNorm with ``rms=True``).

    Loop dims: leading axes (SAMPLE / ATTRIBUTE, splittable), normalised axes (PARAMETER when
    affine, else ATTRIBUTE; **unsplittable**: mean and variance need the whole row). Outputs
    ``y`` plus the auxiliary per-row ``mean`` (not for RMSNorm) and ``rstd``; saves ``x`` and
    the statistics (``native_layer_norm``'s saved tensors). FLOPs ``8`` per element forward
    (mean, centre, square, sum, normalise, scale, shift), ``16`` backward (RMSNorm: 5 / 10).
    """
    xs = gb.shape(x)
    if not 1 <= normalized_ndim <= len(xs):
        raise InvalidInputError(f"layer_norm: normalized_ndim={normalized_ndim} invalid for {gb.spec(x)}")
    opname = gb.op_name(name)
    k = len(xs) - normalized_ndim
    dims, groups = _dims_of(gb, x)
    nshape = xs[k:]
    for i in range(k, len(xs)):
        dims[i] = LoopDim(dims[i].name, xs[i], DimKind.PARAMETER if affine else DimKind.ATTRIBUTE, splittable=False)
    ngroups = tuple(groups[k:])
    uses = [TensorUse(x, tuple(groups))]
    if affine:
        if weight is None:
            weight = gb.parameter(f"{opname}.weight", nshape, exact=True)
        uses.append(TensorUse(weight, ngroups))
        if bias and not rms:
            if bias_param is None:
                bias_param = gb.parameter(f"{opname}.bias", nshape, exact=True)
            uses.append(TensorUse(bias_param, ngroups))
    lead_axis = gb.batch_axis(x) if (gb.batch_axis(x) is not None and gb.batch_axis(x) < k) else None
    y = gb.new_tensor(f"{opname}.out", xs, gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    outs = [TensorUse(y, tuple(groups))]
    stats = []
    if not rms:
        mean = gb.new_tensor(f"{opname}.mean", xs[:k], "float32", batch_axis=lead_axis)
        outs.append(TensorUse(mean, tuple(groups[:k])))
        stats.append(mean)
    rstd = gb.new_tensor(f"{opname}.rstd", xs[:k], "float32", batch_axis=lead_axis)
    outs.append(TensorUse(rstd, tuple(groups[:k])))
    stats.append(rstd)
    n = math.prod(xs)
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.LAYER_NORM,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=tuple(outs),
            flops=(5.0 if rms else 8.0) * n,
            backward_flops=(10.0 if rms else 16.0) * n,
            saved=_saved(gb, x, *stats),
            attrs=_attrs(normalized_shape=nshape, eps=float(eps), affine=affine, bias=bool(affine and bias and not rms), rms=rms),
        )
    )
    return y


def batch_norm(
    gb: GraphState,
    x: str,
    *,
    eps: float = 1e-5,
    momentum: float = 0.1,
    affine: bool = True,
    track_running_stats: bool = True,
    weight: str | None = None,
    bias_param: str | None = None,
    running_mean: str | None = None,
    running_var: str | None = None,
    name: str = "bn",
) -> str:
    """Batch normalisation of ``x [N, C, ...]`` (training mode: batch statistics).

    Statistics policy (documented choice): splitting the sample ``n`` or a spatial dimension
    computes the statistics over the *local* shard, as PyTorch DDP without SyncBatchNorm does,
    so all of ``n`` and the spatial dims are splittable and no communication is implied (a cost
    model wanting SyncBatchNorm adds a ``2 C``-element all-reduce per split). ``c`` is
    PARAMETER (it indexes ``weight``/``bias``/running statistics). Outputs ``y`` and the
    auxiliary ``save_mean``/``save_invstd [C]``; saves ``x`` and them. Running statistics are
    CONSTANT tensors. FLOPs ``8`` per element forward, ``16`` backward.
    """
    xs = gb.shape(x)
    if len(xs) < 2:
        raise InvalidInputError(f"batch_norm needs [N, C, ...], got {gb.spec(x)}")
    opname = gb.op_name(name)
    C = xs[1]
    dims = [LoopDim("n", xs[0], DimKind.SAMPLE), LoopDim("c", C, DimKind.PARAMETER)]
    dims += [LoopDim(f"d{i}", n, DimKind.ATTRIBUTE) for i, n in enumerate(xs[2:], start=2)]
    groups = tuple((d.name,) for d in dims)
    uses = [TensorUse(x, groups)]
    if affine:
        weight = weight or gb.parameter(f"{opname}.weight", (C,), exact=True)
        bias_param = bias_param or gb.parameter(f"{opname}.bias", (C,), exact=True)
        uses += [TensorUse(weight, (("c",),)), TensorUse(bias_param, (("c",),))]
    if track_running_stats:
        running_mean = running_mean or gb.constant(f"{opname}.running_mean", (C,), exact=True)
        running_var = running_var or gb.constant(f"{opname}.running_var", (C,), exact=True)
        uses += [TensorUse(running_mean, (("c",),)), TensorUse(running_var, (("c",),))]
    y = gb.new_tensor(f"{opname}.out", xs, gb.dtype_of(x), batch_axis=0)
    m = gb.new_tensor(f"{opname}.save_mean", (C,), "float32")
    v = gb.new_tensor(f"{opname}.save_invstd", (C,), "float32")
    n = math.prod(xs)
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.BATCH_NORM,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, groups), TensorUse(m, (("c",),)), TensorUse(v, (("c",),))),
            flops=8.0 * n,
            backward_flops=16.0 * n,
            saved=_saved(gb, x, m, v),
            attrs=_attrs(
                eps=float(eps),
                momentum=float(momentum),
                affine=affine,
                track_running_stats=track_running_stats,
                local_statistics=True,
            ),
        )
    )
    return y


def softmax(gb: GraphState, x: str, dim: int = -1, *, log: bool = False, name: str | None = None) -> str:
    """(Log-)softmax along ``dim``: that axis is ATTRIBUTE and **unsplittable**; saves the output.

    FLOPs 5 per element forward (max, subtract, exp, sum, divide/log), 4 backward.
    """
    xs = gb.shape(x)
    dim = _norm_axis(dim, len(xs), "softmax dim")
    opname = gb.op_name(name or ("log_softmax" if log else "softmax"))
    dims, groups = _dims_of(gb, x)
    dims[dim] = LoopDim(dims[dim].name, xs[dim], DimKind.ATTRIBUTE, splittable=False)
    y = gb.new_tensor(f"{opname}.out", xs, gb.dtype_of(x), batch_axis=gb.batch_axis(x))
    n = math.prod(xs)
    gb.add_operator(
        Operator(
            opname,
            OpKind.SOFTMAX,
            tuple(dims),
            inputs=(TensorUse(x, tuple(groups)),),
            outputs=(TensorUse(y, tuple(groups)),),
            flops=5.0 * n,
            backward_flops=4.0 * n,
            saved=(y,),
            attrs=_attrs(dim=dim, log=bool(log)),
        )
    )
    return y


def reduce(
    gb: GraphState, x: str, dims: Sequence[int], fn: str = "sum", *, keepdim: bool = False, name: str | None = None
) -> str:
    """Reduce ``x`` over ``dims`` with ``fn`` in ``sum``, ``mean``, ``amax``, ``amin`` (kind REDUCE).

    Reduced dims are REDUCTION: splittable for sum/mean (partial sums), unsplittable for
    amax/amin. Kept dims keep their kinds. FLOPs one per input element forward and backward.
    Saves nothing for sum/mean, input and output for amax/amin.
    """
    if fn not in ("sum", "mean", "amax", "amin"):
        raise InvalidInputError(f"reduce fn must be sum, mean, amax or amin, got {fn!r}")
    xs = gb.shape(x)
    rd = sorted({_norm_axis(d, len(xs), "reduce dim") for d in dims})
    opname = gb.op_name(name or fn)
    ldims, groups = _dims_of(gb, x)
    for i in rd:
        ldims[i] = LoopDim(ldims[i].name, xs[i], DimKind.REDUCTION, splittable=fn in ("sum", "mean"))
    bax = gb.batch_axis(x)
    if keepdim:
        oshape = tuple(1 if i in rd else n for i, n in enumerate(xs))
        ogroups = tuple(() if i in rd else g for i, g in enumerate(groups))
        obax = bax if bax not in rd else None
    else:
        oshape = tuple(n for i, n in enumerate(xs) if i not in rd)
        ogroups = tuple(g for i, g in enumerate(groups) if i not in rd)
        obax = None if (bax is None or bax in rd) else bax - sum(1 for i in rd if i < bax)
    y = gb.new_tensor(f"{opname}.out", oshape, gb.dtype_of(x), batch_axis=obax)
    n = math.prod(xs)
    gb.add_operator(
        Operator(
            opname,
            OpKind.REDUCE,
            tuple(ldims),
            inputs=(TensorUse(x, tuple(groups)),),
            outputs=(TensorUse(y, ogroups),),
            flops=float(n),
            backward_flops=float(n),
            saved=_saved(gb, x, y) if fn in ("amax", "amin") else (),
            attrs=_attrs(fn=fn, dims=tuple(rd), keepdim=bool(keepdim)),
        )
    )
    return y


# ----------------------------------------------------------------------------------------------
# EMBEDDING / RNN_CELL
# ----------------------------------------------------------------------------------------------
def embedding(
    gb: GraphState,
    ids: str,
    num_embeddings: int | None = None,
    embedding_dim: int | None = None,
    *,
    weight: str | None = None,
    padding_idx: int | None = None,
    name: str = "embedding",
) -> str:
    """Table lookup ``W[ids]``: integer ``ids [...]`` -> ``[..., D]`` with ``W [V, D]``.

    Loop dims: the ids' axes (SAMPLE / ATTRIBUTE), ``v`` vocabulary (PARAMETER: it indexes the
    table but not the output, so splitting it leaves *partial sums*: each device looks up the
    ids in its slice, zeros elsewhere, and an all-reduce sums them, Megatron's vocab-parallel
    embedding), ``d`` (PARAMETER). FLOPs 0 forward (a gather), ``N D`` backward (scatter-add).
    Saves ``ids``.
    """
    opname = gb.op_name(name)
    if weight is None:
        if num_embeddings is None or embedding_dim is None:
            raise InvalidInputError("embedding needs num_embeddings and embedding_dim or an existing weight")
        weight = gb.parameter(f"{opname}.weight", (num_embeddings, embedding_dim), exact=True)
    V, D = gb.shape(weight)
    dims, groups = _dims_of(gb, ids)
    dims += [LoopDim("v", V, DimKind.PARAMETER), LoopDim("e", D, DimKind.PARAMETER)]
    ishape = gb.shape(ids)
    y = gb.new_tensor(f"{opname}.out", ishape + (D,), gb.dtype_of(weight), batch_axis=gb.batch_axis(ids))
    n = math.prod(ishape)
    ins, prm = _split_uses(gb, [TensorUse(ids, tuple(groups)), TensorUse(weight, (("v",), ("e",)))])
    gb.add_operator(
        Operator(
            opname,
            OpKind.EMBEDDING,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, tuple(groups) + (("e",),)),),
            flops=0.0,
            backward_flops=float(n * D),
            saved=_saved(gb, ids),
            attrs=_attrs(padding_idx=padding_idx),
        )
    )
    return y


def rnn_cell(
    gb: GraphState,
    x: str,
    h: str | None,
    c: str | None,
    hidden_size: int | None = None,
    *,
    weights: tuple[str, str, str | None] | None = None,
    bias: bool = True,
    mode: str = "lstm",
    name: str = "lstm",
) -> tuple[str, str]:
    """One LSTM time step: ``(h', c') = LSTMCell(x, (h, c))``; returns ``(h', c')``.

    ``x [B, I]``, ``h``/``c [B, H]`` (None: a zero initial state, which skips the recurrent
    matmul). ``weights = (w_ih [4, H, I], w_hh [4, H, H], b [4, H] or None)`` shares parameters
    between time steps; otherwise they are created as ``<name>.weight_ih`` etc. The weights are
    stored gate-major ``[4, H, *]`` (``torch.nn.LSTM``'s ``[4H, *]`` viewed as ``[4, H, *]``;
    gate order i, f, g, o) so that the hidden units are their own tensor dimension. The bias
    is ``b_ih + b_hh``.

    Loop dims: ``b`` SAMPLE, ``g`` gates (PARAMETER, unsplittable: the cell combines all four),
    ``h`` hidden units (PARAMETER, splittable: column-parallel LSTM), ``i`` input features and
    ``j`` previous hidden units (REDUCTION). Outputs ``h'``, ``c'`` and the auxiliary gate
    workspace ``[B, 4, H]`` (PyTorch's fused cell keeps it). Saves ``x``, ``h``, ``c``, the
    workspace and ``c'``. FLOPs: forward ``2 B 4H (I + H)`` (+ ``4 B H`` bias) + ``20 B H``
    (gates); backward ``4 B 4H (I + H)`` (+ ``4 B H``) + ``30 B H``.
    """
    if mode != "lstm":
        raise InvalidInputError(f"rnn_cell mode {mode!r} not supported (only 'lstm')")
    xs = gb.shape(x)
    if len(xs) != 2:
        raise InvalidInputError(f"rnn_cell needs x [B, I], got {gb.spec(x)}")
    B, I = xs
    opname = gb.op_name(name)
    if weights is None:
        if hidden_size is None:
            raise InvalidInputError("rnn_cell needs hidden_size or weights")
        H = hidden_size
        weights = (
            gb.parameter(f"{opname}.weight_ih", (4, H, I), exact=True),
            gb.parameter(f"{opname}.weight_hh", (4, H, H), exact=True),
            gb.parameter(f"{opname}.bias", (4, H), exact=True) if bias else None,
        )
    w_ih, w_hh, b = weights
    H = gb.shape(w_ih)[1]
    if gb.shape(w_ih) != (4, H, I) or gb.shape(w_hh) != (4, H, H) or (b is not None and gb.shape(b) != (4, H)):
        raise InvalidInputError(f"rnn_cell {opname!r}: weights do not match x {xs} and hidden {H}")
    for t in (h, c):
        if t is not None and gb.shape(t) != (B, H):
            raise InvalidInputError(f"rnn_cell {opname!r}: state {gb.spec(t)} should be {(B, H)}")
    dims = (
        LoopDim("b", B, DimKind.SAMPLE),
        LoopDim("g", 4, DimKind.PARAMETER, splittable=False),
        LoopDim("h", H, DimKind.PARAMETER),
        LoopDim("i", I, DimKind.REDUCTION),
        LoopDim("j", H, DimKind.REDUCTION),
    )
    inputs = [TensorUse(x, (("b",), ("i",)))]
    if h is not None:
        inputs.append(TensorUse(h, (("b",), ("j",))))
    if c is not None:
        inputs.append(TensorUse(c, (("b",), ("h",))))
    params = [TensorUse(w_ih, (("g",), ("h",), ("i",)))]
    if h is not None:
        params.append(TensorUse(w_hh, (("g",), ("h",), ("j",))))
    if b is not None:
        params.append(TensorUse(b, (("g",), ("h",))))
    hn = gb.new_tensor(f"{opname}.h", (B, H), gb.dtype_of(x), batch_axis=0)
    cn = gb.new_tensor(f"{opname}.c", (B, H), gb.dtype_of(x), batch_axis=0)
    ws = gb.new_tensor(f"{opname}.workspace", (B, 4, H), gb.dtype_of(x), batch_axis=0)
    K = I + (H if h is not None else 0)
    gb.add_operator(
        Operator(
            opname,
            OpKind.RNN_CELL,
            dims,
            inputs=tuple(inputs),
            params=tuple(params),
            outputs=(
                TensorUse(hn, (("b",), ("h",))),
                TensorUse(cn, (("b",), ("h",))),
                TensorUse(ws, (("b",), ("g",), ("h",))),
            ),
            flops=2.0 * B * 4 * H * K + (4.0 * B * H if b is not None else 0) + 20.0 * B * H,
            backward_flops=4.0 * B * 4 * H * K + (4.0 * B * H if b is not None else 0) + 30.0 * B * H,
            saved=_saved(gb, x, h, c, ws, cn),
            attrs=_attrs(mode=mode, has_h=h is not None, has_c=c is not None, bias=b is not None),
        )
    )
    return hn, cn


def lstm_cell(gb, x, h, c, hidden_size=None, **kw):
    """Alias of :func:`rnn_cell` with ``mode="lstm"``."""
    return rnn_cell(gb, x, h, c, hidden_size, mode="lstm", **kw)


# ----------------------------------------------------------------------------------------------
# RESHAPE / TRANSPOSE / CONCAT / SPLIT
# ----------------------------------------------------------------------------------------------
def _refine(in_shape, out_shape):
    """Segments of a reshape: list of (in_axes, out_axes, factors or None).

    ``factors`` is the common refinement (sizes, outermost first) when every axis of the
    segment is a product of consecutive factors; None when no such refinement exists.
    """
    segs = []
    i = j = 0
    ni, no = len(in_shape), len(out_shape)
    while i < ni or j < no:
        ia, oa = [], []
        pi = po = 1
        # size-1 axes form their own segment
        if i < ni and in_shape[i] == 1 and not (j < no and out_shape[j] == 1):
            segs.append(([i], [], []))
            i += 1
            continue
        if j < no and out_shape[j] == 1 and not (i < ni and in_shape[i] == 1):
            segs.append(([], [j], []))
            j += 1
            continue
        while True:
            if pi <= po and i < ni:
                pi *= in_shape[i]
                ia.append(i)
                i += 1
            elif j < no:
                po *= out_shape[j]
                oa.append(j)
                j += 1
            else:
                break
            if pi == po and ia and oa:
                break
        if pi != po:
            raise InvalidInputError(f"cannot reshape {tuple(in_shape)} to {tuple(out_shape)}")
        cuts = set()
        acc = 1
        for a in ia:
            acc *= in_shape[a]
            cuts.add(acc)
        acc = 1
        for a in oa:
            acc *= out_shape[a]
            cuts.add(acc)
        chain = sorted(cuts)
        ok = all(chain[k + 1] % chain[k] == 0 for k in range(len(chain) - 1))
        factors = None
        if ok:
            factors, prev = [], 1
            for cval in chain:
                factors.append(cval // prev)
                prev = cval
        segs.append((ia, oa, factors))
    return segs


def reshape(gb: GraphState, x: str, shape: Sequence[int], *, name: str = "reshape") -> str:
    """Reshape (view / flatten / unsqueeze / squeeze) with merged loop dimensions.

    The loop dims are the common refinement of the two shapes: ``[B, S, H*D] -> [B, S, H, D]``
    has loop dims ``b, s, h, d``, the input's last axis being indexed by ``("h", "d")``.
    Splitting a loop dim therefore splits both sides consistently (only outermost factors of a
    merged axis may be split). Axis groups with no common refinement (``[6, 4] -> [4, 6]``)
    get separate, unsplittable loop dims on each side. One ``-1`` is allowed. A reshape to the
    same shape returns ``x`` unchanged (no operator). FLOPs 0, nothing saved.
    """
    xs = gb.shape(x)
    shape = list(shape)
    n = math.prod(xs)
    if shape.count(-1) > 1:
        raise InvalidInputError(f"reshape: at most one -1 allowed, got {shape}")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        if rest == 0 or n % rest:
            raise InvalidInputError(f"cannot reshape {xs} to {shape}")
        shape[shape.index(-1)] = n // rest
    shape = tuple(int(s) for s in shape)
    if math.prod(shape) != n:
        raise InvalidInputError(f"cannot reshape {gb.spec(x)} to {shape}")
    if shape == xs:
        return x
    opname = gb.op_name(name)
    bax = gb.batch_axis(x)
    dims: list[LoopDim] = []
    gin: list[tuple] = [()] * len(xs)
    gout: list[tuple] = [()] * len(shape)
    out_bax = None
    for k, (ia, oa, factors) in enumerate(_refine(xs, shape)):
        if not ia and not oa:
            continue
        if factors is None:
            for a in ia:
                nm = f"i{a}"
                dims.append(LoopDim(nm, xs[a], DimKind.SAMPLE if a == bax else DimKind.ATTRIBUTE, splittable=False))
                gin[a] = (nm,)
            for a in oa:
                nm = f"o{a}"
                dims.append(LoopDim(nm, shape[a], DimKind.ATTRIBUTE, splittable=False))
                gout[a] = (nm,)
            continue
        names = [f"r{k}_{f}" for f in range(len(factors))]
        if len(factors) == 1:
            names = [f"r{k}"]
        seg_dims = [LoopDim(nm, sz, DimKind.ATTRIBUTE) for nm, sz in zip(names, factors)]
        # assign factors to axes
        pos = 0
        for a in ia:
            grp, acc = [], 1
            while acc < xs[a]:
                grp.append(names[pos])
                acc *= factors[pos]
                pos += 1
            gin[a] = tuple(grp)
            if a == bax and grp:
                sd = seg_dims[names.index(grp[0])]
                seg_dims[names.index(grp[0])] = LoopDim(sd.name, sd.size, DimKind.SAMPLE)
        pos = 0
        for a in oa:
            grp, acc = [], 1
            while acc < shape[a]:
                grp.append(names[pos])
                acc *= factors[pos]
                pos += 1
            gout[a] = tuple(grp)
        dims += seg_dims
    sample = {d.name for d in dims if d.kind is DimKind.SAMPLE}
    for a, g in enumerate(gout):
        if g and g[0] in sample:
            out_bax = a
            break
    y = gb.new_tensor(f"{opname}.out", shape, gb.dtype_of(x), batch_axis=out_bax)
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(gin))])
    gb.add_operator(
        Operator(
            opname,
            OpKind.RESHAPE,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, tuple(gout)),),
            attrs=_attrs(shape=shape),
        )
    )
    return y


def flatten(gb, x, start_dim: int = 1, end_dim: int = -1, *, name: str = "flatten"):
    """``torch.flatten`` as a :func:`reshape`."""
    xs = gb.shape(x)
    s, e = _norm_axis(start_dim, len(xs)), _norm_axis(end_dim, len(xs))
    return reshape(gb, x, xs[:s] + (math.prod(xs[s : e + 1]),) + xs[e + 1 :], name=name)


def transpose(gb: GraphState, x: str, perm: Sequence[int], *, name: str = "transpose") -> str:
    """Permute the axes of ``x`` (``y.shape[i] = x.shape[perm[i]]``); identity returns ``x``.

    Loop dims: one per axis (all splittable), the output indexing them permuted. FLOPs 0.
    """
    xs = gb.shape(x)
    perm = tuple(_norm_axis(p, len(xs)) for p in perm)
    if sorted(perm) != list(range(len(xs))):
        raise InvalidInputError(f"transpose: {perm} is not a permutation of {len(xs)} axes")
    if perm == tuple(range(len(xs))):
        return x
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, x)
    bax = gb.batch_axis(x)
    y = gb.new_tensor(
        f"{opname}.out", tuple(xs[p] for p in perm), gb.dtype_of(x), batch_axis=None if bax is None else perm.index(bax)
    )
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(groups))])
    gb.add_operator(
        Operator(
            opname,
            OpKind.TRANSPOSE,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=(TensorUse(y, tuple(groups[p] for p in perm)),),
            attrs=_attrs(perm=perm),
        )
    )
    return y


def concat(gb: GraphState, xs: Sequence[str], dim: int = 0, *, name: str = "concat") -> str:
    """Concatenate along ``dim``. The other axes are shared loop dims; along ``dim`` every
    input and the output have their own unsplittable loop dim (an output extent is a sum, not
    a product). FLOPs 0, nothing saved."""
    if not xs:
        raise InvalidInputError("concat needs at least one tensor")
    shapes = [gb.shape(t) for t in xs]
    nd = len(shapes[0])
    dim = _norm_axis(dim, nd, "concat dim")
    for s in shapes:
        if len(s) != nd or any(s[i] != shapes[0][i] for i in range(nd) if i != dim):
            raise InvalidInputError(f"concat: shapes {shapes} differ outside dim {dim}")
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, xs[0])
    cat = dims[dim]
    dims.pop(dim)
    total = sum(s[dim] for s in shapes)
    dims.append(LoopDim("cat", total, cat.kind, splittable=False))
    uses = []
    for k, (t, s) in enumerate(zip(xs, shapes)):
        dims.append(LoopDim(f"cat{k}", s[dim], cat.kind, splittable=False))
        g = list(groups)
        g[dim] = (f"cat{k}",)
        uses.append(TensorUse(t, tuple(g)))
    out_shape = shapes[0][:dim] + (total,) + shapes[0][dim + 1 :]
    y = gb.new_tensor(f"{opname}.out", out_shape, gb.dtype_of(xs[0]), batch_axis=_out_batch_axis(gb, [(t, 0) for t in xs]))
    g = list(groups)
    g[dim] = ("cat",)
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(opname, OpKind.CONCAT, tuple(dims), inputs=ins, params=prm,
                 outputs=(TensorUse(y, tuple(g)),), attrs=_attrs(dim=dim, order=tuple(xs)))
    )
    return y


def split(gb: GraphState, x: str, sizes: Sequence[int] | int, dim: int = 0, *, name: str = "split") -> tuple[str, ...]:
    """Split along ``dim`` into pieces of ``sizes`` (an int: equal pieces, the last may be
    smaller, like ``torch.split``). Same loop-dim scheme as :func:`concat`. FLOPs 0."""
    xs = gb.shape(x)
    dim = _norm_axis(dim, len(xs), "split dim")
    n = xs[dim]
    if isinstance(sizes, int):
        if sizes < 1:
            raise InvalidInputError(f"split size must be >= 1, got {sizes}")
        sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
    sizes = [int(s) for s in sizes]
    if sum(sizes) != n or any(s < 1 for s in sizes):
        raise InvalidInputError(f"split sizes {sizes} do not add up to {n} (dim {dim} of {gb.spec(x)})")
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, x)
    sp = dims.pop(dim)
    dims.append(LoopDim("cat", n, sp.kind, splittable=False))
    gi = list(groups)
    gi[dim] = ("cat",)
    outs, names = [], []
    bax = gb.batch_axis(x)
    for k, s in enumerate(sizes):
        dims.append(LoopDim(f"cat{k}", s, sp.kind, splittable=False))
        t = gb.new_tensor(f"{opname}.out{k}", xs[:dim] + (s,) + xs[dim + 1 :], gb.dtype_of(x), batch_axis=bax)
        g = list(groups)
        g[dim] = (f"cat{k}",)
        outs.append(TensorUse(t, tuple(g)))
        names.append(t)
    ins, prm = _split_uses(gb, [TensorUse(x, tuple(gi))])
    gb.add_operator(Operator(opname, OpKind.SPLIT, tuple(dims), inputs=ins, params=prm, outputs=tuple(outs),
                    attrs=_attrs(dim=dim, sizes=tuple(sizes))))
    return tuple(names)


# ----------------------------------------------------------------------------------------------
# LOSS / OPAQUE
# ----------------------------------------------------------------------------------------------
def loss(
    gb: GraphState,
    logits: str,
    labels: str,
    *,
    fn: str = "cross_entropy",
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    name: str = "loss",
) -> str:
    """Classification loss of ``logits [..., C]`` (class axis last, or ``[N, C, ...]`` never)
    against integer ``labels [...]``; returns the scalar loss.

    ``fn="cross_entropy"`` (log-softmax + NLL; outputs the auxiliary log-probabilities, which
    it saves with the labels) or ``fn="nll"`` (the input already holds log-probabilities;
    saves the labels). The class axis ``c`` is ATTRIBUTE and **unsplittable** (the softmax
    needs every class; a vocab-parallel cross-entropy would be an extension). The leading axes
    are splittable: the scalar output indexes none of them, so a split leaves a *partial sum*
    (of the per-sample losses already divided by the global count for ``reduction="mean"``).
    FLOPs: forward 5 per logit (+1 per sample), backward 4 per logit.
    """
    ls, ys = gb.shape(logits), gb.shape(labels)
    if ls[:-1] != ys:
        raise InvalidInputError(f"loss: labels {gb.spec(labels)} must have the logits' leading shape {ls[:-1]}")
    if fn not in ("cross_entropy", "nll"):
        raise InvalidInputError(f"loss fn must be 'cross_entropy' or 'nll', got {fn!r}")
    if reduction not in ("mean", "sum"):
        raise InvalidInputError(f"loss reduction must be 'mean' or 'sum', got {reduction!r}")
    opname = gb.op_name(name)
    dims, groups = _dims_of(gb, logits)
    dims[-1] = LoopDim("c", ls[-1], DimKind.ATTRIBUTE, splittable=False)
    groups[-1] = ("c",)
    out = gb.new_tensor(f"{opname}.out", (), "float32")
    outs = [TensorUse(out, ())]
    saved = [labels]
    if fn == "cross_entropy":
        logp = gb.new_tensor(f"{opname}.logp", ls, gb.dtype_of(logits), batch_axis=gb.batch_axis(logits))
        outs.append(TensorUse(logp, tuple(groups)))
        saved.append(logp)
    n = math.prod(ls)
    gb.add_operator(
        Operator(
            opname,
            OpKind.LOSS,
            tuple(dims),
            inputs=(TensorUse(logits, tuple(groups)), TensorUse(labels, tuple(groups[:-1]))),
            outputs=tuple(outs),
            flops=(5.0 if fn == "cross_entropy" else 1.0) * n + math.prod(ys),
            backward_flops=(4.0 if fn == "cross_entropy" else 1.0) * n,
            saved=_saved(gb, *saved),
            attrs=_attrs(fn=fn, reduction=reduction, ignore_index=int(ignore_index), label_smoothing=float(label_smoothing)),
        )
    )
    return out


def cross_entropy(gb, logits, labels, **kw):
    """``loss(logits, labels, fn="cross_entropy")``."""
    return loss(gb, logits, labels, fn="cross_entropy", **kw)


def max_pool2d(gb, x, kernel_size, stride=None, padding=0, **kw):
    return pool2d(gb, x, kernel_size, stride, padding, mode="max", **kw)


def avg_pool2d(gb, x, kernel_size=None, stride=None, padding=0, **kw):
    return pool2d(gb, x, kernel_size, stride, padding, mode="avg", **kw)


def opaque(
    gb: GraphState,
    inputs: Sequence[str],
    outputs: Sequence[tuple[str, Sequence[int], str]],
    *,
    flops: float = 0.0,
    backward_flops: float = 0.0,
    saved: Sequence[str] = (),
    attrs: tuple = (),
    name: str = "opaque",
) -> tuple[str, ...]:
    """An operator with no rule: every loop dimension is unsplittable (it runs replicated).

    ``inputs`` are activation names, constants or parameters; ``outputs`` are
    ``(hint, shape, dtype)``. Each tensor axis gets its own loop dim (the batch axis is
    SAMPLE, still unsplittable). ``attrs`` should let an executor run it (the torch importer
    stores the aten target and its arguments).
    """
    opname = gb.op_name(name)
    dims, uses = [], []
    for k, t in enumerate(inputs):
        d, g = _dims_of(gb, t, prefix=f"in{k}", splittable=False)
        dims += d
        uses.append(TensorUse(t, tuple(g)))
    outs, names = [], []
    bax = _out_batch_axis(gb, [(t, 0) for t in inputs])
    for k, (hint, shape, dtype) in enumerate(outputs):
        shape = tuple(shape)
        ob = bax if (bax is not None and bax < len(shape)) else None
        t = gb.new_tensor(f"{opname}.{hint}", shape, dtype, batch_axis=ob)
        d, g = _dims_of(gb, t, prefix=f"out{k}", splittable=False)
        dims += d
        outs.append(TensorUse(t, tuple(g)))
        names.append(t)
    ins, prm = _split_uses(gb, uses)
    gb.add_operator(
        Operator(
            opname,
            OpKind.OPAQUE,
            tuple(dims),
            inputs=ins,
            params=prm,
            outputs=tuple(outs),
            flops=float(flops),
            backward_flops=float(backward_flops),
            saved=_saved(gb, *saved),
            attrs=tuple(attrs),
        )
    )
    return tuple(names)
