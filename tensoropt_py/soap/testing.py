"""Small graphs built directly on the IR, for the SOAP tests, doctests and benchmarks.

They do not depend on :mod:`tensoropt_py.graph.ops`, so the simulator can be tested on its
own: an MLP, a LeNet-like CNN and an unrolled RNN language model (FlexFlow §8.3 uses LeNet and
a 2-step RNNLM for its exhaustive-search comparison).

Examples
--------
>>> g = lenet_graph()
>>> [op.name for op in g][:4]
['data', 'conv1', 'pool1', 'conv2']
"""

from __future__ import annotations

from ..graph.ir import DimKind, Graph, LoopDim, Operator, OpKind, TensorRole, TensorSpec, TensorUse

__all__ = ["mlp_graph", "lenet_graph", "rnn_graph", "chain_graph"]

S, A, P, R = DimKind.SAMPLE, DimKind.ATTRIBUTE, DimKind.PARAMETER, DimKind.REDUCTION


class _G:
    def __init__(self, name):
        self.name = name
        self.tensors = []
        self.ops = []

    def tensor(self, name, shape, role=TensorRole.ACTIVATION, dtype="float32"):
        self.tensors.append(TensorSpec(name, tuple(shape), dtype, role))
        return name

    def op(self, *a, **k):
        self.ops.append(Operator(*a, **k))

    def build(self):
        return Graph(self.tensors, self.ops, name=self.name)

    # -- operators ---------------------------------------------------------------------------
    def input(self, name, outs):
        """outs: list of (tensor, shape); first axis is the batch."""
        b = outs[0][1][0]
        dims = [LoopDim("b", b, S)]
        uses = []
        for t, shape in outs:
            extra = []
            for j, s in enumerate(shape[1:]):
                dn = f"{t}_d{j}"
                dims.append(LoopDim(dn, s, A))
                extra.append((dn,))
            self.tensor(t, shape, TensorRole.INPUT)
            uses.append(TensorUse(t, (("b",),) + tuple(extra)))
        self.op(name, OpKind.INPUT, tuple(dims), outputs=tuple(uses))

    def linear(self, name, x, b, i, o, y, weight=None):
        w = weight or self.tensor(f"{name}.w", (i, o), TensorRole.PARAMETER)
        if weight is None:
            pass
        self.tensor(y, (b, o))
        self.op(name, OpKind.LINEAR, (LoopDim("b", b, S), LoopDim("i", i, R), LoopDim("o", o, P)),
                inputs=(TensorUse(x, (("b",), ("i",))),), params=(TensorUse(w, (("i",), ("o",))),),
                outputs=(TensorUse(y, (("b",), ("o",))),), flops=2.0 * b * i * o, backward_flops=4.0 * b * i * o,
                saved=(x,))

    def relu(self, name, x, b, f, y):
        self.tensor(y, (b, f))
        self.op(name, OpKind.UNARY, (LoopDim("b", b, S), LoopDim("f", f, A)),
                inputs=(TensorUse(x, (("b",), ("f",))),), outputs=(TensorUse(y, (("b",), ("f",))),),
                flops=float(b * f), backward_flops=float(b * f), saved=(y,))

    def conv(self, name, x, b, ci, co, h, w, k, y):
        wt = self.tensor(f"{name}.w", (co, ci, k, k), TensorRole.PARAMETER)
        self.tensor(y, (b, co, h, w))
        dims = (LoopDim("b", b, S), LoopDim("co", co, P), LoopDim("h", h, A), LoopDim("w", w, A),
                LoopDim("ci", ci, R), LoopDim("kh", k, R, False), LoopDim("kw", k, R, False))
        f = 2.0 * b * co * h * w * ci * k * k
        self.op(name, OpKind.CONV2D, dims, inputs=(TensorUse(x, (("b",), ("ci",), ("h",), ("w",))),),
                params=(TensorUse(wt, (("co",), ("ci",), ("kh",), ("kw",))),),
                outputs=(TensorUse(y, (("b",), ("co",), ("h",), ("w",))),), flops=f, backward_flops=2 * f, saved=(x,))

    def pool(self, name, x, b, c, h, w, y):
        self.tensor(y, (b, c, h // 2, w // 2))
        dims = (LoopDim("b", b, S), LoopDim("c", c, A), LoopDim("h", h // 2, A), LoopDim("w", w // 2, A),
                LoopDim("kh", 2, R, False), LoopDim("kw", 2, R, False))
        self.op(name, OpKind.POOL2D, dims, inputs=(TensorUse(x, (("b",), ("c",), ("h", "kh"), ("w", "kw"))),),
                outputs=(TensorUse(y, (("b",), ("c",), ("h",), ("w",))),), flops=float(b * c * h * w),
                backward_flops=float(b * c * h * w), saved=(x,))

    def flatten(self, name, x, b, c, h, w, y):
        self.tensor(y, (b, c * h * w))
        dims = (LoopDim("b", b, S), LoopDim("c", c, A), LoopDim("h", h, A), LoopDim("w", w, A))
        self.op(name, OpKind.RESHAPE, dims, inputs=(TensorUse(x, (("b",), ("c",), ("h",), ("w",))),),
                outputs=(TensorUse(y, (("b",), ("c", "h", "w"))),))

    def loss(self, name, x, b, c, y):
        self.tensor(y, (b,))
        self.op(name, OpKind.LOSS, (LoopDim("b", b, S), LoopDim("c", c, R, False)),
                inputs=(TensorUse(x, (("b",), ("c",))),), outputs=(TensorUse(y, (("b",),)),),
                flops=3.0 * b * c, backward_flops=2.0 * b * c, saved=(x,))

    def embed(self, name, ids, b, v, e, y, table):
        self.tensor(y, (b, e))
        self.op(name, OpKind.EMBEDDING, (LoopDim("b", b, S), LoopDim("e", e, P), LoopDim("v", v, R)),
                inputs=(TensorUse(ids, (("b",),)),), params=(TensorUse(table, (("v",), ("e",))),),
                outputs=(TensorUse(y, (("b",), ("e",))),), flops=float(b * e), backward_flops=float(b * e),
                saved=(ids,))

    def cell(self, name, x, h, b, i, o, y, wx, wh):
        dims = [LoopDim("b", b, S), LoopDim("o", o, P), LoopDim("i", i, R)]
        inputs = [TensorUse(x, (("b",), ("i",)))]
        params = [TensorUse(wx, (("i",), ("o",)))]
        f = 8.0 * b * i * o
        if h is not None:
            dims.append(LoopDim("k", o, R))
            inputs.append(TensorUse(h, (("b",), ("k",))))
            params.append(TensorUse(wh, (("k",), ("o",))))
            f += 8.0 * b * o * o
        self.tensor(y, (b, o))
        self.op(name, OpKind.RNN_CELL, tuple(dims), inputs=tuple(inputs), params=tuple(params),
                outputs=(TensorUse(y, (("b",), ("o",))),), flops=f, backward_flops=2 * f,
                saved=tuple(u.tensor for u in inputs) + (y,))


def mlp_graph(batch=64, width=1024, layers=4, classes=None, name="mlp") -> Graph:
    """data -> (linear -> relu) x layers -> linear -> loss."""
    g = _G(name)
    classes = classes or width
    g.input("data", [("x", (batch, width))])
    h = "x"
    for k in range(layers):
        g.linear(f"fc{k}", h, batch, width, width, f"h{k}")
        g.relu(f"relu{k}", f"h{k}", batch, width, f"a{k}")
        h = f"a{k}"
    g.linear("head", h, batch, width, classes, "logits")
    g.loss("loss", "logits", batch, classes, "l")
    return g.build()


def chain_graph(batch=8, width=8, n=2, name="chain") -> Graph:
    """data -> relu -> relu ... (n relus): no parameters, easy to reason about by hand."""
    g = _G(name)
    g.input("data", [("x", (batch, width))])
    h = "x"
    for k in range(n):
        g.relu(f"r{k}", h, batch, width, f"y{k}")
        h = f"y{k}"
    return g.build()


def lenet_graph(batch=64, name="lenet") -> Graph:
    """A LeNet-like CNN: conv-pool-conv-pool-flatten-fc-relu-fc-loss on 28x28 images."""
    g = _G(name)
    g.input("data", [("img", (batch, 4, 28, 28))])
    g.conv("conv1", "img", batch, 4, 32, 28, 28, 5, "c1")
    g.pool("pool1", "c1", batch, 32, 28, 28, "p1")
    g.conv("conv2", "p1", batch, 32, 64, 14, 14, 5, "c2")
    g.pool("pool2", "c2", batch, 64, 14, 14, "p2")
    g.flatten("flat", "p2", batch, 64, 7, 7, "f")
    g.linear("fc1", "f", batch, 64 * 49, 512, "h1")
    g.relu("relu", "h1", batch, 512, "a1")
    g.linear("fc2", "a1", batch, 512, 16, "logits")
    g.loss("loss", "logits", batch, 16, "l")
    return g.build()


def rnn_graph(batch=64, steps=2, vocab=8192, hidden=1024, layers=1, name="rnnlm") -> Graph:
    """An unrolled RNN language model: embed -> cells (weights shared over steps) -> linear -> loss per step."""
    g = _G(name)
    g.input("data", [(f"tok{t}", (batch,)) for t in range(steps)])
    table = g.tensor("embed.table", (vocab, hidden), TensorRole.PARAMETER)
    wx = [g.tensor(f"rnn{l}.wx", (hidden, hidden), TensorRole.PARAMETER) for l in range(layers)]
    wh = [g.tensor(f"rnn{l}.wh", (hidden, hidden), TensorRole.PARAMETER) for l in range(layers)]
    wo = g.tensor("out.w", (hidden, vocab), TensorRole.PARAMETER)
    prev = [None] * layers
    for t in range(steps):
        g.embed(f"embed{t}", f"tok{t}", batch, vocab, hidden, f"e{t}", table)
        x = f"e{t}"
        for l in range(layers):
            y = f"h{l}_{t}"
            g.cell(f"cell{l}_{t}", x, prev[l], batch, hidden, hidden, y, wx[l], wh[l])
            prev[l] = y
            x = y
        g.linear(f"out{t}", x, batch, hidden, vocab, f"logits{t}", weight=wo)
        g.loss(f"loss{t}", f"logits{t}", batch, vocab, f"l{t}")
    return g.build()
