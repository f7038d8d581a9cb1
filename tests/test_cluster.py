"""tensoropt_py.cluster: specs, presets, JSON, device counts, calibration files."""

import dataclasses
import json

import pytest

from tensoropt_py.cluster import (
    Cluster,
    CommTable,
    ComputeTable,
    DeviceSpec,
    LinkSpec,
    group_signature,
    load_calibration,
    write_calibration,
)
from tensoropt_py.errors import CalibrationError, InvalidInputError

EXPECTED_PRESETS = {
    "v100-2x8",
    "v100-2x8-pcie",
    "v100-2x8-nordma",
    "v100-2x8-4xrdma",
    "dgx-a100-2x8",
    "h100-4x8",
    "h100-8x8",
    "cpu-1x4",
}


def test_presets_exist_and_validate():
    assert set(Cluster.presets()) == EXPECTED_PRESETS
    for name in Cluster.presets():
        cl = Cluster.preset(name)
        assert cl.name == name
        assert cl.num_devices == cl.machines * cl.devices_per_machine
        d = cl.device
        for v in (d.memory, d.peak_flops, d.memory_bandwidth, cl.intra_link.bandwidth):
            assert v > 0
        assert d.kernel_overhead >= 0 and cl.intra_link.latency >= 0
        if cl.machines > 1:
            assert cl.inter_link is not None and cl.inter_link.bandwidth > 0
        assert name in str(cl)
        hash(cl)  # frozen, usable as a key


def test_paper_cluster_numbers():
    cl = Cluster.preset("v100-2x8")
    assert (cl.machines, cl.devices_per_machine) == (2, 8)
    assert cl.device.memory == 16 * 2**30
    assert cl.intra_link.kind == "nvlink" and cl.inter_link.kind == "infiniband"
    assert cl.inter_link.bandwidth <= 12.5e9  # 100 Gb/s EDR line rate
    assert cl.intra_link.bandwidth > 5 * cl.inter_link.bandwidth
    pcie = Cluster.preset("v100-2x8-pcie").intra_link
    # an 8-GPU ring on PCIe runs at ~1/20 of NVLink (TensorOpt §5.1)
    eight_ring = pcie.bandwidth * min(1, pcie.ports / 8)
    assert 1 / 30 < eight_ring / cl.intra_link.bandwidth < 1 / 10
    nordma = Cluster.preset("v100-2x8-nordma").inter_link
    assert nordma.bandwidth == pytest.approx(0.5 * cl.inter_link.bandwidth)
    four = Cluster.preset("v100-2x8-4xrdma").inter_link
    assert four.ports * four.bandwidth == pytest.approx(4 * cl.inter_link.bandwidth)
    assert Cluster.preset("h100-4x8").num_devices == 32
    assert Cluster.preset("h100-8x8").num_devices == 64
    assert Cluster.preset("dgx-a100-2x8").device.flops_for("bf16") == 312e12


def test_unknown_preset_lists_names():
    with pytest.raises(InvalidInputError) as info:
        Cluster.preset("tpu-v9")
    msg = str(info.value)
    assert "'tpu-v9'" in msg
    for name in EXPECTED_PRESETS:
        assert name in msg


@pytest.mark.parametrize("name", sorted(EXPECTED_PRESETS))
def test_json_round_trip(name, tmp_path):
    cl = Cluster.preset(name)
    text = cl.to_json()
    json.loads(text)
    assert Cluster.from_json(text) == cl
    assert Cluster.from_json(json.loads(text)) == cl
    path = tmp_path / "cl.json"
    path.write_text(text)
    assert Cluster.load(path) == cl
    assert Cluster.load(str(path)) == cl
    assert Cluster.load(name) == cl


def test_json_round_trip_with_tables(tmp_path):
    comm = CommTable({("all_reduce", (2, 2, 1)): ([1, 2], [1e-5, 2e-5])}, {"backend": "mpi"})
    comp = ComputeTable({"mm|[2,2]|float32|fwd": 1e-6})
    cl = dataclasses.replace(Cluster.preset("cpu-1x4"), comm_table=comm, compute_table=comp)
    back = Cluster.from_json(cl.to_json())
    assert back == cl
    assert back.comm_table.get("all_reduce", (2, 2, 1)) == ((1.0, 2.0), (1e-5, 2e-5))
    assert back.comm_table.meta == {"backend": "mpi"}
    assert "calibrated" in str(back)


def test_synchronisation_term_round_trip_and_errors(tmp_path):
    comm = CommTable({("all_reduce", (2, 2, 1)): ([1, 2], [1e-5, 2e-5])}, {"backend": "mpi"},
                     sync={(2, 2, 1): (4e-4, 1.25), (4, 4, 1): (0.0, 1.0)})
    assert comm != CommTable({("all_reduce", (2, 2, 1)): ([1, 2], [1e-5, 2e-5])}, {"backend": "mpi"})
    path = write_calibration(tmp_path / "cal.json", comm=comm)
    back = Cluster.preset("cpu-1x4").with_calibration(path).comm_table
    assert back == comm and hash(back) == hash(comm)
    assert back.sync == {(2, 2, 1): (4e-4, 1.25), (4, 4, 1): (0.0, 1.0)} and back.sync_for((2, 2, 2)) == (0.0, 1.0)
    assert Cluster.from_json(dataclasses.replace(Cluster.preset("cpu-1x4"), comm_table=comm).to_json()).comm_table == comm
    # files written before the term existed load with none
    old = CommTable.from_dict({"entries": comm.to_dict()["entries"]})
    assert old.sync == {} and old.sync_for((2, 2, 1)) == (0.0, 1.0)
    # a file without stretches (waits only) reads them as 1
    waits_only = comm.to_dict()
    for e in waits_only["sync"]:
        del e["stretch"]
    assert CommTable.from_dict(waits_only).sync_for((2, 2, 1)) == (4e-4, 1.0)
    for bad in ({(2, 2): (1e-4, 1.0)}, {(2, 0, 1): (1e-4, 1.0)}, {(2, 2, 1): (-1e-4, 1.0)}, {(2, 2, 1): (1e-4, 0.5)},
                {(2, 2, 1): (float("nan"), 1.0)}, {(2, 2, 1): (1e-4, float("inf"))}, {(2, 2, 1): 1e-4},
                {(2, 2, 1): ("x", 1.0)}):
        with pytest.raises(CalibrationError, match="synchronisation entry"):
            CommTable({}, sync=bad)


def test_load_errors(tmp_path):
    with pytest.raises(InvalidInputError, match="neither an existing cluster JSON file nor a preset"):
        Cluster.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        Cluster.load(bad)
    incomplete = tmp_path / "inc.json"
    incomplete.write_text(json.dumps({"name": "x"}))
    with pytest.raises(InvalidInputError, match="malformed"):
        Cluster.load(incomplete)


def test_device_counts_and_machine_of():
    cl = Cluster.preset("v100-2x8")
    assert cl.device_counts() == (1, 2, 4, 8, 16)
    assert [cl.machine_of(d) for d in (0, 7, 8, 15)] == [0, 0, 1, 1]
    assert dataclasses.replace(cl, machines=3).device_counts() == (1, 2, 4, 8, 16, 24)
    assert dataclasses.replace(cl, machines=1, devices_per_machine=1).device_counts() == (1,)
    assert Cluster.preset("h100-4x8").device_counts() == (1, 2, 4, 8, 16, 32)
    for bad in (-1, 16, 2.0, True, "3"):
        with pytest.raises(InvalidInputError, match="out of range"):
            cl.machine_of(bad)


def test_spec_validation():
    d = DeviceSpec("x", "1GB", "1TFLOPS", "1GB/s", 0)
    assert d.kernel_overhead == 0.0
    with pytest.raises(InvalidInputError, match="size"):
        DeviceSpec("x", "-1GB", "1TFLOPS", "1GB/s")
    with pytest.raises(InvalidInputError, match="dtype"):
        DeviceSpec("x", "1GB", "1TFLOPS", "1GB/s", dtype_flops={"float13": 1e12})
    with pytest.raises(InvalidInputError, match="link kind"):
        LinkSpec("carrier-pigeon", "1GB/s", "1s")
    with pytest.raises(InvalidInputError, match="ports"):
        LinkSpec("infiniband", "1GB/s", "1us", ports=0)
    base = Cluster.preset("v100-2x8")
    for field, value in (("machines", 0), ("devices_per_machine", -2), ("machines", 1.5)):
        with pytest.raises(InvalidInputError, match=field):
            dataclasses.replace(base, **{field: value})
    with pytest.raises(InvalidInputError, match="no inter_link"):
        dataclasses.replace(base, inter_link=None)
    single = dataclasses.replace(base, machines=1, inter_link=None)
    assert Cluster.from_json(single.to_json()) == single


def test_group_signature():
    mof = lambda d: d // 8  # noqa: E731
    assert group_signature([tuple(range(16))], mof) == (16, 8, 1)
    assert group_signature([(0, 1), (2, 3), (8, 9)], mof) == (2, 2, 2)
    assert group_signature([(i, i + 8) for i in range(8)], mof) == (2, 1, 8)
    assert group_signature([tuple(range(j, 16, 2)) for j in range(2)], mof) == (8, 4, 2)


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_with_calibration_and_errors(tmp_path):
    comm = CommTable({("all_gather", (2, 2, 1)): ([1, 2, 4], [3e-6, 3e-6, 4e-6])})
    path = write_calibration(tmp_path / "cal.json", comm=comm)
    cl = Cluster.preset("cpu-1x4").with_calibration(path)
    assert cl.comm_table == comm and cl.compute_table is None
    # adding a compute section keeps the comm section
    write_calibration(path, compute=ComputeTable({"k": 1e-3}))
    cl2 = Cluster.preset("cpu-1x4").with_calibration(path)
    assert cl2.comm_table == comm and cl2.compute_table.get("k") == 1e-3

    missing = tmp_path / "nope.json"
    with pytest.raises(CalibrationError, match="nope.json"):
        Cluster.preset("cpu-1x4").with_calibration(missing)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "tensoropt_py-calibration", "vers')
    with pytest.raises(CalibrationError, match="corrupt.json"):
        Cluster.preset("cpu-1x4").with_calibration(corrupt)
    for name, data in [
        ("wrongformat.json", {"format": "other", "version": 1, "comm": {}}),
        ("noversion.json", {"format": "tensoropt_py-calibration", "version": 99, "comm": {"entries": []}}),
        ("empty.json", {"format": "tensoropt_py-calibration", "version": 1}),
        ("badentry.json", {"format": "tensoropt_py-calibration", "version": 1,
                           "comm": {"entries": [{"collective": "all_reduce"}]}}),
        ("badsizes.json", {"format": "tensoropt_py-calibration", "version": 1,
                           "comm": {"entries": [{"collective": "all_reduce", "group_size": 2,
                                                 "devices_per_machine": 2, "concurrent_groups": 1,
                                                 "sizes": [4, 2], "seconds": [1e-6, 2e-6]}]}}),
        ("negtime.json", {"format": "tensoropt_py-calibration", "version": 1,
                          "compute": {"entries": {"k": -1}}}),
    ]:
        p = _write(tmp_path / name, data)
        with pytest.raises(CalibrationError, match=name):
            load_calibration(p)


def test_device_efficiency_is_validated_and_falls_back():
    from tensoropt_py.cluster import DeviceSpec
    from tensoropt_py.errors import InvalidInputError

    d = DeviceSpec("toy", "1GiB", "1TFLOPS", "100GB/s", "5us", efficiency={"linear": 0.5, "unary": 0.8})
    assert d.efficiency_for("linear") == 0.5
    assert d.efficiency_for("unary:gelu") == 0.8  # the kind's value when the function has none
    assert d.efficiency_for("attention") == 1.0  # unknown families run at the roofline
    assert DeviceSpec(**d.to_dict()) == d
    for bad in ({"linear": 0.0}, {"linear": 1.5}, {"linear": "fast"}):
        with pytest.raises(InvalidInputError, match="efficiency"):
            DeviceSpec("toy", "1GiB", "1TFLOPS", "100GB/s", efficiency=bad)
