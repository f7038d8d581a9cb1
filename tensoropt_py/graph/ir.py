"""Computation-graph IR: operators as einsum-like loops over named dimensions.

Every operator is described by its *loop dimensions* (the iteration space of its
computation, each with a size and a FlexFlow Table 2 kind) and by the tensors it
reads and writes, each tensor dimension being one loop dimension or a row-major
merge of several (``(("h", "d"),)`` for a ``[h*d]`` dimension). This single
description is what the configuration space and the cost model work from:

* splitting a loop dimension over a mesh axis splits every tensor dimension whose
  *outermost* loop dimension it is (an inner factor of a merged dimension cannot be
  split without a non-contiguous layout, so the space forbids it);
* a tensor that does not index a split loop dimension is produced as a partial sum
  over that mesh axis (forward: outputs not indexing a reduction dimension;
  backward: the gradient of an input or parameter that does not index a split
  dimension, e.g. the weight gradient under data parallelism);
* the local work of a device is the operator's FLOPs divided by the split factor of
  every split loop dimension (mesh axes used by no loop dimension replicate the
  computation).

Conventions the builders (:mod:`~tensoropt_py.graph.ops`, the zoo, the torch importer)
follow, which the cost model may rely on:

* ``outputs[0]`` is an operator's primary result (SPLIT, TOPK and OPAQUE operators have
  several results read by later operators). Further outputs of the other kinds are *auxiliary*
  tensors that only the backward pass reads (max-pool indices, dropout masks,
  layer/batch-norm statistics, attention log-sum-exp, the LSTM gate workspace, the
  log-probabilities of the loss): they appear in ``saved`` and are consumed by no
  operator. :attr:`Operator.aux_outputs` lists them.
* ``saved`` never lists PARAMETER or CONSTANT tensors (they are resident anyway):
  it is the activation memory the operator adds between forward and backward. A
  tensor saved by several operators (e.g. ``x`` saved by both a producer and a
  consumer) is one buffer in PyTorch; :meth:`Graph.saved_bytes` counts it once.
* A parameter may be read by several operators (tied embeddings, an RNN cell
  unrolled over time steps share weights): it is *one* tensor, its gradient is
  accumulated over its users and synchronised once; :meth:`Graph.parameter_users`
  lists its readers. Cost models must not count its memory per user.
* A loop dimension that indexes a parameter and the output is PARAMETER; one that
  indexes a parameter but not the output (embedding vocabulary) is PARAMETER too,
  and splitting it leaves partial sums by the general rule above.
* Operators with ``splittable=False`` loop dims must be computed whole along them.

The IR is pure data: frozen, slotted dataclasses holding tuples, so graphs hash,
compare and serialise. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..errors import InvalidInputError

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
]

#: Bytes per element of the dtypes the IR understands.
DTYPE_BYTES: Mapping[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


class DimKind(str, Enum):
    """FlexFlow Table 2 dimension kinds of an operator's loop dimensions."""

    SAMPLE = "sample"  # the batch: splitting it is data parallelism
    ATTRIBUTE = "attribute"  # e.g. image height/width, sequence length, hidden units of an elementwise op
    PARAMETER = "parameter"  # indexes a parameter and the output (e.g. output channels): model parallelism
    REDUCTION = "reduction"  # summed over: splitting it leaves partial sums in the output


class OpKind(str, Enum):
    """The operator kinds of the IR."""

    INPUT = "input"  # data loading: produces the batch (and labels)
    LINEAR = "linear"
    MATMUL = "matmul"
    BMM = "bmm"
    ATTENTION = "attention"  # scaled dot-product attention, fused
    CONV2D = "conv2d"
    POOL2D = "pool2d"
    UNARY = "unary"  # elementwise with one input (relu, gelu, tanh, dropout, scale...)
    BINARY = "binary"  # elementwise with two inputs (add, mul...), with broadcasting
    LAYER_NORM = "layer_norm"
    BATCH_NORM = "batch_norm"
    SOFTMAX = "softmax"
    EMBEDDING = "embedding"
    RNN_CELL = "rnn_cell"  # LSTM / GRU / vanilla RNN cell, one time step
    RESHAPE = "reshape"  # reshape / view / flatten
    TRANSPOSE = "transpose"  # permute / transpose
    CONCAT = "concat"
    SPLIT = "split"
    LOSS = "loss"
    REDUCE = "reduce"  # sum / mean / amax over some dimensions (added after the first version of the IR)
    PAD = "pad"  # constant padding of some axes (torch.nn.functional.pad, mode "constant")
    TOPK = "topk"  # the k largest values along the last axis and their indices (MoE routing)
    MOE_DISPATCH = "moe_dispatch"  # tokens -> per-expert capacity slots [groups, experts, capacity, hidden]
    MOE_EXPERTS = "moe_experts"  # the experts' gated feed-forward, one weight block per expert
    MOE_COMBINE = "moe_combine"  # expert outputs -> tokens, weighted by the router's top-k weights
    OPAQUE = "opaque"  # an operator with no rule: kept replicated


class TensorRole(str, Enum):
    """What a tensor is in the graph."""

    ACTIVATION = "activation"  # produced by an operator
    PARAMETER = "parameter"  # trained weights (optimizer state follows them)
    INPUT = "input"  # data fed to the model (produced by an INPUT operator)
    CONSTANT = "constant"  # non-trained buffers (masks, running statistics)


@dataclass(frozen=True, slots=True)
class LoopDim:
    """One dimension of an operator's iteration space.

    Parameters
    ----------
    name : str
        Unique within its operator.
    size : int
        Extent (>= 1).
    kind : DimKind
    splittable : bool
        False for dimensions the operator cannot compute in pieces without extra
        communication the IR does not model (softmax / layer-norm axis, conv kernel).
    """

    name: str
    size: int
    kind: DimKind
    splittable: bool = True

    def __post_init__(self):
        if not isinstance(self.size, int) or self.size < 1:
            raise InvalidInputError(f"loop dimension {self.name!r} must have a positive int size, got {self.size!r}")

    def __str__(self):
        return f"{self.name}:{self.size}{'' if self.splittable else '*'}"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor of the graph: name, shape, dtype and role."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    role: TensorRole = TensorRole.ACTIVATION

    def __post_init__(self):
        if self.dtype not in DTYPE_BYTES:
            raise InvalidInputError(
                f"tensor {self.name!r} has dtype {self.dtype!r}; allowed: {', '.join(DTYPE_BYTES)}"
            )
        if any((not isinstance(s, int)) or s < 1 for s in self.shape):
            raise InvalidInputError(f"tensor {self.name!r} has a bad shape {self.shape!r}: dims must be ints >= 1")

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    def __str__(self):
        return f"{self.name}[{','.join(map(str, self.shape))}]:{self.dtype}"


@dataclass(frozen=True, slots=True)
class TensorUse:
    """How an operator indexes a tensor.

    ``dims[i]`` lists the loop dimensions that make up tensor dimension ``i``,
    outermost first; the product of their sizes equals the tensor's extent there.
    An empty tuple is a size-1 (broadcast) dimension.
    """

    tensor: str
    dims: tuple[tuple[str, ...], ...]

    def loop_dims(self) -> tuple[str, ...]:
        """All loop dimensions this use indexes, in tensor order."""
        return tuple(d for group in self.dims for d in group)

    def __str__(self):
        return f"{self.tensor}({','.join('*'.join(g) or '1' for g in self.dims)})"


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator of the graph.

    Parameters
    ----------
    name : str
        Unique within the graph.
    kind : OpKind
    loop_dims : tuple of LoopDim
    inputs, params, outputs : tuple of TensorUse
        Activations read, parameters (and constants) read, tensors written.
    flops : float
        Forward floating-point operations of the whole (unsplit) operator.
    backward_flops : float
        Backward FLOPs of the whole operator (gradients of inputs and parameters).
    saved : tuple of str
        Names of the tensors (among inputs, params, outputs) the backward pass needs,
        which training must keep from forward to backward.
    attrs : tuple of (str, value) pairs
        Everything needed to run the operator (activation function, stride, eps...).
    """

    name: str
    kind: OpKind
    loop_dims: tuple[LoopDim, ...]
    inputs: tuple[TensorUse, ...] = ()
    params: tuple[TensorUse, ...] = ()
    outputs: tuple[TensorUse, ...] = ()
    flops: float = 0.0
    backward_flops: float = 0.0
    saved: tuple[str, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = field(default=())

    def __post_init__(self):
        names = [d.name for d in self.loop_dims]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"operator {self.name!r} repeats a loop dimension name: {names}")
        known = set(names)
        for use in self.inputs + self.params + self.outputs:
            unknown = set(use.loop_dims()) - known
            if unknown:
                raise InvalidInputError(
                    f"operator {self.name!r} indexes {use.tensor!r} by unknown loop dimensions {sorted(unknown)}"
                )
        used = {u.tensor for u in self.inputs + self.params + self.outputs}
        missing = set(self.saved) - used
        if missing:
            raise InvalidInputError(f"operator {self.name!r} saves tensors it does not use: {sorted(missing)}")
        if self.flops < 0 or self.backward_flops < 0:
            raise InvalidInputError(f"operator {self.name!r} has negative FLOPs")

    def attr(self, key: str, default=None):
        """The value of attribute ``key`` (``default`` if absent)."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def loop_dim(self, name: str) -> LoopDim:
        for d in self.loop_dims:
            if d.name == name:
                return d
        raise KeyError(f"operator {self.name!r} has no loop dimension {name!r}")

    def uses(self) -> tuple[TensorUse, ...]:
        return self.inputs + self.params + self.outputs

    @property
    def aux_outputs(self) -> tuple[str, ...]:
        """Names of the auxiliary outputs (all outputs but the first): tensors kept for backward only."""
        return tuple(u.tensor for u in self.outputs[1:])

    def use(self, tensor: str) -> TensorUse:
        """The :class:`TensorUse` of ``tensor`` in this operator (first match)."""
        for u in self.uses():
            if u.tensor == tensor:
                return u
        raise KeyError(f"operator {self.name!r} does not use tensor {tensor!r}")

    def __str__(self):
        return f"{self.kind.value} {self.name} [{' '.join(map(str, self.loop_dims))}]"


class Graph:
    """A computation graph: tensors and operators in topological order.

    Parameters
    ----------
    tensors : iterable of TensorSpec
    operators : iterable of Operator
        Must be in topological order (every input produced by an earlier operator).
    name : str

    Examples
    --------
    >>> from tensoropt_py.graph.ir import *
    >>> x = TensorSpec("x", (8, 4), role=TensorRole.INPUT)
    >>> y = TensorSpec("y", (8, 4))
    >>> load = Operator("load", OpKind.INPUT, (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("f", 4, DimKind.ATTRIBUTE)),
    ...                 outputs=(TensorUse("x", (("b",), ("f",))),))
    >>> relu = Operator("relu", OpKind.UNARY, (LoopDim("b", 8, DimKind.SAMPLE), LoopDim("f", 4, DimKind.ATTRIBUTE)),
    ...                 inputs=(TensorUse("x", (("b",), ("f",))),), outputs=(TensorUse("y", (("b",), ("f",))),),
    ...                 flops=32, backward_flops=32, saved=("y",))
    >>> g = Graph([x, y], [load, relu], name="tiny")
    >>> g.edges()
    (('load', 'relu', 'x'),)
    """

    __slots__ = ("name", "tensors", "operators", "outputs", "_producer", "_index", "_consumers")

    def __init__(
        self,
        tensors: Iterable[TensorSpec],
        operators: Iterable[Operator],
        name: str = "graph",
        outputs: Iterable[str] | None = None,
    ):
        self.name = name
        self.tensors: dict[str, TensorSpec] = {}
        for t in tensors:
            if t.name in self.tensors:
                raise InvalidInputError(f"graph {name!r} defines tensor {t.name!r} twice")
            self.tensors[t.name] = t
        self.operators: tuple[Operator, ...] = tuple(operators)
        self._index = {}
        self._producer: dict[str, str] = {}
        self._consumers: dict[str, list[str]] = {}
        for op in self.operators:
            if op.name in self._index:
                raise InvalidInputError(f"graph {name!r} has two operators named {op.name!r}")
            self._index[op.name] = len(self._index)
            self.check_uses(op, self.tensors)
            for use in op.inputs:
                if use.tensor not in self._producer:
                    raise InvalidInputError(
                        f"operator {op.name!r} reads {use.tensor!r} before any operator produces it "
                        "(operators must be in topological order)"
                    )
                readers = self._consumers.setdefault(use.tensor, [])
                if not readers or readers[-1] != op.name:  # an operator reading it twice is one consumer
                    readers.append(op.name)
            for use in op.params:
                if self.tensors[use.tensor].role not in (TensorRole.PARAMETER, TensorRole.CONSTANT):
                    raise InvalidInputError(
                        f"operator {op.name!r} lists {use.tensor!r} as a parameter but its role is "
                        f"{self.tensors[use.tensor].role.value}"
                    )
            for use in op.outputs:
                if use.tensor in self._producer:
                    raise InvalidInputError(
                        f"tensor {use.tensor!r} is produced by both {self._producer[use.tensor]!r} and {op.name!r}"
                    )
                self._producer[use.tensor] = op.name
        if outputs is None:
            read = {u.tensor for op in self.operators for u in op.inputs}
            aux = {t for op in self.operators for t in op.aux_outputs}
            outputs = [t for t in self._producer if t not in read and t not in aux]
        self.outputs: tuple[str, ...] = tuple(outputs)
        for t in self.outputs:
            if t not in self._producer:
                raise InvalidInputError(f"graph {name!r} declares output {t!r} that no operator produces")

    @classmethod
    def check_uses(cls, op: Operator, tensors) -> None:
        """Every tensor ``op`` uses exists in ``tensors`` and its loop dims give the tensor's extents."""
        for use in op.uses():
            spec = tensors.get(use.tensor)
            if spec is None:
                raise InvalidInputError(f"operator {op.name!r} uses undefined tensor {use.tensor!r}")
            cls._check_extent(op, use, spec)

    @staticmethod
    def _check_extent(op: Operator, use: TensorUse, spec: TensorSpec):
        if len(use.dims) != len(spec.shape):
            raise InvalidInputError(
                f"operator {op.name!r} indexes {spec} with {len(use.dims)} dimensions, tensor has {len(spec.shape)}"
            )
        for axis, (group, extent) in enumerate(zip(use.dims, spec.shape)):
            size = math.prod(op.loop_dim(d).size for d in group)
            if size != extent:
                raise InvalidInputError(
                    f"operator {op.name!r}: dimension {axis} of {spec} is {extent} but loop dims {group} give {size}"
                )

    # --- queries -------------------------------------------------------------------------------
    def operator(self, name: str) -> Operator:
        return self.operators[self._index[name]]

    def index(self, name: str) -> int:
        """Position of operator ``name`` in topological order."""
        return self._index[name]

    def producer(self, tensor: str) -> str | None:
        """Name of the operator producing ``tensor`` (None for parameters and constants)."""
        return self._producer.get(tensor)

    def edges(self) -> tuple[tuple[str, str, str], ...]:
        """``(producer, consumer, tensor)`` for every activation an operator reads, in topological order."""
        out = []
        for op in self.operators:
            for use in op.inputs:
                out.append((self._producer[use.tensor], op.name, use.tensor))
        return tuple(out)

    def consumers(self, tensor: str) -> tuple[str, ...]:
        """Names of the operators reading ``tensor`` as an input, in topological order."""
        return tuple(self._consumers.get(tensor, ()))

    @property
    def parameters(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.tensors.values() if t.role is TensorRole.PARAMETER)

    @property
    def num_parameters(self) -> int:
        """Number of trained parameters (elements)."""
        return sum(t.numel for t in self.parameters)

    @property
    def parameter_bytes(self) -> int:
        """Bytes of the trained parameters (weights only: no gradients or optimizer state)."""
        return sum(t.nbytes for t in self.parameters)

    @property
    def flops(self) -> float:
        """Forward + backward FLOPs of one iteration."""
        return sum(op.flops + op.backward_flops for op in self.operators)

    def parameter_users(self) -> dict[str, tuple[str, ...]]:
        """Parameter name -> names of the operators reading it (shared weights have several)."""
        users: dict[str, list[str]] = {t.name: [] for t in self.parameters}
        for op in self.operators:
            for u in op.params:
                if u.tensor in users and op.name not in users[u.tensor]:
                    users[u.tensor].append(op.name)
        return {k: tuple(v) for k, v in users.items()}

    @property
    def saved_bytes(self) -> int:
        """Bytes of the distinct tensors kept from forward to backward (each tensor counted once)."""
        names = {t for op in self.operators for t in op.saved}
        return sum(self.tensors[t].nbytes for t in names if self.tensors[t].role
                   not in (TensorRole.PARAMETER, TensorRole.CONSTANT))

    def memory_estimate(self, optimizer_factor: float = 2.0, gradient_factor: float = 1.0) -> float:
        """Single-device peak memory estimate in bytes.

        ``parameter_bytes * (1 + gradient_factor + optimizer_factor) + saved_bytes`` plus the
        constant buffers: Adam in fp32 keeps two states per weight (``optimizer_factor=2``).
        Temporary workspace and the gradients of activations in flight are ignored.
        """
        const = sum(t.nbytes for t in self.tensors.values() if t.role is TensorRole.CONSTANT)
        return self.parameter_bytes * (1.0 + gradient_factor + optimizer_factor) + self.saved_bytes + const

    def kinds(self) -> dict[str, int]:
        """Operator count per :class:`OpKind` value."""
        out: dict[str, int] = {}
        for op in self.operators:
            out[op.kind.value] = out.get(op.kind.value, 0) + 1
        return out

    def fingerprint(self) -> str:
        """A short hash of the operators and tensors (names, loop dims, shapes, dtypes, roles).

        A Plan records it, so the executor can refuse a plan made for another model.
        """
        import hashlib

        h = hashlib.sha256()
        for op in self.operators:
            h.update(f"{op.name}|{op.kind.value}|{[(d.name, d.size) for d in op.loop_dims]}".encode())
        for t in sorted(self.tensors.values(), key=lambda t: t.name):
            h.update(f"{t.name}|{t.shape}|{t.dtype}|{t.role.value}".encode())
        return h.hexdigest()[:16]

    def summary(self, max_ops: int | None = 20) -> str:
        """A human-readable table: one line per operator (the first ``max_ops``) and totals.

        Examples
        --------
        >>> from tensoropt_py.graph import zoo
        >>> print(zoo.mlp(batch=4, sizes=(8, 4)).summary(max_ops=2))  # doctest: +ELLIPSIS
        graph mlp: 3 operators, 36 parameters ...
        """
        lines = [
            f"graph {self.name}: {len(self.operators)} operators, {self.num_parameters:,} parameters "
            f"({self.parameter_bytes / 2**30:.3g} GiB), {self.flops:.3g} FLOPs/iteration, "
            f"saved activations {self.saved_bytes / 2**30:.3g} GiB"
        ]
        ops = self.operators if max_ops is None else self.operators[:max_ops]
        for op in ops:
            outs = ", ".join(str(self.tensors[u.tensor]) for u in op.outputs[:1])
            lines.append(f"  {op}  -> {outs}  fwd {op.flops:.3g} bwd {op.backward_flops:.3g}")
        if len(ops) < len(self.operators):
            lines.append(f"  ... {len(self.operators) - len(ops)} more")
        return "\n".join(lines)

    def __len__(self):
        return len(self.operators)

    def __iter__(self):
        return iter(self.operators)

    def __repr__(self):
        return (
            f"Graph({self.name!r}, operators={len(self.operators)}, tensors={len(self.tensors)}, "
            f"parameters={self.num_parameters:,})"
        )

    __str__ = __repr__
