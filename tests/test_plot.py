"""Figures (Fig. 6, 7, 8 style): each one renders to a PNG, with units in the labels."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import tensoropt_py as to  # noqa: E402
from tensoropt_py import baselines as bl  # noqa: E402
from tensoropt_py.plot import plot_frontier, plot_frontiers, plot_profile  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def fr():
    return to.frontier("mlp", "cpu-1x4", devices=4, exact=True)


def _is_png(path):
    return path.exists() and path.read_bytes()[:8] == PNG and path.stat().st_size > 1000


def test_fig6_frontier_with_baselines(fr, tmp_path):
    path = tmp_path / "fig6.png"
    base = bl.all_baselines(fr.model_cost_graph, to.Cluster.preset("cpu-1x4"))
    base["Mesh-TensorFlow"] = bl.mesh_tensorflow("mlp", "cpu-1x4", 4)
    k = min(3, len(fr) - 1)
    fig = fr.plot(path, memory_cap=float(fr.memory[k]), baselines=base, picked=k)
    assert _is_png(path)
    ax = fig.axes[0]
    # mlp's frontier needs < 1 MB per device and data parallelism ~3.3 MB: MB, not a column of 0.00x GB
    assert fig.axes[-1].get_xlabel() == "memory per device (MB)"
    assert ax.get_ylabel() == "per-iteration time (ms)"  # data parallelism: 1.2 ms
    assert 1 <= ax.get_xlim()[1] < 1000 and 1 <= ax.get_ylim()[1] < 1000
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for name in ("turning point", "data parallel", "OptCNN", "ToFu", "SOYBEAN", "Mesh-TensorFlow"):
        assert name in labels
    assert f"cost frontier ({len(fr)} points)" in labels
    for start in ("least memory", "fastest", "picked"):
        assert any(label.startswith(start) for label in labels), start
    assert ax.get_legend().get_title().get_text().startswith("exact frontier")
    assert any(label.startswith("memory cap") and "MB" in label for label in labels)
    assert ax.get_title() == "mlp on cpu-1x4 (4 devices)"


def test_fig6_units_follow_data(tmp_path):
    from types import SimpleNamespace

    big = SimpleNamespace(memory=np.array([4e9, 8e9, 12e9]), time=np.array([3.0, 1.5, 1.2]),
                          compute_time=np.array([1.0, 1.0, 1.0]), communication_time=np.array([2.0, 0.5, 0.2]))
    fig = plot_frontier(big, path=tmp_path / "big.png", memory_cap=14.5e9, turning_point=1)
    assert fig.axes[-1].get_xlabel() == "memory per device (GB)"
    assert fig.axes[0].get_ylabel() == "per-iteration time (s)"
    xs = fig.axes[0].lines[1].get_xdata()  # the frontier's markers, in GB
    np.testing.assert_allclose(xs, [4, 8, 12])
    assert _is_png(tmp_path / "big.png")


def test_time_axis_spans_the_frontier_not_zero(tmp_path):
    """A frontier from 1.17 to 1.37 s must not be squashed flat against an axis from 0."""
    from types import SimpleNamespace

    narrow = SimpleNamespace(memory=np.linspace(9.6e9, 20.7e9, 200), time=np.linspace(1.37, 1.17, 200),
                             compute_time=np.full(200, 1.0), communication_time=np.linspace(0.37, 0.17, 200))
    fig = plot_frontier(narrow, picked=150)
    low, high = fig.axes[0].get_ylim()
    assert 1.0 < low < 1.17 and 1.37 < high < 1.6
    assert len(fig.axes) == 2 and fig.axes[1].get_ylim()[0] == 0  # the split keeps its own scale
    # 200 points: the markers are a readable subset, the line goes through all of them
    markers = [line for line in fig.axes[0].lines if line.get_label().startswith("cost frontier")][0]
    assert markers.get_markevery() > 1


def test_plot_path_checked_before_any_work(tmp_path):
    from tensoropt_py.errors import InvalidInputError
    from tensoropt_py.plot import check_plot_path

    assert check_plot_path(tmp_path / "ok.svg").suffix == ".svg"
    with pytest.raises(InvalidInputError, match=r"\.docx.*\.png"):
        check_plot_path(tmp_path / "fig.docx")
    with pytest.raises(InvalidInputError, match="does not exist"):
        check_plot_path(tmp_path / "missing" / "fig.png")


def test_fig7_several_frontiers(tmp_path):
    path = tmp_path / "fig7.png"
    frs = {f"{n} devices": to.frontier("mlp", "cpu-1x4", devices=n) for n in (2, 4)}
    fig = plot_frontiers(frs, path=path, title="mlp frontiers")
    assert _is_png(path)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["2 devices", "4 devices"]
    assert "(" in fig.axes[0].get_xlabel() and "(" in fig.axes[0].get_ylabel()


def test_fig8_profile(tmp_path):
    path = tmp_path / "fig8.png"
    prof = to.find_strategy("mlp", "cpu-1x4", option="profiling", devices=[1, 2, 4], memory_cap="1.3MB")
    fig = prof.plot(path, baselines={"data parallel": [np.nan, np.nan, 1.2e-3]})
    assert _is_png(path)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "number of devices"
    assert ax.get_ylabel() == "best per-iteration time (ms)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert sum(t.get_text() == "does not fit" for t in ax.texts) == 2 + 2
    assert "memory cap 1.3 MB" in ax.get_title()


def test_fig8_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="3 device counts"):
        plot_profile([1, 2, 4], {"TensorOpt": [1.0, 2.0]})


def test_save_as_pdf_and_svg(fr, tmp_path):
    for ext, magic in (("pdf", b"%PDF"), ("svg", b"<?xml")):
        path = tmp_path / f"f.{ext}"
        fr.plot(path)
        assert path.read_bytes()[: len(magic)] == magic


def test_timeline_has_a_memory_panel_with_the_marked_peak(tmp_path):
    from tensoropt_py.cost.memory import MemoryModel, memory_events
    from tensoropt_py.soap.plan_simulator import simulate_plan

    fr = to.frontier("small_transformer", "cpu-1x4", devices=2)
    plan = fr.plan(0)
    sim = simulate_plan(plan, to.models.small_transformer())
    path = tmp_path / "timeline.png"
    fig = plan.plot(sim, measured_time=2 * sim.time, measured_memory=1.1 * plan.memory, path=path)
    assert _is_png(path)
    streams, mem = fig.axes
    assert mem.get_ylabel().startswith("memory") and "time in the iteration" in mem.get_xlabel()
    # the live-memory curve is the plan's timeline, its top the plan's peak
    live = np.asarray(plan.memory_timeline)
    np.testing.assert_allclose(live, MemoryModel(fr.model_cost_graph).live(plan.choices, plan.edge_choices))
    assert live.max() == pytest.approx(plan.memory)
    unit = plan.memory / mem.lines[0].get_ydata().max()
    # the marker sits on the peak, named by its operator and phase (the plan's own)
    marker = [ln for ln in mem.lines if ln.get_marker() == "v"]
    assert len(marker) == 1 and marker[0].get_ydata()[0] * unit == pytest.approx(plan.memory)
    k = int(np.argmax(live))
    op, phase = memory_events([o.name for o in plan.operators])[k]
    assert (op, phase) == (plan.peak_operator, plan.peak_phase)
    label = marker[0].get_label()
    assert label.startswith("peak") and (phase in label) and (op in label or phase == "optimizer")
    assert any(t.get_text().startswith("peak:") for t in mem.texts)
    # the executor's measured peak is a horizontal reference line at its value
    measured = [ln for ln in mem.lines if ln.get_label().startswith("measured peak")]
    assert len(measured) == 1 and measured[0].get_ydata()[0] * unit == pytest.approx(1.1 * plan.memory)
    # and the panel shares the streams' time axis
    assert mem.get_shared_x_axes().joined(mem, streams)


def test_timeline_without_a_memory_timeline_draws_the_streams_only():
    from types import SimpleNamespace as E

    from tensoropt_py.plot import plot_timeline

    sim = E(time=2.0, additive_time=2.5, events=(E(device=0, stream="compute", phase="forward", start=0.0, end=2.0),))
    fig = plot_timeline(sim, plan=E(memory_timeline=(), operators=()))
    assert len(fig.axes) == 1
