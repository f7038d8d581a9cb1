"""Run IR operators with torch: :func:`run_operator` (one operator) and :func:`run_graph`.

Operators are executed with ``torch.nn.functional`` / aten calls from their ``attrs``, so
that a graph can be run operator by operator (the distributed executor runs operators on
local shards with the same function). Auxiliary outputs (max-pool indices, dropout masks,
normalisation statistics, attention log-sum-exp, LSTM workspace, log-probabilities) are
computed too. ``training=False`` (the default) disables dropout and uses batch-norm running
statistics, like ``module.eval()``.

Examples
--------
>>> import torch
>>> from tensoropt_py.graph import zoo
>>> from tensoropt_py.graph.torch_ops import init_params, run_graph
>>> g = zoo.mlp(batch=4, sizes=(8, 3))
>>> params = init_params(g, seed=0)
>>> out = run_graph(g, {"x": torch.randn(4, 8), "labels": torch.tensor([0, 1, 2, 0])}, params)
>>> out["loss.out"].shape
torch.Size([])
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from ..errors import InvalidInputError, UnsupportedOperatorError
from .ir import DTYPE_BYTES, Graph, Operator, OpKind, TensorRole

__all__ = ["run_operator", "run_graph", "init_params", "torch_dtype"]

_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
assert set(_DTYPES) == set(DTYPE_BYTES)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of an IR dtype name."""
    return _DTYPES[name]


def _unary(fn, x, op, training):
    a = op.attr
    if fn == "relu":
        return F.relu(x)
    if fn in ("gelu", "gelu_tanh"):
        return F.gelu(x, approximate="tanh" if fn == "gelu_tanh" else a("approximate", "none"))
    if fn == "pow":
        return torch.pow(x, a("exponent"))
    if fn == "mul_scalar":
        return x * a("scalar")
    if fn == "add_scalar":
        return x + a("scalar")
    if fn == "rsub_scalar":
        return a("scalar") - x
    if fn in ("identity",):
        return x
    if fn == "expand":
        return x.expand(a("shape"))
    if fn == "cast":
        return x.to(_DTYPES[a("dtype")])
    if fn == "square":
        return x * x
    if fn == "compare":
        return getattr(torch, a("op"))(x, a("scalar"))
    f = {
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "silu": F.silu,
        "exp": torch.exp,
        "log": torch.log,
        "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt,
        "reciprocal": torch.reciprocal,
        "neg": torch.neg,
        "abs": torch.abs,
        "sin": torch.sin,
        "cos": torch.cos,
        "erf": torch.erf,
    }.get(fn)
    if f is None:
        raise UnsupportedOperatorError(f"operator {op.name!r}: unary function {fn!r} cannot be executed")
    return f(x)


def _moe_slots(idx, num_experts, capacity, offset, local_experts):
    """Flat slot index of every routed choice in a ``[G, local_experts * capacity]`` buffer.

    ``idx [G, S, k]``: slot ``c`` of expert ``e`` goes to the ``c``-th choice routed to ``e`` in
    the group (token order, then choice order). Choices beyond the capacity, or to an expert
    outside ``[offset, offset + local_experts)``, get the dump index ``local_experts * capacity``.
    Returns ``[G, S * k]`` int64.
    """
    G = idx.shape[0]
    flat = idx.reshape(G, -1).long()
    onehot = F.one_hot(flat, num_experts)  # [G, S*k, E]
    pos = (onehot.cumsum(1) - 1).gather(2, flat.unsqueeze(-1)).squeeze(-1)  # position within its expert
    local = flat - offset
    keep = (pos < capacity) & (local >= 0) & (local < local_experts)
    dump = local_experts * capacity
    return torch.where(keep, local.clamp(0, max(local_experts - 1, 0)) * capacity + pos, torch.full_like(flat, dump))


_MOE_ACT = {"silu": F.silu, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def _moe_dispatch(x, idx, a, local_experts):
    G, S, H = x.shape
    C = a("capacity")
    slots = _moe_slots(idx, a("num_experts"), C, a("expert_offset", 0), local_experts)
    k = idx.shape[-1]
    src = x.unsqueeze(2).expand(G, S, k, H).reshape(G, S * k, H)
    buf = x.new_zeros(G, local_experts * C + 1, H)
    buf = buf.scatter_add(1, slots.unsqueeze(-1).expand(-1, -1, H), src)  # one choice per kept slot
    return buf[:, : local_experts * C].reshape(G, local_experts, C, H)


def _moe_experts(x, up, down, a):
    act = _MOE_ACT[a("activation")]
    t = a("transposed")
    proj = torch.einsum("gech,eho->geco", x, up) if t else torch.einsum("gech,eoh->geco", x, up)
    if a("gated"):
        gate, u = proj.chunk(2, dim=-1)
        h = act(gate) * u
    else:
        h = act(proj)
    y = torch.einsum("geci,eih->gech", h, down) if t else torch.einsum("geci,ehi->gech", h, down)
    return y, proj


def _moe_combine(y, idx, w, a):
    G, El, C, H = y.shape
    S, k = idx.shape[1], idx.shape[2]
    slots = _moe_slots(idx, a("num_experts"), C, a("expert_offset", 0), El)
    buf = torch.cat([y.reshape(G, El * C, H), y.new_zeros(G, 1, H)], dim=1)
    picked = buf.gather(1, slots.unsqueeze(-1).expand(-1, -1, H)).reshape(G, S, k, H)
    return (picked * w.unsqueeze(-1).to(picked.dtype)).sum(2)


def _decode(arg, env):
    if isinstance(arg, tuple) and len(arg) == 3 and arg[0] == "__empty__":  # a zero-size tensor
        return torch.empty(arg[1], dtype=_DTYPES[arg[2]])
    if isinstance(arg, tuple) and len(arg) == 2 and arg[0] == "__tensor__":
        return env[arg[1]]
    if isinstance(arg, tuple) and len(arg) == 2 and arg[0] == "__list__":
        return [_decode(a, env) for a in arg[1]]
    if isinstance(arg, tuple):
        return tuple(_decode(a, env) for a in arg)
    return arg


def _resolve_target(target):
    if callable(target):
        return target
    if isinstance(target, str) and target.startswith("aten."):
        _, name, overload = target.split(".")
        return getattr(getattr(torch.ops.aten, name), overload)
    raise UnsupportedOperatorError(f"cannot execute opaque target {target!r}")


def _attention_lse(q, k, mask, causal, scale):
    """The attention's log-sum-exp output (per query row), outside autograd.

    A side output the backward of fused attention keeps (TensorOpt's memory model counts it);
    ``scaled_dot_product_attention`` keeps its own copy, so computing this one under autograd
    would keep the whole score matrix a second time.
    """
    with torch.no_grad():
        scale = scale or 1.0 / math.sqrt(q.shape[-1])
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        if causal:
            Sq, Sk = s.shape[-2], s.shape[-1]
            keep = torch.ones(Sq, Sk, dtype=torch.bool, device=s.device).tril(diagonal=Sk - Sq)
            s = s.masked_fill(~keep, float("-inf"))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
        return torch.logsumexp(s, dim=-1)


def run_operator(
    op: Operator,
    inputs: Mapping[str, torch.Tensor],
    params: Mapping[str, torch.Tensor],
    *,
    training: bool = False,
) -> dict[str, torch.Tensor]:
    """Compute the forward of ``op``.

    Parameters
    ----------
    op : Operator
    inputs : mapping of tensor name -> Tensor
        The operator's input activations (for an INPUT operator: the data it loads).
    params : mapping of tensor name -> Tensor
        Its parameters and constants (extra entries are ignored).
    training : bool
        Dropout active and batch statistics (as ``module.train()``).

    Returns
    -------
    dict of output tensor name -> Tensor, for every output (auxiliary ones included).
    """
    env = {**params, **inputs}

    def get(name):
        try:
            return env[name]
        except KeyError:
            raise InvalidInputError(f"operator {op.name!r} needs tensor {name!r}, which was not given") from None

    ins = [get(u.tensor) for u in op.inputs]
    prm = [get(u.tensor) for u in op.params]
    outs = [u.tensor for u in op.outputs]
    a = op.attr
    k = op.kind
    if k is OpKind.INPUT:
        res = [get(t) for t in outs]
    elif k is OpKind.LINEAR:
        seq = ins + prm
        x, w = seq[0], seq[1]
        b = seq[2] if a("bias") else None
        if a("weight_layout") == "io":
            y = x @ w
            res = [y + b if b is not None else y]
        else:
            res = [F.linear(x, w, b)]
    elif k in (OpKind.MATMUL, OpKind.BMM):
        x, y = (get(t) for t in a("order"))
        res = [torch.matmul(x, y)]
    elif k is OpKind.ATTENTION:
        order = a("order")
        q, kk, v = (get(t) for t in order[:3])
        mask = get(order[3]) if len(order) > 3 else None
        p = a("dropout_p", 0.0) if training else 0.0
        out = F.scaled_dot_product_attention(q, kk, v, attn_mask=mask, dropout_p=p, is_causal=a("causal", False),
                                             scale=a("scale"))
        res = [out, _attention_lse(q, kk, mask, a("causal", False), a("scale"))]
    elif k is OpKind.CONV2D:
        b = prm[1] if a("bias") else None
        x = ins[0]
        w = prm[0]
        res = [F.conv2d(x, w, b, stride=a("stride"), padding=a("padding"), dilation=a("dilation"), groups=a("groups"))]
    elif k is OpKind.POOL2D:
        x = ins[0]
        if a("mode") == "max":
            y, idx = F.max_pool2d(x, a("kernel_size"), a("stride"), a("padding"), ceil_mode=a("ceil_mode"),
                                  return_indices=True)
            res = [y, idx]
        elif a("output_size") is not None:
            res = [F.adaptive_avg_pool2d(x, a("output_size"))]
        else:
            res = [F.avg_pool2d(x, a("kernel_size"), a("stride"), a("padding"), ceil_mode=a("ceil_mode"),
                                count_include_pad=a("count_include_pad"))]
    elif k is OpKind.UNARY:
        x = (ins or prm)[0]
        fn = a("fn")
        if fn == "dropout":
            p = a("p", 0.0)
            if training and p > 0:
                mask = torch.rand_like(x, dtype=torch.float32) >= p
                res = [x * mask / (1.0 - p), mask]
            else:
                res = [x, torch.ones_like(x, dtype=torch.bool)]
        else:
            res = [_unary(fn, x, op, training)]
    elif k is OpKind.BINARY:
        x, y = (get(t) for t in a("order"))
        fn = a("fn")
        if fn == "where":
            res = [torch.where(y, x, torch.as_tensor(a("scalar"), dtype=x.dtype, device=x.device))]
        elif fn == "masked_fill":
            res = [x.masked_fill(y, a("scalar"))]
        else:
            f = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                 "maximum": torch.maximum, "minimum": torch.minimum}[fn]
            res = [f(x, y)]
    elif k is OpKind.LAYER_NORM:
        x = ins[0]
        shape = tuple(a("normalized_shape"))
        w = prm[0] if a("affine") else None
        b = prm[1] if a("bias") else None
        dims = tuple(range(x.dim() - len(shape), x.dim()))
        if a("rms"):
            rstd = torch.rsqrt(x.float().pow(2).mean(dims, keepdim=True) + a("eps"))
            y = (x.float() * rstd).to(x.dtype)
            res = [y * w if w is not None else y, rstd.reshape(x.shape[: x.dim() - len(shape)])]
        else:
            y, mean, rstd = torch.native_layer_norm(x, list(shape), w, b, a("eps"))
            lead = x.shape[: x.dim() - len(shape)]
            res = [y, mean.reshape(lead), rstd.reshape(lead)]
    elif k is OpKind.BATCH_NORM:
        x = ins[0]
        w, b = (prm[0], prm[1]) if a("affine") else (None, None)
        rm, rv = (prm[-2].clone(), prm[-1].clone()) if a("track_running_stats") else (None, None)
        use_batch = training or rm is None
        if use_batch:
            y, m, v = torch.native_batch_norm(x, w, b, rm, rv, True, a("momentum"), a("eps"))
        else:
            y = F.batch_norm(x, rm, rv, w, b, False, a("momentum"), a("eps"))
            m, v = rm, torch.rsqrt(rv + a("eps"))
        res = [y, m, v]
    elif k is OpKind.SOFTMAX:
        x = ins[0]
        res = [F.log_softmax(x, a("dim")) if a("log") else F.softmax(x, a("dim"))]
    elif k is OpKind.REDUCE:
        x = ins[0]
        fn, dims, keep = a("fn"), list(a("dims")), a("keepdim")
        res = [{"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}[fn](x, dims, keepdim=keep)]
    elif k is OpKind.EMBEDDING:
        ids, w = (ins + prm)[0], prm[-1]
        res = [F.embedding(ids, w, padding_idx=a("padding_idx"))]
    elif k is OpKind.RNN_CELL:
        it = iter(ins)
        x = next(it)
        h = next(it) if a("has_h") else None
        c = next(it) if a("has_c") else None
        pit = iter(prm)
        w_ih = next(pit)
        w_hh = next(pit) if a("has_h") else None
        bias = next(pit) if a("bias") else None
        G, H, I = w_ih.shape
        gates = x @ w_ih.reshape(G * H, I).t()
        if h is not None:
            gates = gates + h @ w_hh.reshape(G * H, H).t()
        if bias is not None:
            gates = gates + bias.reshape(G * H)
        gi, gf, gg, go = gates.reshape(x.shape[0], 4, H).unbind(1)
        gi, gf, gg, go = torch.sigmoid(gi), torch.sigmoid(gf), torch.tanh(gg), torch.sigmoid(go)
        c_new = gi * gg if c is None else gf * c + gi * gg
        h_new = go * torch.tanh(c_new)
        res = [h_new, c_new, torch.stack([gi, gf, gg, go], dim=1)]
    elif k is OpKind.RESHAPE:
        res = [(ins or prm)[0].reshape(a("shape"))]
    elif k is OpKind.TRANSPOSE:
        res = [(ins or prm)[0].permute(a("perm"))]
    elif k is OpKind.CONCAT:
        res = [torch.cat([get(t) for t in a("order")], a("dim"))]
    elif k is OpKind.SPLIT:
        res = list(torch.split((ins or prm)[0], list(a("sizes")), a("dim")))
    elif k is OpKind.MOE_DISPATCH:
        res = [_moe_dispatch(ins[0], ins[1], a, a("local_experts") or a("num_experts"))]
    elif k is OpKind.MOE_EXPERTS:
        res = list(_moe_experts(ins[0], prm[0], prm[1], a))
    elif k is OpKind.MOE_COMBINE:
        res = [_moe_combine(ins[0], ins[1], ins[2], a)]
    elif k is OpKind.PAD:
        res = [F.pad((ins or prm)[0], list(a("pads")), mode="constant", value=a("value"))]
    elif k is OpKind.TOPK:
        vals, idx = torch.topk(ins[0], a("k"), dim=-1)
        res = [vals, idx]
    elif k is OpKind.LOSS:
        logits, labels = ins[0], ins[1]
        C = logits.shape[-1]
        flat_logits, flat_labels = logits.reshape(-1, C), labels.reshape(-1)
        if a("fn") == "cross_entropy":
            # one log-softmax serves the loss and the log-probability output, so autograd keeps
            # one copy of it (the operator's saved tensors: labels and log-probabilities)
            logp = F.log_softmax(logits, -1)
            flat_logp = logp.reshape(-1, C)
            if a("label_smoothing", 0.0):
                # cross_entropy re-normalises its input: log_softmax(logp) == logp up to rounding
                loss = F.cross_entropy(flat_logp, flat_labels, reduction=a("reduction"),
                                       ignore_index=a("ignore_index"), label_smoothing=a("label_smoothing"))
            else:
                loss = F.nll_loss(flat_logp, flat_labels, reduction=a("reduction"), ignore_index=a("ignore_index"))
            res = [loss, logp]
        else:
            res = [F.nll_loss(flat_logits, flat_labels, reduction=a("reduction"), ignore_index=a("ignore_index"))]
    elif k is OpKind.OPAQUE:
        target = _resolve_target(a("target"))
        args = _decode(a("args", ()), env)
        kwargs = {kk: _decode(vv, env) for kk, vv in a("kwargs", ())}
        out = target(*args, **kwargs)
        res = list(out) if isinstance(out, (tuple, list)) else [out]
        res = res[: len(outs)]
    else:  # pragma: no cover
        raise UnsupportedOperatorError(f"operator {op.name!r} of kind {k.value!r} cannot be executed")
    if len(res) != len(outs):
        raise InvalidInputError(f"operator {op.name!r} computed {len(res)} outputs, the IR lists {len(outs)}")
    return dict(zip(outs, res))


def _check_not_meta(what, tensors):
    meta = [k for k, v in tensors.items() if isinstance(v, torch.Tensor) and v.is_meta]
    if meta:
        raise InvalidInputError(
            f"{what}: {len(meta)} tensors are on the meta device (e.g. {meta[:3]}): the model was imported "
            "without its weights, which is enough to plan but not to run. Running needs real weights: build "
            "the model on a real device (or materialise it with module.to_empty(device=...) and load a "
            "state dict), or run with freshly initialised values (init_params)")


def run_graph(
    graph: Graph,
    inputs: Mapping[str, torch.Tensor],
    params: Mapping[str, torch.Tensor],
    *,
    training: bool = False,
) -> dict[str, torch.Tensor]:
    """Execute ``graph`` operator by operator; returns every tensor it produced, by name.

    ``inputs`` holds the data the INPUT operator loads (by tensor name); ``params`` the
    parameters and constants (e.g. ``dict(module.named_parameters()) | dict(module.named_buffers())``
    for an imported module, or :func:`init_params`). Gradients flow through the result
    (``out[loss].backward()`` fills ``params[...].grad`` for leaf parameters).
    """
    missing = [t.name for t in graph.tensors.values()
               if t.role in (TensorRole.PARAMETER, TensorRole.CONSTANT) and t.name not in params]
    if missing:
        raise InvalidInputError(f"run_graph: no value for {len(missing)} parameters/constants, e.g. {missing[:3]}")
    _check_not_meta(graph.name, params)
    env: dict[str, torch.Tensor] = {}
    for op in graph.operators:
        local = {u.tensor: (inputs[u.tensor] if op.kind is OpKind.INPUT else env[u.tensor])
                 for u in (op.outputs if op.kind is OpKind.INPUT else op.inputs)}
        env.update(run_operator(op, local, params, training=training))
    return env


def init_params(graph: Graph, *, seed: int | None = 0, std: float = 0.02) -> dict[str, torch.Tensor]:
    """Random values for every parameter (normal, ``std``, ``requires_grad``) and constant of ``graph``.

    Constants: 1-d integer ones are ``arange`` (position ids), ``*position_ids`` ones ``arange``
    along their last axis, other integer ones zeros (token type ids); float ones
    named ``*running_var`` are ones, other float constants zeros except positional encodings
    (``*positional_encoding``: sinusoids).
    """
    gen = torch.Generator().manual_seed(seed if seed is not None else torch.seed())
    out = {}
    for t in graph.tensors.values():
        dt = _DTYPES[t.dtype]
        if t.role is TensorRole.PARAMETER:
            v = torch.randn(t.shape, generator=gen, dtype=torch.float32).mul_(std).to(dt)
            if len(t.shape) == 1 and t.name.endswith(("ln1.weight", "ln2.weight", "ln.weight", "ln_f.weight",
                                                        "bn.weight", "ln_cross.weight")):
                v = torch.ones(t.shape, dtype=dt)
            out[t.name] = v.requires_grad_(dt.is_floating_point)
        elif t.role is TensorRole.CONSTANT:
            if not dt.is_floating_point:
                if len(t.shape) == 1:
                    out[t.name] = torch.arange(t.shape[0], dtype=dt)
                elif t.shape and t.name.endswith("position_ids"):  # e.g. [1, S]: positions along the last axis
                    out[t.name] = torch.arange(t.shape[-1], dtype=dt).expand(t.shape).clone()
                else:
                    out[t.name] = torch.zeros(t.shape, dtype=dt)
            elif t.name.endswith("running_var"):
                out[t.name] = torch.ones(t.shape, dtype=dt)
            elif t.name.endswith("positional_encoding") and len(t.shape) == 2:
                n, d = t.shape
                pos = torch.arange(n, dtype=torch.float32)[:, None]
                div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
                pe = torch.zeros(n, d)
                pe[:, 0::2] = torch.sin(pos * div)
                pe[:, 1::2] = torch.cos(pos * div[: d // 2])
                out[t.name] = pe.to(dt)
            else:
                out[t.name] = torch.zeros(t.shape, dtype=dt)
    return out
