"""Computation-graph IR, operator builders, the model zoo and the torch.export importer.

``from_torch`` / ``run_graph`` import torch lazily (only when called).
"""

from . import ops, zoo
from .builder import GraphBuilder
from .ir import DTYPE_BYTES, DimKind, Graph, LoopDim, Operator, OpKind, TensorRole, TensorSpec, TensorUse

__all__ = [
    "DimKind",
    "OpKind",
    "TensorRole",
    "LoopDim",
    "TensorSpec",
    "TensorUse",
    "Operator",
    "Graph",
    "DTYPE_BYTES",
    "GraphBuilder",
    "ops",
    "zoo",
    "from_torch",
    "run_graph",
    "run_operator",
]


def from_torch(module, example_inputs=(), *, name=None, **kwargs):
    """Import a ``torch.nn.Module``: see :func:`tensoropt_py.graph.torch_import.from_torch`."""
    from .torch_import import from_torch as _f

    return _f(module, example_inputs, name=name, **kwargs)


def run_graph(graph, inputs, params, **kwargs):
    """Execute a graph with torch: see :func:`tensoropt_py.graph.torch_ops.run_graph`."""
    from .torch_ops import run_graph as _r

    return _r(graph, inputs, params, **kwargs)


def run_operator(op, inputs, params, **kwargs):
    """Execute one operator with torch: see :func:`tensoropt_py.graph.torch_ops.run_operator`."""
    from .torch_ops import run_operator as _r

    return _r(op, inputs, params, **kwargs)
