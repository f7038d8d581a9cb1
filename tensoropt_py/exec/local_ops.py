"""Run one IR operator on its local shards under a configuration.

:func:`prepare` checks (before anything runs) that an operator's configuration can be
computed from local slices and returns a :class:`LocalOp`, whose :meth:`LocalOp.run` calls
:func:`~tensoropt_py.graph.torch_ops.run_operator` on the local blocks with the
shape-carrying attributes adjusted, plus the corrections that keep partial sums exact:

* ``reshape`` / ``expand`` targets become the local output shape; a grouped convolution
  split over its groups gets the local group count;
* a bias added to a *partial* output (linear / conv split over their reduction dimension)
  is added by the devices at coordinate 0 of the partial axes only;
* a ``mean`` loss or reduction over split dimensions is scaled by local / global count, so
  that the partial results sum to the global mean (a split ``mean`` loss whose local labels
  contain ``ignore_index`` raises :class:`~tensoropt_py.errors.TensorOptError` when it runs:
  torch divides by the number of counted labels, which no shard knows; ``from_torch``
  imports such losses as a ``sum`` divided by a count computed in the graph);
* an embedding split over the vocabulary looks up only the ids in its slice (zeros
  elsewhere: Megatron's vocab-parallel embedding);
* causal attention split over query positions gets an explicit mask offset by the block's
  first position;
* mixture-of-experts dispatch / combine split over the experts fill / read the capacity slots
  of the local experts only (the combine's output is then a partial sum over the experts);
* attention split over the value features ``e`` computes the full log-sum-exp of the scores
  (which does not depend on ``e``) on every device, while its layout is partial over that
  axis: the devices at coordinate 0 of the partial axes keep it, the others hold zeros.

Unsupported (raises :class:`UnsupportedConfigError`, a ``NotImplementedError``, naming the
operator and the configuration): a convolution or pooling split over output rows/columns
unless kernel == stride, padding 0, dilation 1 (no halo); an adaptive pooling split over
rows/columns; any split of a dimension the IR marks unsplittable (softmax / layer-norm
axis, attention keys, loss classes); an opaque operator or an RNN cell split over anything
but the batch; a partial output of an operator that is not linear in the split dimension.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from ..errors import TensorOptError
from ..graph.ir import DimKind, Operator, OpKind
from ..graph.torch_ops import run_operator
from ..space.layout import PARTIAL
from .shard import local_shape, place_coordinate, region

__all__ = ["UnsupportedConfigError", "LocalOp", "prepare"]


class UnsupportedConfigError(NotImplementedError, TensorOptError):
    """An operator's configuration cannot be executed from local shards by this executor."""


_LINEAR_IN_SPLIT = {OpKind.LINEAR, OpKind.MATMUL, OpKind.BMM, OpKind.CONV2D, OpKind.EMBEDDING, OpKind.REDUCE,
                    OpKind.LOSS, OpKind.MOE_COMBINE}


def _fail(op, cfg, why):
    raise UnsupportedConfigError(f"operator {op.name!r} ({op.kind.value}) with config {cfg}: {why}")


class LocalOp:
    """An operator ready to run on local shards (see the module docstring)."""

    def __init__(self, op: Operator, local_op: Operator, out_shapes, *, bias_mask=None, bias_name=None,
                 scale=None, vocab=None, causal_q0=None, aux_keep=None, ignore_check=None):
        self.op = op
        self.local_op = local_op
        self.out_shapes = out_shapes
        self.bias_mask = bias_mask
        self.bias_name = bias_name
        self.scale = scale
        self.vocab = vocab  # (v0, v_local) of a vocab-split embedding
        self.causal_q0 = causal_q0
        self.aux_keep = aux_keep or {}  # auxiliary output -> 1.0 | 0.0 (a partial replica's share)
        self.ignore_check = ignore_check  # (labels tensor, ignore_index) of a split mean loss

    def run(self, inputs: dict, params: dict) -> dict:
        op = self.local_op
        params = dict(params)
        if self.bias_mask is not None and self.bias_name in params:
            params[self.bias_name] = params[self.bias_name] * self.bias_mask
        if self.ignore_check is not None:
            self._check_no_ignored(inputs)
        if self.vocab is not None:
            outs = self._embedding(inputs, params)
        elif self.causal_q0 is not None:
            outs = self._causal_attention(inputs, params)
        else:
            outs = run_operator(op, inputs, params, training=False)
        if self.scale is not None:
            first = op.outputs[0].tensor
            outs[first] = outs[first] * self.scale
        for name, keep in self.aux_keep.items():
            outs[name] = outs[name] * keep
        for name, want in self.out_shapes.items():
            got = tuple(outs[name].shape)
            if got != want:
                raise TensorOptError(f"operator {op.name!r} produced a local {name!r} of shape {got}, expected {want}")
        return outs

    def _check_no_ignored(self, inputs):
        labels, ignore = self.ignore_check
        if bool((inputs[labels] == ignore).any()):
            raise TensorOptError(
                f"operator {self.op.name!r} (loss, reduction='mean') is split over samples and its labels contain "
                f"ignore_index={ignore}: the mean divides by the global number of counted labels, which a local "
                f"shard does not know (import the loss as a sum divided by a count, as from_torch does)")

    def _embedding(self, inputs, params):
        op = self.local_op
        v0, vl = self.vocab
        env = {**params, **inputs}
        ids = env[(op.inputs + op.params)[0].tensor]
        w = env[op.params[-1].tensor]
        rel = ids - v0
        valid = (rel >= 0) & (rel < vl)
        pad = op.attr("padding_idx")
        pad = pad - v0 if pad is not None and v0 <= pad < v0 + vl else None
        out = F.embedding(rel.clamp(0, vl - 1), w, padding_idx=pad) * valid.unsqueeze(-1).to(w.dtype)
        return {op.outputs[0].tensor: out}

    def _causal_attention(self, inputs, params):
        op = self.local_op
        q = inputs[op.attr("order")[0]]
        k = inputs[op.attr("order")[1]]
        sq, sk = q.shape[-2], k.shape[-2]
        i = torch.arange(sq, device=q.device)[:, None] + self.causal_q0
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i  # top-left aligned, as torch's is_causal
        return run_operator(op, {**inputs, "__causal_mask__": mask}, params, training=False)


def prepare(op: Operator, cfg, graph, rank: int) -> LocalOp:
    """Check ``op`` under ``cfg`` (an :class:`~tensoropt_py.space.configs.OpConfig`) and build its LocalOp."""
    uses = op.uses()
    nin, npar = len(op.inputs), len(op.params)
    split = {lab for lab in cfg.fine if lab >= 0}
    split_names = {op.loop_dims[i].name for i in split}
    for i in split:
        d = op.loop_dims[i]
        if not d.splittable:
            _fail(op, cfg, f"loop dimension {d.name!r} is unsplittable but split")
    lay = [cfg.layout(op, u) for u in range(len(uses))]
    shapes = [graph.tensors[u.tensor].shape for u in uses]
    out_shapes = {}
    for k, u in enumerate(op.outputs):
        idx = nin + npar + k
        out_shapes[u.tensor] = local_shape(lay[idx], shapes[idx])
    out_layout = lay[nin + npar] if op.outputs else None
    partial_out = out_layout is not None and out_layout.is_partial
    kind = op.kind
    a = op.attr
    attrs = dict(op.attrs)
    kw = {}
    if partial_out and kind not in _LINEAR_IN_SPLIT:
        _fail(op, cfg, "its output would be a partial sum of a non-linear function")
    if kind is OpKind.REDUCE and partial_out and a("fn") not in ("sum", "mean"):
        _fail(op, cfg, f"{a('fn')} over a split dimension")
    if kind is OpKind.OPAQUE and split:
        _fail(op, cfg, "opaque operators run replicated only")
    if kind is OpKind.RNN_CELL and any(op.loop_dims[i].kind is not DimKind.SAMPLE for i in split):
        _fail(op, cfg, "an RNN cell can only be split over its batch")
    if kind in (OpKind.CONV2D, OpKind.POOL2D) and split_names & {"h", "w"}:
        ks, st = a("kernel_size"), a("stride")
        if kind is OpKind.CONV2D:
            w = graph.tensors[op.params[0].tensor].shape
            ks = (w[2], w[3])
        pad, dil = a("padding"), a("dilation") or (1, 1)
        if kind is OpKind.POOL2D and a("output_size") is not None:
            _fail(op, cfg, "adaptive pooling split over rows/columns")
        for ax, nm in enumerate(("h", "w")):
            if nm in split_names and not (ks[ax] == st[ax] and pad[ax] == 0 and dil[ax] == 1):
                _fail(op, cfg, f"split over output {'rows' if nm == 'h' else 'columns'} needs halo exchange "
                                f"(kernel {ks[ax]}, stride {st[ax]}, padding {pad[ax]})")
    if kind is OpKind.RESHAPE:
        attrs["shape"] = out_shapes[op.outputs[0].tensor]
    if kind is OpKind.UNARY and a("fn") == "expand":
        attrs["shape"] = out_shapes[op.outputs[0].tensor]
    if kind is OpKind.UNARY and a("fn") == "dropout" and a("p", 0.0) > 0:
        pass  # training=False: dropout is the identity, as in the reference
    if kind is OpKind.LAYER_NORM:
        ns = tuple(a("normalized_shape"))
        x_local = local_shape(lay[0], shapes[0])
        if tuple(x_local[len(x_local) - len(ns):]) != ns:
            _fail(op, cfg, "the normalized dimensions are split")
    if kind is OpKind.SOFTMAX:
        x_local = local_shape(lay[0], shapes[0])
        if x_local[a("dim")] != shapes[0][a("dim")]:
            _fail(op, cfg, "the softmax dimension is split")
    if kind in (OpKind.CONCAT, OpKind.SPLIT):
        x_local = local_shape(lay[0], shapes[0])
        d = a("dim")
        if x_local[d] != shapes[0][d]:
            _fail(op, cfg, "the concatenation dimension is split")
    if kind is OpKind.CONV2D and a("groups", 1) > 1:
        gi = [i for i, d in enumerate(op.loop_dims) if d.name == "g"]
        if gi and gi[0] in split:
            attrs["groups"] = a("groups") // cfg.split_factors()[gi[0]]
    if kind in (OpKind.LINEAR, OpKind.CONV2D) and a("bias") and partial_out:
        idx, _ = place_coordinate(out_layout, rank, PARTIAL)
        kw["bias_mask"] = 1.0 if idx == 0 else 0.0
        kw["bias_name"] = op.params[-1].tensor if kind is OpKind.LINEAR else op.params[1].tensor
    if kind is OpKind.LOSS and a("reduction") == "mean":
        lab = 1  # labels use
        full = math.prod(shapes[lab])
        loc = math.prod(local_shape(lay[lab], shapes[lab]))
        if loc != full:
            kw["scale"] = loc / full
            kw["ignore_check"] = (op.inputs[lab].tensor, a("ignore_index"))
    if kind is OpKind.REDUCE and a("fn") == "mean":
        rd = a("dims")
        x_local = local_shape(lay[0], shapes[0])
        full = math.prod(shapes[0][d] for d in rd)
        loc = math.prod(x_local[d] for d in rd)
        if loc != full:
            kw["scale"] = loc / full
    if kind is OpKind.EMBEDDING:
        wi = nin + npar - 1
        wreg = region(lay[wi], shapes[wi], rank)
        v0, v1 = wreg[0]
        if v1 - v0 != shapes[wi][0]:
            kw["vocab"] = (v0, v1 - v0)
    if kind is OpKind.ATTENTION and len(op.outputs) > 1 and lay[nin + npar + 1].is_partial:
        idx, _ = place_coordinate(lay[nin + npar + 1], rank, PARTIAL)
        kw["aux_keep"] = {op.outputs[1].tensor: 1.0 if idx == 0 else 0.0}
    if kind is OpKind.ATTENTION and a("causal"):
        qreg = region(lay[0], shapes[0], rank)
        q0, q1 = qreg[-2]
        if q1 - q0 != shapes[0][-2]:
            if a("has_mask"):
                _fail(op, cfg, "causal attention with an explicit mask split over query positions")
            attrs["causal"] = False
            attrs["order"] = tuple(a("order")) + ("__causal_mask__",)
            kw["causal_q0"] = q0
    if kind in (OpKind.MOE_DISPATCH, OpKind.MOE_COMBINE):
        # the experts block this device holds (expert parallelism): its slots only
        ui = nin + npar if kind is OpKind.MOE_DISPATCH else 0
        e0, e1 = region(lay[ui], shapes[ui], rank)[1]
        if e1 - e0 != a("num_experts"):
            attrs["expert_offset"], attrs["local_experts"] = e0, e1 - e0
    local_op = dataclasses.replace(op, attrs=tuple(attrs.items())) if attrs != dict(op.attrs) else op
    return LocalOp(op, local_op, out_shapes, **kw)
