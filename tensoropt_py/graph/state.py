"""The state of a graph under construction (:class:`GraphState`), shared by the operator
functions of :mod:`~tensoropt_py.graph.ops` and by :class:`~tensoropt_py.graph.builder.GraphBuilder`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence

from ..errors import InvalidInputError
from .ir import DTYPE_BYTES, Graph, Operator, TensorRole, TensorSpec

__all__ = ["GraphState"]


class GraphState:
    """The tensors and operators of a graph under construction: naming, shapes, batch axes, checks.

    The operator functions of :mod:`tensoropt_py.graph.ops` take one as their first argument;
    :class:`~tensoropt_py.graph.builder.GraphBuilder` adds them as methods. It lives below
    both modules so that ``ops`` needs nothing from ``builder`` (imports go one way).

    Parameters
    ----------
    name : str
        Name of the graph.
    dtype : str
        Default dtype of new activations and parameters (a key of ``DTYPE_BYTES``).
    """

    def __init__(self, name: str = "graph", dtype: str = "float32"):
        if dtype not in DTYPE_BYTES:
            raise InvalidInputError(f"dtype {dtype!r} not allowed; allowed: {', '.join(DTYPE_BYTES)}")
        self.name = name
        self.dtype = dtype
        self.tensors: dict[str, TensorSpec] = {}
        self.operators: list[Operator] = []
        self._op_names: set[str] = set()
        self._batch_axis: dict[str, int | None] = {}
        self._produced: set[str] = set()
        self._scope: list[str] = []

    # --- naming --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, prefix: str):
        """Prefix the names of tensors and operators created inside the ``with`` block by ``prefix.``."""
        self._scope.append(prefix)
        try:
            yield self
        finally:
            self._scope.pop()

    def _scoped(self, hint: str) -> str:
        return ".".join(self._scope + [hint]) if self._scope else hint

    @staticmethod
    def _unique(base: str, taken) -> str:
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"

    def op_name(self, hint: str) -> str:
        """A fresh operator name derived from ``hint`` (scoped)."""
        return self._unique(self._scoped(hint), self._op_names)

    # --- tensors -------------------------------------------------------------------------------
    def new_tensor(
        self,
        hint: str,
        shape: Sequence[int],
        dtype: str | None = None,
        role: TensorRole = TensorRole.ACTIVATION,
        batch_axis: int | None = None,
        *,
        exact: bool = False,
    ) -> str:
        """Declare a tensor and return its (unique) name.

        With ``exact=True`` the name is used verbatim (not scoped) and a clash raises.
        """
        name = hint if exact else self._unique(self._scoped(hint), self.tensors)
        if name in self.tensors:
            raise InvalidInputError(f"tensor {name!r} is already defined in graph {self.name!r}")
        shape = tuple(int(s) for s in shape)
        self.tensors[name] = TensorSpec(name, shape, dtype or self.dtype, role)
        if batch_axis is not None and not (0 <= batch_axis < len(shape)):
            raise InvalidInputError(f"batch axis {batch_axis} out of range for {self.tensors[name]}")
        self._batch_axis[name] = batch_axis
        return name

    def parameter(self, name: str, shape: Sequence[int], dtype: str | None = None, *, exact: bool = False) -> str:
        """Declare a trained parameter (``TensorRole.PARAMETER``); returns its name."""
        return self.new_tensor(name, shape, dtype, TensorRole.PARAMETER, exact=exact)

    def constant(self, name: str, shape: Sequence[int], dtype: str | None = None, *, exact: bool = False) -> str:
        """Declare a non-trained buffer (``TensorRole.CONSTANT``); returns its name."""
        return self.new_tensor(name, shape, dtype, TensorRole.CONSTANT, exact=exact)

    def spec(self, tensor: str) -> TensorSpec:
        try:
            return self.tensors[tensor]
        except KeyError:
            raise InvalidInputError(f"graph {self.name!r} has no tensor {tensor!r}") from None

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.spec(tensor).shape

    def dtype_of(self, tensor: str) -> str:
        return self.spec(tensor).dtype

    def role(self, tensor: str) -> TensorRole:
        return self.spec(tensor).role

    def batch_axis(self, tensor: str) -> int | None:
        """The axis of ``tensor`` that holds the batch (None if it has none)."""
        self.spec(tensor)
        return self._batch_axis.get(tensor)

    def set_batch_axis(self, tensor: str, axis: int | None):
        self._batch_axis[tensor] = axis

    def producer_known(self, tensor: str) -> bool:
        """True if an operator added so far produces ``tensor``."""
        return tensor in self._produced

    def is_weight(self, tensor: str) -> bool:
        """True for PARAMETER and CONSTANT tensors (read through ``Operator.params``)."""
        return self.role(tensor) in (TensorRole.PARAMETER, TensorRole.CONSTANT)

    # --- operators -----------------------------------------------------------------------------
    def add_operator(self, op: Operator) -> Operator:
        """Append ``op`` after checking names, extents and topological order."""
        if op.name in self._op_names:
            raise InvalidInputError(f"graph {self.name!r} already has an operator named {op.name!r}")
        Graph.check_uses(op, self.tensors)
        for use in op.inputs:
            if use.tensor not in self._produced:
                raise InvalidInputError(f"operator {op.name!r} reads {use.tensor!r} before it is produced")
        for use in op.outputs:
            if use.tensor in self._produced:
                raise InvalidInputError(f"tensor {use.tensor!r} is produced twice (again by {op.name!r})")
            self._produced.add(use.tensor)
        self._op_names.add(op.name)
        self.operators.append(op)
        return op

    def build(self, outputs: Iterable[str] | None = None) -> Graph:
        """The finished :class:`Graph` (validated again by its constructor)."""
        used = {u.tensor for op in self.operators for u in op.uses()}
        tensors = [t for n, t in self.tensors.items() if n in used]
        return Graph(tensors, self.operators, name=self.name, outputs=outputs)

    # --- statistics while building -------------------------------------------------------------
    @property
    def num_parameters(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors.values() if t.role is TensorRole.PARAMETER)
