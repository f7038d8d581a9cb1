"""The notebooks run, at reduced size, and are committed without outputs.

No Jupyter needed: the notebook JSON is read with ``json`` and its code cells are executed
in order in one namespace, with ``SMALL = True`` and ``OUT_DIR`` (a temporary folder)
injected right after the cell tagged ``parameters`` (papermill's convention).
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PNG = b"\x89PNG\r\n\x1a\n"


def _cells(name):
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    return nb["cells"]


def _run(name, overrides):
    namespace = {"__name__": "__notebook__"}
    injected = False
    for i, cell in enumerate(_cells(name)):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        exec(compile(source, f"{name}[cell {i}]", "exec"), namespace)  # noqa: S102
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            exec(overrides, namespace)  # noqa: S102
            injected = True
    assert injected, f"{name} has no cell tagged 'parameters'"
    plt.close("all")
    return namespace


@pytest.mark.parametrize("name", ["quickstart.ipynb", "reproduce_paper.ipynb"])
def test_committed_without_outputs(name):
    for cell in _cells(name):
        if cell["cell_type"] == "code":
            assert cell.get("outputs", []) == [] and cell.get("execution_count") is None


@pytest.mark.parametrize("name", ["quickstart.ipynb", "reproduce_paper.ipynb"])
def test_parameter_cell_defaults(name):
    params = [c for c in _cells(name) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    ns = {}
    exec("".join(params[0]["source"]), ns)  # noqa: S102
    assert "SMALL" in ns and "OUT_DIR" in ns


def test_quickstart_runs_small(tmp_path):
    ns = _run("quickstart.ipynb", f"SMALL = True\nOUT_DIR = {str(tmp_path)!r}\n")
    fr, plan = ns["fr"], ns["plan"]
    assert plan.memory <= 500e3 and plan.time == pytest.approx(fr.time[fr.index_under("500kB")], rel=1e-12)
    assert (tmp_path / "plan.json").exists()
    assert (tmp_path / "frontier.png").read_bytes()[:8] == PNG


def test_reproduce_paper_runs_small(tmp_path):
    ns = _run("reproduce_paper.ipynb", f"SMALL = True\nOUT_DIR = {str(tmp_path)!r}\n")
    written = sorted(p.name for p in tmp_path.glob("*.png"))
    assert written == ["fig6_small_cnn.png", "fig6_small_transformer.png", "fig7a_model_size.png",
                       "fig7b_network.png", "fig8_profile.png"]
    assert all((tmp_path / n).read_bytes()[:8] == PNG for n in written)
    # the figures' claims hold on the data behind them
    for fr, base in ns["fig6"].values():
        for plan in base.values():
            m = list(getattr(plan, "memory", []) if hasattr(plan.memory, "__len__") else [plan.memory])
            t = list(plan.time if hasattr(plan.time, "__len__") else [plan.time])
            for mi, ti in zip(m, t):
                assert ((fr.memory <= mi * (1 + 1e-9)) & (fr.time <= ti * (1 + 1e-9))).any()
    assert len(ns["sizes"]) == 3 and len(ns["nets"]) == 4
