"""Simulator: hand-computed timelines on tiny graphs, memory, conversions, delta == full."""

import dataclasses
import zlib

import numpy as np
import pytest

from tensoropt_py.cluster import Cluster, DeviceSpec, LinkSpec
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.soap import (
    ConfigSpace,
    NotSoapError,
    SoapConfig,
    SoapStrategy,
    Simulator,
    data_parallel,
    from_split_factors,
    parallel_dims,
    strategy_from_split_factors,
)
from tensoropt_py.soap import task_graph as tgm
from tensoropt_py.soap.testing import chain_graph, lenet_graph, mlp_graph, rnn_graph


class UnitCompute:
    """Every compute task takes exactly 1 s."""

    def time(self, flops, bytes_moved, key=None, dtype="float32"):
        return 1.0


def _cluster(machines=1, per=4, intra=("nvlink", 128.0), ports=1):
    dev = DeviceSpec("d", "1GiB", "1TFLOPS", "1GB/s", 0)
    inter = LinkSpec("infiniband", 128.0, 0.0, ports=ports) if machines > 1 else None
    return Cluster("t", machines, per, dev, LinkSpec(intra[0], intra[1], 0.0), inter)


def _strategy(*cfgs):
    return SoapStrategy(tuple(cfgs))


# data -> relu on an 8x8 float32 tensor: half of it is 128 bytes, 1 s on a 128 B/s link.
@pytest.mark.parametrize("link,expected", [("nvlink", 4.0), ("pcie", 5.0)])
def test_two_transfers_distinct_links_vs_shared_bus(link, expected):
    g = chain_graph(batch=8, width=8, n=1)
    sim = Simulator(g, _cluster(intra=(link, 128.0)), 4, compute_model=UnitCompute())
    # data on device 0 (1 s), relu split in two over devices 1, 2: two 128-byte transfers
    s = _strategy(SoapConfig((), (0,)), SoapConfig((("b", 2),), (1, 2)))
    r = sim.simulate(s)
    # nvlink: links 0->1 and 0->2 run concurrently: 1 + 1 + 1 (fwd) + 1 (bwd) = 4
    # pcie (shared bus): the transfers queue: the second relu starts at 3, its backward ends at 5
    assert r.time == expected
    tl = r.timeline
    assert tl[(1, 0, 0, 0)][2:] == (1.0, 2.0)  # first transfer
    assert tl[(1, 0, 0, 1)][2:] == ((1.0, 2.0) if link == "nvlink" else (2.0, 3.0))
    assert r.num_tasks == 1 + 2 + 2 + 2  # data fwd, relu fwd+bwd x2, 2 transfers (no bwd into data)


def test_same_device_overlap_is_free_and_only_overlap_moves():
    g = chain_graph(batch=8, width=8, n=1)
    sim = Simulator(g, _cluster(), 4, compute_model=UnitCompute())
    # producer split by rows on (0, 1), consumer split by rows on (0, 1): aligned, no transfer
    r = sim.simulate(_strategy(SoapConfig((("b", 2),), (0, 1)), SoapConfig((("b", 2),), (0, 1))))
    assert r.time == 3.0 and r.num_tasks == 2 + 4
    # consumer split by columns on (0, 1): each consumer needs a quarter (64 bytes) from the other device
    r = sim.simulate(_strategy(SoapConfig((("b", 2),), (0, 1)), SoapConfig((("f", 2),), (0, 1))))
    tl = r.timeline
    comm = {k: v for k, v in tl.items() if k[0] == 1}
    assert sorted(comm) == [(1, 0, 0, 1), (1, 0, 1, 0)]
    assert all(v[3] - v[2] == 0.5 for v in comm.values())  # 64 bytes at 128 B/s
    assert r.time == 1.0 + 0.5 + 1.0 + 1.0


@pytest.mark.parametrize("ports,expected", [(1, 5.0), (2, 4.0)])
def test_cross_machine_transfers_share_the_nic(ports, expected):
    g = chain_graph(batch=8, width=8, n=1)
    cl = _cluster(machines=2, per=2, ports=ports)
    sim = Simulator(g, cl, 4, compute_model=UnitCompute())
    # rows 0-3 go 0 -> 2, rows 4-7 go 1 -> 3: both leave machine 0 (one NIC port, or two)
    r = sim.simulate(_strategy(SoapConfig((("b", 2),), (0, 1)), SoapConfig((("b", 2),), (2, 3))))
    assert r.time == expected


def test_gradient_allreduce_ring_tasks():
    g = mlp_graph(batch=8, width=4, layers=0, classes=4)  # data -> head (linear 4x4) -> loss
    cl = _cluster()
    sim = Simulator(g, cl, 4, compute_model=UnitCompute())
    r = sim.simulate(data_parallel(g, range(4)))
    sync = {k: v for k, v in r.timeline.items() if k[0] == 4}
    assert len(sync) == 4  # one ring link per device
    # 64-byte weight, k = 4: 2 * 3/4 * 64 bytes at 128 B/s, latency 0
    assert all(v[3] - v[2] == pytest.approx(2 * 3 / 4 * 64 / 128) for v in sync.values())
    assert {v[0] for v in sync.values()} == {("link", 0, 1), ("link", 1, 2), ("link", 2, 3), ("link", 3, 0)}


def test_memory_per_device_by_hand():
    g = mlp_graph(batch=8, width=4, layers=0, classes=4)  # head: x(8x4) @ w(4x4), saves x; loss saves logits
    sim = Simulator(g, _cluster(), 4, compute_model=UnitCompute(), optimizer_state_factor=2.0)
    r = sim.simulate(data_parallel(g, range(2)))
    w = 4 * 4 * 4 * (2 + 2)  # weight + grad + 2 Adam moments, replicated
    x_half = 4 * 4 * 4
    logits_half = 4 * 4 * 4
    assert list(r.per_device_memory) == [w + x_half + logits_half] * 2 + [0, 0]
    r = sim.simulate(_strategy(SoapConfig((), (0,)), SoapConfig((("o", 2),), (0, 1)), SoapConfig((), (0,))))
    # head split by output columns: half the weight each; both keep the whole input x
    assert list(r.per_device_memory) == [w // 2 + 2 * x_half + 2 * logits_half, w // 2 + 2 * x_half, 0, 0]


def test_from_split_factors():
    g = mlp_graph(batch=8, width=4, layers=0, classes=4)
    head = g.operator("head")
    assert parallel_dims(head) == ("b", "o")
    c = from_split_factors(head, {"b": 2, "o": 2}, [4, 5, 6, 7])
    assert c == SoapConfig((("b", 2), ("o", 2)), (4, 5, 6, 7))
    # replicated over a mesh axis: first replica of each part
    assert from_split_factors(head, {"b": 2}, [0, 1, 2, 3]).devices == (0, 2)
    with pytest.raises(NotSoapError, match="reduction"):
        from_split_factors(head, {"i": 2}, [0, 1])
    with pytest.raises(InvalidInputError, match="divide"):
        from_split_factors(head, {"b": 3}, [0, 1, 2])
    s = strategy_from_split_factors(g, {op.name: ({}, [0]) for op in g})
    assert all(cfg == SoapConfig((), (0,)) for cfg in s)


def test_bad_input():
    g = chain_graph()
    sim = Simulator(g, _cluster(), 2)
    with pytest.raises(InvalidInputError, match="outside"):
        sim.simulate(_strategy(SoapConfig((), (0,)), SoapConfig((), (3,)), SoapConfig((), (0,))))
    with pytest.raises(InvalidInputError, match="configs"):
        sim.simulate(_strategy(SoapConfig((), (0,))))
    with pytest.raises(InvalidInputError):
        SoapConfig((("b", 2),), (0,))
    with pytest.raises(InvalidInputError, match="devices"):
        Simulator(g, _cluster(), 9)


CLUSTERS = {
    "v100-2x8": Cluster.preset("v100-2x8"),
    "cpu-1x4": Cluster.preset("cpu-1x4"),
    "v100-4x8": dataclasses.replace(Cluster.preset("v100-2x8"), machines=4),
}


@pytest.mark.parametrize(
    "model,cluster,devices,placement",
    [
        ("mlp", "v100-2x8", 16, "contiguous"),
        ("lenet", "v100-2x8", 8, "any"),
        ("rnn", "v100-2x8", 16, "any"),
        ("lenet", "cpu-1x4", 4, "contiguous"),
        ("rnn", "cpu-1x4", 4, "any"),
        ("mlp", "v100-4x8", 32, "any"),
    ],
)
@pytest.mark.parametrize("backend", sorted(tgm.BACKENDS))
def test_delta_equals_full(model, cluster, devices, placement, backend, monkeypatch):
    monkeypatch.setattr(tgm, "_default_backend", backend)
    g = {"mlp": lambda: mlp_graph(batch=64, width=256, layers=3), "lenet": lenet_graph,
         "rnn": lambda: rnn_graph(batch=32, steps=3, vocab=1024, hidden=256)}[model]()
    sim = Simulator(g, CLUSTERS[cluster], devices)
    space = ConfigSpace(g, sim.devices, placement=placement)
    rng = np.random.default_rng(zlib.crc32(f"{model}{cluster}".encode()))
    st = sim.start(space.random_strategy(rng))
    for step in range(40):
        i = int(rng.integers(len(g)))
        c = space.neighbour(i, st.configs[i], rng) if step % 3 == 0 else space.random(i, rng)
        delta = sim.simulate_delta(st, i, c)
        full = sim.simulate(st.strategy)
        assert delta.timeline == full.timeline  # every task: device, ready, start, end
        assert delta.time == full.time
        assert np.array_equal(delta.per_device_memory, full.per_device_memory)
        st.tg.check()
        assert st.tg.backend == backend


def test_simulate_is_deterministic_and_str():
    g = lenet_graph()
    sim = Simulator(g, Cluster.preset("v100-2x8"), 4)
    s = data_parallel(g, range(4))
    assert sim.simulate(s).timeline == sim.simulate(s).timeline
    assert str(s).startswith("[b4@0-3 | b4@0-3")


@pytest.mark.parametrize("model,devices", [("lenet", 8), ("mlp", 16), ("rnn", 16)])
def test_backends_build_and_simulate_identically(model, devices, monkeypatch):
    """The compiled task-graph backend (its own edge builder and event loop) gives the same
    tasks and bit-identical timelines as the pure-Python reference, full and delta."""
    if "cython" not in tgm.BACKENDS:
        pytest.skip("compiled backend not built")
    g = {"mlp": lambda: mlp_graph(batch=64, width=256, layers=3), "lenet": lenet_graph,
         "rnn": lambda: rnn_graph(batch=32, steps=3, vocab=1024, hidden=256)}[model]()
    sim = Simulator(g, CLUSTERS["v100-2x8"], devices)
    space = ConfigSpace(g, sim.devices, placement="any")
    rng = np.random.default_rng(devices)
    moves = [(i, space.random(i, rng)) for i in rng.integers(len(g), size=15).tolist()]
    start = space.random_strategy(rng)
    out = {}
    for b in sorted(tgm.BACKENDS):
        monkeypatch.setattr(tgm, "_default_backend", b)
        st = sim.start(start)
        assert st.tg.backend == b
        run = [sim.simulate(start).timeline]
        for i, c in moves:
            run.append(sim.simulate_delta(st, i, c).timeline)
        run.append([[t.key for t in ts] for ts in st.edge_tasks])
        out[b] = run
    assert out["cython"] == out["python"]
