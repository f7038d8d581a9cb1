"""Import a PyTorch module into the IR through ``torch.export``.

:func:`from_torch` exports the module (training IR, no decomposition), then maps every aten
call to an IR operator (:mod:`~tensoropt_py.graph.ops`). Parameters (from
``ep.graph_signature``, tied weights counted once under their first name in
``module.named_parameters()``) become PARAMETER tensors named by their fully-qualified names;
buffers and lifted constants become CONSTANT tensors; the user inputs are produced by one
INPUT operator (tensor inputs only; a tensor input whose first axis is the first input's
batch size has its batch on axis 0).

Shape-only ops are folded when they change nothing (``contiguous``, ``clone``, ``alias``,
same-shape ``view``/``expand``, same-dtype ``to``, eval-mode ``dropout``), otherwise they
become RESHAPE / TRANSPOSE / UNARY(expand) operators with merged loop dimensions.

Tensors computed from constants only (position ids, causal masks built with ``arange``) are
*static*. OPAQUE operators keep the aten target and arguments in ``attrs`` so
:func:`~tensoropt_py.graph.torch_ops.run_graph` can execute them.

What the importer does with what it meets:

* **an operator without a rule** on tensors computed from constants only (position ids, masks
  built with ``arange``) becomes an OPAQUE operator silently; on data (inputs, labels) a
  replicated OPAQUE operator with a ``warnings.warn`` naming it (the planner cannot split it,
  the executor replays the aten call); reading a parameter, an
  :class:`~tensoropt_py.errors.UnsupportedOperatorError` naming the operator.
* **zero-size tensors** (the empty pass-through half of a full rotary split, the empty key/value
  tensors of a cache) hold no data and become no IR tensor: ``cat`` drops them, an operator
  whose result is empty adds nothing, another reader of one is replayed with an empty tensor.
* **in-place arithmetic** (``div_``, ``add_``, ``masked_fill_``...) on a result that is not a view
  is imported out of place, later readers see the new tensor; ``copy_`` / ``fill_`` into a slice
  of a tensor (the label shift of seq2seq models) rebuild the tensor by split and concat.
* **LayerDrop** (``if self.training and torch.rand([]) < p: skip the layer``: OPT, BART, ...)
  is resolved to "no layer skipped" while exporting (LayerDrop attributes set to 0, a 0-d
  ``torch.rand`` draw reads 1.0), with a warning; other branches on tensor data raise an
  :class:`~tensoropt_py.errors.UnsupportedOperatorError` naming the line.
* **mixture of experts**: Hugging Face experts modules become MOE_DISPATCH -> MOE_EXPERTS ->
  MOE_COMBINE (see :mod:`~tensoropt_py.graph.torch_moe`), dropless by default (capacity = the
  tokens of a sequence: exact), or with ``moe_capacity_factor`` (tokens beyond capacity dropped).
* **meta-device modules** (built under ``torch.device("meta")``, no weights in memory) import
  the same way: the graph is all planning needs; running it needs real weights
  (:func:`~tensoropt_py.graph.torch_ops.run_graph` says so).

A ``reduction="mean"`` cross-entropy / NLL loss divides by the number of labels that are not
``ignore_index`` (data-dependent: causal LMs ignore the last position of every sequence). It
is imported as a ``sum`` LOSS divided by that count, computed in the graph (an OPAQUE
``aten.ne.Scalar`` on the labels, a cast and a REDUCE ``sum``), so that every split of the
loss stays exact.

Examples
--------
>>> import torch
>>> from tensoropt_py.graph.torch_import import from_torch
>>> m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
>>> g = from_torch(m, (torch.randn(2, 8),))
>>> [op.kind.value for op in g], g.num_parameters
(['input', 'linear', 'unary'], 36)
"""

from __future__ import annotations

import contextlib
import math
import operator
import warnings
from collections.abc import Mapping

import torch

from ..errors import InvalidInputError, UnsupportedOperatorError
from .builder import GraphBuilder
from .ir import Graph, TensorRole
from .torch_moe import experts_as_one_operator

__all__ = ["from_torch", "from_torch_with_state"]

_DTYPE_NAMES = {
    torch.float64: "float64",
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}

aten = torch.ops.aten

_FOLD = {"contiguous", "clone", "alias", "detach", "lift_fresh_copy", "lift_fresh", "dropout_"}
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async",
         "sym_constrain_range", "_check_is_size"}
_CREATION = {"arange", "full", "ones", "zeros", "empty", "scalar_tensor", "new_ones", "new_zeros", "new_full",
             "new_empty", "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn", "eye", "tensor",
             "linspace", "empty_strided"}
_UNARY = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "neg": "neg", "exp": "exp",
          "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "abs": "abs", "sin": "sin", "cos": "cos", "erf": "erf",
          "reciprocal": "reciprocal", "relu_": "relu", "silu_": "silu"}
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum", "minimum": "minimum"}


def _dtype_name(dt) -> str:
    try:
        return _DTYPE_NAMES[dt]
    except KeyError:
        raise InvalidInputError(f"dtype {dt} is not supported by the IR; allowed: {sorted(_DTYPE_NAMES.values())}") from None


def _opname(target) -> str:
    """``aten.add.Tensor`` -> ``add``."""
    name = getattr(target, "__name__", str(target))
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        name = packet.__name__
    return name.split(".")[0]


class _Empty:
    """A zero-size tensor value (a shape with a 0, e.g. an empty slice of a rotary split, an empty
    key/value cache): it holds no data, so it is no IR tensor. ``cat`` drops it; an operator
    reading it otherwise is replayed (OPAQUE) with an empty tensor in its arguments."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(int(s) for s in shape), dtype

    def encode(self):
        return ("__empty__", self.shape, self.dtype)

    def __repr__(self):
        return f"_Empty{self.shape}"


def _is_empty_val(v) -> bool:
    return isinstance(v, torch.Tensor) and v.numel() == 0


#: aten in-place operators whose out-of-place form has a rule (``div_`` -> ``div``).
_INPLACE = {"add_", "sub_", "mul_", "div_", "relu_", "silu_", "masked_fill_", "clamp_", "neg_", "exp_", "tanh_",
            "sigmoid_", "pow_"}
#: operators whose output is a view of their first argument (an in-place update of it would
#: also change the tensor it views, which an out-of-place rule cannot express).
_VIEWS = {"view", "_unsafe_view", "reshape", "slice", "select", "narrow", "expand", "permute", "transpose", "t",
          "unsqueeze", "squeeze", "split", "split_with_sizes", "chunk", "unbind", "as_strided", "diagonal",
          "alias", "view_as", "unflatten", "flatten", "detach", "getitem"}


class _Importer:
    def __init__(self, module, ep, name, moe_capacity_factor=None):
        self.module = module
        self.ep = ep
        self.moe_capacity_factor = moe_capacity_factor
        self.batch = None
        self.views: dict[str, tuple] = {}  # fx node of a slice/select -> (base node, dim, start, end)
        self.gb = GraphBuilder(name)
        self.env: dict[str, object] = {}  # fx node name -> IR tensor name / tuple / python value
        self.static: set[str] = set()  # IR tensors computed from constants only
        self.values: dict[str, torch.Tensor] = {}

    # --- helpers -------------------------------------------------------------------------------
    def val(self, node):
        return node.meta.get("val")

    def t(self, arg):
        """IR tensor name of an fx argument."""
        v = self.env[arg.name]
        if not isinstance(v, str):
            raise InvalidInputError(f"node {arg.name!r} is not a tensor")
        return v

    def is_tensor(self, arg):
        return isinstance(arg, torch.fx.Node) and isinstance(self.env.get(arg.name), str)

    def is_param(self, name):
        return self.gb.role(name) is TensorRole.PARAMETER

    def is_static_t(self, name):
        return name in self.static or self.gb.role(name) is TensorRole.CONSTANT

    def tensor_args(self, node):
        out = []

        def visit(a):
            if isinstance(a, torch.fx.Node):
                v = self.env.get(a.name)
                if isinstance(v, str) and v not in out:
                    out.append(v)
                elif isinstance(v, tuple):
                    for x in v:
                        if isinstance(x, str) and x not in out:
                            out.append(x)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    visit(x)
            elif isinstance(a, dict):
                for x in a.values():
                    visit(x)

        visit(node.args)
        visit(node.kwargs)
        return out

    def encode(self, a):
        if isinstance(a, torch.fx.Node):
            v = self.env[a.name]
            if isinstance(v, _Empty):
                return v.encode()
            if isinstance(v, tuple):
                return tuple(x.encode() if isinstance(x, _Empty) else x for x in v)
            return ("__tensor__", v) if isinstance(v, str) else v
        if isinstance(a, list):
            return ("__list__", tuple(self.encode(x) for x in a))
        if isinstance(a, tuple):
            return tuple(self.encode(x) for x in a)
        return a

    # --- main ----------------------------------------------------------------------------------
    def run(self, example_batch_size=None):
        ep, gb = self.ep, self.gb
        sig = ep.graph_signature
        canonical = {}
        seen = {}
        for fqn, p in self.module.named_parameters(remove_duplicate=False):
            canonical[fqn] = seen.setdefault(id(p), fqn)
        state = ep.state_dict
        user = []
        for spec in sig.input_specs:
            ph = spec.arg.name
            kind = spec.kind.name
            if kind == "PARAMETER":
                fqn = canonical.get(spec.target, spec.target)
                if state[spec.target].numel() == 0:
                    self.env[ph] = _Empty(state[spec.target].shape, _dtype_name(state[spec.target].dtype))
                    continue
                if fqn not in gb.tensors:
                    v = state[spec.target]
                    gb.parameter(fqn, tuple(v.shape), _dtype_name(v.dtype), exact=True)
                    self.values[fqn] = v
                self.env[ph] = fqn
            elif kind in ("BUFFER", "CONSTANT_TENSOR"):
                v = state[spec.target] if kind == "BUFFER" and spec.target in state else ep.constants[spec.target]
                if v.numel() == 0:  # e.g. the empty key/value tensors of a cache created in forward
                    self.env[ph] = _Empty(v.shape, _dtype_name(v.dtype))
                    continue
                if spec.target not in gb.tensors:
                    gb.constant(spec.target, tuple(v.shape), _dtype_name(v.dtype), exact=True)
                    self.values[spec.target] = v
                self.env[ph] = spec.target
            elif kind == "USER_INPUT":
                user.append(ph)
            else:
                raise UnsupportedOperatorError(f"unsupported export input kind {kind} for {ph!r}")
        nodes = {n.name: n for n in ep.graph.nodes}
        specs, axes = [], []
        batch = None
        for ph in user:
            v = self.val(nodes[ph])
            if not isinstance(v, torch.Tensor):
                self.env[ph] = v  # non-tensor user input (a flag): a python constant
                continue
            shape = tuple(int(s) for s in v.shape)
            if v.numel() == 0:
                self.env[ph] = _Empty(shape, _dtype_name(v.dtype))
                continue
            if batch is None and shape:
                batch = shape[0]
            specs.append((ph, shape, _dtype_name(v.dtype)))
            axes.append(0 if shape and shape[0] == batch else None)
            self.env[ph] = ph
        self.batch = batch
        if specs:
            gb.input(specs, batch_axes=axes)
        self.walk(ep.graph, ep.graph_module)
        outs = []
        for spec in sig.output_specs:
            if spec.kind.name != "USER_OUTPUT":
                continue
            name = getattr(spec.arg, "name", None)
            v = self.env.get(name) if name else None
            if isinstance(v, str) and v not in outs and gb.producer_known(v):
                outs.append(v)
        return gb.build(outputs=outs), self.values

    def walk(self, graph, gm):
        for node in graph.nodes:
            if node.op in ("placeholder", "output", "get_attr"):
                if node.op == "get_attr":
                    self.env[node.name] = getattr(gm, node.target)
                continue
            self.convert(node, gm)

    def inline(self, node, gm, sub, operands):
        for ph, a in zip([n for n in sub.graph.nodes if n.op == "placeholder"], operands):
            self.env[ph.name] = self.env[a.name] if isinstance(a, torch.fx.Node) else a
        for n in sub.graph.nodes:
            if n.op == "output":
                res = n.args[0]
                self.env[node.name] = tuple(self.env[r.name] if isinstance(r, torch.fx.Node) else r for r in res)
            elif n.op == "get_attr":
                self.env[n.name] = getattr(sub, n.target)
            elif n.op == "call_function":
                self.convert(n, sub)

    # --- conversion of one node ----------------------------------------------------------------
    def convert(self, node, gm):
        gb = self.gb
        target = node.target
        if target is operator.getitem:
            src = self.env[node.args[0].name]
            self.env[node.name] = src[node.args[1]]
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            hop = getattr(target, "name", lambda: str(target))()
            if "wrap_with_set_grad_enabled" in hop or "wrap_with_autocast" in hop:
                k = 1 if "set_grad" in hop else 4
                sub = getattr(gm, node.args[k].target)
                self.inline(node, gm, sub, node.args[k + 1 :])
                return
            raise UnsupportedOperatorError(f"higher-order operator {hop!r} is not supported")
        op = _opname(target)
        if op in _SKIP:
            self.env[node.name] = None
            return
        val = self.val(node)
        if _is_empty_val(val):  # a zero-size result holds no data: no operator
            self.env[node.name] = _Empty(val.shape, _dtype_name(val.dtype))
            return
        view_write = op in _INPLACE and isinstance(node.args[0], torch.fx.Node) and node.args[0].name in self.views
        inplace = op in _INPLACE and (view_write or self._may_update_in_place(node))
        if inplace:
            op = op[:-1]
        tins = self.tensor_args(node)
        static = op in _CREATION or all(self.is_static_t(t) for t in tins)  # creation reads shapes only
        before = len(gb.operators)
        try:
            res = self.rule(op, node, val)
        except UnsupportedOperatorError:
            raise
        except (InvalidInputError, KeyError, TypeError, ValueError, IndexError, AttributeError):
            res = None
        if res is None:
            res = self.opaque(op, node, val, tins, static)
        elif view_write and isinstance(res, str):  # the base tensor gets the updated block
            res = self.splice(node.args[0].name, res, node.name, val)
            self.env[node.args[0].name] = res
        elif inplace:  # later readers of the updated tensor see the new value
            self.env[node.args[0].name] = res
        self.env[node.name] = res
        if static:
            for o in gb.operators[before:]:
                for u in o.outputs:
                    self.static.add(u.tensor)

    def _may_update_in_place(self, node) -> bool:
        """True if the in-place ``node`` may be imported as its out-of-place form: its first
        argument is an operator's result that is not a view of another tensor."""
        src = node.args[0] if node.args else None
        if not isinstance(src, torch.fx.Node) or src.op != "call_function":
            return False
        if src.target is operator.getitem:
            base = src.args[0]
            return isinstance(base, torch.fx.Node) and _opname(base.target) not in _VIEWS
        return _opname(src.target) not in _VIEWS and isinstance(self.env.get(src.name), str)

    def opaque(self, op, node, val, tins, static):
        params = [t for t in tins if self.is_param(t)]
        if params:
            raise UnsupportedOperatorError(
                f"aten operator {node.target} (node {node.name!r}) has no IR rule and reads parameters {params}"
            )
        if not static:
            warnings.warn(
                f"aten operator {node.target} (node {node.name!r}) has no IR rule: imported as a replicated OPAQUE operator",
                stacklevel=4,
            )
        vals = val if isinstance(val, (tuple, list)) else (val,)
        outs = []
        for i, v in enumerate(vals):
            if not isinstance(v, torch.Tensor):
                raise UnsupportedOperatorError(f"aten operator {node.target} (node {node.name!r}) returns a non-tensor")
            outs.append((f"out{i}", tuple(int(s) for s in v.shape), _dtype_name(v.dtype)))
        args = tuple(self.encode(a) for a in node.args)
        kwargs = tuple((k, self.encode(v)) for k, v in node.kwargs.items())
        numel = sum(int(v.numel()) for v in vals)
        names = self.gb.opaque(tins, outs, flops=float(numel), backward_flops=float(numel),
                               attrs=(("target", str(node.target)), ("args", args), ("kwargs", kwargs), ("static", static)),
                               name=node.name)
        return names if isinstance(val, (tuple, list)) else names[0]

    def mean_loss(self, logits, labels, fn, ignore_index, label_smoothing, nm):
        """torch's ``reduction="mean"`` loss as ``sum / (number of labels != ignore_index)``.

        torch divides by the number of labels that are not ``ignore_index``, which depends on
        the data: a LOSS operator split over samples cannot know it from its local labels.
        Written as a ``sum`` loss divided by a count computed in the graph, every split stays
        exact (both are partial sums until the division). The count is an OPAQUE
        ``aten.ne.Scalar`` (replicated), a cast to float32 and a REDUCE ``sum``.

        Returns
        -------
        (str, str)
            The scalar loss and the scalar count (the ``total_weight`` of ``nll_loss_forward``).
        """
        gb = self.gb
        ys = gb.shape(labels)
        total = gb.loss(logits, labels, fn=fn, reduction="sum", ignore_index=ignore_index,
                        label_smoothing=label_smoothing, name=f"{nm}_sum")
        (valid,) = gb.opaque([labels], [("out0", ys, "bool")], flops=float(math.prod(ys)), backward_flops=0.0,
                             attrs=(("target", "aten.ne.Scalar"), ("args", (("__tensor__", labels), int(ignore_index))),
                                    ("kwargs", ()), ("static", self.is_static_t(labels))),
                             name=f"{nm}_valid")
        count = gb.reduce(gb.unary(valid, "cast", dtype="float32", name=f"{nm}_valid_f32"),
                          list(range(len(ys))), "sum", name=f"{nm}_count")
        return gb.binary(total, count, "div", name=nm), count

    def strided_slice(self, x, dim, start, end, step, val, nm):
        """``x[..., start:end:step]`` (interleaved rotary halves, patch merging) as a reshape of
        the axis into ``[n / step, step]``, a slice of the inner axis and a reshape back. Only
        when ``step`` divides the axis and the slice runs to its end from a start below ``step``."""
        gb = self.gb
        shape = gb.shape(x)
        n = shape[dim]
        if step < 1 or n % step or start >= step or end < n - (step - 1 - start):
            return None
        grid = gb.reshape(x, shape[:dim] + (n // step, step) + shape[dim + 1:], name=f"{nm}_grid")
        sizes = [s for s in (start, 1, step - start - 1) if s > 0]
        piece = gb.split(grid, sizes, dim + 1, name=nm)[1 if start > 0 else 0] if len(sizes) > 1 else grid
        return gb.reshape(piece, self.shape_of(val), name=f"{nm}_strided")

    def write_into_view(self, op, node, val):
        """``copy_`` / ``fill_`` into a slice or select of a tensor, imported without mutation:
        the base tensor becomes the concatenation of its untouched parts and the written block
        (later readers of the base see the new tensor), e.g. the label shift of seq2seq models
        (``shifted[:, 1:] = labels[:, :-1]; shifted[:, 0] = start``)."""
        gb = self.gb
        base_node, dim, start, end = self.views[node.args[0].name]
        base = self.env.get(base_node)
        if not isinstance(base, str):
            return None
        shape = gb.shape(base)
        block = shape[:dim] + (end - start,) + shape[dim + 1:]
        nm = node.name
        src = node.args[1]
        if op == "copy_" and self.is_tensor(src):
            new = self.t(src)
        elif op == "fill_" and self.is_tensor(src) and not gb.shape(self.t(src)):
            new = gb.expand(gb.reshape(self.t(src), (1,) * len(block), name=f"{nm}_value"), block, name=f"{nm}_fill")
        elif op == "fill_" and isinstance(src, (int, float)) and not isinstance(src, bool):
            old = self.t(node.args[0])
            new = gb.unary(gb.unary(old, "mul_scalar", scalar=0, name=f"{nm}_zero"), "add_scalar", scalar=src, name=nm)
        else:
            return None
        return self.splice(node.args[0].name, new, nm, val)

    def splice(self, view, new, nm, val):
        """Write ``new`` into the block the slice/select ``view`` (an fx node name) reads of its
        base: the base becomes split + concat with ``new`` in place of the block (later readers
        of the base see it). Returns ``new`` shaped like ``val`` (the view)."""
        gb = self.gb
        base_node, dim, start, end = self.views[view]
        base = self.env[base_node]
        shape = gb.shape(base)
        block = shape[:dim] + (end - start,) + shape[dim + 1:]
        if gb.shape(new) != block:
            if math.prod(gb.shape(new)) == math.prod(block):
                new = gb.reshape(new, block, name=f"{nm}_block")
            else:
                new = gb.expand(new, block, name=f"{nm}_block")
        if gb.dtype_of(new) != gb.dtype_of(base):
            new = gb.unary(new, "cast", dtype=gb.dtype_of(base), name=f"{nm}_cast")
        n = shape[dim]
        sizes = [s for s in (start, end - start, n - end) if s > 0]
        pieces = list(gb.split(base, sizes, dim, name=f"{nm}_parts")) if len(sizes) > 1 else [base]
        pieces[1 if start > 0 else 0] = new
        self.env[base_node] = gb.concat(pieces, dim, name=f"{nm}_into") if len(pieces) > 1 else new
        return new if tuple(int(s) for s in val.shape) == block else gb.reshape(new, self.shape_of(val), name=f"{nm}_view")

    def moe(self, node):
        """``tensoropt::moe_experts`` -> MOE_DISPATCH, MOE_EXPERTS, MOE_COMBINE.

        Tokens ``[T, H]`` form ``G`` groups (the example batch when it divides ``T``: one group
        per sequence, else one group); the capacity per expert and group is the group size
        (dropless, exact) or ``ceil(factor * S * k / E)`` with ``moe_capacity_factor``.
        """
        gb = self.gb
        x, idx, w, up, down = (self.t(a) for a in node.args[:5])
        act, gated, transposed = node.args[5:8]
        n, H = gb.shape(x)
        k = gb.shape(idx)[-1]
        E = gb.shape(up)[0]
        G = self.batch if self.batch and n % self.batch == 0 else 1
        S = n // G
        cf = self.moe_capacity_factor
        C = S if cf is None else min(S, max(1, math.ceil(cf * S * k / E)))
        nm = node.name
        xg = gb.reshape(x, (G, S, H), name=f"{nm}_tokens")
        ig = gb.reshape(idx, (G, S, k), name=f"{nm}_indices")
        wg = gb.reshape(w, (G, S, k), name=f"{nm}_weights")
        xe = gb.moe_dispatch(xg, ig, E, C, name=f"{nm}_dispatch")
        ye = gb.moe_experts(xe, up, down, activation=act, gated=gated, transposed=transposed,
                            tokens=G * min(S * k, E * C), name=f"{nm}_experts")
        return gb.reshape(gb.moe_combine(ye, ig, wg, name=f"{nm}_combine"), (n, H), name=nm)

    def shape_of(self, val):
        return tuple(int(s) for s in val.shape)

    def rule(self, op, node, val):  # noqa: C901 (a dispatch table)
        gb = self.gb
        A = node.args
        K = node.kwargs
        T = self.t
        nm = node.name

        def arg(i, key, default=None):
            if len(A) > i:
                return A[i]
            return K.get(key, default)

        if op in _FOLD:
            return T(A[0])
        if op in _CREATION:
            return None  # OPAQUE (static: no warning)
        if op == "dropout":
            p, train = arg(1, "p", 0.5), arg(2, "train", True)
            return gb.dropout(T(A[0]), p, name=nm) if train and p > 0 else T(A[0])
        if op in ("to", "_to_copy", "type_as"):
            x = T(A[0])
            dt = _dtype_name(val.dtype)
            return x if dt == gb.dtype_of(x) else gb.unary(x, "cast", dtype=dt, name=nm)
        if op in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "unsqueeze", "squeeze", "view_as"):
            return gb.reshape(T(A[0]), self.shape_of(val), name=nm)
        if op == "expand":
            return gb.expand(T(A[0]), self.shape_of(val), name=nm)
        if op in ("permute", "transpose", "t", "numpy_T", "swapaxes"):
            x = T(A[0])
            n = len(gb.shape(x))
            if op == "permute":
                perm = list(A[1])
            elif op in ("transpose", "swapaxes"):
                perm = list(range(n))
                d0, d1 = A[1] % n, A[2] % n
                perm[d0], perm[d1] = perm[d1], perm[d0]
            else:
                perm = list(range(n))[::-1]
            return gb.transpose(x, perm, name=nm)
        if op == "linear":
            x, w = T(A[0]), T(A[1])
            b = T(A[2]) if len(A) > 2 and A[2] is not None else None
            if not self.is_param(w) or (b is not None and not self.is_param(b)):
                y = gb.matmul(x, gb.transpose(w, (1, 0), name=f"{nm}_wt"), name=nm)
                return gb.add(y, b, name=f"{nm}_bias") if b is not None else y
            return gb.linear(x, weight=w, bias=b or False, name=nm)
        if op == "addmm":
            b, x, w = T(A[0]), T(A[1]), T(A[2])
            if arg(3, "beta", 1) != 1 or arg(4, "alpha", 1) != 1:
                return None
            if self.is_param(w) and self.is_param(b) and gb.shape(b) == (gb.shape(w)[1],):
                return gb.linear(x, weight=w, bias=b, weight_layout="io", name=nm)
            return gb.add(gb.matmul(x, w, name=f"{nm}_mm"), b, name=nm)
        if op in ("mm", "matmul"):
            return gb.matmul(T(A[0]), T(A[1]), name=nm)
        if op == "bmm":
            return gb.bmm(T(A[0]), T(A[1]), name=nm)
        if op in ("conv2d", "convolution"):
            x, w = T(A[0]), T(A[1])
            b = T(A[2]) if len(A) > 2 and A[2] is not None else None
            if op == "convolution":
                stride, padding, dilation, transposed, _, groups = A[3:9]
                if transposed:
                    return None
            else:
                stride, padding, dilation, groups = arg(3, "stride", 1), arg(4, "padding", 0), arg(5, "dilation", 1), arg(6, "groups", 1)
            if len(gb.shape(x)) != 4 or not self.is_param(w) or (b is not None and not self.is_param(b)):
                return None
            if isinstance(padding, (list, tuple)) and len(padding) == 1:
                padding = padding[0]
            return gb.conv2d(x, gb.shape(w)[0], tuple(gb.shape(w)[2:]), stride=tuple(stride) if isinstance(stride, (list, tuple)) else stride,
                             padding=tuple(padding) if isinstance(padding, (list, tuple)) else padding,
                             dilation=tuple(dilation) if isinstance(dilation, (list, tuple)) else dilation,
                             groups=groups, bias=b is not None, weight=w, bias_param=b, name=nm)
        if op in ("max_pool2d", "max_pool2d_with_indices"):
            x = T(A[0])
            k = A[1]
            s = arg(2, "stride", None) or k
            p, d, ceil = arg(3, "padding", 0), arg(4, "dilation", 1), arg(5, "ceil_mode", False)
            if d not in (1, [1, 1], (1, 1)):
                return None
            y = gb.max_pool2d(x, tuple(k) if isinstance(k, (list, tuple)) else k, tuple(s) if isinstance(s, (list, tuple)) else s,
                              tuple(p) if isinstance(p, (list, tuple)) else p, ceil_mode=ceil, name=nm)
            if op == "max_pool2d_with_indices":
                return (y, gb.operators[-1].outputs[1].tensor)
            return y
        if op == "avg_pool2d":
            x = T(A[0])
            k = A[1]
            s = arg(2, "stride", None) or k
            p, ceil, cip = arg(3, "padding", 0), arg(4, "ceil_mode", False), arg(5, "count_include_pad", True)
            if arg(6, "divisor_override", None) is not None:
                return None
            return gb.avg_pool2d(x, tuple(k) if isinstance(k, (list, tuple)) else k, tuple(s) if isinstance(s, (list, tuple)) else s,
                                 tuple(p) if isinstance(p, (list, tuple)) else p, ceil_mode=ceil, count_include_pad=cip, name=nm)
        if op == "adaptive_avg_pool1d" and list(A[1]) == [1]:  # a mean over the last axis (Swin's pooler)
            return gb.reduce(T(A[0]), [-1], "mean", keepdim=True, name=nm)
        if op in ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"):
            return gb.avg_pool2d(T(A[0]), output_size=tuple(self.shape_of(val)[2:]), name=nm)
        if op in _UNARY:
            return gb.unary(T(A[0]), _UNARY[op], name=nm)
        if op == "gelu":
            approx = arg(1, "approximate", "none")
            return gb.unary(T(A[0]), "gelu", approximate=approx, name=nm)
        if op == "pow" and not self.is_tensor(A[1]) and self.is_tensor(A[0]):
            e = A[1]
            return gb.unary(T(A[0]), "pow", exponent=e, name=nm)
        if op in _BINARY:
            a, b = A[0], A[1]
            if "alpha" in K and K["alpha"] != 1:
                return None
            if len(A) > 2 or K.get("rounding_mode") is not None:
                return None
            if self.is_tensor(a) and self.is_tensor(b):
                x, y = T(a), T(b)
                if gb.dtype_of(x) != gb.dtype_of(y) or _dtype_name(val.dtype) != gb.dtype_of(x):
                    return None
                return gb.binary(x, y, _BINARY[op], name=nm)
            if self.is_tensor(a) and isinstance(b, (int, float)) and not isinstance(b, bool):
                x = T(a)
                if _dtype_name(val.dtype) != gb.dtype_of(x):
                    return None
                if op == "add":
                    return gb.unary(x, "add_scalar", scalar=b, name=nm)
                if op == "sub":
                    return gb.unary(x, "add_scalar", scalar=-b, name=nm)
                if op == "mul":
                    return gb.unary(x, "mul_scalar", scalar=b, name=nm)
                if op == "div":
                    return gb.unary(x, "mul_scalar", scalar=1.0 / b, name=nm)
            return None
        if op in ("gt", "ge", "lt", "le", "eq", "ne") and self.is_tensor(A[0]) and len(A) == 2 \
                and isinstance(A[1], (int, float)) and not isinstance(A[1], bool):
            return gb.unary(T(A[0]), "compare", op=op, scalar=A[1], name=nm)
        if op == "rsub" and self.is_tensor(A[0]) and isinstance(A[1], (int, float)) and K.get("alpha", 1) == 1:
            return gb.unary(T(A[0]), "rsub_scalar", scalar=A[1], name=nm)
        if op in ("layer_norm", "native_layer_norm"):
            x = T(A[0])
            shape = tuple(A[1])
            w = T(A[2]) if len(A) > 2 and A[2] is not None else None
            b = T(A[3]) if len(A) > 3 and A[3] is not None else None
            eps = arg(4, "eps", 1e-5)
            if (w is not None and not self.is_param(w)) or (b is not None and not self.is_param(b)):
                return None
            if w is None and b is not None:
                return None
            y = gb.layer_norm(x, len(shape), eps=eps, affine=w is not None, bias=b is not None, weight=w,
                              bias_param=b, name=nm)
            if op == "native_layer_norm":
                o = gb.operators[-1]
                return (y, o.outputs[1].tensor, o.outputs[2].tensor)
            return y
        if op == "rms_norm":
            x = T(A[0])
            shape = tuple(A[1])
            w = T(A[2]) if len(A) > 2 and A[2] is not None else None
            eps = arg(3, "eps", None)
            if eps is None:
                return None
            return gb.layer_norm(x, len(shape), eps=eps, affine=w is not None, weight=w, rms=True, name=nm)
        if op in ("batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
                  "native_batch_norm", "_native_batch_norm_legit_functional"):
            x = T(A[0])
            w = T(A[1]) if A[1] is not None else None
            b = T(A[2]) if A[2] is not None else None
            rm = T(A[3]) if A[3] is not None else None
            rv = T(A[4]) if A[4] is not None else None
            if op == "_native_batch_norm_legit_no_training":
                momentum, eps = A[5], A[6]
            else:
                momentum, eps = A[6], A[7]
            if (w is None) != (b is None) or (rm is None) != (rv is None):
                return None
            y = gb.batch_norm(x, eps=eps, momentum=momentum, affine=w is not None, track_running_stats=rm is not None,
                              weight=w, bias_param=b, running_mean=rm, running_var=rv, name=nm)
            if op == "batch_norm":
                return y
            o = gb.operators[-1]
            return (y, o.outputs[1].tensor, o.outputs[2].tensor)
        if op in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
            x = T(A[0])
            if _dtype_name(val.dtype) != gb.dtype_of(x):
                return None
            return gb.softmax(x, A[1], log="log" in op, name=nm)
        if op == "embedding":
            w, ids = T(A[0]), T(A[1])
            pad = arg(2, "padding_idx", -1)
            return gb.embedding(ids, weight=w, padding_idx=None if pad == -1 else pad, name=nm)
        if op == "scaled_dot_product_attention":
            q, k, v = T(A[0]), T(A[1]), T(A[2])
            mask = arg(3, "attn_mask", None)
            dp, causal = arg(4, "dropout_p", 0.0), arg(5, "is_causal", False)
            scale = K.get("scale", A[6] if len(A) > 6 else None)
            if K.get("enable_gqa", False) and gb.shape(q)[:-2] != gb.shape(k)[:-2]:
                return None
            return gb.attention(q, k, v, mask=T(mask) if mask is not None else None, causal=causal, scale=scale,
                                dropout_p=dp, name=nm)
        if op == "cross_entropy_loss" or op in ("nll_loss", "nll_loss_forward", "nll_loss_nd"):
            logits, labels = T(A[0]), T(A[1])
            weight = arg(2, "weight", None)
            reduction = arg(3, "reduction", 1)
            ignore = arg(4, "ignore_index", -100)
            smoothing = arg(5, "label_smoothing", 0.0) if op == "cross_entropy_loss" else 0.0
            if weight is not None or reduction not in (1, 2):
                return None
            ls, ys = gb.shape(logits), gb.shape(labels)
            if len(ls) > 2 and ls[:1] + ls[2:] == ys and len(ls) != len(ys) + 1:
                return None  # [N, C, d...] layout
            if len(ls) == len(ys) + 1 and ls[:-1] == ys:
                fn = "cross_entropy" if op == "cross_entropy_loss" else "nll"
                if reduction == 2:
                    out = gb.loss(logits, labels, fn=fn, reduction="sum", ignore_index=ignore,
                                  label_smoothing=smoothing, name=nm)
                    return out if op != "nll_loss_forward" else (out, out)
                out, count = self.mean_loss(logits, labels, fn, ignore, smoothing, nm)
                return out if op != "nll_loss_forward" else (out, count)
            return None
        if op == "cat":
            # zero-size inputs (an empty cache, the empty pass-through half of a full rotary
            # split) add nothing
            xs = [T(a) for a in A[0] if not isinstance(self.env.get(a.name), _Empty)]
            if len(xs) == 1:
                return xs[0]
            return gb.concat(xs, arg(1, "dim", 0), name=nm)
        if op in ("split", "split_with_sizes", "chunk", "unbind"):
            x = T(A[0])
            vals = val
            dim = arg(2, "dim", 0) if op != "unbind" else arg(1, "dim", 0)
            dim = dim % len(gb.shape(x))
            sizes = [int(v.shape[dim]) for v in vals]
            full = [s for s in sizes if s > 0]
            got = iter(gb.split(x, full, dim, name=nm) if len(full) > 1 else (x,))
            pieces = tuple(next(got) if s > 0 else _Empty(v.shape, _dtype_name(v.dtype)) for s, v in zip(sizes, vals))
            if op == "unbind":
                pieces = tuple(gb.reshape(p, self.shape_of(v), name=f"{nm}_squeeze") for p, v in zip(pieces, vals))
            return pieces
        if op == "pad":
            mode = arg(2, "mode", "constant")
            value = arg(3, "value", None)
            if mode != "constant" or any(p < 0 for p in A[1]):
                return None
            return gb.pad(T(A[0]), list(A[1]), 0.0 if value is None else value, name=nm)
        if op == "constant_pad_nd":
            if any(p < 0 for p in A[1]):
                return None
            return gb.pad(T(A[0]), list(A[1]), arg(2, "value", 0), name=nm)
        if op in ("where", "masked_fill") and len(A) == 3:
            if op == "where":  # where(cond, x, scalar)
                cond, x, other = A
            else:  # masked_fill(x, mask, scalar)
                x, cond, other = A
            if not (self.is_tensor(cond) and self.is_tensor(x)) or not isinstance(other, (int, float)):
                return None
            if gb.dtype_of(T(cond)) != "bool" or _dtype_name(val.dtype) != gb.dtype_of(T(x)):
                return None
            return gb.binary(T(x), T(cond), op, scalar=other, name=nm)
        if op == "index" and self.is_tensor(A[0]) and self.is_param(T(A[0])) and len(A[1]) == 1 \
                and self.is_tensor(A[1][0]) and len(gb.shape(T(A[0]))) == 2 \
                and gb.dtype_of(T(A[1][0])) in ("int64", "int32"):
            # a parameter table indexed by integer ids (a relative-position bias table): a lookup
            return gb.embedding(T(A[1][0]), weight=T(A[0]), name=nm)
        if op == "moe_experts":
            return self.moe(node)
        if op == "topk":
            k, dim = A[1], arg(2, "dim", -1)
            largest = arg(3, "largest", True)
            x = T(A[0])
            # (sorted=False leaves the order unspecified: the sorted order is one valid answer)
            if dim % len(gb.shape(x)) != len(gb.shape(x)) - 1 or not largest:
                return None
            return gb.topk(x, k, name=nm)
        if op in ("slice", "narrow", "select"):
            x = T(A[0])
            shape = gb.shape(x)
            dim = A[1] % len(shape)
            n = shape[dim]
            if op == "slice":
                start, end, step = (A[2] if len(A) > 2 else 0), (A[3] if len(A) > 3 else None), (A[4] if len(A) > 4 else 1)
                start = 0 if start is None else (start + n if start < 0 else min(start, n))
                end = n if end is None else (end + n if end < 0 else min(end, n))
                if step != 1:
                    return self.strided_slice(x, dim, start, end, step, val, nm)
            elif op == "narrow":
                start, end = A[2] % n, A[2] % n + A[3]
            else:
                start = A[2] % n
                end = start + 1
            if start == 0 and end == n:
                piece = x
            else:
                sizes = [s for s in (start, end - start, n - end) if s > 0]
                pieces = gb.split(x, sizes, dim, name=nm)
                piece = pieces[1 if start > 0 else 0]
            src = A[0]
            if src.op == "call_function" and _opname(src.target) not in _VIEWS:
                self.views[node.name] = (src.name, dim, start, end)  # for a later write into it (copy_, fill_)
            if op == "select":
                piece = gb.reshape(piece, self.shape_of(val), name=f"{nm}_squeeze")
            return piece
        if op in ("copy_", "fill_") and isinstance(A[0], torch.fx.Node) and A[0].name in self.views:
            return self.write_into_view(op, node, val)
        if op in ("mean", "sum") and (len(A) == 1 or (A[1] is None and not arg(2, "keepdim", False))):
            if K.get("dtype") is not None or not gb.shape(T(A[0])):
                return None
            return gb.reduce(T(A[0]), list(range(len(gb.shape(T(A[0]))))), op, name=nm)
        if op in ("mean", "sum", "amax", "amin") and len(A) >= 2 and A[1] is not None:
            x = T(A[0])
            dims = A[1] if isinstance(A[1], (list, tuple)) else [A[1]]
            keep = arg(2, "keepdim", False)
            if K.get("dtype") is not None:
                return None
            return gb.reduce(x, list(dims), op, keepdim=keep, name=nm)
        return None


#: Module attributes holding a LayerDrop probability (Hugging Face OPT, BART, mBART, Whisper, ...).
_LAYERDROP_ATTRS = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop")


@contextlib.contextmanager
def _training_step_branches(module):
    """Resolve the random branches of a training step while it is exported.

    LayerDrop (``if self.training and torch.rand([]) < self.layerdrop: skip the layer``) is a
    Python branch on random data, which ``torch.export`` cannot trace. While exporting, every
    LayerDrop probability of a module in training mode is set to 0, and a 0-d ``torch.rand``
    draw (the idiom of such branches, which some versions draw even when the probability is 0)
    returns the Python float 1.0, so no layer is skipped. Yields a list that receives one line per
    resolution (empty if nothing was resolved); everything is restored on exit.
    """
    resolved: list[str] = []
    saved = []
    for qual, sub in module.named_modules():
        if not sub.training:
            continue
        for attr in _LAYERDROP_ATTRS:
            p = getattr(sub, attr, None)
            if isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0:
                saved.append((sub, attr, p))
                setattr(sub, attr, 0.0)
                resolved.append(f"{attr}={p} of {qual or type(sub).__name__} ({type(sub).__name__}) set to 0 while exporting")
    rand = torch.rand
    draws = []

    def rand_no_skip(*size, **kw):
        dims = size[0] if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)) else size
        if len(dims) == 0 and not any(k in kw for k in ("out", "generator")):
            draws.append(1)
            return 1.0
        return rand(*size, **kw)

    torch.rand = rand_no_skip
    try:
        yield resolved
    finally:
        torch.rand = rand
        for sub, attr, p in saved:
            setattr(sub, attr, p)
        if draws:
            resolved.append(f"{len(draws)} 0-d torch.rand() draws (LayerDrop-style `if torch.rand([]) < p` branches) "
                            "read as 1.0")


def _user_frame(exc) -> str:
    """`` at FILE:LINE`` of the innermost frame of ``exc`` outside torch, or ``""``."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    text = str(exc)
    marker = "The following call raised this error:"
    if marker in text:  # torch names the user's line in the message
        lines = [ln.strip() for ln in text.split(marker, 1)[1].splitlines() if ln.strip()]
        if lines:
            return f" ({lines[0]}: {lines[1] if len(lines) > 1 else ''})"
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def from_torch_with_state(
    module: torch.nn.Module,
    example_inputs=(),
    *,
    name: str | None = None,
    kwargs: Mapping | None = None,
    strict: bool = False,
    moe_capacity_factor: float | None = None,
) -> tuple[Graph, dict[str, torch.Tensor]]:
    """Like :func:`from_torch`, also returning the values of the graph's parameters and
    constants (by IR tensor name), ready for :func:`~tensoropt_py.graph.torch_ops.run_graph`."""
    if not isinstance(module, torch.nn.Module):
        raise InvalidInputError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    elif isinstance(example_inputs, Mapping):
        kwargs = {**dict(example_inputs), **dict(kwargs or {})}
        example_inputs = ()
    if moe_capacity_factor is not None and not (isinstance(moe_capacity_factor, (int, float))
                                                 and moe_capacity_factor > 0):
        raise InvalidInputError(f"moe_capacity_factor must be a positive number or None, got {moe_capacity_factor!r}")
    with _training_step_branches(module) as resolved, experts_as_one_operator(module) as moe_modules:
        try:
            ep = torch.export.export(module, tuple(example_inputs), kwargs=dict(kwargs) if kwargs else None,
                                     strict=strict)
        except Exception as exc:
            if type(exc).__name__ in ("GuardOnDataDependentSymNode", "UserError") and "data-dependent" in str(exc):
                where = _user_frame(exc)
                raise UnsupportedOperatorError(
                    f"{type(module).__name__} branches on a value computed from tensor data{where}: torch.export "
                    "needs every Python `if` on a tensor resolved when tracing. Rewrite the branch with "
                    "torch.where / torch.cond, or export a module whose training step takes one fixed path "
                    f"(original error: {str(exc).splitlines()[0]})") from exc
            raise
    if resolved:
        warnings.warn("from_torch resolved random branches of the training step to what it runs when nothing is "
                      "skipped: " + "; ".join(resolved) + ". The graph costs a step that runs every layer "
                      "(LayerDrop skips a layer with that probability, so this is the most expensive step).",
                      stacklevel=3)
    if moe_modules and moe_capacity_factor is not None:
        warnings.warn(f"mixture of experts imported with capacity factor {moe_capacity_factor}: tokens beyond an "
                      "expert's capacity are dropped (as GShard / Switch training does), which the module itself "
                      "(dropless) does not do", stacklevel=3)
    imp = _Importer(module, ep, name or type(module).__name__, moe_capacity_factor)
    graph, values = imp.run()
    return graph, values


def from_torch(module: torch.nn.Module, example_inputs=(), *, name: str | None = None, **kwargs) -> Graph:
    """Import ``module`` (called on ``example_inputs``) into a :class:`~tensoropt_py.graph.ir.Graph`.

    Parameters
    ----------
    module : torch.nn.Module
        Put it in ``eval()`` mode to drop dropout; in ``train()`` mode dropout becomes UNARY
        dropout operators.
    example_inputs : Tensor, tuple of Tensors or dict
        Positional example inputs (a dict: keyword inputs). Shapes are static.
    name : str, optional
        Graph name (default: the module's class name).
    kwargs : dict, optional
        Keyword example inputs (e.g. ``{"input_ids": ids, "labels": labels}``).
    moe_capacity_factor : float, optional
        Capacity of every expert per sequence as a multiple of its fair share of the routed
        tokens (GShard / Switch); None (default): dropless, the exact computation of the module.
    strict : bool
        ``torch.export``'s strict mode (default False).

    Returns
    -------
    Graph
        Its ``outputs`` are the module's tensor outputs in order.

    Raises
    ------
    UnsupportedOperatorError
        An aten operator without an IR rule reads parameters, or the module branches on tensor
        data (other than LayerDrop).

    Warns
    -----
    UserWarning
        An operator without a rule on data (replicated OPAQUE); LayerDrop branches resolved;
        an MoE capacity factor that drops tokens; an experts module left as traced.
    """
    return from_torch_with_state(module, example_inputs, name=name, **kwargs)[0]
