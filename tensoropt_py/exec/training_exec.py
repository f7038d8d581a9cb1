"""The executor's side of the training options (:mod:`tensoropt_py.cost.training`).

* **Precision** (:func:`autocast`): ``"bf16-mixed"`` runs every operator's forward (and its
  recomputation) under ``torch.autocast(device, dtype=torch.bfloat16)`` and keeps what the cost
  model counts (:func:`~tensoropt_py.cost.training.precision_graph`, the mixed-precision state of
  :func:`~tensoropt_py.cost.optimizer.state_bytes_per_param`): the activations of
  :func:`~tensoropt_py.cost.training.half_tensors` are stored in bf16 (an operator's float
  outputs are cast, the LOSS computes and keeps its log-probabilities in fp32 as autocast
  does); the trained parameters are bf16 working copies with bf16 gradients (reduced in
  bf16), and the optimizer steps fp32 master copies (of the local shard only, with sharded
  state) that are copied back after every step.
* **Sharded optimizer state** (:class:`ShardedGroup`, ZeRO-1): the parameters of one fused
  gradient group (an operator's parameters reduced over the same mesh axes) become views of
  one flat buffer; the flat gradient is reduce-scattered over the group's replicas, each rank
  steps the optimizer on its chunk of the buffer (a view: no extra copy of the weights; the
  optimizer state is the chunk's) and an all-gather of the chunks restores the parameters.
  Adam and momentum are elementwise, so a flat chunk updates exactly like the tensors.
* **Recomputation** (:class:`Rerun`): a recomputed operator's saved tensors other than its
  inputs (outputs, statistics, log-probabilities...) are released after its forward, and so
  are the copies of its outputs its consumers saved; the first backward read of any of them
  runs the operator's forward again (once per iteration, autocast as in forward) from the
  inputs it saved (themselves re-derived when their producer is recomputed) or from
  references to the inputs it did not save, and a consumer's copy is rescheduled again with
  the edge's forward collectives (phase ``"rederive"``). The re-run's saved tensors are
  matched to the released ones by their order (the same local forward saves the same
  sequence).
"""

from __future__ import annotations

import contextlib

import torch

from ..errors import TensorOptError

__all__ = ["autocast", "ShardedGroup", "Rerun", "input_sources"]


def autocast(precision: str, device):
    """A context running the forward in ``precision`` (``"32-true"``: no change).

    Examples
    --------
    >>> import torch
    >>> with autocast("bf16-mixed", torch.device("cpu")):
    ...     y = torch.ones(2, 2) @ torch.ones(2, 2)
    >>> y.dtype
    torch.bfloat16
    """
    if precision in (None, "32-true"):
        return contextlib.nullcontext()
    if precision == "bf16-mixed":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    raise TensorOptError(f"the executor runs precisions 32-true and bf16-mixed, not {precision!r}")


class ShardedGroup:
    """One fused gradient group whose optimizer state is sharded over its replicas (ZeRO-1).

    Parameters
    ----------
    tensors : list of Tensor
        The group's local parameter blocks (their values are copied into the flat buffer).
    groups : tuple of tuple of int
        The concurrent replica groups (every rank is in one).
    rank : int

    Attributes
    ----------
    params : list of Tensor
        Leaf views of the flat buffer replacing ``tensors`` (requires_grad).
    shard : Tensor
        This rank's chunk of the buffer (a leaf view), the optimizer's parameter.

    Examples
    --------
    >>> import torch
    >>> sg = ShardedGroup([torch.ones(3), torch.zeros(2, 2)], ((0, 1),), rank=1)
    >>> sg.chunk, sg.shard.tolist()            # 7 elements over 2 replicas: chunks of 4
    (4, [0.0, 0.0, 0.0, 0.0])
    >>> sg.params[0].data_ptr() == sg.flat.data_ptr()
    True
    """

    def __init__(self, tensors, groups, rank: int, master_dtype=None):
        mine = next(g for g in groups if rank in g)
        self.groups, self.size, self.index = groups, len(mine), mine.index(rank)
        numel = sum(t.numel() for t in tensors)
        self.chunk = -(-numel // self.size)
        self.flat = torch.zeros(self.chunk * self.size, dtype=tensors[0].dtype, device=tensors[0].device)
        self.params, off = [], 0
        for t in tensors:
            k = t.numel()
            self.flat[off:off + k].copy_(t.detach().reshape(-1))
            self.params.append(self.flat[off:off + k].view(t.shape).requires_grad_(True))
            off += k
        self.numel = numel
        lo = self.index * self.chunk
        self.shard = self.flat[lo:lo + self.chunk].requires_grad_(True)
        #: the tensor the optimizer steps: the chunk itself, or an fp32 master copy of it (bf16-mixed)
        self.master = self.shard
        if master_dtype is not None and master_dtype != self.flat.dtype:
            self.master = self.shard.detach().to(master_dtype).requires_grad_(True)

    def reduce_scatter(self, be):
        """Sum the gradients over the replicas; this rank's chunk becomes ``shard.grad``."""
        flat = torch.zeros_like(self.flat)
        off = 0
        for p in self.params:
            k = p.numel()
            if p.grad is not None:
                flat[off:off + k].copy_(p.grad.reshape(-1))
            off += k
        self.shard.grad = be.reduce_scatter(flat.view(self.size, self.chunk), self.groups).reshape(-1)

    def all_gather(self, be):
        """Every replica's updated chunk back into the flat buffer (the parameters' storage)."""
        with torch.no_grad():
            full = be.all_gather(self.shard.detach(), self.groups).reshape(-1)
            self.flat.copy_(full)


def input_sources(op, ins, packed):
    """Per input tensor of ``op``, where a re-run reads it: ``("holder", (h, geometry))`` when ``op``
    saved that tensor or a view of it (the holder may be released and re-derived later; the input
    is the holder's storage seen with the input's size, stride and offset), else ``("ref", t)``.

    Examples
    --------
    >>> import torch
    >>> from types import SimpleNamespace
    >>> op = SimpleNamespace(inputs=[SimpleNamespace(tensor="x")])
    >>> x = torch.ones(2, 3)
    >>> input_sources(op, {"x": x}, [])["x"][0]
    'ref'
    >>> input_sources(op, {"x": x}, [SimpleNamespace(tensor=x.view(6))])["x"][0]
    'holder'
    """
    out = {}
    for use in op.inputs:
        t = ins[use.tensor]
        if use.tensor in out:
            continue
        src = ("ref", t)
        for h in packed:
            x = getattr(h, "tensor", None)
            if (x is not None and x.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
                    and x.dtype == t.dtype):
                src = ("holder", (h, (tuple(t.size()), tuple(t.stride()), t.storage_offset())))
                break
        out[use.tensor] = src
    return out


class Rerun:
    """The recomputation of one operator in one iteration (run at most once, on first need).

    Parameters
    ----------
    local_op : LocalOp
    sources : dict
        :func:`input_sources` of the operator.
    requires_grad : dict
        Per input, whether it required grad in forward (so the re-run saves the same tensors).
    params : dict
        The parameter blocks the forward used.
    packed_count : int
        How many tensors the forward saved (checked against the re-run).
    context : callable
        Returns the context the forward ran in (autocast).
    name : str
    store : callable, optional
        ``store(name, tensor)``: the output as the run keeps it (bf16-mixed casts).

    Examples
    --------
    >>> import contextlib, torch
    >>> from types import SimpleNamespace
    >>> lin = SimpleNamespace(run=lambda ins, prm: {"y": torch.tanh(ins["x"])})   # saves its output
    >>> r = Rerun(lin, {"x": ("ref", torch.zeros(2))}, {"x": True}, {}, 1, contextlib.nullcontext, "tanh")
    >>> r.expect("saved", 0); r.expect("output", "y")
    >>> r.saved(0).tolist(), r.output("y").tolist()
    ([0.0, 0.0], [0.0, 0.0])
    """

    __slots__ = ("local_op", "sources", "requires_grad", "params", "count", "context", "name", "result", "left",
                 "store", "__weakref__")

    def __init__(self, local_op, sources, requires_grad, params, packed_count, context, name, store=None):
        self.local_op, self.sources, self.requires_grad = local_op, sources, requires_grad
        self.params, self.count, self.context, self.name = params, packed_count, context, name
        self.store = store or (lambda name, t: t)
        self.result = None
        self.left: dict = {}  # ("saved", j) or ("output", name) -> reads still to come

    def expect(self, what, key):
        """Register one future read of ``saved(key)`` (``what="saved"``) or ``output(key)``."""
        self.left[(what, key)] = self.left.get((what, key), 0) + 1

    def _take(self, what, key, value):
        k = (what, key)
        n = self.left.get(k, 0) - 1
        if n > 0:
            self.left[k] = n
        else:  # its last reader: let it go (the re-run's tensors do not outlive their use)
            self.left.pop(k, None)
            if what == "saved":
                self.result[1][key] = None
            else:
                self.result[0].pop(key, None)
            if not self.left:
                self.result = ()  # every read done
        return value

    def _run(self):
        if self.result == ():
            raise TensorOptError(f"operator {self.name!r} was recomputed and read more often than registered")
        if self.result is None:
            ins = {}
            for name, (kind, s) in self.sources.items():
                if kind == "holder":
                    h, (size, stride, offset) = s
                    x = h.get().as_strided(size, stride, offset)
                else:
                    x = s
                ins[name] = x.detach().requires_grad_(self.requires_grad[name])
            packed = []

            def pack(t):  # detached: a saved output holding its own grad_fn would be a cycle gc cannot see
                d = t.detach()
                packed.append(d)
                return d

            with torch.enable_grad(), self.context(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = self.local_op.run(ins, self.params)
            if len(packed) != self.count:
                raise TensorOptError(f"recomputing operator {self.name!r} saved {len(packed)} tensors, its forward "
                                     f"saved {self.count}: the re-run does not match the forward")
            self.result = ({k: self.store(k, v.detach()) for k, v in out.items()}, list(packed))
        return self.result

    def saved(self, j: int):
        """The ``j``-th tensor the forward saved."""
        return self._take("saved", j, self._run()[1][j])

    def output(self, name: str):
        """Output ``name`` of the operator."""
        return self._take("output", name, self._run()[0][name])
