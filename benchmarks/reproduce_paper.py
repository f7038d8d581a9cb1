"""Reproduce TensorOpt's Fig. 6 (cost frontier vs baselines) and Fig. 8 (time per device count).

For each zoo model and device count on ``v100-2x8``: the frontier (``epsilon=1e-3``), the
baselines (data parallelism, OptCNN, ToFu, SOYBEAN, the Mesh-TensorFlow frontier), a table
(memory per device, time per iteration, whether the frontier dominates each baseline) and
``docs/figures/fig6_<model>_<devices>.png``. ``--profile MODEL`` adds a Fig. 8 style profile
(``docs/figures/fig8_<model>.png``).

Every (model, devices) runs in a child process under ``--time-limit`` seconds; what finished
before the limit (the frontier, then the baselines one by one) is still reported and plotted.

    python benchmarks/reproduce_paper.py --models transformer wide_resnet --devices 8
    python benchmarks/reproduce_paper.py --models rnn --rnn-small --devices 8 --time-limit 300
    python benchmarks/reproduce_paper.py --models none --profile transformer --profile-devices 1 2 4 8
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIGURES = ROOT / "docs" / "figures"
CLUSTER = "v100-2x8"
EPSILON = 1e-3
# Baselines in the order they are run (cheapest first, so a time limit cuts the expensive ones).
BASELINES = ("data parallel", "OptCNN", "Mesh-TF", "ToFu", "SOYBEAN")


def make_model(name: str, rnn_small: bool):
    from tensoropt_py.graph import zoo

    if name == "rnn" and rnn_small:
        # 4 layers x 8192 units, 10 steps: same structure, ~1/4 the depth and 1/2 the sequence.
        return zoo.rnn(layers=4, hidden=8192, seq_len=10, name="rnn_small")
    return getattr(zoo, name)()


def dominance(fm, ft, m, t, tol=EPSILON):
    """'dominated', 'on the frontier' (within tol) or 'not dominated' for the point (m, t)."""
    weak = (fm <= m * (1 + 1e-9)) & (ft <= t * (1 + 1e-9))
    strict = weak & ((fm < m * (1 - tol)) | (ft < t * (1 - tol)))
    if strict.any():
        j = int(np.flatnonzero(strict)[0])
        return "dominated", (float(fm[j]), float(ft[j]))
    close = (fm <= m * (1 + tol)) & (ft <= t * (1 + tol))
    if close.any():
        return "on the frontier", None
    return "not dominated", None


def _run_one(model_name, devices, rnn_small, queue):
    """Child: frontier, then each baseline; sends rows to ``queue`` and re-plots after each."""
    from tensoropt_py import baselines as bl
    from tensoropt_py.api import frontier
    from tensoropt_py.inputs import parse_memory_cap
    from tensoropt_py.cluster import Cluster

    cluster = Cluster.preset(CLUSTER)
    cap = parse_memory_cap(None, cluster)
    model = make_model(model_name, rnn_small)
    t0 = time.perf_counter()
    fr = frontier(model, cluster, devices, epsilon=EPSILON)
    tp = fr.turning_point
    queue.put(("frontier", dict(model=fr.model, points=len(fr), seconds=time.perf_counter() - t0,
                                memory=fr.memory.tolist(), time=fr.time.tolist(), turning_point=tp,
                                exact=fr.exact, cap=cap)))
    tag = "rnn_small" if (model_name == "rnn" and rnn_small) else model_name
    path = FIGURES / f"fig6_{tag}_{devices}.png"
    drawn = {}

    def replot():
        import matplotlib.pyplot as plt

        fig = fr.plot(path, baselines=drawn, memory_cap=cap,
                      title=f"{fr.model} on {CLUSTER}, {devices} devices (Fig. 6 style)")
        fig.set_dpi(100)
        fig.savefig(path, dpi=100)
        plt.close(fig)

    replot()
    mcg = fr.model_cost_graph
    calls = {
        "data parallel": lambda: bl.data_parallel(cluster=cluster, cost_graph=mcg),
        "OptCNN": lambda: bl.optcnn(cluster=cluster, cost_graph=mcg),
        "Mesh-TF": lambda: bl.mesh_tensorflow(model, cluster, devices),
        "ToFu": lambda: bl.tofu(cluster=cluster, cost_graph=mcg),
        "SOYBEAN": lambda: bl.soybean(cluster=cluster, cost_graph=mcg),
    }
    for name in BASELINES:
        t1 = time.perf_counter()
        try:
            res = calls[name]()
        except Exception as exc:  # e.g. SOYBEAN on a non-power-of-two count
            queue.put(("error", dict(name=name, error=f"{type(exc).__name__}: {exc}")))
            continue
        drawn[name] = res
        queue.put(("baseline", dict(name=name, seconds=time.perf_counter() - t1,
                                    memory=np.atleast_1d(res.memory).astype(float).tolist(),
                                    time=np.atleast_1d(res.time).astype(float).tolist())))
        replot()
    queue.put(("done", {}))


def gb(x):
    return f"{x / 1e9:.1f}"


def report(model_name, devices, msgs, elapsed, limit):
    fr = next((d for k, d in msgs if k == "frontier"), None)
    print(f"\n### {model_name} on {devices} devices of {CLUSTER} ({elapsed:.0f} s)")
    if fr is None:
        print(f"frontier not finished within the {limit:.0f} s limit")
        return
    fm, ft = np.array(fr["memory"]), np.array(fr["time"])
    tp = fr["turning_point"]
    print(f"frontier: {fr['points']} points in {fr['seconds']:.0f} s, {gb(fm.min())}-{gb(fm.max())} GB per device, "
          f"{ft.min():.3g}-{ft.max():.3g} s per iteration; memory cap {gb(fr['cap'])} GB")
    print("| strategy | memory per device (GB) | time per iteration (s) | vs. the frontier |")
    print("|---|---|---|---|")
    print(f"| frontier, minimum-memory end | {gb(fm[0])} | {ft[0]:.3f} | |")
    print(f"| frontier, turning point | {gb(fm[tp])} | {ft[tp]:.3f} | |")
    print(f"| frontier, minimum-time end | {gb(fm[-1])} | {ft[-1]:.3f} | |")
    fits = np.flatnonzero(fm <= fr["cap"])
    if fits.size:
        i = int(fits[-1])
        print(f"| frontier, fastest under the cap | {gb(fm[i])} | {ft[i]:.3f} | |")
    seen = set()
    for kind, d in msgs:
        if kind == "error":
            seen.add(d["name"])
            print(f"| {d['name']} | - | - | not applicable ({d['error'][:80]}) |")
        if kind != "baseline":
            continue
        seen.add(d["name"])
        bm, bt = np.array(d["memory"]), np.array(d["time"])
        cap_note = "" if bm.min() <= fr["cap"] else ", over the cap"
        if bm.size == 1:
            verdict, by = dominance(fm, ft, bm[0], bt[0])
            extra = f" (by {gb(by[0])} GB, {by[1]:.3f} s)" if by else ""
            if verdict == "not dominated":
                j = max(int(np.searchsorted(fm, bm[0], side="right")) - 1, 0)  # frontier point left of it
                extra = (f" (memory {100 * (bm[0] / fm[j] - 1):+.2f}%, time {100 * (bt[0] / ft[j] - 1):+.2f}% vs "
                         f"the frontier's {fm[j] / 1e9:.3f} GB, {ft[j]:.3f} s point)")
            print(f"| {d['name']} | {gb(bm[0])} | {bt[0]:.3f} | {verdict}{extra}{cap_note} |")
        else:
            verdicts = [dominance(fm, ft, m, t)[0] for m, t in zip(bm, bt)]
            n_dom = sum(v == "dominated" for v in verdicts)
            n_on = sum(v == "on the frontier" for v in verdicts)
            print(f"| {d['name']} frontier ({bm.size} points) | {gb(bm.min())}-{gb(bm.max())} | "
                  f"{bt.min():.3f}-{bt.max():.3f} | {n_dom} points dominated, {n_on} on ours; its least memory "
                  f"{gb(bm.min())} GB vs ours {gb(fm.min())} GB{cap_note} |")
    for name in BASELINES:
        if name not in seen:
            print(f"| {name} | - | - | not finished within the {limit:.0f} s limit |")
    sys.stdout.flush()


def run_model(model_name, devices, rnn_small, limit):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run_one, args=(model_name, devices, rnn_small, queue), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    msgs = []
    while True:
        left = limit - (time.perf_counter() - t0)
        try:
            kind, data = queue.get(timeout=max(left, 0.01))
        except Exception:
            if left <= 0 or not proc.is_alive():
                break
            continue
        if kind == "done":
            break
        msgs.append((kind, data))
    if proc.is_alive():
        proc.terminate()  # our own child, by handle
    proc.join(5)
    report(model_name, devices, msgs, time.perf_counter() - t0, limit)
    return msgs


def profile(model_name, counts, rnn_small):
    """Fig. 8: best time under the default cap per device count, with data parallelism and OptCNN."""
    import matplotlib.pyplot as plt

    from tensoropt_py import baselines as bl
    from tensoropt_py.api import find_strategy
    from tensoropt_py.inputs import parse_memory_cap
    from tensoropt_py.cluster import Cluster

    cluster = Cluster.preset(CLUSTER)
    cap = parse_memory_cap(None, cluster)
    model = make_model(model_name, rnn_small)
    t0 = time.perf_counter()
    prof = find_strategy(model, cluster, option="profiling", devices=list(counts), epsilon=EPSILON)
    base = {"data parallel": [], "OptCNN": []}
    raw = {"data parallel": [], "OptCNN": []}
    for n in prof.devices:
        for name, fn in (("data parallel", bl.data_parallel), ("OptCNN", bl.optcnn)):
            p = fn(model, cluster, n)
            raw[name].append((float(p.memory), float(p.time)))
            base[name].append(float(p.time) if p.memory <= cap else math.nan)
    path = FIGURES / f"fig8_{'rnn_small' if (model_name == 'rnn' and rnn_small) else model_name}.png"
    fig = prof.plot(path, baselines=base, title=f"{prof.model} on {CLUSTER}, cap {gb(cap)} GB (Fig. 8 style)")
    # A method with no bar at all (nothing fits) gets a default-coloured legend swatch: redraw
    # the legend with the colours plot_profile uses (C0, C1, ... in order).
    from matplotlib.patches import Patch

    names = ["TensorOpt", *base]
    fig.axes[0].legend(handles=[Patch(color=f"C{i}", label=n) for i, n in enumerate(names)], fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"\n### Fig. 8 profile: {prof.model} on {CLUSTER}, memory cap {gb(cap)} GB "
          f"({time.perf_counter() - t0:.0f} s)")
    print("| devices | TensorOpt (s) | its memory (GB) | least memory any strategy (GB) | data parallel: memory GB / time s "
          "| OptCNN: memory GB / time s |")
    print("|---|---|---|---|---|---|")
    for i, n in enumerate(prof.devices):
        t = "does not fit" if math.isnan(prof.time[i]) else f"{prof.time[i]:.3f}"
        m = "-" if math.isnan(prof.memory[i]) else gb(prof.memory[i])
        cells = []
        for name in ("data parallel", "OptCNN"):
            bm, bt = raw[name][i]
            cells.append(f"{gb(bm)} / {bt:.3f}" + ("" if bm <= cap else " (over the cap)"))
        print(f"| {n} | {t} | {m} | {gb(prof.min_memory[i])} | {cells[0]} | {cells[1]} |")
    sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["transformer", "wide_resnet", "rnn"],
                    help="zoo models (transformer, wide_resnet, rnn), or 'none'")
    ap.add_argument("--devices", nargs="+", type=int, default=[8])
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds per (model, devices)")
    ap.add_argument("--rnn-small", action="store_true", help="a smaller RNN (4 x 8192, 10 steps) for speed")
    ap.add_argument("--profile", default=None, help="model for the Fig. 8 profile")
    ap.add_argument("--profile-devices", nargs="+", type=int, default=[1, 2, 4, 8])
    args = ap.parse_args(argv)
    FIGURES.mkdir(parents=True, exist_ok=True)
    for model_name in args.models:
        if model_name == "none":
            continue
        for n in args.devices:
            run_model(model_name, n, args.rnn_small, args.time_limit)
    if args.profile:
        profile(args.profile, args.profile_devices, args.rnn_small)


if __name__ == "__main__":
    main()
