"""Figures in the style of TensorOpt's Fig. 6-8 (matplotlib, imported lazily).

Every function takes plain data (objects with ``memory``/``time`` arrays, or
arrays), draws on a new or given axis, and returns the matplotlib ``Figure``;
``path`` writes it (PNG/PDF/SVG by extension). Memory is shown per device and time
per iteration, each in the largest decimal unit the data reaches (GB = 1e9 bytes, as
in the paper, for real models; kB or MB for the small test models; s, ms or us), and
the unit is written in the axis label.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["plot_frontier", "plot_frontiers", "plot_profile", "plot_timeline", "check_plot_path"]

_GB = 1e9
from .errors import InvalidInputError
from .units import MEMORY_UNITS as _MEMORY_UNITS
from .units import TIME_UNITS as _TIME_UNITS
from .units import display_unit as _unit
from .units import parse_count




def _fmt(value, unit):
    name, div = unit
    return f"{value / div:.3g} {name}"


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


def check_plot_path(path) -> Path:
    """Check, before any long computation, that a figure can be written to ``path``.

    Parameters
    ----------
    path : str or Path
        The file to write; its suffix picks the format.

    Returns
    -------
    Path

    Raises
    ------
    InvalidInputError
        The suffix is not a format matplotlib writes, or the folder does not exist.

    Examples
    --------
    >>> check_plot_path("frontier.png").suffix
    '.png'
    >>> check_plot_path("frontier.docx")
    Traceback (most recent call last):
    ...
    tensoropt_py.errors.InvalidInputError: cannot write a figure to 'frontier.docx': ...
    """
    from matplotlib.figure import Figure

    path = Path(path)
    formats = sorted(Figure().canvas.get_supported_filetypes())
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise InvalidInputError(f"cannot write a figure to {str(path)!r}: the suffix {path.suffix or '(none)'!r} "
                                f"is not a figure format; use one of {', '.join('.' + f for f in formats)}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InvalidInputError(f"cannot write a figure to {str(path)!r}: the folder {str(folder)!r} does not exist")
    return path


def plot_frontier(
    frontier,
    *,
    baselines: Mapping[str, object] | None = None,
    memory_cap: float | None = None,
    turning_point: int | None = None,
    picked: int | None = None,
    note: str | None = None,
    ax=None,
    path=None,
    title: str | None = None,
    options: Mapping[str, Sequence[float]] | None = None,
):
    """Fig. 6 style: one frontier (its two ends, turning point and picked plan marked), baselines as points.

    The time axis spans the frontier and the baselines, not zero: a frontier whose times differ
    by 15% stays readable. When the frontier has ``compute_time`` and ``communication_time``
    (and no ``ax`` is given), a second panel below shows them on their own scale.

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
    picked : int, optional
        Index of the plan picked (e.g. the fastest under the cap), marked.
    note : str, optional
        Shown in the corner, e.g. whether the frontier is exact and how approximate.
    ax : matplotlib Axes, optional
        Draw the frontier there (one panel only).
    path : str or Path, optional
        Where to save the figure.
    title : str, optional
    options : mapping lever -> (P,) counts, optional
        Per point, how many operators use each training lever (``Frontier.option_usage()``:
        ``"recompute"``, ``"shard_state"``); points using one get that lever's marker.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> fr = SimpleNamespace(memory=np.array([1e9, 2e9, 4e9]), time=np.array([3.0, 1.5, 1.0]))
    >>> fig = plot_frontier(fr, memory_cap=3e9, turning_point=1, picked=1, note="exact",
    ...                     options={"recompute": [3, 1, 0], "shard_state": [2, 2, 0]})
    >>> len(fig.axes)
    1
    """
    split = [getattr(frontier, a, None) for a in ("compute_time", "communication_time")]
    two_panels = ax is None and all(v is not None and len(v) == len(frontier.memory) for v in split)
    if two_panels:
        plt = _pyplot()
        fig, (ax, ax_split) = plt.subplots(2, 1, figsize=(6.4, 6.0), sharex=True, height_ratios=(2, 1),
                                           layout="constrained")
    else:
        fig, ax = _new_axes(ax)
    base_items = [(n, b) for n, b in (baselines or {}).items() if b is not None]
    mem_all = [frontier.memory] + [b.memory for _, b in base_items]
    if memory_cap is not None and math.isfinite(memory_cap):
        mem_all.append([memory_cap])
    mu = _unit(mem_all, _MEMORY_UNITS)
    tu = _unit([frontier.time] + [b.time for _, b in base_items], _TIME_UNITS)
    mem = np.asarray(frontier.memory, dtype=float) / mu[1]
    time = np.asarray(frontier.time, dtype=float) / tu[1]
    # A step line: with memory x available, the best time is that of the last point left of x.
    # Many points: markers on a readable subset, the line through all of them.
    every = max(1, len(mem) // 60)
    ax.step(mem, time, where="post", color="C0", lw=1.5)
    ax.plot(mem, time, "o", color="C0", ms=4 if every == 1 else 3, markevery=every,
            label=f"cost frontier ({len(mem)} points)")
    if len(mem):
        ax.plot(mem[0], time[0], "<", ms=10, color="C0", mfc="white", mew=1.8, zorder=5,
                label=f"least memory {_fmt(mem[0] * mu[1], mu)}, {_fmt(time[0] * tu[1], tu)}")
        ax.plot(mem[-1], time[-1], ">", ms=10, color="C0", mfc="white", mew=1.8, zorder=5,
                label=f"fastest {_fmt(time[-1] * tu[1], tu)}, {_fmt(mem[-1] * mu[1], mu)}")
    for (lever, counts), (marker, color, size) in zip((options or {}).items(),
                                                      (("^", "C1", 7), ("s", "C2", 9), ("v", "C5", 7))):
        used = np.asarray(counts) > 0
        if used.shape == mem.shape and used.any():
            label = {"recompute": "uses recomputation", "shard_state": "uses sharded optimizer state"}.get(lever, lever)
            idx = np.flatnonzero(used)[::max(1, int(used.sum()) // 60)]  # a readable subset, as for the line
            ax.plot(mem[idx], time[idx], marker, ls="none", ms=size, mfc="none", mew=1.2, color=color, zorder=4,
                    label=f"{label} ({int(used.sum())} of {len(mem)} points)")
    if turning_point is not None and -len(mem) <= turning_point < len(mem):
        ax.plot(mem[turning_point], time[turning_point], "*", ms=14, color="C3", label="turning point", zorder=5)
    if picked is not None and -len(mem) <= picked < len(mem):
        ax.plot(mem[picked], time[picked], "o", ms=13, mfc="none", mew=2.2, color="k", zorder=6,
                label=f"picked {_fmt(mem[picked] * mu[1], mu)}, {_fmt(time[picked] * tu[1], tu)}")
    markers = iter(["s", "D", "^", "v", "P", "<", ">", "X", "h"])
    colors = iter(f"C{i}" for i in range(4, 10))
    for name, base in base_items:
        bm = np.atleast_1d(np.asarray(base.memory, dtype=float)) / mu[1]
        bt = np.atleast_1d(np.asarray(base.time, dtype=float)) / tu[1]
        color = next(colors, "k")
        if bm.size > 1:
            ax.plot(bm, bt, "x--", ms=5, lw=1.2, color=color, label=name)
        else:
            # Hollow markers: baselines often coincide (e.g. Mesh-TF's only point = data parallel).
            ax.plot(bm, bt, next(markers, "o"), ms=9, mfc="none", mew=1.8, color=color, label=name, zorder=4)
    if memory_cap is not None and math.isfinite(memory_cap):
        for a in (ax, ax_split) if two_panels else (ax,):
            a.axvline(memory_cap / mu[1], color="k", ls="--", lw=1,
                      label=f"memory cap {_fmt(memory_cap, mu)}" if a is ax else None)
    ax.margins(y=0.08)
    ax.set_ylabel(f"per-iteration time ({tu[0]})")
    legend = ax.legend(fontsize=8, loc="best", framealpha=0.9,
                       title=None if not note else textwrap.fill(note, 38), title_fontsize=8)
    legend.get_title().set_multialignment("left")
    bottom = ax
    if two_panels:
        su = _unit(split, _TIME_UNITS)
        for values, color, label in zip(split, ("C2", "C1"), ("compute time", "communication time")):
            ax_split.step(mem, np.asarray(values, dtype=float) / su[1], where="post", color=color, lw=1.5,
                          label=f"{label} of each point")
        ax_split.set_ylabel(f"time ({su[0]})")
        ax_split.set_ylim(bottom=0)
        ax_split.legend(fontsize=8, loc="best", framealpha=0.9)
        ax_split.grid(True, which="both", alpha=0.3)
        bottom = ax_split
    bottom.set_xlabel(f"memory per device ({mu[0]})")
    return _finish(fig, ax, path, title)


def plot_frontiers(frontiers: Mapping[str, object], *, ax=None, path=None, title: str | None = None):
    """Fig. 7 style: several frontiers on one axis (model sizes, network settings).

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> a = SimpleNamespace(memory=np.array([1e9, 2e9]), time=np.array([2.0, 1.0]))
    >>> fig = plot_frontiers({"NVLink": a, "PCIe": a})
    >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    ['NVLink', 'PCIe']
    """
    fig, ax = _new_axes(ax)
    mu = _unit([fr.memory for fr in frontiers.values()], _MEMORY_UNITS)
    tu = _unit([fr.time for fr in frontiers.values()], _TIME_UNITS)
    for i, (name, fr) in enumerate(frontiers.items()):
        ax.step(np.asarray(fr.memory, float) / mu[1], np.asarray(fr.time, float) / tu[1], where="post",
                color=f"C{i}", lw=1.5, label=name)
        ax.plot(np.asarray(fr.memory, float) / mu[1], np.asarray(fr.time, float) / tu[1], "o", ms=3,
                color=f"C{i}")
    ax.set_xlabel(f"memory per device ({mu[0]})")
    ax.set_ylabel(f"per-iteration time ({tu[0]})")
    if frontiers:
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
    for name in methods:
        if len(times[name]) != len(devices):
            raise ValueError(f"plot_profile: {name!r} has {len(times[name])} times for {len(devices)} device counts")
    width = 0.8 / max(len(methods), 1)
    tu = _unit(list(times.values()), _TIME_UNITS)
    top = max((np.nanmax(np.asarray(v, float)) for v in times.values() if np.isfinite(np.asarray(v, float)).any()),
              default=tu[1]) / tu[1]
    ax.set_axisbelow(True)
    for i, name in enumerate(methods):
        values = np.asarray(times[name], dtype=float) / tu[1]
        x = positions + (i - (len(methods) - 1) / 2) * width
        fits = np.isfinite(values)
        ax.bar(x[fits], values[fits], width=width, color=f"C{i}", label=name)
        for xi in x[~fits]:
            ax.text(xi, top * 0.02, "does not fit", rotation=90, ha="center", va="bottom", fontsize=7, color=f"C{i}")
    ax.set_xticks(positions, [str(d) for d in devices])
    ax.set_xlim(-0.6, len(devices) - 0.4)
    ax.set_xlabel("number of devices")
    ax.set_ylim(0, top * 1.1)
    ax.set_ylabel(f"best per-iteration time ({tu[0]})")
    ax.legend(fontsize=8)
    return _finish(fig, ax, path, title)


_PHASE_COLORS = {"forward": "C0", "backward": "C2", "gradient sync": "C1", "rederive": "C4"}


def plot_timeline(simulation, *, devices: int | None = 4, measured_time: float | None = None, plan=None,
                  measured_memory: float | None = None, ax=None, path=None, title: str | None = None):
    """One simulated iteration: the compute and network streams of each device over time, and
    under them the live memory of a device over the same iteration with its peak.

    Parameters
    ----------
    simulation : PlanSimulation
        What :func:`tensoropt_py.soap.plan_simulator.simulate_plan` returned (``time``,
        ``additive_time`` and ``events`` with ``device``, ``stream``, ``phase``, ``start``, ``end``).
    devices : int or None
        Draw the first this many devices (None: all).
    measured_time : float, optional
        The executor's measured iteration time (seconds), drawn as a line.
    plan : Plan, optional
        The simulated plan: with its ``memory_timeline``, a second panel draws the live memory
        (every event placed at the start of its task on the first device shown) and marks the
        peak with its operator and phase.
    measured_memory : float, optional
        The executor's measured peak (bytes), drawn as a reference line on the memory panel.
    ax : matplotlib Axes, optional
        Draw the streams here (no memory panel).
    path : str or Path, optional
        Where to save the figure.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from types import SimpleNamespace as E
    >>> sim = E(time=3.0, additive_time=3.5, events=(E(device=0, stream="compute", phase="forward", start=0.0, end=1.0),
    ...          E(device=0, stream="network", phase="gradient sync", start=1.0, end=3.0)))
    >>> fig = plot_timeline(sim)
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['device 0 compute', 'device 0 network']
    """
    parse_count(devices, "devices", allow_none=True)
    timeline = tuple(getattr(plan, "memory_timeline", ()) or ())
    mem_ax = None
    if timeline and ax is None:
        fig, (ax, mem_ax) = _pyplot().subplots(2, 1, figsize=(8.0, 6.0), layout="constrained", sharex=True,
                                                height_ratios=(3, 2))
    else:
        fig, ax = _new_axes(ax, size=(8.0, 3.6))
    shown = sorted({e.device for e in simulation.events})
    if devices is not None:
        shown = shown[:devices]
    rows = [(d, s) for d in shown for s in ("compute", "network")]
    tu = _unit([[simulation.time, simulation.additive_time] + ([measured_time] if measured_time else [])],
               _TIME_UNITS)
    seen = set()
    for y, (d, stream) in enumerate(rows):
        for phase, color in _PHASE_COLORS.items():
            bars = [(e.start / tu[1], (e.end - e.start) / tu[1]) for e in simulation.events
                    if e.device == d and e.stream == stream and e.phase == phase]
            if bars:
                ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=color, label=None if phase in seen else phase)
                seen.add(phase)
    ax.axvline(simulation.time / tu[1], color="k", lw=1.2, label=f"simulated {_fmt(simulation.time, tu)}")
    ax.axvline(simulation.additive_time / tu[1], color="k", ls=":", lw=1.2,
               label=f"additive estimate {_fmt(simulation.additive_time, tu)}")
    if measured_time:
        ax.axvline(measured_time / tu[1], color="C3", ls="--", lw=1.5, label=f"measured {_fmt(measured_time, tu)}")
    ax.set_yticks(range(len(rows)), [f"device {d} {s}" for d, s in rows])
    ax.invert_yaxis()
    if mem_ax is None:
        ax.set_xlabel(f"time in the iteration ({tu[0]})")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), framealpha=0.9, ncols=3)
        return _finish(fig, ax, path, title)
    ax.legend(fontsize=8, loc="upper right", framealpha=0.9, ncols=2)
    ax.grid(True, which="both", alpha=0.3)
    _memory_panel(mem_ax, simulation, plan, timeline, shown[0] if shown else 0, tu, measured_memory)
    mem_ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, ax, path, title)


def _memory_panel(ax, simulation, plan, timeline, device, tu, measured_memory):
    """Live memory of ``device`` over the simulated iteration, the peak marked with its cause."""
    from .cost.memory import memory_events

    names = [o.name for o in plan.operators]
    events = memory_events(names)
    if len(events) != len(timeline):
        raise InvalidInputError(f"the plan's memory timeline has {len(timeline)} events, its {len(names)} "
                                f"operators make {len(events)}")
    starts = {}
    for e in simulation.events:
        if e.device == device and e.stream == "compute" and e.phase in ("forward", "backward"):
            starts.setdefault((e.label, e.phase), e.start)
    xs = [starts.get(ev, simulation.time) if ev[1] != "optimizer" else simulation.time for ev in events]
    xs = np.maximum.accumulate(np.asarray(xs, dtype=float)) / tu[1]  # events happen in this order
    live = np.asarray(timeline, dtype=float)
    mu = _unit([live] + ([[measured_memory]] if measured_memory else []), _MEMORY_UNITS)
    ax.step(xs, live / mu[1], where="post", color="C0", lw=1.3, label=f"live memory, device {device}")
    k = int(np.argmax(live))
    op, phase = events[k]
    what = f"{phase} of {op}" if op else "the optimizer step"
    ax.plot([xs[k]], [live[k] / mu[1]], "v", color="C3", ms=8, label=f"peak {_fmt(live[k], mu)}: {what}")
    ax.annotate(f"peak: {what}", (xs[k], live[k] / mu[1]), textcoords="offset points", xytext=(4, 6), fontsize=8,
                color="C3")
    if measured_memory:
        ax.axhline(measured_memory / mu[1], color="C3", ls="--", lw=1.2,
                   label=f"measured peak {_fmt(measured_memory, mu)}")
    ax.set_ylim(0, max(live.max(), measured_memory or 0.0) / mu[1] * 1.15)
    ax.set_ylabel(f"memory ({mu[0]})")
    ax.set_xlabel(f"time in the iteration ({tu[0]})")
    ax.legend(fontsize=8, loc="lower right", framealpha=0.9)
