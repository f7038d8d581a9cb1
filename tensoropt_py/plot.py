"""Figures in the style of TensorOpt's Fig. 6-8 (matplotlib, imported lazily).

Every function takes plain data (objects with ``memory``/``time`` arrays, or
arrays), draws on a new or given axis, and returns the matplotlib ``Figure``;
``path`` writes it (PNG/PDF/SVG by extension). Memory is shown in GB (1e9 bytes)
per device, time in seconds per iteration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["plot_frontier", "plot_frontiers", "plot_profile"]

_GB = 1e9


def _pyplot():
    # Imported here so that importing tensoropt_py never needs a display or matplotlib.
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg") and not _interactive():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _interactive():
    import sys

    return hasattr(sys, "ps1") or "ipykernel" in sys.modules


def _new_axes(ax, size=(6.4, 4.4)):
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=size, layout="constrained")
    else:
        fig = ax.figure
    return fig, ax


def _finish(fig, ax, path, title):
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if path is not None:
        fig.savefig(path, dpi=150)
    return fig


def plot_frontier(
    frontier,
    *,
    baselines: Mapping[str, object] | None = None,
    memory_cap: float | None = None,
    turning_point: int | None = None,
    ax=None,
    path=None,
    title: str | None = None,
):
    """Fig. 6 style: one frontier with its compute and communication time, baselines as points.

    Parameters
    ----------
    frontier : object with ``memory``, ``time`` arrays (bytes, seconds) and optionally
        ``compute_time`` / ``communication_time`` arrays of the same length.
    baselines : mapping name -> object with scalar ``memory``/``time`` (a Plan), or with
        array ``memory``/``time`` (a Frontier, drawn as a dashed line, e.g. Mesh-TensorFlow).
    memory_cap : float, optional
        Drawn as a vertical line (bytes).
    turning_point : int, optional
        Index into the frontier of the point to mark.
    path : str or Path, optional
        Where to save the figure.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> fr = SimpleNamespace(memory=np.array([1e9, 2e9, 4e9]), time=np.array([3.0, 1.5, 1.0]))
    >>> fig = plot_frontier(fr, memory_cap=3e9, turning_point=1)
    >>> len(fig.axes)
    1
    """
    fig, ax = _new_axes(ax)
    mem = np.asarray(frontier.memory, dtype=float) / _GB
    time = np.asarray(frontier.time, dtype=float)
    # A step line: with memory x available, the best time is that of the last point left of x.
    ax.step(mem, time, where="post", color="C0", lw=1.5)
    ax.plot(mem, time, "o", color="C0", ms=4, label="cost frontier (time)")
    for attr, style, label in (
        ("compute_time", ":", "compute time"),
        ("communication_time", ":", "network time"),
    ):
        values = getattr(frontier, attr, None)
        if values is not None and len(values) == len(mem):
            ax.plot(mem, np.asarray(values, dtype=float), style, lw=1.5, label=label)
    if turning_point is not None and 0 <= turning_point < len(mem):
        ax.plot(mem[turning_point], time[turning_point], "*", ms=14, color="C3", label="turning point", zorder=5)
    markers = iter("sD^vP<>Xh")
    for name, base in (baselines or {}).items():
        if base is None:
            continue
        bm = np.atleast_1d(np.asarray(base.memory, dtype=float)) / _GB
        bt = np.atleast_1d(np.asarray(base.time, dtype=float))
        if bm.size > 1:
            ax.plot(bm, bt, "--", lw=1.5, label=name)
        else:
            ax.plot(bm, bt, next(markers, "o"), ms=8, label=name, zorder=4)
    if memory_cap is not None and math.isfinite(memory_cap):
        ax.axvline(memory_cap / _GB, color="k", ls="--", lw=1, label=f"memory cap {memory_cap / _GB:.1f} GB")
    ax.set_xlabel("memory per device (GB)")
    ax.set_ylabel("per-iteration time (s)")
    ax.legend(fontsize=8)
    return _finish(fig, ax, path, title)


def plot_frontiers(frontiers: Mapping[str, object], *, ax=None, path=None, title: str | None = None):
    """Fig. 7 style: several frontiers on one axis (model sizes, network settings).

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> a = SimpleNamespace(memory=np.array([1e9, 2e9]), time=np.array([2.0, 1.0]))
    >>> fig = plot_frontiers({"NVLink": a, "PCIe": a})
    >>> len(fig.axes[0].lines)
    2
    """
    fig, ax = _new_axes(ax)
    for i, (name, fr) in enumerate(frontiers.items()):
        ax.plot(np.asarray(fr.memory, float) / _GB, np.asarray(fr.time, float), "o-", ms=3, color=f"C{i}", label=name)
    ax.set_xlabel("memory per device (GB)")
    ax.set_ylabel("per-iteration time (s)")
    ax.legend(fontsize=8)
    return _finish(fig, ax, path, title)


def plot_profile(
    devices: Sequence[int],
    times: Mapping[str, Sequence[float]],
    *,
    ax=None,
    path=None,
    title: str | None = None,
):
    """Fig. 8 style: device count vs best per-iteration time, per method; NaN = does not fit.

    Examples
    --------
    >>> import numpy as np
    >>> fig = plot_profile([2, 4, 8], {"TensorOpt": [np.nan, 2.0, 1.1], "data parallel": [np.nan, np.nan, 1.0]})
    >>> fig.axes[0].get_xlabel()
    'number of devices'
    """
    fig, ax = _new_axes(ax)
    devices = np.asarray(devices)
    positions = np.arange(len(devices))
    methods = list(times)
    width = 0.8 / max(len(methods), 1)
    top = max((np.nanmax(np.asarray(v, float)) for v in times.values() if np.isfinite(v).any()), default=1.0)
    for i, name in enumerate(methods):
        values = np.asarray(times[name], dtype=float)
        x = positions + (i - (len(methods) - 1) / 2) * width
        fits = np.isfinite(values)
        ax.bar(x[fits], values[fits], width=width, color=f"C{i}", label=name)
        for xi in x[~fits]:
            ax.text(xi, top * 0.02, "does not fit", rotation=90, ha="center", va="bottom", fontsize=7, color=f"C{i}")
    ax.set_xticks(positions, [str(d) for d in devices])
    ax.set_xlim(-0.6, len(devices) - 0.4)
    ax.set_xlabel("number of devices")
    ax.set_ylabel("best per-iteration time (s)")
    ax.legend(fontsize=8)
    return _finish(fig, ax, path, title)
