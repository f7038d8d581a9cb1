"""Operator and optimizer-update compute tables, timed with torch at local shard shapes."""

from __future__ import annotations

import datetime as _dt
import socket
from typing import Mapping

from ..cluster import ComputeTable, write_calibration
from ..cost.training import Precision
from ..errors import InvalidInputError
from ..units import parse_count
from .timing import auto_sync, check_counts, measure

__all__ = ["calibrate_compute", "calibrate_model_compute", "model_compute_entries", "model_update_entries"]


def calibrate_compute(entries, *, repeats: int = 10, warmup: int = 2, out=None, sync="auto", meta: Mapping | None = None,
                      comm=None) -> ComputeTable:
    """Time operators and return (and optionally write) a compute table.

    Parameters
    ----------
    entries : mapping key -> callable, or iterable of (key, callable)
        Keys as :class:`~tensoropt_py.cost.compute.ComputeModel` looks them up, e.g.
        ``"linear|[64,1024]x[1024,256]|float32|fwd+bwd"``; callables run the work once.
    repeats, warmup : int
        See :func:`measure`.
    out : path, optional
        Calibration file to write (its ``compute`` entries are merged, other sections kept).
    sync : "auto", callable or None
        Device synchronisation after each call; ``"auto"`` uses ``torch.cuda.synchronize`` when
        CUDA is initialised.
    meta : mapping, optional
        Extra metadata to record (device name, torch version...).
    comm : mpi4py communicator, optional
        Time every entry on all of its ranks at once (a barrier before each entry) and keep
        the slowest rank's time per call over the whole loop (``statistic="mean"`` of
        :func:`measure`): the load of a training step, where every device computes at the
        same time. Where processes share cores or memory bandwidth this shows; a median would
        keep only the calls no other rank interrupted. Every rank must call it; rank 0
        writes ``out``.

    Examples
    --------
    >>> t = calibrate_compute({"noop": lambda: None}, repeats=3, warmup=0)
    >>> len(t), t.get("noop") >= 0
    (1, True)
    """
    items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
    if sync == "auto":
        sync = auto_sync()
    times = {}
    for item in items:
        try:
            key, fn = item
        except (TypeError, ValueError):
            raise InvalidInputError(f"compute entries must be (key, callable) pairs, got {item!r}") from None
        if not isinstance(key, str) or not callable(fn):
            raise InvalidInputError(f"compute entry needs a string key and a callable, got ({key!r}, {fn!r})")
        if comm is not None:
            comm.Barrier()
        if isinstance(fn, _Known):  # timed already, as part of a batch
            times[key] = fn.seconds if comm is None else max(comm.allgather(fn.seconds))
        elif comm is None:
            times[key] = measure(fn, repeats=repeats, warmup=warmup, sync=sync)
        else:
            times[key] = max(comm.allgather(measure(fn, repeats=repeats, warmup=warmup, sync=sync,
                                                    statistic="mean")))
    info = {"repeats": repeats, "warmup": warmup, "host": socket.gethostname(),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "concurrent_ranks": 1 if comm is None else int(comm.Get_size())}
    info.update(meta or {})
    table = ComputeTable(times, info)
    if out is not None and (comm is None or comm.Get_rank() == 0):
        write_calibration(out, compute=table)
    return table


def _cost_graph(graph, cluster, devices, *, dtype, mixed_precision, precision, optimizer="adam"):
    """The cost graph whose keys a table for ``precision`` must hold (its activations' dtypes)."""
    from ..cost.builder import build_cost_graph
    from ..cost.training import PRECISIONS, TrainingOptions

    if precision not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {precision!r}; allowed: {', '.join(PRECISIONS)}")
    return build_cost_graph(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision, optimizer=optimizer,
                            training=TrainingOptions(precision=precision))


def model_compute_entries(graph, cluster, devices, *, dtype=None, mixed_precision=False,
                          precision: Precision = "32-true"):
    """Distinct compute keys of a model's kept configurations: ``{key: (op, config)}``.

    The first operator and configuration met represent a key (all of them do the same local
    work). INPUT operators (no kernel) are left out. ``precision="bf16-mixed"`` gives the keys
    of that precision's cost graph (:func:`~tensoropt_py.cost.training.precision_graph`).
    """
    from ..cost.operator_cost import compute_dtype, config_compute_keys
    from ..graph.ir import OpKind

    mcg = _cost_graph(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision, precision=precision)
    g = mcg.graph
    entries: dict = {}
    for op, cfgs in zip(g.operators, mcg.configs):
        if op.kind is OpKind.INPUT:
            continue
        dt = compute_dtype(op, g.tensors, dtype, mcg.mixed_precision)
        for cfg, key in zip(cfgs, config_compute_keys(op, g.tensors, cfgs, dt)):
            entries.setdefault(key, (op, cfg))
    return entries, g


def model_update_entries(graph, cluster, devices, *, optimizer="adam", dtype=None, mixed_precision=False,
                         precision: Precision = "32-true"):
    """Distinct optimizer-update keys of a model's kept configurations: ``{key: (shape, dtype)}``.

    One entry per local parameter shard shape (:func:`~tensoropt_py.cost.optimizer.update_key`).
    """
    from ..cost.optimizer import update_key
    from ..graph.ir import TensorRole

    mcg = _cost_graph(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision, precision=precision,
                      optimizer=optimizer)
    g = mcg.graph
    entries: dict = {}
    for op, cfgs in zip(g.operators, mcg.configs):
        for pi, use in enumerate(op.params):
            spec = g.tensors[use.tensor]
            if spec.role is not TensorRole.PARAMETER:
                continue
            for cfg in cfgs:
                f = cfg.layout(op, len(op.inputs) + pi).split_factors(len(spec.shape))
                shape = tuple(n // d for n, d in zip(spec.shape, f))
                entries.setdefault(update_key(optimizer, shape, spec.dtype), (shape, spec.dtype))
    return entries


def _update_runner(optimizer, shape, dtype, device):
    """A no-argument callable running one optimizer step on a parameter shard of ``shape``."""
    import torch

    from ..exec.runner import make_optimizer
    from ..graph.torch_ops import torch_dtype

    gen = torch.Generator(device="cpu").manual_seed(0)
    p = (torch.randn(shape, generator=gen) * 0.1).to(device=device, dtype=torch_dtype(dtype)).requires_grad_(True)
    p.grad = torch.randn(shape, generator=gen).to(device=device, dtype=p.dtype) * 1e-3
    opt = make_optimizer(optimizer, [p], 1e-3)
    opt.step()  # creates the state: the timed steps are steady-state updates
    return opt.step


def _multi_tensor_update_shares(optimizer, updates, device, *, repeats, warmup, sync) -> dict:
    """Per-key seconds of the optimizer update the way the executor runs it on a GPU.

    torch's default optimizer on CUDA tensors is the multi-tensor (``foreach``) implementation:
    one step updates every parameter with a few kernels, so a parameter's update costs its
    share of that step, not a step of its own (timed alone, a small parameter's update is
    mostly launch and Python overhead, ~0.15 ms on an H100, which a real step pays once).
    One step over a shard of every distinct shape is timed; each key gets the step's time
    times its share of the bytes.
    """
    import torch

    from ..exec.runner import make_optimizer
    from ..graph.torch_ops import torch_dtype

    if not updates:
        return {}
    gen = torch.Generator(device="cpu").manual_seed(0)
    params = []
    for _, shape, dt in updates:
        p = (torch.randn(shape, generator=gen) * 0.1).to(device=device, dtype=torch_dtype(dt)).requires_grad_(True)
        p.grad = torch.randn(shape, generator=gen).to(device=device, dtype=p.dtype) * 1e-3
        params.append(p)
    opt = make_optimizer(optimizer, params, 1e-3)
    opt.step()  # creates the state
    total = measure(opt.step, repeats=repeats, warmup=warmup, sync=sync)
    sizes = [p.numel() * p.element_size() for p in params]
    whole = float(sum(sizes)) or 1.0
    return {key: total * n / whole for (key, _, _), n in zip(updates, sizes)}


def _constant(seconds):
    """A runner whose "measurement" is already known (see :func:`_multi_tensor_update_shares`)."""
    return _Known(seconds)


class _Known:
    __slots__ = ("seconds",)

    def __init__(self, seconds):
        self.seconds = float(seconds)

    def __call__(self):
        return None


def _operator_runners(op, cfg, graph, dtype, device, precision="32-true"):
    """Two no-argument callables running ``op``'s local shard (rank 0): forward + backward, and
    the forward alone (with autograd recording, as a recomputation re-runs it).

    In ``bf16-mixed`` they run as the executor does: tensors in their dtypes of the precision's
    graph, bf16 working parameters, the forward under autocast.
    """
    import torch

    from ..cost.operator_cost import local_shapes
    from ..exec.local_ops import prepare
    from ..exec.training_exec import autocast
    from ..graph.ir import TensorRole
    from ..graph.torch_ops import torch_dtype

    lop = prepare(op, cfg, graph, 0)
    shapes = local_shapes(op, graph.tensors, cfg)
    nin, npar = len(op.inputs), len(op.params)
    fdt = torch_dtype(dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    leaves, inputs, params = [], {}, {}
    for u, (use, shp) in enumerate(zip(op.uses()[: nin + npar], shapes)):
        spec = graph.tensors[use.tensor]
        if spec.dtype in ("float32", "float16", "bfloat16", "float64"):
            tdt = fdt
            if precision != "32-true":
                tdt = torch.bfloat16 if spec.role is TensorRole.PARAMETER else torch_dtype(spec.dtype)
            t = (torch.randn(shp, generator=gen) * 0.1).to(device=device, dtype=tdt).requires_grad_(True)
            leaves.append(t)
        elif spec.dtype == "bool":
            t = torch.ones(shp, dtype=torch.bool, device=device)
        else:  # ids / labels: 0 and 1 are valid for any vocabulary or class count >= 2
            t = torch.randint(0, 2, shp, generator=gen).to(device=device, dtype=torch_dtype(spec.dtype))
        (inputs if u < nin else params)[use.tensor] = t

    def forward():
        with autocast(precision, device):
            return lop.run(inputs, params)

    def forward_backward():
        outs = forward()
        ys = [y for y in outs.values() if isinstance(y, torch.Tensor) and y.requires_grad]
        if ys and leaves:
            torch.autograd.backward(ys, [torch.ones_like(y) for y in ys])
            for t in leaves:
                t.grad = None
        return outs

    forward_backward()  # fails here (not inside the timing) when the entry cannot run
    return forward_backward, forward


def _empty_call(device, backward=True):
    """A no-argument callable doing what an operator entry's call does around no device work.

    A view forward (recorded by autograd) and, with ``backward``, its backward, like a reshape
    entry and its forward-alone entry: what remains is host dispatch (and, with ``sync``, the
    wait for the device), the floor every entry timed alone carries (see
    :mod:`tensoropt_py.cost.compute`, "the call floor").
    """
    import torch

    leaf = torch.zeros(1, device=device, requires_grad=True)

    def once():
        y = leaf.view(-1)
        if backward:
            torch.autograd.backward([y], [torch.ones_like(y)])
            leaf.grad = None

    return once


def model_operator_runners(graph, cluster, devices, *, dtype=None, mixed_precision=False, device="cpu",
                           max_entries=None, precision: Precision = "32-true", forward: bool = False):
    """``(graph, [(key, runner)], {key: reason})``: a no-argument callable per compute key of
    :func:`model_compute_entries` (the local shard forward + backward, in model order), and why
    those that cannot run were skipped; at most ``max_entries`` keys are tried. With
    ``forward``, each key's runner is followed by one for its
    :func:`~tensoropt_py.cost.operator_cost.forward_key` (the forward alone).

    Examples
    --------
    >>> g, runners, skipped = model_operator_runners("mlp", "cpu-1x4", 2, max_entries=2)
    >>> len(runners) + len(skipped), runners[0][1]() is not None
    (2, True)
    """
    import torch

    from ..cost.operator_cost import forward_key
    from ..inputs import load_cluster, load_model

    entries, g = model_compute_entries(load_model(graph), load_cluster(cluster), devices, dtype=dtype,
                                       mixed_precision=mixed_precision, precision=precision)
    items = list(entries.items())
    if max_entries is not None:
        items = items[:max_entries]
    runners, skipped = [], {}
    for key, (op, cfg) in items:
        dt = key.rsplit("|", 1)[1]
        try:
            both, fwd = _operator_runners(op, cfg, g, dt, torch.device(device), precision)
        except Exception as exc:  # noqa: BLE001 - any failure to run means: keep the roofline
            skipped[key] = f"{type(exc).__name__}: {exc}"
            continue
        runners.append((key, both))
        if forward:
            runners.append((forward_key(key), fwd))
    return g, runners, skipped


def calibrate_model_compute(graph, cluster, devices, *, repeats: int = 5, warmup: int = 2, out=None,
                            max_entries: int | None = None, dtype=None, mixed_precision: bool = False,
                            device=None, verbose: bool = False, comm=None, optimizer: str = "adam",
                            precision: Precision = "32-true") -> ComputeTable:
    """Measure the compute table of ``graph`` on ``devices`` devices of ``cluster``.

    Builds the cost graph (:func:`~tensoropt_py.cost.builder.build_cost_graph`), collects the
    distinct :func:`~tensoropt_py.cost.operator_cost.compute_key` of every kept configuration,
    and times each operator forward + backward with torch at its local shard shapes
    (:func:`measure`), and its forward alone (the
    :func:`~tensoropt_py.cost.operator_cost.forward_key` entry, what a recomputation re-runs).
    Entries that cannot run (an executor limitation, see
    :func:`tensoropt_py.exec.local_ops.prepare`, or a torch error) are skipped.

    Parameters
    ----------
    graph : Graph or str
        A graph or a model spec as :func:`tensoropt_py.inputs.load_model` takes it
        (``"mlp"``, ``"gpt2:size=small,batch=8"``, ``"package.module:factory"``).
    cluster : Cluster or str
        A cluster, a preset name or a cluster JSON file.
    devices : int
    repeats, warmup : int
        See :func:`measure`.
    out : path, optional
        Calibration file whose ``compute`` section receives the entries (merged).
    max_entries : int, optional
        Measure at most this many keys (in model order).
    dtype, mixed_precision
        As :func:`~tensoropt_py.cost.builder.build_cost_graph` (they select the keys).
    device : str or torch.device, optional
        Where to run; default ``"cuda"`` when available, else ``"cpu"``.
    comm : mpi4py communicator, optional
        Measure on all its ranks at once, as :func:`calibrate_compute` (the CLI does so when
        run under ``mpiexec`` with several ranks).
    optimizer : {"sgd", "momentum", "adam"}
        Also time one update of this optimizer per distinct local parameter shard
        (:func:`model_update_entries`), the optimizer step of a training iteration.
    precision : {"32-true", "bf16-mixed"}
        The precision whose keys are timed, each operator run as the executor runs it in that
        precision (bf16-mixed: bf16 activations and working weights, the forward under autocast).
        A table holds the keys of every precision timed into it.

    Returns
    -------
    ComputeTable
        ``meta`` records ``entries`` (measured), ``skipped`` (count), ``skipped_keys``
        (key -> reason, at most 20), ``model``, ``devices``, ``torch_device`` and
        ``call_floor``: the seconds of a call with no device work timed the same way (the cost
        model subtracts it from entries measured on CUDA, see :mod:`tensoropt_py.cost.compute`),
        and ``forward_call_floor``, the same for the forward-alone entries.
    """
    import torch

    from ..inputs import load_cluster, load_model

    check_counts(repeats, warmup)
    parse_count(max_entries, "max_entries", allow_none=True)
    graph = load_model(graph)
    cluster = load_cluster(cluster)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    g, runners, skipped = model_operator_runners(graph, cluster, devices, dtype=dtype, mixed_precision=mixed_precision,
                                                 device=device, max_entries=max_entries, precision=precision,
                                                 forward=True)
    updates = list(model_update_entries(graph, cluster, devices, optimizer=optimizer, dtype=dtype,
                                        mixed_precision=mixed_precision, precision=precision).items())
    if max_entries is not None:
        updates = updates[:max(max_entries - len(runners) // 2 - len(skipped), 0)]  # keys: a runner and its forward
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    multi = device.type == "cuda"
    if multi:  # torch's default optimizer on GPUs: one multi-tensor (foreach) step over every parameter
        shares = _multi_tensor_update_shares(optimizer, [(k, shp, dt) for k, (shp, dt) in updates], device,
                                             repeats=repeats, warmup=warmup, sync=sync)
        runners += [(key, _constant(t)) for key, t in shares.items()]
    else:  # on CPU torch runs the single-tensor implementation: one update per parameter
        runners += [(key, _update_runner(optimizer, shape, dt, device)) for key, (shape, dt) in updates]
    # timed the way the entries are (same loop, sync and concurrent ranks), so it is their floor
    floors = calibrate_compute({"empty": _empty_call(device), "empty|fwd": _empty_call(device, backward=False)},
                               repeats=repeats, warmup=warmup, sync=sync, comm=comm)
    meta = {"model": g.name, "devices": int(devices), "cluster": cluster.name, "torch_device": str(device),
            "call_floor": floors.get("empty"), "forward_call_floor": floors.get("empty|fwd"), "precision": precision,
            "optimizer": optimizer, "optimizer_timing": "multi_tensor" if multi else "per_tensor",
            "torch": torch.__version__, "entries": len(runners), "skipped": len(skipped),
            "skipped_keys": dict(list(skipped.items())[:20])}
    if verbose:
        print(f"timing {len(runners)} operator shards of {g.name!r} on {device} ({len(skipped)} skipped)", flush=True)
    return calibrate_compute(runners, repeats=repeats, warmup=warmup, out=out, sync=sync, meta=meta, comm=comm)
