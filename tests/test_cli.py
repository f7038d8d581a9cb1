"""The ``tensoropt-py`` command: every subcommand on a small model, and bad input.

Most cases call ``cli.main([...])`` in-process (fast); one runs ``python -m tensoropt_py``
in a subprocess to check the real entry point.
"""

import json
import subprocess
import sys

import pytest

from tensoropt_py import cli
from tensoropt_py.plan import Plan

PNG = b"\x89PNG\r\n\x1a\n"
SMALL = ["--model", "mlp", "--cluster", "cpu-1x4"]


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_frontier_writes_plot_and_json(capsys, tmp_path):
    png, js = tmp_path / "X.png", tmp_path / "Y.json"
    code, out, err = run(capsys, "frontier", *SMALL, "--devices", "4", "--plot", str(png), "--json", str(js))
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG
    data = json.loads(js.read_text())
    assert data["devices"] == 4 and data["model"] == "mlp" and len(data["memory"]) == len(data["time"]) >= 1
    assert "<- picked" in out and "turning point" in out


def test_frontier_with_baselines_and_cap(capsys, tmp_path):
    png = tmp_path / "b.png"
    code, out, err = run(capsys, "frontier", *SMALL, "--devices", "4", "--exact", "--baselines",
                         "--memory-cap", "0.9MB", "--plot", str(png))
    assert code == 0, err
    for name in ("data parallel", "OptCNN", "ToFu", "SOYBEAN"):
        assert f"{name}: Plan(" in out
    assert "900 kB" in out
    assert png.read_bytes()[:8] == PNG


def test_frontier_cap_below_everything_still_prints(capsys):
    code, out, err = run(capsys, "frontier", *SMALL, "--devices", "4", "--memory-cap", "1kB")
    assert code == 0
    assert "no strategy fits under the cap" in out


def test_find_then_show(capsys, tmp_path):
    path = tmp_path / "PLAN.json"
    code, out, err = run(capsys, "find", *SMALL, "--devices", "4", "--memory-cap", "1.3MB", "--json", str(path))
    assert code == 0, err
    plan = Plan.from_json(path)
    assert plan.devices == 4 and plan.memory <= 1.3e6
    code, out, err = run(capsys, "show", str(path))
    assert code == 0, err
    assert out.startswith(plan.summary())
    assert all(o.name in out for o in plan.operators)


def test_find_mini_parallelism_and_refine(capsys, tmp_path):
    path = tmp_path / "p.json"
    code, out, err = run(capsys, "find", *SMALL, "--option", "mini_parallelism", "--memory-cap", "3MB",
                         "--json", str(path))
    assert code == 0, err
    assert Plan.from_json(path).devices == 2  # peaks: 1 device needs ~4.9 MB, 2 devices ~2.4 MB
    code, out, err = run(capsys, "find", *SMALL, "--devices", "4", "--refine", "mcmc", "--budget", "20",
                         "--seed", "1", "--json", str(path))
    assert code == 0, err
    assert Plan.from_json(path).simulated_time is not None


def test_profile(capsys, tmp_path):
    png, js = tmp_path / "p.png", tmp_path / "p.json"
    code, out, err = run(capsys, "profile", *SMALL, "--devices", "1,2,4", "--memory-cap", "1.3MB",
                         "--plot", str(png), "--json", str(js))
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "2", "4"]
    assert "does not fit" in out
    data = json.loads(js.read_text())
    assert data["devices"] == [1, 2, 4] and data["time"][0] is None and data["time"][2] > 0
    assert png.read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    "argv, words",
    [
        (["frontier", "--model", "nope", "--cluster", "cpu-1x4"], ["unknown model 'nope'", "mlp"]),
        (["frontier", "--model", "mlp", "--cluster", "nope"], ["nope", "cpu-1x4", "v100-2x8"]),
        (["find", *SMALL, "--devices", "4", "--memory-cap", "5XB"], ["5XB"]),
        (["find", *SMALL, "--devices", "4", "--memory-cap", "0GB"], ["0GB"]),
        (["frontier", *SMALL, "--devices", "0"], ["positive", "0"]),
        (["frontier", *SMALL, "--devices", "-2"], ["positive", "-2"]),
        (["frontier", *SMALL, "--devices", "3"], ["devices=3", "(1, 2, 4)"]),
        (["profile", *SMALL, "--devices", "1,x"], ["1,x"]),
        (["profile", *SMALL, "--devices", "1,0"], ["positive"]),
        (["show", "/nonexistent/PLAN.json"], ["/nonexistent/PLAN.json", "does not exist"]),
        (["find", "--model", "mlp:colour=red", "--cluster", "cpu-1x4"], ["colour"]),
        (["find", *SMALL, "--refine", "mcmc", "--budget", "soon"], ["soon"]),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, words):
    code, out, err = run(capsys, *argv, "--quiet") if argv[0] != "show" else run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensoropt-py: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0]


def test_infeasible_exit_1(capsys):
    from tensoropt_py import api

    api.clear_cache()
    code, out, err = run(capsys, "find", *SMALL, "--devices", "4", "--memory-cap", "1kB")
    assert code == 1
    lines = err.strip().splitlines()
    # progress lines first (stderr is not a terminal: one line per finished stage), the error last
    assert lines[-1].startswith("tensoropt-py: error: ") and sum("error" in line for line in lines) == 1
    assert "smallest memory any strategy needs" in lines[-1] and "1 kB" in lines[-1]


def test_progress_lines_through_a_pipe(capsys):
    from tensoropt_py import api

    api.clear_cache()
    code, out, err = run(capsys, "frontier", *SMALL, "--devices", "2")
    assert code == 0
    assert "mlp on 2 devices of cpu-1x4: build: done in" in err and "track: done in" in err
    api.clear_cache()
    code, out, err = run(capsys, "frontier", *SMALL, "--devices", "2", "--quiet")
    assert code == 0 and err == ""


def test_bad_plot_path_fails_before_computing(capsys, monkeypatch, tmp_path):
    from tensoropt_py import api

    monkeypatch.setattr(api, "frontier", lambda *a, **k: pytest.fail("computed before checking --plot"))
    code, out, err = run(capsys, "frontier", *SMALL, "--plot", str(tmp_path / "fig.docx"))
    assert code == 2 and "fig.docx" in err and ".png" in err
    code, out, err = run(capsys, "profile", *SMALL, "--plot", str(tmp_path / "no" / "fig.png"))
    assert code == 2 and "does not exist" in err


def test_default_devices_is_one_machine(capsys):
    code, out, err = run(capsys, "frontier", "--model", "mlp", "--cluster", "v100-2x8", "--quiet", "--limit", "3")
    assert code == 0 and "8 devices" in out


def test_show_rejects_non_plan(capsys, tmp_path):
    path = tmp_path / "f.json"
    assert cli.main(["frontier", *SMALL, "--devices", "2", "--json", str(path)]) == 0
    capsys.readouterr()
    code, out, err = run(capsys, "show", str(path))
    assert code == 2 and "not a tensoropt_py plan" in err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["frontier"])  # --model missing
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        cli.main(["nosuchcommand"])
    assert info.value.code == 2


@pytest.mark.parametrize("command", ["calibrate", "run"])
def test_mpi_subcommands_have_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    assert "usage" in capsys.readouterr().out


def test_python_dash_m_entry_point(tmp_path):
    """The real command line, in a fresh interpreter: output, files and a clean error."""
    plan = tmp_path / "PLAN.json"
    done = subprocess.run([sys.executable, "-m", "tensoropt_py", "find", *SMALL, "--devices", "2",
                           "--json", str(plan)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert plan.exists()
    done = subprocess.run([sys.executable, "-m", "tensoropt_py", "show", str(tmp_path / "missing.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr


def test_show_plots_the_simulated_iteration(capsys, tmp_path):
    plan, png = tmp_path / "p.json", tmp_path / "timeline.png"
    assert cli.main(["find", *SMALL, "--devices", "4", "--json", str(plan), "--quiet"]) == 0
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"time": {"predicted": 1e-3, "measured": 2e-3}}))
    capsys.readouterr()
    code, out, err = run(capsys, "show", str(plan), "--plot", str(png), "--report", str(report))
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG
    assert "simulated iteration" in out and "measured 2 ms" in out
    code, out, err = run(capsys, "show", str(plan), "--plot", str(png), "--model", "small_transformer")
    assert code == 2 and "another model" in err


def test_calibration_file_replaces_the_roofline(capsys, tmp_path):
    """``--calibration`` plans on the measured tables: the same frontier as the API on the
    calibrated cluster, not the roofline's; a missing file is an input error naming it."""
    pytest.importorskip("torch")
    import numpy as np

    import tensoropt_py as to
    from tensoropt_py.calibrate import calibrate_model_compute
    from tensoropt_py.cluster import Cluster
    from tensoropt_py.inputs import parse_memory_cap

    calib = tmp_path / "calib.json"
    calibrate_model_compute("mlp", "cpu-1x4", 2, repeats=1, warmup=0, out=calib, device="cpu")
    fronts = {}
    for name, extra in (("measured", ["--calibration", str(calib)]), ("roofline", [])):
        js = tmp_path / f"{name}.json"
        code, out, err = run(capsys, "frontier", *SMALL, "--devices", "2", "--exact", "-q", "--json", str(js), *extra)
        assert code == 0, err
        data = json.loads(js.read_text())
        fronts[name] = (np.array(data["memory"]), np.array(data["time"]))
    api = to.frontier("mlp", Cluster.preset("cpu-1x4").with_calibration(calib), 2, exact=True, progress=False)
    assert np.array_equal(fronts["measured"][0], api.memory) and np.array_equal(fronts["measured"][1], api.time)
    assert not np.array_equal(fronts["measured"][1], fronts["roofline"][1])
    plan = tmp_path / "plan.json"
    code, out, err = run(capsys, "find", *SMALL, "--devices", "2", "--exact", "-q", "--calibration", str(calib),
                         "--json", str(plan))
    assert code == 0, err
    cap = parse_memory_cap(None, Cluster.preset("cpu-1x4"))  # find's default cap
    assert Plan.from_json(plan).time == pytest.approx(api.time[api.index_under(cap)], rel=1e-12)
    missing = tmp_path / "nowhere.json"
    code, out, err = run(capsys, "profile", *SMALL, "--devices", "1,2", "-q", "--calibration", str(missing))
    assert code == 2 and str(missing) in err
