"""Parsing what users pass in, once, at the boundary: models, clusters, device counts, memory caps.

Everything below the public face (API, CLI, baselines, executor) takes what these functions
return: a :class:`~tensoropt_py.graph.ir.Graph`, a :class:`~tensoropt_py.cluster.Cluster`, an
int device count, a memory cap in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .errors import InvalidInputError
from .units import parse_bytes

__all__ = ["load_model", "load_cluster", "parse_memory_cap", "check_devices", "device_counts", "SAFETY_MARGIN"]

#: TensorOpt §5.2 keeps 10% of device memory free: the default cap is memory / SAFETY_MARGIN.
SAFETY_MARGIN = 1.1


def load_model(model, example_inputs=None):
    """A :class:`~tensoropt_py.graph.ir.Graph` from a zoo name, a Graph, or a torch module.

    Parameters
    ----------
    model : str, Graph or torch.nn.Module
        A zoo name (see :func:`tensoropt_py.models.names`), optionally with keyword
        arguments as ``"gpt2:size=small"`` or ``"mlp:batch=64,hidden=256"``; a
        ``"package.module:factory"`` path whose factory returns a Graph or a
        ``(module, example_inputs)`` pair; a Graph; or a module (then
        ``example_inputs`` is required).
    example_inputs : Tensor, tuple of Tensors or dict, optional
        The module's example inputs (a dict: keyword inputs).

    Examples
    --------
    >>> load_model("mlp:batch=64").name
    'mlp'
    """
    from .graph.ir import Graph

    if isinstance(model, Graph):
        return model
    if isinstance(model, str):
        return _model_from_spec(model)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise InvalidInputError("a torch.nn.Module needs example_inputs (a tuple of tensors) to be traced")
        from .graph.torch_import import from_torch

        if isinstance(example_inputs, Mapping):  # keyword inputs, e.g. {"input_ids": ..., "labels": ...}
            return from_torch(model, dict(example_inputs))
        return from_torch(model, tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,))
    raise InvalidInputError(
        f"model must be a zoo name, a Graph or a torch.nn.Module (with example_inputs); got {type(model).__name__}"
    )


def _parse_value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _model_from_spec(spec: str):
    """``"name"``, ``"name:key=value,..."`` (zoo) or ``"package.module:factory"``."""
    from .graph import zoo as models
    from .graph.ir import Graph

    name, _, rest = spec.partition(":")
    zoo = tuple(n for n in models.__all__ if callable(getattr(models, n)))
    if name in zoo:
        kwargs = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise InvalidInputError(f"model option {item!r} in {spec!r} must look like key=value")
            kwargs[key.strip()] = _parse_value(value.strip())
        try:
            return getattr(models, name)(**kwargs)
        except TypeError as exc:
            raise InvalidInputError(f"bad options for zoo model {name!r}: {exc}") from None
    if not rest:
        raise InvalidInputError(f"unknown model {spec!r}; zoo models: {', '.join(zoo)} (or use package.module:factory)")
    import importlib

    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise InvalidInputError(f"cannot import {name!r} for model {spec!r}: {exc}") from None
    factory = getattr(module, rest, None)
    if not callable(factory):
        raise InvalidInputError(f"{name!r} has no callable {rest!r} (model {spec!r})")
    made = factory()
    if isinstance(made, Graph):
        return made
    if isinstance(made, tuple) and len(made) == 2:
        return load_model(made[0], made[1])
    raise InvalidInputError(f"factory {spec!r} must return a Graph or a (module, example_inputs) pair")


def load_cluster(cluster):
    """A :class:`~tensoropt_py.cluster.Cluster` from a preset name, a JSON path, or a Cluster.

    Parameters
    ----------
    cluster : str, Path or Cluster

    Examples
    --------
    >>> load_cluster("cpu-1x4").num_devices
    4
    """
    from .cluster import Cluster

    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, (str, Path)):
        return Cluster.load(cluster)
    raise InvalidInputError(f"cluster must be a preset name, a JSON file or a Cluster; got {type(cluster).__name__}")


def parse_memory_cap(cap, cluster) -> float:
    """A memory cap in bytes per device, parsed once where the user gives it.

    Parameters
    ----------
    cap : float, int, str or None
        Bytes (``14.5e9``) or a size string (``"14.5GB"``, ``"16 GiB"``); None: the device
        memory of ``cluster`` / :data:`SAFETY_MARGIN` (TensorOpt §5.2 keeps 10% free).
    cluster : Cluster

    Returns
    -------
    float
        Bytes per device (> 0).

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> parse_memory_cap("14.5GB", Cluster.preset("v100-2x8"))
    14500000000.0
    """
    if cap is None:
        return cluster.device.memory / SAFETY_MARGIN
    value = parse_bytes(cap)
    if not value > 0:
        raise InvalidInputError(f"memory_cap must be positive, got {cap!r}")
    return float(value)


def check_devices(devices, cluster) -> int:
    """``devices`` as an int after checking it is one of ``cluster.device_counts()``.

    Parameters
    ----------
    devices : int
    cluster : Cluster

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> check_devices(8, Cluster.preset("v100-2x8"))
    8
    """
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)):
        raise InvalidInputError(f"devices must be a positive int, got {devices!r}")
    devices = int(devices)
    valid = tuple(cluster.device_counts())
    if devices < 1:
        raise InvalidInputError(f"devices must be a positive int, got {devices}; valid counts on {cluster.name}: {valid}")
    if devices not in valid:
        raise InvalidInputError(f"devices={devices} is not a usable device count of {cluster.name}; valid: {valid}")
    return devices


def device_counts(devices, cluster) -> tuple[int, ...]:
    """Sorted distinct device counts from an int, a list of ints, or None (every count of ``cluster``).

    Parameters
    ----------
    devices : int, sequence of int or None
    cluster : Cluster

    Examples
    --------
    >>> from tensoropt_py.cluster import Cluster
    >>> device_counts([8, 2, 8], Cluster.preset("v100-2x8"))
    (2, 8)
    """
    if devices is None:
        return tuple(cluster.device_counts())
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        devices = [devices]
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise InvalidInputError(f"devices must be a positive int or a list of them, got {devices!r}")
    counts = tuple(sorted({check_devices(d, cluster) for d in devices}))
    if not counts:
        raise InvalidInputError("devices must name at least one device count")
    return counts
