"""A :class:`GraphBuilder` that names tensors and operators and checks shapes as it goes.

The builder holds the tensors and operators of a graph under construction. Every
operator-building function of :mod:`tensoropt_py.graph.ops` is also available as a
method (``gb.linear(x, 16)`` is ``ops.linear(gb, x, 16)``). Tensors are referred to
by name; the builder remembers which axis of each activation is the batch (sample)
axis, so that operators can mark the matching loop dimension ``DimKind.SAMPLE``.

Examples
--------
>>> from tensoropt_py.graph.builder import GraphBuilder
>>> gb = GraphBuilder("toy")
>>> x, y = gb.input([("x", (8, 4), "float32"), ("y", (8,), "int64")])
>>> h = gb.relu(gb.linear(x, 16, name="fc1"))
>>> logits = gb.linear(h, 3, name="fc2")
>>> loss = gb.loss(logits, y)
>>> g = gb.build()
>>> g.num_parameters == 4 * 16 + 16 + 16 * 3 + 3
True
>>> [op.kind.value for op in g]
['input', 'linear', 'unary', 'linear', 'loss']
"""

from __future__ import annotations

from . import ops
from .state import GraphState

__all__ = ["GraphBuilder"]


class GraphBuilder(GraphState):
    """Incrementally builds a :class:`~tensoropt_py.graph.ir.Graph`: a
    :class:`~tensoropt_py.graph.state.GraphState` with every function of
    :mod:`tensoropt_py.graph.ops` as a method.

    Parameters
    ----------
    name : str
        Name of the graph.
    dtype : str
        Default dtype of new activations and parameters (a key of ``DTYPE_BYTES``).
    """


def _op_method(fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__qualname__ = f"GraphBuilder.{fn.__name__}"
    method.__doc__ = f"Same as :func:`tensoropt_py.graph.ops.{fn.__name__}` with this builder."
    return method


for _name in ops.__all__:
    setattr(GraphBuilder, _name, _op_method(getattr(ops, _name)))
del _name
