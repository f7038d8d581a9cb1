"""tensoropt_py.calibrate and tensoropt_py.cost.compute: measured tables end to end."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensoropt_py.cluster import COLLECTIVES, Cluster, ComputeTable, load_calibration
from tensoropt_py.calibrate import (
    buffer_elements,
    calibrate_compute,
    color_of,
    machine_ids,
    measure,
    partition_plans,
)
from tensoropt_py.calibrate.__main__ import main
from tensoropt_py.cost.comm import CommModel
from tensoropt_py.cost.compute import ComputeModel
from tensoropt_py.cost.operator_cost import forward_key
from tensoropt_py.errors import CalibrationError, InvalidInputError

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec")


def _have_mpi4py():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


needs_mpi = pytest.mark.skipif(MPIEXEC is None or not _have_mpi4py(), reason="needs mpiexec and mpi4py")


def _run_calibration(n, out, *extra, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "tensoropt_py.calibrate",
           "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=out.parent)


# -- pure rank logic --------------------------------------------------------------------------


def test_partition_plans_one_machine():
    plans = partition_plans(6, [0] * 6)
    assert [sig for _, sig in plans] == [(1, 1, 6), (2, 2, 3), (3, 3, 2), (6, 6, 1)]
    groups, _ = plans[1]
    assert groups == ((0, 1), (2, 3), (4, 5))
    for groups, (g, _, c) in plans:
        assert sorted(d for grp in groups for d in grp) == list(range(6))
        assert all(len(grp) == g for grp in groups) and len(groups) == c


def test_partition_plans_two_machines_adds_strided():
    sigs = [sig for _, sig in partition_plans(8, machine_ids(["a"] * 4 + ["b"] * 4))]
    assert sigs == [(1, 1, 4), (2, 2, 2), (2, 1, 4), (4, 4, 1), (4, 2, 2), (8, 4, 1)]
    with pytest.raises(InvalidInputError):
        partition_plans(4, [0, 0])


def test_color_of_and_machine_ids():
    groups = ((0, 2), (1, 3))
    assert [color_of(r, groups) for r in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    with pytest.raises(InvalidInputError):
        color_of(7, groups)
    assert machine_ids(["x", "y", "x", "z"]) == [0, 1, 0, 2]


@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_buffer_elements_follow_nbytes_semantics(g):
    n, item = 4096, 4
    e = n // item
    assert buffer_elements("all_reduce", n, g, item) == (e, e)
    assert buffer_elements("broadcast", n, g, item) == (e, e)
    send, recv = buffer_elements("all_gather", n, g, item)
    assert recv == e and send * g == e  # gathered result is nbytes
    send, recv = buffer_elements("reduce_scatter", n, g, item)
    assert send == e and recv * g == e  # input before scattering is nbytes
    assert buffer_elements("all_to_all", n, g, item) == (e, e)  # each rank holds nbytes
    assert buffer_elements("all_gather", 1, 8, 1) == (1, 8)  # at least one element per rank
    with pytest.raises(InvalidInputError):
        buffer_elements("gossip", n, g, item)


# -- the MPI run ------------------------------------------------------------------------------


@needs_mpi
@pytest.mark.mpi
def test_mpiexec_calibration_feeds_comm_model(tmp_path):
    out = tmp_path / "tmp.json"
    res = _run_calibration(2, out, "--max-log2", "10", "--repeats", "3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "wrote" in res.stdout and res.stdout.count("wrote") == 1  # only rank 0 prints
    comm, compute = load_calibration(out)
    assert compute is None
    meta = comm.meta
    assert meta["backend"] == "mpi" and meta["world_size"] == 2 and meta["sizes_log2"] == list(range(11))
    sizes = [2.0**i for i in range(11)]
    for kind in COLLECTIVES:
        for sig in ((1, 1, 2), (2, 2, 1)):
            if kind == "send_recv" and sig[0] == 1:
                assert comm.get(kind, sig) is None
                continue
            got = comm.get(kind, sig)
            assert got is not None, (kind, sig)
            assert list(got[0]) == sizes
            assert all(math.isfinite(t) and t > 0 for t in got[1])

    cl = Cluster.preset("cpu-1x4").with_calibration(out)
    cm = CommModel(cl)
    pair = ((0, 1),)
    wait, stretch = comm.sync_for((2, 2, 1))
    for kind in COLLECTIVES:
        assert cm.source(kind, pair) == "calibrated"
        measured = np.maximum.accumulate(comm.get(kind, (2, 2, 1))[1])
        for i in (0, 5, 10):
            assert cm.collective_time(kind, 2**i, pair) == pytest.approx(stretch * measured[i] + wait, rel=1e-12)
        t = cm.collective_time(kind, 3000, pair)
        assert math.isfinite(t) and t > 0
        # partitionings the run could not measure still use the model
        assert cm.source(kind, ((0, 1), (2, 3))) == "model"
    # a size-1 group stays free even though the file measured it
    assert cm.collective_time("all_reduce", 1024, ((0,), (1,))) == 0.0
    # the synchronisation terms of the one partitioning with a pair, and nothing for single devices
    assert set(comm.sync) == {(2, 2, 1)}
    wait, stretch = comm.sync_for((2, 2, 1))
    # measured: on a shared 2-core host the stretch has no useful upper bound (108 was seen with
    # two ranks), so only its floor and the wait's units (seconds) are checked
    assert 0 <= wait < 1 and 1 <= stretch and math.isfinite(stretch)


@needs_mpi
@pytest.mark.mpi
def test_nccl_without_cuda_fails_cleanly(tmp_path):
    if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
        pytest.skip("an NVIDIA device is present: covered by the GPU test")
    out = tmp_path / "nccl.json"
    res = _run_calibration(1, out, "--max-log2", "2", "--backend", "nccl")
    assert res.returncode != 0
    assert "CUDA" in res.stderr
    assert not out.exists()


@needs_mpi
@pytest.mark.mpi
@pytest.mark.gpu
def test_nccl_calibration_on_gpu(tmp_path):
    if not (os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")):
        pytest.skip("needs an NVIDIA GPU")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    out = tmp_path / "nccl.json"
    res = _run_calibration(1, out, "--max-log2", "12", "--backend", "nccl")
    assert res.returncode == 0, res.stdout + res.stderr
    comm, _ = load_calibration(out)
    assert comm.meta["backend"] == "nccl"
    assert comm.get("all_reduce", (1, 1, 1)) is not None


@needs_mpi
@pytest.mark.mpi
def test_synchronisation_calibration_on_one_rank_has_no_pairs(tmp_path):
    out = tmp_path / "one.json"
    res = _run_calibration(1, out, "--max-log2", "4", "--repeats", "1", "--collectives", "all_reduce")
    assert res.returncode == 0, res.stdout + res.stderr
    comm, _ = load_calibration(out)
    assert comm.sync == {} and comm.get("all_reduce", (1, 1, 1)) is not None


@needs_mpi
@pytest.mark.mpi
def test_synchronisation_with_the_models_operators_as_work(tmp_path):
    out = tmp_path / "model.json"
    res = _run_calibration(2, out, "--model", "mlp", "--devices", "2", "--cluster", "cpu-1x4", "--max-log2", "4",
                           "--repeats", "1", "--warmup", "0", "--max-entries", "3", "--collectives", "all_reduce")
    assert res.returncode == 0, res.stdout + res.stderr
    comm, compute = load_calibration(out)
    assert comm.meta["sync_work"] == "model operators" and set(comm.sync) == {(2, 2, 1)}
    assert compute.meta["concurrent_ranks"] == 2 and len(compute) == 6  # 3 keys, each with its forward alone
    keys = {k for k, _ in compute.items()}
    assert keys == {k for k in keys if not k.endswith("|fwd")} | {forward_key(k) for k in keys if not k.endswith("|fwd")}


def test_calibrate_sync_validates_before_communicating():
    from tensoropt_py.calibrate import calibrate_sync

    for kwargs, what in (({"iterations": 0}, "repeats"), ({"work_seconds": (2e-3, 1e-3)}, "work_seconds"),
                         ({"work_seconds": (0.0, 1e-3)}, "work_seconds"), ({"work_seconds": 1e-3}, "work_seconds"),
                         ({"large_log2": 40}, "large_log2"), ({"large_log2": True}, "large_log2"),
                         ({"work": []}, "work"), ({"work": [1]}, "work")):
        with pytest.raises(InvalidInputError, match=what):
            calibrate_sync(None, None, **kwargs)


def test_cli_rejects_bad_size_range():
    with pytest.raises(InvalidInputError, match="min-log2"):
        main(["--min-log2", "5", "--max-log2", "2"])
    with pytest.raises(SystemExit):
        main(["--backend", "carrier-pigeon"])


# -- compute tables ---------------------------------------------------------------------------


def test_measure_validates_and_times():
    calls = []
    t = measure(lambda: calls.append(1), repeats=4, warmup=3)
    assert t >= 0 and len(calls) == 7
    synced = []
    measure(lambda: None, repeats=2, warmup=0, sync=lambda: synced.append(1))
    assert len(synced) == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidInputError, match="repeats"):
            measure(lambda: None, repeats=bad)
    with pytest.raises(InvalidInputError, match="warmup"):
        measure(lambda: None, warmup=-1)
    with pytest.raises(InvalidInputError, match="statistic"):
        measure(lambda: None, statistic="max")


def test_measure_mean_keeps_the_interruptions(monkeypatch):
    # a fake clock: the fifth call is interrupted for a second (another rank had the core)
    import tensoropt_py.calibrate.timing as timing

    now = [0.0]
    durations = iter([0.001, 0.001, 0.001, 0.001, 1.0] * 2)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])

    def call():
        now[0] += next(durations)

    assert measure(call, repeats=5, warmup=0) == pytest.approx(0.001)
    assert measure(call, repeats=5, warmup=0, statistic="mean") == pytest.approx(1.004 / 5)


def test_calibrate_compute_with_torch_ops(tmp_path):
    torch = pytest.importorskip("torch")
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    entries = {
        "matmul|[64,128]x[128,32]|float32|fwd": lambda: a @ b,
        "relu|[64,128]|float32|fwd": lambda: torch.relu(a),
    }
    out = tmp_path / "compute.json"
    table = calibrate_compute(entries, repeats=3, warmup=1, out=out, meta={"device": "cpu"})
    assert len(table) == 2 and table.meta["device"] == "cpu"
    assert all(math.isfinite(t) and t > 0 for _, t in table.items())

    cl = Cluster.preset("cpu-1x4").with_calibration(out)
    assert cl.comm_table is None and cl.compute_table == table
    model = ComputeModel(cl)
    key = "matmul|[64,128]x[128,32]|float32|fwd"
    assert model.source(key) == "calibrated"
    assert model.time(1.0, 1.0, key=key) == table.get(key)
    assert model.source("unknown") == "roofline"
    loaded = ComputeModel.load(out, Cluster.preset("cpu-1x4"))
    assert loaded.time(0, 0, key=key) == table.get(key)

    # save merges with what the file already has
    extra = ComputeModel(Cluster.preset("cpu-1x4"), table={"noop": 1e-7})
    extra.save(out)
    _, compute = load_calibration(out)
    assert set(k for k, _ in compute.items()) == {*entries, "noop"}

    with pytest.raises(InvalidInputError):
        calibrate_compute([("k", "not callable")])
    with pytest.raises(InvalidInputError):
        calibrate_compute([42])


def test_compute_model_roofline():
    cl = Cluster.preset("v100-2x8")
    m = ComputeModel(cl)
    d = cl.device
    assert m.time(d.peak_flops, 0) == pytest.approx(1 + d.kernel_overhead)
    assert m.time(0, d.memory_bandwidth) == pytest.approx(1 + d.kernel_overhead)
    assert m.time(d.peak_flops, 2 * d.memory_bandwidth) == pytest.approx(2 + d.kernel_overhead)  # memory-bound
    assert m.time(125e12, 0, dtype="fp16") == pytest.approx(1 + d.kernel_overhead)
    assert m.time(0, 0) == 0.0
    assert m.time(1.0, 1.0, key="missing") == pytest.approx(d.kernel_overhead, rel=1e-3)
    flops = np.array([0, 1e9, 1e12])
    by = np.array([0, 1e9, 1e6])
    vec = m.times(flops, by)
    assert vec.tolist() == pytest.approx([m.time(f, b) for f, b in zip(flops, by)], rel=1e-12)
    for bad in (-1, math.inf, "x", True):
        with pytest.raises(InvalidInputError):
            m.time(bad, 0)
    with pytest.raises(InvalidInputError):
        m.time(1, 1, dtype="float13")
    with pytest.raises(InvalidInputError):
        m.times([1, -1], [0, 0])
    with pytest.raises(CalibrationError):
        m.save("/nonexistent/never.json")  # no table to save


def test_compute_model_load_errors(tmp_path):
    cl = Cluster.preset("cpu-1x4")
    with pytest.raises(CalibrationError, match="missing.json"):
        ComputeModel.load(tmp_path / "missing.json", cl)
    comm_only = tmp_path / "comm_only.json"
    comm_only.write_text(json.dumps({"format": "tensoropt_py-calibration", "version": 1,
                                     "comm": {"entries": []}}))
    with pytest.raises(CalibrationError, match="no 'compute' section"):
        ComputeModel.load(comm_only, cl)
    assert ComputeModel(cl, table=ComputeTable({"a": 1.0})).time(5, 5, key="a") == 1.0


def test_call_floor_of_cuda_tables_is_not_charged(tmp_path):
    from tensoropt_py.cluster import write_calibration
    from tensoropt_py.cost.compute import call_floor

    floor, upd = 1e-4, "optimizer_update|adam|[4]|float32"
    entries = {"reshape|a": 0.9e-4, "linear|b": floor + 3e-3, upd: 2e-4}
    cl = Cluster.preset("h100-4x8")
    # recorded floor: entries above it are charged their excess, below it nothing; updates as measured
    path = write_calibration(tmp_path / "gpu.json", compute=ComputeTable(
        entries, {"torch_device": "cuda", "call_floor": floor}))
    m = ComputeModel(cl.with_calibration(path))
    assert m.floor == floor
    assert m.time(0, 0, key="linear|b") == pytest.approx(3e-3, rel=1e-12)
    assert m.time(0, 0, key="reshape|a") == 0.0
    assert m.time(0, 0, key=upd) == 2e-4
    # a table written before the floor was recorded: its fastest operator entry bounds it
    old = ComputeTable(entries, {"torch_device": "cuda:0"})
    assert call_floor(old) == 0.9e-4
    assert ComputeModel(cl, table=old).time(0, 0, key="linear|b") == pytest.approx(floor + 3e-3 - 0.9e-4, rel=1e-12)
    # CPU tables: the host is the device, entries are what a step pays
    cpu = ComputeTable(entries, {"torch_device": "cpu", "call_floor": floor})
    assert call_floor(cpu) == 0.0 and ComputeModel(cl, table=cpu).time(0, 0, key="reshape|a") == 0.9e-4
    for bad in (-1.0, "x", float("nan")):
        with pytest.raises(CalibrationError, match="call_floor"):
            call_floor(ComputeTable(entries, {"torch_device": "cuda", "call_floor": bad}))
        with pytest.raises(CalibrationError, match="forward_call_floor"):
            call_floor(ComputeTable(entries, {"torch_device": "cuda", "forward_call_floor": bad}), forward=True)
    # forward-alone entries carry the floor of an empty forward (no backward), not of a whole call
    fwd = {**entries, "linear|b|fwd": 4e-5 + 1e-3, "reshape|a|fwd": 3e-5}
    m = ComputeModel(cl, table=ComputeTable(fwd, {"torch_device": "cuda", "call_floor": floor,
                                                  "forward_call_floor": 4e-5}))
    assert (m.floor, m.forward_floor) == (floor, 4e-5)
    assert m.time(0, 0, key="linear|b|fwd") == pytest.approx(1e-3, rel=1e-12)
    assert m.time(0, 0, key="linear|b") == pytest.approx(3e-3, rel=1e-12)
    assert m.time(0, 0, key="reshape|a|fwd") == 0.0
    assert call_floor(ComputeTable(fwd, {"torch_device": "cuda"}), forward=True) == 3e-5  # its fastest forward
    assert call_floor(ComputeTable(fwd, {"torch_device": "cuda"})) == 0.9e-4  # forward entries left out


# -- model compute tables (torch at shard shapes) ---------------------------------------------


def test_compute_key_is_name_free_and_shape_driven():
    from tensoropt_py.cost.operator_cost import compute_key, config_compute_keys
    from tensoropt_py.graph import zoo
    from tensoropt_py.space.configs import enumerate_configs

    g = zoo.mlp(batch=8, sizes=(64, 32, 32, 10))
    lin = [op for op in g.operators if op.kind.value == "linear"]
    key = compute_key(lin[0], [g.tensors[u.tensor].shape for u in lin[0].uses()], "float32")
    assert key.startswith("linear|") and key.endswith("|float32") and "x0[8,64]" in key
    assert lin[0].name not in key and lin[0].params[0].tensor not in key
    # the second hidden layer (32 -> 32) and a differently named copy share keys per config
    cfgs = enumerate_configs(lin[1], 4)
    keys = config_compute_keys(lin[1], g.tensors, cfgs, "float32")
    assert len(keys) == len(cfgs) and len(set(keys)) < len(keys)  # equal local work, equal key
    with pytest.raises(InvalidInputError):
        compute_key(lin[0], [(8, 64)], "float32")


class _TwoRankComm:
    """A stand-in communicator whose other rank is always three times slower (rank 0's view)."""

    def __init__(self):
        self.barriers = 0

    def Barrier(self):
        self.barriers += 1

    def allgather(self, value):
        return [value, 3 * value]

    def Get_size(self):
        return 2

    def Get_rank(self):
        return 0


def test_calibrate_compute_on_several_ranks_keeps_the_slowest(monkeypatch):
    import tensoropt_py.calibrate.operators as operators

    monkeypatch.setattr(operators, "measure", lambda fn, repeats, warmup, sync, statistic="median": 0.25)
    comm = _TwoRankComm()
    table = calibrate_compute({"a": lambda: None, "b": lambda: None}, repeats=3, warmup=0, comm=comm)
    lone = calibrate_compute({"a": lambda: None}, repeats=3, warmup=0)
    assert comm.barriers == 2  # every entry starts on all ranks together
    assert table.meta["concurrent_ranks"] == 2 and lone.meta["concurrent_ranks"] == 1
    assert table.get("a") == table.get("b") == 0.75 and lone.get("a") == 0.25


@needs_mpi
@pytest.mark.mpi
def test_compute_calibration_under_mpiexec_times_all_ranks_at_once(tmp_path):
    out = tmp_path / "c.json"
    res = _run_calibration(2, out, "--model", "mlp", "--devices", "2", "--no-comm", "--repeats", "1",
                           "--warmup", "0", "--max-entries", "3")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("wrote 6 compute entries") == 1  # rank 0 prints and writes (3 keys, and their forwards)
    comm, compute = load_calibration(out)
    assert comm is None and len(compute) == 6 and compute.meta["concurrent_ranks"] == 2


def _check_compute_times_are_the_table(mcg, table):
    """Every kept configuration's compute time is its measured entry plus the measured updates
    of its trained parameter shards (a shared one's divided among its readers). Returns how many
    configurations were checked."""
    from tensoropt_py.cost.operator_cost import compute_dtype, config_compute_keys, local_shapes
    from tensoropt_py.cost.optimizer import update_key

    g = mcg.graph
    readers = {p: len(u) for p, u in g.parameter_users().items()}
    checked = 0
    for i, op in enumerate(g.operators):
        if op.kind.value == "input":
            continue
        dtype = compute_dtype(op, g.tensors, None, mcg.mixed_precision)
        keys = config_compute_keys(op, g.tensors, mcg.configs[i], dtype)
        costs = np.asarray(mcg.node_costs[i])
        trained = [(pi, u.tensor) for pi, u in enumerate(op.params) if g.tensors[u.tensor].role.value == "parameter"]
        for k, key in enumerate(keys):
            shapes = local_shapes(op, g.tensors, mcg.configs[i][k])[len(op.inputs):len(op.inputs) + len(op.params)]
            upd = sum(table.get(update_key("adam", shapes[pi], "float32")) / readers[t] for pi, t in trained)
            assert costs[k, 2] == pytest.approx(table.get(key) + upd, rel=1e-12), (op.name, key)
            checked += 1
    return checked


def test_calibrate_model_compute_feeds_cost_graph(tmp_path):
    pytest.importorskip("torch")
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.calibrate import calibrate_model_compute, model_compute_entries, model_update_entries
    from tensoropt_py.graph import zoo

    out = tmp_path / "t.json"
    g = zoo.mlp()
    cl = Cluster.preset("cpu-1x4")
    table = calibrate_model_compute(g, cl, 4, repeats=2, warmup=1, out=out, device="cpu")
    entries, _ = model_compute_entries(g, cl, 4)
    updates = model_update_entries(g, cl, 4, optimizer="adam")
    assert table.meta["entries"] == len(table) and table.meta["skipped"] == 0
    forwards = {forward_key(k) for k in entries}
    assert {k for k, _ in table.items()} == set(entries) | forwards | set(updates) and len(entries) > 0
    assert all(k.startswith("optimizer_update|adam|") for k in updates) and len(updates) > 0
    assert all(math.isfinite(t) and t > 0 for _, t in table.items())
    # the empty call is timed too; on a CPU it is work the step pays, so entries stay as measured
    assert 0 < table.meta["call_floor"] < max(t for _, t in table.items())

    base = build_cost_graph(g, cl, 4)
    cal = Cluster.preset("cpu-1x4").with_calibration(out)
    mcg = build_cost_graph(g, cal, 4)
    again = build_cost_graph(g, Cluster.preset("cpu-1x4"), 4)  # no table: the old numbers
    checked = _check_compute_times_are_the_table(mcg, table)
    differ = 0
    for i in range(len(mcg.graph.operators)):
        # roofline for the same configurations (pruning may keep different ones)
        if mcg.graph.operators[i].kind.value != "input" and mcg.configs[i] == base.configs[i]:
            differ += int(np.any(np.asarray(mcg.node_costs[i])[:, 2] != np.asarray(base.node_costs[i])[:, 2]))
    assert checked >= len(entries) and differ > 0
    for i in range(len(base.graph.operators)):
        assert np.array_equal(np.asarray(again.node_costs[i]), np.asarray(base.node_costs[i]))
    # the fast and the reference construction agree with the table too
    ref = build_cost_graph(g, cal, 4, reference=True)
    for i in range(len(ref.graph.operators)):
        assert np.allclose(np.asarray(ref.node_costs[i]), np.asarray(mcg.node_costs[i]))

    # max_entries and the CLI without mpiexec
    assert len(calibrate_model_compute("mlp", "cpu-1x4", 4, repeats=1, warmup=0, max_entries=2, device="cpu")) == 4
    cli_out = tmp_path / "cli.json"
    assert main(["--model", "mlp", "--devices", "4", "--out", str(cli_out), "--no-comm", "--repeats", "1",
                 "--warmup", "0", "-q"]) == 0
    comm, compute = load_calibration(cli_out)
    assert comm is None and {k for k, _ in compute.items()} == set(entries) | forwards | set(updates)
    with pytest.raises(InvalidInputError, match="--devices"):
        main(["--model", "mlp", "--no-comm"])
    with pytest.raises(InvalidInputError, match="--no-comm"):
        main(["--no-comm"])


def test_recomputation_charges_the_measured_forward(tmp_path):
    """With recomputation in the space, a recomputed configuration costs its plain twin's compute
    plus the measured forward alone (a CPU table: no call floor); from a table without forward
    entries, the measured forward + backward split in the roofline's proportion."""
    pytest.importorskip("torch")
    from dataclasses import replace

    from tensoropt_py.cluster import write_calibration
    from tensoropt_py.calibrate import calibrate_model_compute
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.cost.operator_cost import OperatorCoster, config_compute_keys
    from tensoropt_py.cost.training import TrainingOptions
    from tensoropt_py.graph import zoo

    g, cl = zoo.mlp(), Cluster.preset("cpu-1x4")
    out, older = tmp_path / "t.json", tmp_path / "older.json"
    table = calibrate_model_compute(g, cl, 2, repeats=1, warmup=0, out=out, device="cpu")
    write_calibration(older, compute=ComputeTable({k: t for k, t in table.items() if not k.endswith("|fwd")}, table.meta))
    rec = TrainingOptions(recompute=True)
    roofline = OperatorCoster(cl)
    checked = {out.name: 0, older.name: 0}
    for path, split in ((out, False), (older, True)):
        mcg = build_cost_graph(g, cl.with_calibration(path), 2, training=rec)
        for i, op in enumerate(mcg.graph.operators):
            cfgs = mcg.configs[i]
            twin = {c: k for k, c in enumerate(cfgs) if not c.recompute}
            costs = np.asarray(mcg.node_costs[i])
            for k, c in enumerate(cfgs):
                j = twin.get(replace(c, recompute=False))
                if not c.recompute or j is None or (split and op.params):
                    continue
                key = config_compute_keys(op, mcg.graph.tensors, [c], "float32")[0]
                if split:  # no parameters: the roofline's compute is forward + backward alone
                    share = roofline.forward_times(op, mcg.graph.tensors, [c])[0] / roofline.costs(
                        op, mcg.graph.tensors, [c]).compute_time[0]
                    expected = table.get(key) * share
                else:
                    expected = table.get(forward_key(key))
                assert costs[k, 2] - costs[j, 2] == pytest.approx(expected, rel=1e-9), (op.name, str(c), path.name)
                checked[path.name] += 1
    assert min(checked.values()) >= 2, checked


def test_multi_tensor_update_shares_split_one_step_by_bytes():
    import torch

    from tensoropt_py.calibrate.operators import _constant, _multi_tensor_update_shares, calibrate_compute

    ups = [("a", (64, 32), "float32"), ("b", (32,), "float32"), ("c", (128, 64), "float32")]
    shares = _multi_tensor_update_shares("adam", ups, torch.device("cpu"), repeats=2, warmup=1, sync=None)
    assert set(shares) == {"a", "b", "c"} and all(v > 0 for v in shares.values())
    assert shares["c"] / shares["a"] == pytest.approx(4.0)  # 8192 vs 2048 elements
    assert shares["a"] / shares["b"] == pytest.approx(64.0)
    table = calibrate_compute([("a", _constant(shares["a"]))], repeats=1, warmup=0)
    assert table.get("a") == shares["a"]  # a share is recorded as timed, not re-timed


def test_bf16_calibration_holds_the_keys_of_the_bf16_cost_graph(tmp_path):
    """A table timed with precision="bf16-mixed" serves every configuration of that precision's
    cost graph (the fp32 keys of the plain graph would miss them all)."""
    pytest.importorskip("torch")
    from tensoropt_py.calibrate import calibrate_model_compute, model_compute_entries, model_update_entries
    from tensoropt_py.cost.builder import build_cost_graph
    from tensoropt_py.cost.training import TrainingOptions
    from tensoropt_py.graph import zoo

    g = zoo.small_transformer(batch=4, seq_len=8, hidden=16, heads=2, layers=1, vocab=32)
    cl = Cluster.preset("cpu-1x4")
    out = tmp_path / "bf16.json"
    table = calibrate_model_compute(g, cl, 2, repeats=1, warmup=0, out=out, device="cpu", precision="bf16-mixed")
    entries, _ = model_compute_entries(g, cl, 2, precision="bf16-mixed")
    updates = model_update_entries(g, cl, 2, precision="bf16-mixed")
    assert table.meta["skipped"] == 0 and table.meta["precision"] == "bf16-mixed"
    assert {k for k, _ in table.items()} == set(entries) | {forward_key(k) for k in entries} | set(updates)
    assert any("bfloat16" in k for k in entries)
    plain, _ = model_compute_entries(g, cl, 2)
    assert not set(plain) & {k for k in entries if "bfloat16" in k}

    bf16 = TrainingOptions(precision="bf16-mixed")
    mcg = build_cost_graph(g, cl.with_calibration(out), 2, training=bf16)
    checked = _check_compute_times_are_the_table(mcg, table)
    assert checked >= len(entries)
    with pytest.raises(InvalidInputError, match="precision 'fp8'"):
        model_compute_entries(g, cl, 2, precision="fp8")
