"""SOYBEAN's own tiling model (SOYBEAN paper §4): per-matrix tilings, Eq. 2-3, the one-cut and k-cut DPs.

SOYBEAN parallelizes the *dataflow graph of training*: every matrix of the forward and the
backward pass (``X, W, Y, dY, dX, dW`` of every layer) has its own tiling, and every matrix
multiplication chooses, cut by cut, one of three *aligned* layouts. Communication is the
only cost, counted in elements. This module implements that model as the paper states it;
:func:`decode_choices` maps its result onto this library's operator configurations so that
the plan is costed by our model and run by our executor (see "Mapping" below).

Tilings (§4.1)
--------------
A matrix of rank ``d`` has the basic tilings ``T^1 = {P_0, ..., P_{d-1}, r}`` (§4.5): halve
dimension ``j`` or replicate. For matrices ``P_0 = R`` (rows) and ``P_1 = C`` (columns).
Codes: ``j >= 0`` for ``P_j``, :data:`REP` (``-1``) for ``r`` and :data:`RED` (``-2``) for the
``red`` output of an aligned multiplication (full-size partial sums). A k-cut tiling
(Def. 1) is a sequence of k basic tilings, the outermost cut first; ``"rR"`` replicates
across the two halves of the devices and splits rows inside each half. Only even tilings
exist: a dimension split ``c`` times must divide by ``2**c``. Composition commutes as a
*set of tiles* (Thm 2, :func:`flatten`: ``RC`` and ``CR`` are both ``R^1 C^1``); costs are
computed cut by cut, so a tiling is kept as its sequence.

Conversion cost (§4.2.1)
------------------------
``c(t1 -> t2)`` is the "ghost area": what a device needs for its local multiplication
minus what it holds, summed over the two devices (or groups), as a fraction of the
converted matrix (:func:`conversion_fraction`, values derived from the ghost-area rule):
same -> same 0; ``P_a -> P_b`` 1/2; ``P_a -> r`` 1; ``r -> anything`` 0;
``red -> P_a`` 1 (reduce-scatter); ``red -> r`` 2 (all-reduce).

Operators
---------
* :class:`MatMul` ``Z = op(X) op(Y)`` (``op`` an optional transpose, which swaps ``R`` and
  ``C`` of the stored tiling). Eq. 2: the minimum over the aligned layouts
  ``A1: X R, Y r -> Z R``, ``A2: X r, Y C -> Z C``, ``A3: X C, Y R -> Z red`` of the
  conversions of X, Y into the layout and of the result into Z's tiling, each scaled by
  the size of the matrix converted.
* :class:`Contraction`: a multiplication of N-D tensors with a table of aligned layouts;
  a convolution (§4.5) splits the batch, the output channels or the input channels
  (``red``), never the image or kernel (:func:`conv_layouts`).
* :class:`Elementwise` (§4.5): aligned only when every input and output has one common
  tiling, and all-replicated is banned (redundant computation).
* :class:`BatchOnly` (§4.5, "all other operators"): only the batch is split: batched
  tensors ``P_0``, tensors without the batch dimension (parameters) replicated and their
  gradients ``red``.
* :class:`Update` ``W -= lr * dW``: the paper has no formula for the weight update; here
  it is local on ``W``'s tiles, so ``dW`` is converted into ``W``'s tiling
  (``c(t_dW -> t_W) |dW|``). ``dW`` keeps a tiling of its own, and data parallelism's
  gradient all-reduce appears as ``red -> r`` wherever it is cheapest.

One cut (§4.2.2, Eq. 3-5)
-------------------------
:func:`one_cut` minimises the sum of operator costs over tilings in ``T^1``. Operators are
ordered by a breadth-first search of the undirected graph ``G'`` (operators linked when
they share a matrix: the paper leaves ``G'``'s nodes unspecified) and the DP of Eq. 4-5 runs
over them one at a time: its state is the tiling of every matrix touched so far and still
used later (the paper's ``tau_l``). Exhaustive over states, hence exact (tests check it
against brute force). The states grow exponentially with the number of live tensors
(§4.2.2's worst case): when a greedy operator order needs fewer states than the BFS order
it is used instead, and a graph needing more than :data:`MAX_STATES` states is refused
(a one-layer transformer block: about 9e8).

k cuts (§4.3, Algorithm 1, Thm 1)
---------------------------------
:func:`k_cuts` applies :func:`one_cut` to the *tile graph*: after a cut, every matrix
shrinks to one tile of its own tiling (``ConstructTileGraph``, undefined in the paper:
here a matrix's size is its stored tile, ``|M| / 2**(non-replicated cuts so far)``, and
each operator's loop extents shrink with the aligned layout it chose, which only decides
which later layouts stay even). The cost is Thm 1's ``c_k = sum_i 2**(i-1) delta_i`` with
``delta_1`` the outermost cut. :func:`tiling_cost` evaluates any k-cut tiling the same way
and :func:`exact_k_cuts` minimises it jointly over ``T^k`` (the oracle for Algorithm 1).

Findings, stated precisely (tests check each)
---------------------------------------------
* The recursion counts a conversion at cut ``i`` once per group of cut ``i`` on the group's
  tile. Reordering the cuts of a tiling (the same permutation for every tensor: §4.4's
  "the order of the tiling applied will not influence the total communication cost")
  leaves ``c_k`` unchanged for tilings without replication (every conversion then moves
  the same fraction of the whole tensor at whichever cut). It does not hold in general: a gradient ``G`` stored ``Rr`` and updated into a weight stored ``rr`` costs
  ``|G|`` (the outer groups swap halves, the inner copy is free); the same tiling with its
  cuts swapped, ``rR -> rr``, costs ``2|G|``; the ghost area of both on 4 devices is
  ``2|G|`` (each device fetches half). The recursion undercounts the first.
* Algorithm 1 is greedy: each cut minimises its own ``delta``. On small graphs it matches
  the joint optimum (:func:`exact_k_cuts`) in most cases but not always: the outer cut's
  optimum need not be unique, and which optimum OneCut returns decides the tile sizes the
  inner cuts convert (a replicated tensor keeps its whole size). Four layers of 16 units,
  batch 12, 4 devices: 2112 elements against the joint 1920 (the §2.2 "batch 300, width
  400" shape with 5 layers: 1.92e6 against 1.68e6).
* The §2.2 arithmetic (``n x 2 x size``) is not the tiling model's: data parallelism with
  replicated gradients costs ``2 (n - 1) |W|`` per layer on 4 devices
  (:func:`section_2_2_traffic` reproduces the paper's numbers; the tests compare both). On
  more cuts the cheapest aligned layout of ``dW`` changes once the batch tiles are small
  (gathering them beats reducing ``W``): §2.2's MLP on 16 devices costs 9.9e6 elements,
  not ``2 x 15 x 5 x 90000 = 1.35e7``.

Mapping onto this library's configurations
------------------------------------------
Our operator configuration (:mod:`tensoropt_py.space.configs`) splits one loop dimension
of a layer per fine mesh axis, for the forward and both backward matmuls at once, and a
gradient's layout is tied to its tensor's. SOYBEAN chooses the aligned layouts of a
linear layer's forward, ``dX`` and ``dW`` matmuls independently. Cut ``i`` maps to fine axis
``i`` (outermost first, as §5.1 places the first cut across the slowest links). Per layer
and cut, each matmul's aligned layout names the loop dimension it splits:

===========  =======================  =================  =================
matmul       A1                       A2                 A3
===========  =======================  =================  =================
forward      batch ``b``              output ``o``       input ``i``
dX           batch ``b``              input ``i``        output ``o``
dW           output ``o``             input ``i``        batch ``b``
===========  =======================  =================  =================

The three agree exactly for (A1, A1, A3) -> ``b``, (A2, A3, A2) -> ``o`` and (A3, A2, A1) ->
``i``; a convolution maps the same way (output channels for ``o``, input channels for
``i``). Any other combination (e.g. ``dX`` replicated while ``X`` is column-split, so that
``dX`` uses A1 while the forward uses A3) has no configuration. **Rule:** the dimension
named by at least two of the three matmuls, else the forward matmul's. An element-wise
operator takes its forward tiling (its backward's may differ: the same rule with two
voters), a batch-only operator (loss, convolution, pooling...) splits its sample
dimension, data loading stays data parallel (our space's only configuration for it: an
input SOYBEAN replicates for free is all-gathered on our edge after data loading, at a
cost our model charges), and
biases (vectors, not in SOYBEAN's matrix model) follow their layer. Where a rule overrides
SOYBEAN's choice, and where the decoded configuration was pruned from the cost graph (the
kept one agreeing on the most fine axes replaces it), :func:`decode_choices` says so in
its notes.

Examples
--------
The paper's §4.1 data-parallel tiling of one layer on two devices costs the gradient
all-reduce, ``2 |W|``:

>>> g = mlp_graph(batch=400, sizes=(300, 300))
>>> t = {m: ("r" if m.startswith(("W", "dW")) else "R") for m in g.matrix_names}
>>> tiling_cost(g, t)
180000.0
>>> r = one_cut(g)  # the input replicated (free: nothing produces it), W column-split
>>> r.cost, r.text("X0"), r.text("W1"), r.text("dW1")
(0.0, 'r', 'C', 'C')
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import InvalidInputError
from ..units import parse_count

__all__ = ["REP", "RED", "GRAD", "MatMul", "Contraction", "conv_layouts", "Elementwise", "BatchOnly", "Update", "TilingGraph", "CutResult",
           "conversion_fraction", "parse_tiling", "format_tiling", "flatten", "matmul_cost", "op_cost",
           "one_cut", "k_cuts", "exact_k_cuts", "brute_force", "tiling_cost", "tile_graph_sizes",
           "reorder_cuts", "mlp_graph", "graph_from_model", "decode_choices", "section_2_2_traffic",
           "ALIGNED"]

REP = -1
RED = -2
#: Prefix of a gradient's name in :func:`graph_from_model` (``"grad:fc0.weight"``).
GRAD = "grad:"
#: The aligned layouts of a multiplication (§4.2.1, Fig. 6): name -> (X, Y, Z) basic tilings
#: and the loop extent it halves (0: m, 1: k, 2: n).
ALIGNED = {"A1": (0, REP, 0, 0), "A2": (REP, 1, 1, 2), "A3": (1, 0, RED, 1)}

_LETTERS_2D = {"R": 0, "C": 1, "r": REP}


# ----------------------------------------------------------------------------------------------
# tilings
# ----------------------------------------------------------------------------------------------
def _code_str(c: int, rank: int) -> str:
    if c == REP:
        return "r"
    if c == RED:
        return "red"
    if rank == 2:
        return "RC"[c]
    return f"P{c}"


def format_tiling(seq, rank: int = 2) -> str:
    """A tiling sequence as text: ``(0, -1) -> "Rr"`` for matrices, ``"P2.r"`` for other ranks.

    >>> format_tiling((REP, 0)), format_tiling((2, REP), rank=3)
    ('rR', 'P2.r')
    """
    parts = [_code_str(int(c), rank) for c in seq]
    return "".join(parts) if rank == 2 else ".".join(parts)


def parse_tiling(text, rank: int = 2) -> tuple[int, ...]:
    """Inverse of :func:`format_tiling`; also accepts a sequence of codes.

    >>> parse_tiling("rR"), parse_tiling("P0.r", rank=3), parse_tiling((0, 1))
    ((-1, 0), (0, -1), (0, 1))
    """
    if isinstance(text, str):
        if rank == 2 and "." not in text:
            bad = [ch for ch in text if ch not in _LETTERS_2D]
            if bad:
                raise InvalidInputError(f"tiling {text!r}: unknown letter(s) {bad}; use R, C or r")
            return tuple(_LETTERS_2D[ch] for ch in text)
        out = []
        for part in filter(None, text.split(".")):
            if part == "r":
                out.append(REP)
            elif part.startswith("P") and part[1:].isdigit() and int(part[1:]) < rank:
                out.append(int(part[1:]))
            else:
                raise InvalidInputError(f"tiling {text!r}: bad part {part!r}; use P0..P{rank - 1} or r")
        return tuple(out)
    seq = tuple(int(c) for c in text)
    for c in seq:
        if not (c == REP or 0 <= c < rank):
            raise InvalidInputError(f"tiling {seq!r}: code {c} is not a basic tiling of a rank-{rank} tensor")
    return seq


def flatten(seq) -> dict:
    """Thm 2: a k-cut tiling as counts per basic tiling (cut order forgotten).

    >>> flatten((0, 1)) == flatten((1, 0)) == {0: 1, 1: 1}
    True
    """
    out: dict = {}
    for c in seq:
        out[int(c)] = out.get(int(c), 0) + 1
    return out


def conversion_fraction(src: int, dst: int) -> float:
    """One-cut conversion cost ``c(src -> dst)`` as a fraction of the converted matrix.

    Ghost area summed over the two devices: needing the other half of a ``P_a`` tile in
    ``P_b`` layout costs a quarter per device; becoming ``r`` from half costs a half per
    device; reducing ``red`` partial sums costs one half (``P_a``) or one whole (``r``) per
    device.

    >>> [conversion_fraction(*p) for p in [(0, 0), (0, 1), (0, REP), (REP, 1), (RED, 0), (RED, REP)]]
    [0.0, 0.5, 1.0, 0.0, 1.0, 2.0]
    """
    if dst == RED:
        raise InvalidInputError("no conversion produces red partial sums; red is only an aligned output")
    if src == dst:
        return 0.0
    if src == RED:
        return 2.0 if dst == REP else 1.0
    if src == REP:
        return 0.0
    if dst == REP:
        return 1.0
    return 0.5


def _transpose(c: int) -> int:
    return 1 - c if c in (0, 1) else c


# ----------------------------------------------------------------------------------------------
# graph
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MatMul:
    """``z = op(x) @ op(y)`` with ``op`` a transpose where ``x_t`` / ``y_t`` is set (rank-2 matrices)."""

    name: str
    x: str
    y: str
    z: str
    x_t: bool = False
    y_t: bool = False

    @property
    def matrices(self) -> tuple[str, ...]:
        return (self.x, self.y, self.z)


@dataclass(frozen=True, slots=True)
class Contraction:
    """A multiplication of N-D tensors with its own aligned layouts (§4.5's convolution).

    ``layouts`` lists the aligned layouts as ``(name, x, y, z, extent)``: the basic tilings
    ``x``, ``y`` need, the tiling ``z`` comes out in (:data:`RED` for partial sums) and the
    index in ``extents`` of the loop extent the layout halves. A convolution ``y = conv(x,
    w)`` (``x [b, ci, ...]``, ``w [co, ci, ...]``, ``y [b, co, ...]``) has the batch split
    ``(x P0, w r -> y P0)``, the output-channel split ``(x r, w P0 -> y P1)`` and the
    input-channel split ``(x P1, w P1 -> y red)``: :func:`conv_layouts`.
    """

    name: str
    x: str
    y: str
    z: str
    layouts: tuple
    extents: tuple

    @property
    def matrices(self) -> tuple[str, ...]:
        return (self.x, self.y, self.z)


def conv_layouts(role: str) -> tuple:
    """Aligned layouts of a convolution's ``"fwd"``, ``"dX"`` or ``"dW"`` multiplication (§4.5).

    Extents are ``(b, co, ci)``. Forward ``y = conv(x, w)``: batch, output channels, input
    channels (``red``). ``dx = conv^T(dy, w)``: batch, input channels, output channels
    (``red``). ``dw = corr(dy, x)`` (operands ``dy``, ``x``): output channels, input channels,
    batch (``red``), the same pattern as a linear layer's three matmuls.

    >>> [name for name, *_ in conv_layouts("dW")]
    ['A1', 'A2', 'A3']
    """
    table = {"fwd": (("A1", 0, REP, 0, 0), ("A2", REP, 0, 1, 1), ("A3", 1, 1, RED, 2)),
             "dX": (("A1", 0, REP, 0, 0), ("A2", REP, 1, 1, 2), ("A3", 1, 0, RED, 1)),
             "dW": (("A1", 1, REP, 0, 1), ("A2", REP, 1, 1, 2), ("A3", 0, 0, RED, 0))}
    if role not in table:
        raise InvalidInputError(f"convolution role must be 'fwd', 'dX' or 'dW', got {role!r}")
    return table[role]


@dataclass(frozen=True, slots=True)
class Elementwise:
    """Element-wise operator: aligned when all inputs and outputs share one non-``r`` tiling."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def matrices(self) -> tuple[str, ...]:
        return tuple(self.inputs) + tuple(self.outputs)


@dataclass(frozen=True, slots=True)
class BatchOnly:
    """Any other operator (§4.5), forward and backward: only the batch (dimension 0) is split.

    Aligned layout: every ``inputs`` / ``outputs`` tensor ``P_0``; every ``params`` tensor
    (read, without the batch dimension: parameters, broadcast operands) replicated; every
    ``grads`` tensor (written, without the batch dimension: parameter gradients, sums over
    the batch) ``red`` partial sums. This is data parallelism of the operator. ``inputs`` /
    ``outputs`` include the backward's (output gradients in, input gradients out). With no
    ``inputs`` or ``outputs`` (no batch dimension), the aligned layout replicates
    everything and the ``grads`` come out whole.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[str, ...] = ()
    grads: tuple[str, ...] = ()

    @property
    def matrices(self) -> tuple[str, ...]:
        return tuple(self.inputs) + tuple(self.outputs) + tuple(self.params) + tuple(self.grads)


@dataclass(frozen=True, slots=True)
class Update:
    """The weight update ``weight -= lr * grad``, local on ``weight``'s tiles."""

    name: str
    grad: str
    weight: str

    @property
    def matrices(self) -> tuple[str, ...]:
        return (self.grad, self.weight)


def _extents(op, shapes) -> tuple[int, ...]:
    """Loop extents of ``op`` at the root: (m, k, n) of a matmul, the tensor shape otherwise."""
    if isinstance(op, MatMul):
        xs, ys = shapes[op.x], shapes[op.y]
        m, k = (xs[1], xs[0]) if op.x_t else xs
        n = ys[0] if op.y_t else ys[1]
        return (m, k, n)
    if isinstance(op, Contraction):
        return tuple(op.extents)
    if isinstance(op, Update):
        return tuple(shapes[op.weight])
    if isinstance(op, BatchOnly):
        acts = tuple(op.inputs) + tuple(op.outputs)
        return (shapes[acts[0]][0],) if acts else ()
    return tuple(shapes[op.matrices[0]])


@dataclass(frozen=True, slots=True)
class TilingGraph:
    """SOYBEAN's dataflow graph: named tensors (usually matrices) and the operators on them.

    Parameters
    ----------
    matrices : tuple of (name, shape)
    ops : tuple of MatMul, Elementwise, BatchOnly or Update

    Examples
    --------
    >>> g = TilingGraph((("X", (4, 6)), ("W", (6, 2)), ("Y", (4, 2))), (MatMul("fwd", "X", "W", "Y"),))
    >>> g.shape("W"), g.matrix_names
    ((6, 2), ('X', 'W', 'Y'))
    >>> TilingGraph((("X", (4, 6)),), (MatMul("fwd", "X", "W", "Y"),))
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: operator 'fwd' uses unknown tensor(s) ['W', 'Y']
    """

    matrices: tuple
    ops: tuple
    _shapes: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        shapes: dict = {}
        for item in self.matrices:
            name, shape = item
            shape = tuple(int(s) for s in shape)
            if name in shapes:
                raise InvalidInputError(f"tensor {name!r} is declared twice")
            if not shape or any(s < 1 for s in shape):
                raise InvalidInputError(f"tensor {name!r} has shape {shape}; need at least one positive dimension")
            shapes[name] = shape
        object.__setattr__(self, "matrices", tuple((n, s) for n, s in shapes.items()))
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "_shapes", shapes)
        names = set()
        for op in self.ops:
            if not isinstance(op, (MatMul, Contraction, Elementwise, BatchOnly, Update)):
                raise InvalidInputError(f"unknown SOYBEAN operator {op!r}")
            if op.name in names:
                raise InvalidInputError(f"operator {op.name!r} is declared twice")
            names.add(op.name)
            unknown = [m for m in op.matrices if m not in shapes]
            if unknown:
                raise InvalidInputError(f"operator {op.name!r} uses unknown tensor(s) {unknown}")
            if isinstance(op, MatMul):
                for m in op.matrices:
                    if len(shapes[m]) != 2:
                        raise InvalidInputError(f"matmul {op.name!r}: {m!r} has shape {shapes[m]}, not a matrix")
                m_, k, n = _extents(op, shapes)
                ky = shapes[op.y][1] if op.y_t else shapes[op.y][0]
                if ky != k or shapes[op.z] != (m_, n):
                    raise InvalidInputError(f"matmul {op.name!r}: shapes {shapes[op.x]}{'T' if op.x_t else ''} x "
                                            f"{shapes[op.y]}{'T' if op.y_t else ''} -> {shapes[op.z]} do not match")
            elif isinstance(op, Contraction):
                for name, *codes, ext in op.layouts:
                    bad = [(m, c) for m, c in zip(op.matrices, codes)
                           if not (c == REP or (c == RED and m == op.z) or 0 <= c < len(shapes[m]))]
                    if bad or not 0 <= ext < len(op.extents):
                        raise InvalidInputError(f"contraction {op.name!r}: aligned layout {name!r} has bad tilings "
                                                f"{bad} or extent {ext}")
            elif isinstance(op, BatchOnly):
                batch = {m: shapes[m][0] for m in tuple(op.inputs) + tuple(op.outputs)}
                if len(set(batch.values())) > 1:
                    raise InvalidInputError(f"batch-only operator {op.name!r}: tensors differ in batch size {batch}")
            else:
                ref = shapes[op.matrices[0]]
                bad = [m for m in op.matrices if shapes[m] != ref]
                if bad:
                    raise InvalidInputError(f"operator {op.name!r}: tensors {bad} differ in shape from "
                                            f"{op.matrices[0]!r} {ref}")

    @property
    def matrix_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.matrices)

    def shape(self, name: str) -> tuple[int, ...]:
        try:
            return self._shapes[name]
        except KeyError:
            raise InvalidInputError(f"unknown tensor {name!r}") from None

    def size(self, name: str) -> int:
        return math.prod(self.shape(name))


# ----------------------------------------------------------------------------------------------
# costs
# ----------------------------------------------------------------------------------------------
def _even_letters(shape) -> tuple[int, ...]:
    """Basic tilings valid for a tile of ``shape`` (a split dimension must be even)."""
    return tuple(j for j, s in enumerate(shape) if s % 2 == 0) + (REP,)


def matmul_cost(tx: int, ty: int, tz: int, sizes, *, x_t=False, y_t=False, allowed=("A1", "A2", "A3")):
    """Eq. 2 for one cut: ``(cost in elements, aligned layout name)``.

    Parameters
    ----------
    tx, ty, tz : int
        Stored basic tilings of X, Y, Z.
    sizes : (|X|, |Y|, |Z|)
        Elements of the (tiles of the) matrices converted.
    x_t, y_t : bool
        The matmul reads X (Y) transposed: its ``R`` is X's ``C``.
    allowed : iterable of str
        Aligned layouts to consider (those keeping the loop extents even).

    Examples
    --------
    Notes §3 T2 (X 400x300, W 300x200, Y 400x200): ``C x R -> R`` costs ``|Z|``:

    >>> matmul_cost(1, 0, 0, (120000, 60000, 80000))
    (80000.0, 'A3')
    """
    best, name = math.inf, None
    for a in ("A1", "A2", "A3"):
        if a not in allowed:
            continue
        nx, ny, nz, _ = ALIGNED[a]
        nx = _transpose(nx) if x_t else nx
        ny = _transpose(ny) if y_t else ny
        c = (conversion_fraction(tx, nx) * sizes[0] + conversion_fraction(ty, ny) * sizes[1]
             + conversion_fraction(nz, tz) * sizes[2])
        if c < best:
            best, name = c, a
    return best, name


def op_cost(op, letters: Mapping, sizes: Mapping, extents):
    """One-cut cost of ``op`` given the basic tiling of each of its tensors: ``(elements, aligned)``.

    ``sizes`` maps tensor -> elements of its current tile; ``extents`` are the operator's
    current loop extents (an aligned layout must halve an even extent). ``aligned`` is
    ``"A1".."A3"`` for a matmul, the common basic tiling of an element-wise or batch-only
    operator, None for an update. ``(inf, None)`` when no aligned layout is allowed.

    >>> op = Elementwise("relu", ("Y",), ("X",))
    >>> op_cost(op, {"Y": 0, "X": REP}, {"Y": 8, "X": 8}, (4, 2))   # R -> aligned R -> r
    (8.0, 0)
    """
    best, name = math.inf, None
    for a in _aligned_options(op, extents):
        c = _cost_fixed(op, letters, sizes, a)
        if c < best:
            best, name = c, a
    return best, name


# ----------------------------------------------------------------------------------------------
# the tile graph and the cost of a k-cut tiling (Thm 1)
# ----------------------------------------------------------------------------------------------
def _halve(shape, letter):
    if letter < 0:
        return shape
    return tuple(s // 2 if j == letter else s for j, s in enumerate(shape))


def _op_halve(op, extents, aligned):
    if isinstance(op, MatMul):
        return _halve(extents, ALIGNED[aligned][3])
    if isinstance(op, Contraction):
        return _halve(extents, {name: ext for name, *_, ext in op.layouts}[aligned])
    if isinstance(op, Update):
        return extents
    return _halve(extents, aligned)


def tile_graph_sizes(graph: TilingGraph, tilings: Mapping, cuts: int) -> dict:
    """``ConstructTileGraph`` after ``cuts`` cuts: tensor -> shape of its stored tile.

    >>> g = TilingGraph((("W", (8, 4)),), ())
    >>> tile_graph_sizes(g, {"W": "rR"}, 2), tile_graph_sizes(g, {"W": "Rr"}, 1)
    ({'W': (4, 4)}, {'W': (4, 4)})
    """
    out = {}
    for name, shape in graph.matrices:
        seq = parse_tiling(tilings[name], len(shape))
        for c in seq[:cuts]:
            shape = _halve(shape, c)
        out[name] = shape
    return out


def _norm_tilings(graph, tilings, k=None):
    out = {}
    for name, shape in graph.matrices:
        if name not in tilings:
            raise InvalidInputError(f"tiling lacks tensor {name!r}")
        seq = parse_tiling(tilings[name], len(shape))
        if k is None:
            k = len(seq)
        if len(seq) != k:
            raise InvalidInputError(f"tensor {name!r} has a {len(seq)}-cut tiling, expected {k} cuts")
        cur = shape
        for c in seq:
            if c >= 0 and cur[c] % 2:
                raise InvalidInputError(f"tiling {format_tiling(seq, len(shape))} of {name!r} {shape} is uneven")
            cur = _halve(cur, c)
        out[name] = seq
    return out, (k or 0)


def _op_cost_k(op, graph, seqs, k):
    """Thm 1 cost of one operator under full k-cut tilings: min over aligned sequences."""
    extents0 = _extents(op, graph._shapes)
    shapes = {m: graph.shape(m) for m in op.matrices}
    tiles = []  # per cut, tile sizes
    for i in range(k):
        tiles.append({m: math.prod(s) for m, s in shapes.items()})
        shapes = {m: _halve(s, seqs[m][i]) for m, s in shapes.items()}
    best = (math.inf, None)

    def rec(i, extents, acc, chosen):
        nonlocal best
        if acc >= best[0]:
            return
        if i == k:
            best = (acc, tuple(chosen))
            return
        letters = {m: seqs[m][i] for m in op.matrices}
        options = _aligned_options(op, extents)
        for a in options:
            c = _cost_fixed(op, letters, tiles[i], a)
            if math.isfinite(c):
                rec(i + 1, _op_halve(op, extents, a), acc + (2 ** i) * c, chosen + [a])

    rec(0, extents0, 0.0, [])
    return best


def _aligned_options(op, extents):
    if isinstance(op, MatMul):
        return [a for a in ALIGNED if extents[ALIGNED[a][3]] % 2 == 0]
    if isinstance(op, Contraction):
        return [name for name, *_, ext in op.layouts if extents[ext] % 2 == 0]
    if isinstance(op, Update):
        return [None]
    if isinstance(op, BatchOnly):
        if not extents:
            return [REP]
        return [0] if extents[0] % 2 == 0 else []
    return [j for j, s in enumerate(extents) if s % 2 == 0]


def _cost_fixed(op, letters, sizes, aligned):
    if isinstance(op, MatMul):
        c, _ = matmul_cost(letters[op.x], letters[op.y], letters[op.z], (sizes[op.x], sizes[op.y], sizes[op.z]),
                           x_t=op.x_t, y_t=op.y_t, allowed=(aligned,))
        return c
    if isinstance(op, Contraction):
        _, nx, ny, nz, _ = [lay for lay in op.layouts if lay[0] == aligned][0]
        return (conversion_fraction(letters[op.x], nx) * sizes[op.x] + conversion_fraction(letters[op.y], ny)
                * sizes[op.y] + conversion_fraction(nz, letters[op.z]) * sizes[op.z])
    if isinstance(op, Update):
        return conversion_fraction(letters[op.grad], letters[op.weight]) * sizes[op.grad]
    c = sum(conversion_fraction(letters[m], aligned) * sizes[m] for m in op.inputs)
    c += sum(conversion_fraction(aligned, letters[m]) * sizes[m] for m in op.outputs)
    if isinstance(op, BatchOnly):
        c += sum(conversion_fraction(letters[m], REP) * sizes[m] for m in op.params)
        c += sum(conversion_fraction(RED if aligned != REP else REP, letters[m]) * sizes[m] for m in op.grads)
    return c


def tiling_cost(graph: TilingGraph, tilings: Mapping) -> float:
    """Thm 1 communication (elements) of a k-cut graph tiling: ``sum_i 2**(i-1) delta_i``.

    ``delta_i`` is the one-cut cost (Eq. 3) of cut ``i`` (outermost first) on the tile graph of
    cuts ``1..i-1``; each operator uses its cheapest aligned layouts (joint over the cuts
    only through evenness).

    Parameters
    ----------
    graph : TilingGraph
    tilings : mapping tensor -> tiling
        ``"rR"``-style text or a sequence of codes; every tensor, all with the same k.

    Examples
    --------
    Notes §3 T1 / T2 on two devices (X 400x300, W 300x200, Y 400x200):

    >>> g = TilingGraph((("X", (400, 300)), ("W", (300, 200)), ("Y", (400, 200))), (MatMul("fwd", "X", "W", "Y"),))
    >>> tiling_cost(g, {"X": "R", "W": "r", "Y": "R"}), tiling_cost(g, {"X": "C", "W": "R", "Y": "r"})
    (0.0, 160000.0)
    """
    seqs, k = _norm_tilings(graph, tilings)
    return float(sum(_op_cost_k(op, graph, seqs, k)[0] for op in graph.ops))


def reorder_cuts(tilings: Mapping, perm) -> dict:
    """The same tiling with its cuts permuted: new cut ``i`` is old cut ``perm[i]``.

    >>> reorder_cuts({"W": "rR"}, (1, 0))
    {'W': (0, -1)}
    """
    out = {}
    for name, t in tilings.items():
        seq = parse_tiling(t, 2) if isinstance(t, str) else tuple(t)
        if sorted(perm) != list(range(len(seq))):
            raise InvalidInputError(f"{perm!r} is not a permutation of the {len(seq)} cuts of {name!r}")
        out[name] = tuple(seq[p] for p in perm)
    return out


# ----------------------------------------------------------------------------------------------
# searches
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CutResult:
    """A graph tiling and its communication.

    Attributes
    ----------
    tilings : dict
        Tensor -> tiling sequence (codes, outermost cut first).
    aligned : dict
        Operator -> per cut, its aligned layout (``"A1".."A3"``, a basic tiling, or None for
        an update).
    cost : float
        Thm 1 total in elements.
    deltas : tuple of float
        Per cut (outermost first), the one-cut cost ``delta_i`` on its tile graph.
    """

    tilings: dict
    aligned: dict
    cost: float
    deltas: tuple = ()

    def text(self, name: str, rank: int = 2) -> str:
        """The tiling of ``name`` as text (``"rR"``)."""
        return format_tiling(self.tilings[name], rank)


def _bfs_order(graph: TilingGraph) -> list:
    """Operators in breadth-first order of ``G'`` (operators linked when sharing a tensor)."""
    users: dict = {}
    for i, op in enumerate(graph.ops):
        for m in op.matrices:
            users.setdefault(m, []).append(i)
    seen, order = set(), []
    for start in range(len(graph.ops)):
        if start in seen:
            continue
        seen.add(start)
        queue = [start]
        while queue:
            nxt = []
            for i in queue:
                order.append(i)
                for m in graph.ops[i].matrices:
                    for j in users[m]:
                        if j not in seen:
                            seen.add(j)
                            nxt.append(j)
            queue = nxt
    return order


def _width(graph: TilingGraph, order, domain) -> float:
    """The most DP states an operator order needs (product of live tensors' domain sizes)."""
    last = {m: pos for pos, i in enumerate(order) for m in graph.ops[i].matrices}
    live: dict = {}
    worst = 1.0
    for pos, i in enumerate(order):
        for m in graph.ops[i].matrices:
            live[m] = None
        worst = max(worst, math.prod(float(len(domain[m])) for m in live))
        live = {m: None for m in live if last[m] > pos}
    return worst


def _narrow_order(graph: TilingGraph) -> list:
    """A greedy operator order: next, the operator leaving the fewest tensors live."""
    users: dict = {}
    for i, op in enumerate(graph.ops):
        for m in op.matrices:
            users.setdefault(m, set()).add(i)
    left = {m: len(u) for m, u in users.items()}
    live: set = set()
    todo = set(range(len(graph.ops)))
    order = []
    while todo:
        def after(i):
            ms = set(graph.ops[i].matrices)
            closed = {m for m in ms if left[m] == 1}  # op i is their last user
            return (len((live | ms) - closed), len(ms - live), i)
        i = min(todo, key=after)
        todo.remove(i)
        order.append(i)
        ms = set(graph.ops[i].matrices)
        for m in ms:
            left[m] -= 1
        live = {m for m in live | ms if left[m] > 0}
    return order


#: Most DP states :func:`one_cut` and :func:`exact_k_cuts` will hold at once.
MAX_STATES = 2_000_000


def _dp(graph: TilingGraph, domain: Mapping, cost_of):
    """Exact DP over operators one at a time (Eq. 4-5), in BFS order of ``G'``.

    When a greedy order needs fewer states than the BFS order, it is used instead (the DP
    is exact in any order). ``domain``: tensor -> candidate values; ``cost_of(op, values)``:
    finite cost or inf. Returns ``(cost, assignment)``.
    """
    order = _bfs_order(graph)
    wide = _width(graph, order, domain)
    if wide > 1000:
        alt = _narrow_order(graph)
        w2 = _width(graph, alt, domain)
        if w2 < wide:
            order, wide = alt, w2
    if wide > MAX_STATES:
        raise InvalidInputError(f"SOYBEAN's level DP would hold {wide:.3g} tilings at once on this graph "
                                f"(more than {MAX_STATES}); the graph is too wide for the exact search")
    last = {}
    for pos, i in enumerate(order):
        for m in graph.ops[i].matrices:
            last[m] = pos
    live: tuple = ()
    states = {(): (0.0, None)}  # live values -> (cost, backpointer chain)
    for pos, i in enumerate(order):
        op = graph.ops[i]
        new = tuple(dict.fromkeys(m for m in op.matrices if m not in live))
        touched = tuple(dict.fromkeys(op.matrices))
        nlive = tuple(m for m in live + new if last[m] > pos)
        dead = tuple(m for m in live + new if last[m] == pos)
        nstates: dict = {}
        for key, (cost, chain) in states.items():
            vals = dict(zip(live, key))
            for combo in itertools.product(*(domain[m] for m in new)):
                vals.update(zip(new, combo))
                c = cost_of(op, {m: vals[m] for m in touched})
                if not math.isfinite(c):
                    continue
                total = cost + c
                nkey = tuple(vals[m] for m in nlive)
                cur = nstates.get(nkey)
                if cur is None or total < cur[0]:
                    nstates[nkey] = (total, (tuple((m, vals[m]) for m in dead), chain))
        if not nstates:
            raise InvalidInputError(f"no even tiling of operator {op.name!r} exists")
        states, live = nstates, nlive
    cost, chain = min(states.values(), key=lambda v: v[0])  # nothing is live after the last operator
    out = {}
    while chain is not None:
        pairs, chain = chain
        out.update(pairs)
    for m in graph.matrix_names:  # tensors no operator uses: replicated
        out.setdefault(m, domain[m][-1])
    return cost, out


def one_cut(graph: TilingGraph, *, shapes: Mapping | None = None, extents: Mapping | None = None) -> CutResult:
    """The optimal one-cut tiling (Eq. 3), by the level DP of Eq. 4-5.

    Parameters
    ----------
    graph : TilingGraph
    shapes : mapping tensor -> tile shape, optional
        The tile graph's shapes (default: the graph's); they decide the sizes that scale
        conversions and which dimensions are even.
    extents : mapping operator -> loop extents, optional
        The operators' loop extents on the tile graph (default: the graph's).

    Examples
    --------
    Two layers of 300 units, batch 400: data parallelism would cost the gradient all-reduce
    ``2 (|W1| + |W2|) = 360000``; SOYBEAN replicates the input (free: nothing produces it),
    splits layer 1 by columns and layer 2 by rows, and pays only the reduction of ``Y2``.

    >>> r = one_cut(mlp_graph(batch=400, sizes=(300, 300, 300)))
    >>> r.cost, r.text("X0"), r.text("W1"), r.text("W2"), r.aligned["fwd2"]
    (120000.0, 'r', 'C', 'R', ('A3',))
    """
    shapes = dict(graph._shapes) if shapes is None else dict(shapes)
    exts = {op.name: (_extents(op, graph._shapes) if extents is None else tuple(extents[op.name]))
            for op in graph.ops}
    tile = {m: math.prod(s) for m, s in shapes.items()}
    domain = {m: _even_letters(shapes[m]) for m in graph.matrix_names}

    memo: dict = {}

    def cost_of(op, vals):
        key = (op.name, tuple(vals[m] for m in op.matrices))
        c = memo.get(key)
        if c is None:
            c = memo[key] = op_cost(op, vals, tile, exts[op.name])[0]
        return c

    cost, assign = _dp(graph, domain, cost_of)
    aligned = {op.name: op_cost(op, {m: assign[m] for m in op.matrices}, tile, exts[op.name])[1]
               for op in graph.ops}
    return CutResult({m: (assign[m],) for m in graph.matrix_names}, {k: (v,) for k, v in aligned.items()},
                     float(cost), (float(cost),))


def _check_k(k):
    parse_count(k, "the number of cuts", least=0)


def k_cuts(graph: TilingGraph, k: int) -> CutResult:
    """Algorithm 1 (k-cuts tiling) for ``2**k`` devices: one cut at a time on the tile graph.

    Returns ``P_k o T_{k-1}`` with cost ``c_k = delta_k + 2 c_{k-1}`` (Thm 1).

    Examples
    --------
    §2.2's MLP (5 layers of 300 units, batch 400) on 4 devices. Thm 3 holds:
    ``delta_1 <= 2 delta_2`` (a tile is at least half its matrix).

    >>> r = k_cuts(mlp_graph(batch=400, sizes=(300,) * 6), 2)
    >>> r.deltas, r.cost == r.deltas[0] + 2 * r.deltas[1], r.text("W1"), r.text("W3")
    ((750000.0, 405000.0), True, 'CC', 'rr')
    """
    _check_k(k)
    shapes = dict(graph._shapes)
    exts = {op.name: _extents(op, graph._shapes) for op in graph.ops}
    tilings = {m: () for m in graph.matrix_names}
    aligned = {op.name: () for op in graph.ops}
    deltas = []
    for _ in range(k):
        r = one_cut(graph, shapes=shapes, extents=exts)
        deltas.append(r.cost)
        for m in graph.matrix_names:
            t = r.tilings[m][0]
            tilings[m] += (t,)
            shapes[m] = _halve(shapes[m], t)
        for op in graph.ops:
            a = r.aligned[op.name][0]
            aligned[op.name] += (a,)
            exts[op.name] = _op_halve(op, exts[op.name], a)
    cost = float(sum((2 ** i) * d for i, d in enumerate(deltas)))
    return CutResult(tilings, aligned, cost, tuple(deltas))


def _kcut_domain(shape, k):
    out = []
    for seq in itertools.product(_even_letters_all(len(shape)), repeat=k):
        cur, ok = shape, True
        for c in seq:
            if c >= 0 and cur[c] % 2:
                ok = False
                break
            cur = _halve(cur, c)
        if ok:
            out.append(seq)
    return out


def _even_letters_all(rank):
    return tuple(range(rank)) + (REP,)


def exact_k_cuts(graph: TilingGraph, k: int) -> CutResult:
    """The minimum of :func:`tiling_cost` over all k-cut tilings, by the same DP over ``T^k``.

    Exponential in ``k`` (``3**k`` tilings per matrix): an oracle for :func:`k_cuts` on small
    graphs.
    """
    _check_k(k)
    domain = {m: _kcut_domain(graph.shape(m), k) for m in graph.matrix_names}
    memo: dict = {}

    def cost_of(op, vals):
        key = (op.name, tuple(vals[m] for m in op.matrices))
        c = memo.get(key)
        if c is None:
            c = memo[key] = _op_cost_k(op, graph, vals, k)[0]
        return c

    cost, assign = _dp(graph, domain, cost_of)
    aligned = {op.name: _op_cost_k(op, graph, {m: assign[m] for m in op.matrices}, k)[1] for op in graph.ops}
    return CutResult(dict(assign), aligned, float(cost))


def brute_force(graph: TilingGraph, k: int = 1) -> float:
    """Exhaustive enumeration of every k-cut graph tiling: the minimum :func:`tiling_cost`.

    >>> g = TilingGraph((("X", (4, 6)), ("W", (6, 2)), ("Y", (4, 2))), (MatMul("fwd", "X", "W", "Y"),))
    >>> brute_force(g, 1) == one_cut(g).cost == 0.0
    True
    """
    _check_k(k)
    names = graph.matrix_names
    domains = [_kcut_domain(graph.shape(m), k) for m in names]
    best = math.inf
    for combo in itertools.product(*domains):
        seqs = dict(zip(names, combo))
        best = min(best, sum(_op_cost_k(op, graph, seqs, k)[0] for op in graph.ops))
    return float(best)


# ----------------------------------------------------------------------------------------------
# the paper's MLP and §2.2
# ----------------------------------------------------------------------------------------------
def mlp_graph(batch: int, sizes, *, activation: bool = False, loss: bool = False) -> TilingGraph:
    """The training dataflow graph of an MLP (Fig. 1b / §4.2.2): per layer ``l = 1..L``

    ``Y_l = X_{l-1} W_l`` (forward), ``dX_{l-1} = dY_l W_l^T`` (not for the input, ``l = 1``),
    ``dW_l = X_{l-1}^T dY_l`` and the update of ``W_l`` by ``dW_l``. Without ``activation``
    the element-wise functions are ignored as in Eq. 1 (``X_l`` is ``Y_l`` and ``dY_l`` is
    ``dX_l``); with it, ``X_l = f(Y_l)`` and ``dY_l = f'(dX_l, X_l)`` are element-wise
    operators (not after the last layer). With ``loss``, ``dY_L = loss'(Y_L)`` is a batch-only
    operator; without it ``dY_L`` is an input of the backward pass.

    Names: ``X0``, ``W1..WL``, ``Y1..YL``, ``dY1..dYL``, ``dW1..dWL``; with ``activation`` also
    ``X1..X{L-1}`` and ``dX1..dX{L-1}``.

    >>> g = mlp_graph(batch=8, sizes=(4, 6, 2))
    >>> [op.name for op in g.ops][:4], g.shape("W2")
    (['fwd1', 'fwd2', 'dX2', 'dW2'], (6, 2))
    """
    parse_count(batch, "batch")
    sizes = tuple(sizes)
    if len(sizes) < 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise InvalidInputError(f"sizes must be at least two positive ints, got {sizes!r}")
    L = len(sizes) - 1
    mats = [("X0", (batch, sizes[0]))]
    ops = []
    x_in = "X0"
    for l in range(1, L + 1):
        mats += [(f"W{l}", (sizes[l - 1], sizes[l])), (f"Y{l}", (batch, sizes[l])), (f"dW{l}", (sizes[l - 1], sizes[l]))]
        ops.append(MatMul(f"fwd{l}", x_in, f"W{l}", f"Y{l}"))
        if activation and l < L:
            mats.append((f"X{l}", (batch, sizes[l])))
            ops.append(Elementwise(f"act{l}", (f"Y{l}",), (f"X{l}",)))
            x_in = f"X{l}"
        else:
            x_in = f"Y{l}"
    # backward, last layer first
    mats.append((f"dY{L}", (batch, sizes[L])))
    if loss:
        ops.append(BatchOnly("loss", (f"Y{L}",), (f"dY{L}",)))
    for l in range(L, 0, -1):
        x_prev = "X0" if l == 1 else (f"X{l - 1}" if activation else f"Y{l - 1}")
        if l > 1:  # without activations dX_{l-1} is dY_{l-1} itself
            dx = f"dX{l - 1}" if activation else f"dY{l - 1}"
            mats.append((dx, (batch, sizes[l - 1])))
            ops.append(MatMul(f"dX{l}", f"dY{l}", f"W{l}", dx, y_t=True))
        ops.append(MatMul(f"dW{l}", x_prev, f"dY{l}", f"dW{l}", x_t=True))
        ops.append(Update(f"update{l}", f"dW{l}", f"W{l}"))
        if l > 1 and activation:
            mats.append((f"dY{l - 1}", (batch, sizes[l - 1])))
            ops.append(Elementwise(f"act{l - 1}'", (f"dX{l - 1}", f"X{l - 1}"), (f"dY{l - 1}",)))
    return TilingGraph(tuple(mats), tuple(ops))


def section_2_2_traffic(layers: int, width: int, batch: int, devices: int, groups: int = 1, itemsize: int = 4):
    """The §2.2 arithmetic: ``(data parallel, model parallel, hybrid)`` traffic in bytes.

    Data parallelism moves the parameters ``n x 2`` times, model parallelism the forward
    activations ``n x 2`` times; the hybrid (data parallelism over ``groups`` groups, model
    parallelism inside each) moves the parameters ``groups x 2`` times plus, per group, a
    ``1/groups`` batch of activations ``(n / groups) x 2`` times.

    >>> dp, mp, hy = section_2_2_traffic(5, 300, 400, 16, groups=4)
    >>> round(dp / 1e6, 1), round(mp / 1e6, 1), round(hy / 1e6, 1)
    (57.6, 76.8, 33.6)
    """
    for k, v in {"layers": layers, "width": width, "batch": batch, "devices": devices, "groups": groups}.items():
        parse_count(v, k)
    if devices % groups:
        raise InvalidInputError(f"{groups} groups do not divide {devices} devices")
    params = width * width * layers * itemsize
    acts = batch * width * layers * itemsize
    per_group = devices // groups
    return (params * devices * 2, acts * devices * 2, params * groups * 2 + groups * (acts / groups * per_group * 2))


# ----------------------------------------------------------------------------------------------
# a model of this library -> SOYBEAN's graph, and back
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Link:
    """How a tensoropt operator's loop dimensions map to SOYBEAN tensors / operators."""

    op: str
    kind: str  # "linear" | "conv" | "unary" | "batch" | "input"
    soy_ops: tuple  # SOYBEAN operator names, voting order (forward first)
    dims: tuple  # per SOYBEAN operator: aligned value -> loop dimension name


def graph_from_model(graph) -> tuple[TilingGraph, tuple]:
    """SOYBEAN's training dataflow graph of a tensoropt :class:`~tensoropt_py.graph.ir.Graph`.

    Every tensor ``t`` of the forward pass is a tensor here, and its gradient ``"grad:" + t``
    (for floating-point activations not produced by data loading). Per operator:

    * a linear layer on matrices (input ``x`` ``[batch, in]``, weight ``w`` ``[out, in]``,
      output ``y``): the matmuls ``y = x w^T``, ``dx = dy w`` (not for the graph input),
      ``dw = dy^T x`` and the :class:`Update` of ``w``. Its bias is a vector, outside
      SOYBEAN's matrix model, and left out;
    * a convolution (``groups == 1``): the :class:`Contraction` forward, ``dx`` (not for the
      graph input) and ``dw`` of :func:`conv_layouts` and the update of ``w`` (bias left out);
    * an element-wise unary operator: :class:`Elementwise` forward ``y = f(x)`` and backward
      ``dx = f'(dy, saved)``;
    * anything else (the loss, pooling, reshapes, attention, linear layers on tensors of
      rank > 2, normalisation...): :class:`BatchOnly`, SOYBEAN's rule for "all other
      operators" (§4.5), with its parameters replicated and their gradients reduced.
      Constants are not tensors here (no operator produces them: their tiling is free).

    Returns
    -------
    (TilingGraph, tuple of _Link)
        The links say which SOYBEAN operators decide each of our operators' configuration
        (:func:`decode_choices`).

    Examples
    --------
    >>> from tensoropt_py.graph import zoo
    >>> tg, links = graph_from_model(zoo.mlp(batch=8, sizes=(12, 16, 6)))
    >>> [op.name for op in tg.ops]
    ['fc0:fwd', 'fc0:dW', 'update:fc0.weight', 'relu0:fwd', 'relu0:bwd', 'fc1:fwd', 'fc1:dX', 'fc1:dW', 'update:fc1.weight', 'loss']
    """
    from ..graph.ir import OpKind, TensorRole

    mats: dict = {}
    ops = []
    links = []
    updated = set()
    loaded = {u.tensor for op in graph.operators if op.kind is OpKind.INPUT for u in op.outputs}
    consumed = {u.tensor for op in graph.operators for u in op.inputs}

    def mat(name):
        base = name[len(GRAD):] if name.startswith(GRAD) else name
        mats.setdefault(name, tuple(graph.tensors[base].shape))
        return name

    def has_grad(t):
        spec = graph.tensors[t]
        return (spec.role is TensorRole.ACTIVATION and t not in loaded and spec.dtype.startswith(("float", "bfloat"))
                and len(spec.shape) >= 1)

    def update(w):
        if w not in updated:
            updated.add(w)
            ops.append(Update(f"update:{w}", mat(GRAD + w), mat(w)))

    for op in graph.operators:
        kind = op.kind
        if kind is OpKind.INPUT:
            links.append(_Link(op.name, "input", (), ()))
            continue
        roles = {d.kind.value: d.name for d in op.loop_dims}
        if kind is OpKind.LINEAR and len(graph.tensors[op.inputs[0].tensor].shape) == 2 and \
                dict(op.attrs).get("weight_layout", "oi") == "oi" and len(op.loop_dims) == 3 and \
                {"sample", "reduction", "parameter"} <= set(roles):
            x, w, y = op.inputs[0].tensor, op.params[0].tensor, op.outputs[0].tensor
            b, i, o = roles["sample"], roles["reduction"], roles["parameter"]
            ops.append(MatMul(op.name + ":fwd", mat(x), mat(w), mat(y), y_t=True))
            names, dims = [op.name + ":fwd"], [{"A1": b, "A2": o, "A3": i}]
            if has_grad(x):
                ops.append(MatMul(op.name + ":dX", mat(GRAD + y), w, mat(GRAD + x)))
                names.append(op.name + ":dX")
                dims.append({"A1": b, "A2": i, "A3": o})
            ops.append(MatMul(op.name + ":dW", mat(GRAD + y), x, mat(GRAD + w), x_t=True))
            names.append(op.name + ":dW")
            dims.append({"A1": o, "A2": i, "A3": b})
            if graph.tensors[w].role is TensorRole.PARAMETER:
                update(w)
            links.append(_Link(op.name, "linear", tuple(names), tuple(dims)))
            continue
        if kind is OpKind.CONV2D and dict(op.attrs).get("groups", 1) == 1 and \
                {"sample", "reduction", "parameter"} <= set(roles) and len(op.inputs) == 1:
            # §4.5: batch split (data parallel) or channel split (model parallel); spatial and
            # kernel splits are dropped as strictly worse than the batch split
            x, w, y = op.inputs[0].tensor, op.params[0].tensor, op.outputs[0].tensor
            b, co = roles["sample"], roles["parameter"]
            ci = op.inputs[0].dims[1][0]
            sizes = {d.name: d.size for d in op.loop_dims}
            ext = (sizes[b], sizes[co], sizes[ci])
            ops.append(Contraction(op.name + ":fwd", mat(x), mat(w), mat(y), conv_layouts("fwd"), ext))
            names, dims = [op.name + ":fwd"], [{"A1": b, "A2": co, "A3": ci}]
            if has_grad(x):
                ops.append(Contraction(op.name + ":dX", mat(GRAD + y), w, mat(GRAD + x), conv_layouts("dX"), ext))
                names.append(op.name + ":dX")
                dims.append({"A1": b, "A2": ci, "A3": co})
            ops.append(Contraction(op.name + ":dW", mat(GRAD + y), x, mat(GRAD + w), conv_layouts("dW"), ext))
            names.append(op.name + ":dW")
            dims.append({"A1": co, "A2": ci, "A3": b})
            if graph.tensors[w].role is TensorRole.PARAMETER:
                update(w)
            links.append(_Link(op.name, "conv", tuple(names), tuple(dims)))
            continue
        if kind is OpKind.UNARY and len(op.inputs) == 1 and \
                graph.tensors[op.inputs[0].tensor].shape == graph.tensors[op.outputs[0].tensor].shape:
            x, y = op.inputs[0].tensor, op.outputs[0].tensor
            ops.append(Elementwise(op.name + ":fwd", (mat(x),), (mat(y),)))
            names = [op.name + ":fwd"]
            dims = [{j: g[0] for j, g in enumerate(op.outputs[0].dims)}]
            if has_grad(x):
                saved = [t for t in op.saved if t in (x, y)] or [y]
                ops.append(Elementwise(op.name + ":bwd", (mat(GRAD + y), mat(saved[0])), (mat(GRAD + x),)))
                names.append(op.name + ":bwd")
                dims.append({j: g[0] for j, g in enumerate(op.inputs[0].dims)})
            links.append(_Link(op.name, "unary", tuple(names), tuple(dims)))
            continue
        # §4.5: every other operator is split along the batch only
        sample = next((d.name for d in op.loop_dims if d.kind.value == "sample"), None)
        acts_in, acts_out, reads, writes = [], [], [], []

        def batched(use):
            return sample is not None and bool(use.dims) and bool(use.dims[0]) and use.dims[0][0] == sample

        for u in op.inputs:
            spec = graph.tensors[u.tensor]
            if spec.role is TensorRole.CONSTANT or not spec.shape:
                continue
            (acts_in if batched(u) else reads).append(mat(u.tensor))
            if has_grad(u.tensor):
                (acts_out if batched(u) else writes).append(mat(GRAD + u.tensor))
        for j, u in enumerate(op.outputs):
            if not graph.tensors[u.tensor].shape or not (j == 0 or u.tensor in consumed):
                continue
            (acts_out if batched(u) else writes).append(mat(u.tensor))
            if has_grad(u.tensor) and u.tensor in consumed:
                (acts_in if batched(u) else reads).append(mat(GRAD + u.tensor))
        params = [u.tensor for u in op.params if graph.tensors[u.tensor].role is TensorRole.PARAMETER]
        for p in dict.fromkeys(params):
            reads.append(mat(p))
            writes.append(mat(GRAD + p))
        if not (acts_in or acts_out):  # no batch dimension: replicated, gradients whole
            sample = None
        uniq = lambda xs: tuple(dict.fromkeys(xs))  # noqa: E731
        ops.append(BatchOnly(op.name, uniq(acts_in), uniq(acts_out), uniq(reads), uniq(writes)))
        for p in dict.fromkeys(params):
            update(p)
        links.append(_Link(op.name, "batch", (op.name,), ({0: sample, REP: None},)))
    return TilingGraph(tuple(mats.items()), tuple(ops)), tuple(links)


def _vote(values):
    """The value named at least twice, else the first (the forward's); and whether all agree."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    top = max(counts.values())
    if top >= 2:
        return [v for v in values if counts[v] == top][0], top == len(values)
    return values[0], len(values) == 1


def decode_choices(mcg, links, result: CutResult) -> tuple:
    """Map a SOYBEAN tiling onto configurations of a :class:`~tensoropt_py.cost.builder.ModelCostGraph`.

    Cut ``i`` is fine mesh axis ``i`` of the ``2**k`` devices. Per operator and cut the loop
    dimension is the one named by the majority of its SOYBEAN operators' aligned layouts,
    else the forward's (module docstring, "Mapping").

    Parameters
    ----------
    mcg : ModelCostGraph
        The cost graph of the model on ``2**k`` devices.
    links : tuple
        From :func:`graph_from_model` of ``mcg.graph``.
    result : CutResult
        A k-cut tiling of that SOYBEAN graph (its ``aligned`` layouts are what is decoded).

    Returns
    -------
    (choices, notes)
        ``choices``: config index per node of ``mcg``; ``notes``: one line per operator and
        cut where the SOYBEAN matmuls disagree (the rule decided), and per configuration not
        in ``mcg`` (replaced by the kept configuration agreeing on the most fine axes).

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> from tensoropt_py.cost.builder import build_cost_graph
    >>> from tensoropt_py.graph import zoo
    >>> mcg = build_cost_graph(zoo.mlp(batch=8, sizes=(12, 16, 6)), Cluster.preset("cpu-1x4"), 2)
    >>> tg, links = graph_from_model(mcg.graph)
    >>> choices, notes = decode_choices(mcg, links, k_cuts(tg, 1))
    >>> [str(mcg.configs[i][c]) for i, c in enumerate(choices)], notes
    (['mesh[2] map[0,-1]', 'mesh[2] map[-1,-1,0]', 'mesh[2] map[-1,0]', 'mesh[2] map[-1,0,-1]', 'mesh[2] map[0,-1]'], ())
    """
    import numpy as np

    from ..space.configs import config_key

    n = mcg.num_devices
    k = max(n.bit_length() - 1, 0)
    if n != 2 ** k:
        raise InvalidInputError(f"SOYBEAN needs a power-of-two device count, got {n}")
    lens = {len(v) for v in result.aligned.values()}
    if lens and lens != {k}:
        raise InvalidInputError(f"the tiling has {sorted(lens)} cuts but {n} devices need {k}")
    by_name = {link.op: link for link in links}
    choices = np.zeros(len(mcg.op_names), dtype=np.int64)
    notes = []
    for node, name in enumerate(mcg.op_names):
        cfgs = mcg.configs[node]
        link = by_name.get(name)
        op = mcg.graph.operator(name)
        if link is None or link.kind == "input":
            continue  # data loading: our space's single configuration
        index = {d.name: j for j, d in enumerate(op.loop_dims)}
        fine = []
        for cut in range(k):
            dims = [link.dims[j][result.aligned[soy][cut]] for j, soy in enumerate(link.soy_ops)]
            dim, agreed = _vote(dims)
            if dim is None:  # a batch-only operator without a sample dimension: replicated
                fine.append(-1)
                continue
            if not agreed:
                votes = ", ".join(f"{soy.split(':')[-1]} {result.aligned[soy][cut]} ({d})"
                                  for soy, d in zip(link.soy_ops, dims))
                notes.append(f"{name} cut {cut + 1}: {votes} -> {dim}")
            fine.append(index[dim])
        want = config_key((2,) * k, tuple(fine))
        hit = [c for c, cfg in enumerate(cfgs) if cfg.key == want]
        if hit:
            choices[node] = hit[0]
            continue
        # not in the (pruned) space: the kept configuration agreeing on the most fine axes
        def agree(cfg):
            return sum(1 for a, b in zip(cfg.fine, fine) if a == b)
        best = max(range(len(cfgs)), key=lambda c: (agree(cfgs[c]), -c))
        choices[node] = best
        notes.append(f"{name}: configuration splitting {[op.loop_dims[f].name for f in fine]} by cut is not in the "
                     f"cost graph; nearest kept: {cfgs[best]}")
    return choices, tuple(notes)
