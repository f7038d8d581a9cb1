"""tensoropt_py.cost.comm: the collective communication model and its tables."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tensoropt_py.cluster import COLLECTIVES, Cluster, CommTable
from tensoropt_py.cost.comm import CommModel, normalize_groups
from tensoropt_py.errors import InvalidInputError

V100 = Cluster.preset("v100-2x8")
KINDS = list(COLLECTIVES)
FULL = (tuple(range(16)),)
INTRA8 = (tuple(range(8)),)
CROSS_PAIR = ((0, 8),)
CROSS_PAIRS = tuple((i, i + 8) for i in range(8))
LAYOUTS = [
    ((0, 1),),
    INTRA8,
    FULL,
    CROSS_PAIR,
    CROSS_PAIRS,
    tuple(tuple(range(j, 16, 2)) for j in range(2)),  # strided: 4 devices per machine, 2 groups
    tuple(tuple(range(i, i + 4)) for i in range(0, 16, 4)),
]


@pytest.fixture(scope="module")
def cm():
    return CommModel(V100)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("groups", LAYOUTS)
def test_table_exact_at_powers_of_two(cm, kind, groups):
    for i in range(0, cm.max_log2 + 1, 3):
        n = 2.0**i
        assert cm.collective_time(kind, n, groups) == pytest.approx(cm.model_time(kind, n, groups), rel=1e-12)
    sizes, times = cm.table(kind, groups)
    assert np.array_equal(sizes, 2.0 ** np.arange(cm.max_log2 + 1))
    assert np.all(np.diff(times) >= 0)


@pytest.mark.parametrize("kind", KINDS)
def test_monotone_and_between_neighbours(cm, kind):
    rng = np.random.default_rng(0)
    n = np.sort(rng.uniform(0, 40, size=2000))
    n = 2.0**n
    t = cm.collective_times(kind, n, CROSS_PAIRS)
    assert np.all(np.diff(t) >= 0)
    lo = 2.0 ** np.floor(np.log2(n))
    assert np.all(t >= cm.collective_times(kind, lo, CROSS_PAIRS) - 1e-15)
    inside = n < 2.0**cm.max_log2
    assert np.all(t[inside] <= cm.collective_times(kind, 2 * lo[inside], CROSS_PAIRS) + 1e-15)


def test_scalar_matches_vectorised(cm):
    sizes = [0, 0.5, 1, 3, 1000, 12345.6, 2**20, 3 * 2**33, 2**40]
    for kind in KINDS:
        for groups in LAYOUTS:
            vec = cm.collective_times(kind, np.array(sizes), groups)
            for n, v in zip(sizes, vec):
                assert cm.collective_time(kind, n, groups) == pytest.approx(v, rel=1e-12, abs=0)
    assert cm.collective_times("all_reduce", np.ones((2, 3)) * 1e6, FULL).shape == (2, 3)


def test_extrapolation_beyond_table_is_linear_and_exact_for_model(cm):
    for kind in KINDS:
        big = 2.0**cm.max_log2 * 5
        assert cm.collective_time(kind, big, FULL) == pytest.approx(cm.model_time(kind, big, FULL), rel=1e-9)


def test_zero_bytes_and_size_one_groups_cost_nothing(cm):
    singles = tuple((d,) for d in range(16))
    for kind in KINDS:
        assert cm.collective_time(kind, 2**30, ((3,),)) == 0.0
        assert cm.collective_time(kind, 2**30, singles) == 0.0
        assert cm.collective_time(kind, 0, FULL) == 0.0
        assert cm.source(kind, singles) == "trivial"
        assert np.all(cm.collective_times(kind, [0, 1, 2**30], singles) == 0)
    assert cm.p2p_time(1e9, 5, 5) == 0.0


@pytest.mark.parametrize("name", Cluster.presets())
@pytest.mark.parametrize("groups", LAYOUTS)
def test_all_reduce_is_reduce_scatter_plus_all_gather(name, groups):
    cl = Cluster.preset(name)
    if max(max(g) for g in groups) >= cl.num_devices:
        pytest.skip("layout needs more devices")
    m = CommModel(cl)
    for n in (1, 1000, 2**20, 3e8):
        ar = m.collective_time("all_reduce", n, groups)
        rs = m.collective_time("reduce_scatter", n, groups)
        ag = m.collective_time("all_gather", n, groups)
        launch = cl.device.kernel_overhead  # charged once per call
        assert ar == pytest.approx(rs + ag - launch, rel=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_contention_concurrent_cross_machine_groups_are_slower(cm, kind):
    alone = cm.collective_time(kind, 2**26, CROSS_PAIR)
    together = cm.collective_time(kind, 2**26, CROSS_PAIRS)
    assert together > alone
    assert cm.signature(CROSS_PAIRS) == (2, 1, 8)


@pytest.mark.parametrize("name", ["v100-2x8", "v100-2x8-pcie", "dgx-a100-2x8", "h100-4x8", "cpu-1x4"])
@given(data=st.data())
def test_adding_concurrent_groups_is_never_faster(name, data):
    cl = Cluster.preset(name)
    m = CommModel(cl)
    n_dev = cl.num_devices
    size = data.draw(st.sampled_from([s for s in (2, 4, 8) if s <= n_dev]), label="group size")
    perm = data.draw(st.permutations(range(n_dev)), label="devices")
    groups = [tuple(sorted(perm[i:i + size])) for i in range(0, n_dev - size + 1, size)]
    k = data.draw(st.integers(1, len(groups)), label="groups used")
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    nbytes = data.draw(st.sampled_from([1, 2**10, 2**20, 2**27 + 5]), label="nbytes")
    fewer = tuple(groups[:k - 1]) + (groups[k - 1],)
    more = tuple(groups)
    for g in fewer:
        assert m.collective_time(kind, nbytes, (g,)) <= m.collective_time(kind, nbytes, fewer) * (1 + 1e-12)
    assert m.collective_time(kind, nbytes, fewer) <= m.collective_time(kind, nbytes, more) * (1 + 1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_intra_machine_faster_than_cross_machine(cm, kind):
    for n in (2**10, 2**20, 2**28):
        assert cm.collective_time(kind, n, ((0, 1),)) < cm.collective_time(kind, n, CROSS_PAIR)
        assert cm.collective_time(kind, n, INTRA8) < cm.collective_time(kind, n, (tuple(range(4, 12)),))
    assert cm.p2p_time(2**20, 0, 1) < cm.p2p_time(2**20, 0, 8)


def test_network_variants_order_like_fig7():
    n = 2**28
    t = {name: CommModel(Cluster.preset(name)).collective_time("all_reduce", n, FULL)
         for name in ("v100-2x8", "v100-2x8-nordma", "v100-2x8-4xrdma")}
    assert t["v100-2x8-4xrdma"] < t["v100-2x8"] < t["v100-2x8-nordma"]
    intra = {name: CommModel(Cluster.preset(name)).collective_time("all_reduce", n, INTRA8)
             for name in ("v100-2x8", "v100-2x8-pcie")}
    assert intra["v100-2x8-pcie"] > 10 * intra["v100-2x8"]


def test_known_values():
    m = CommModel(V100)
    n = 2**20
    L = 5e-6  # the V100's kernel_overhead: one launch per collective
    # one cross-machine pair: 2 steps of 5 us + n / 12 GB/s
    assert m.collective_time("all_reduce", n, CROSS_PAIR) == pytest.approx(L + 10e-6 + n / 12e9, rel=1e-12)
    # eight concurrent pairs share one EDR port
    assert m.collective_time("all_reduce", n, CROSS_PAIRS) == pytest.approx(L + 10e-6 + 8 * n / 12e9, rel=1e-12)
    # 8-GPU NVLink ring: 14 steps of 2 us + 2 * 7/8 * n / 130 GB/s
    assert m.collective_time("all_reduce", n, INTRA8) == pytest.approx(L + 28e-6 + 1.75 * n / 130e9, rel=1e-12)
    assert m.p2p_time(n, 3, 12) == pytest.approx(L + 5e-6 + n / 12e9, rel=1e-12)


def _calibrated(entries):
    return CommModel(dataclasses.replace(Cluster.preset("cpu-1x4"), comm_table=CommTable(entries)))


def test_calibrated_table_overrides_model():
    sizes = [2.0**i for i in range(0, 11)]
    times = [1e-3 * (i + 1) for i in range(11)]  # nothing like the model
    m = _calibrated({("all_reduce", (2, 2, 1)): (sizes, times)})
    g = ((0, 1),)
    assert m.source("all_reduce", g) == "calibrated"
    for s, t in zip(sizes, times):
        assert m.collective_time("all_reduce", s, g) == t
    # linear in bytes between points, linear extrapolation beyond, first value below
    assert m.collective_time("all_reduce", 3, g) == pytest.approx(0.5 * (times[1] + times[2]))
    assert m.collective_time("all_reduce", 2048, g) == pytest.approx(times[-1] + 2 * (times[-1] - times[-2]))
    assert m.collective_time("all_reduce", 0.25, g) == times[0]
    assert m.collective_time("all_reduce", 0, g) == 0.0
    # other signatures and kinds fall back to the model
    assert m.source("all_gather", g) == "model"
    assert m.source("all_reduce", ((0, 1), (2, 3))) == "model"
    assert m.collective_time("all_gather", 1024, g) == pytest.approx(m.model_time("all_gather", 1024, g))


def test_calibrated_noise_made_monotone():
    m = _calibrated({("broadcast", (4, 4, 1)): ([1, 2, 4, 8], [5e-6, 4e-6, 6e-6, 5.5e-6])})
    _, times = m.table("broadcast", ((0, 1, 2, 3),))
    assert list(times) == [5e-6, 5e-6, 6e-6, 6e-6]


@given(
    st.lists(st.floats(min_value=1e-7, max_value=1.0), min_size=2, max_size=12),
    st.floats(min_value=0, max_value=2**14),
    st.floats(min_value=0, max_value=2**14),
)
def test_calibrated_interpolation_is_monotone(raw, a, b):
    sizes = [2.0**i for i in range(len(raw))]
    m = _calibrated({("all_to_all", (2, 2, 1)): (sizes, raw)})
    lo, hi = sorted((a, b))
    assert m.collective_time("all_to_all", lo, ((0, 1),)) <= m.collective_time("all_to_all", hi, ((0, 1),))


def test_groups_forms_and_validation(cm):
    assert normalize_groups([[0, 1], [2, 3]]) == ((0, 1), (2, 3))
    assert cm.collective_time("all_gather", 1e6, [[0, 8], [1, 9]]) == cm.collective_time("all_gather", 1e6, ((0, 8), (1, 9)))
    assert cm.collective_time("all_gather", 1e6, (0, 8)) == cm.collective_time("all_gather", 1e6, ((0, 8),))
    assert cm.collective_time("all_gather", 1e6, (np.int64(0), np.int64(8))) == cm.collective_time("all_gather", 1e6, ((0, 8),))
    cases = [
        (("all_reduce", 1e3, ((0, 1), (2, 3, 4))), "same size"),
        (("all_reduce", 1e3, ((0, 1), (1, 2))), "more than once"),
        (("all_reduce", 1e3, ((0, 16),)), "out of range"),
        (("all_reduce", 1e3, ((0, -1),)), "out of range"),
        (("all_reduce", 1e3, ()), "at least one group"),
        (("all_reduce", 1e3, ((),)), "empty"),
        (("all_reduce", 1e3, ((0, 1.5),)), "integers"),
        (("allreduce", 1e3, ((0, 1),)), "unknown collective"),
        (("all_reduce", -1, ((0, 1),)), ">= 0"),
        (("all_reduce", math.nan, ((0, 1),)), ">= 0"),
        (("all_reduce", "1GB", ((0, 1),)), "number of bytes"),
    ]
    for args, fragment in cases:
        with pytest.raises(InvalidInputError, match=fragment):
            cm.collective_time(*args)
    with pytest.raises(InvalidInputError, match=">= 0"):
        cm.collective_times("all_reduce", [1, -1], ((0, 1),))
    with pytest.raises(InvalidInputError, match="out of range"):
        cm.p2p_time(10, 0, 99)
    with pytest.raises(InvalidInputError, match="max_log2"):
        CommModel(V100, max_log2=0)


def test_cache_returns_same_values_after_clear():
    m = CommModel(V100, cache_size=4)
    vals = [m.collective_time("all_to_all", 2**i + 1, FULL) for i in range(20)]
    m.clear_cache()
    assert vals == [m.collective_time("all_to_all", 2**i + 1, FULL) for i in range(20)]


def test_every_collective_call_pays_the_launch_cost():
    base = Cluster.preset("h100-4x8")
    free = dataclasses.replace(base, device=dataclasses.replace(base.device, kernel_overhead=0.0))
    slow = dataclasses.replace(base, device=dataclasses.replace(base.device, kernel_overhead=30e-6))
    g = ((0, 1, 2, 3),)
    for kind in COLLECTIVES:
        for n in (1, 2**20):
            t0 = CommModel(free).collective_time(kind, n, g)
            assert CommModel(base).collective_time(kind, n, g) == pytest.approx(t0 + 5e-6, rel=1e-12)
            assert CommModel(slow).collective_time(kind, n, g) == pytest.approx(t0 + 30e-6, rel=1e-12)
        assert CommModel(slow).collective_time(kind, 0, g) == 0.0  # nothing to send: no call


def test_synchronisation_terms_stretch_and_wait_once_per_call():
    sizes = [2.0**i for i in range(0, 11)]
    times = [1e-4 * (i + 1) for i in range(11)]
    wait, stretch = 7e-4, 1.5
    table = CommTable({("all_reduce", (2, 2, 2)): (sizes, times)},
                      sync={(2, 2, 2): (wait, stretch), (4, 4, 1): (2 * wait, 1.0)})
    m = CommModel(dataclasses.replace(Cluster.preset("cpu-1x4"), comm_table=table))
    plain = CommModel(Cluster.preset("cpu-1x4"))
    pairs, quad = ((0, 1), (2, 3)), ((0, 1, 2, 3),)
    # a measured table: stretched, plus the wait, whatever the size (interpolation included)
    for s, t in zip(sizes, times):
        assert m.collective_time("all_reduce", s, pairs) == pytest.approx(stretch * t + wait, rel=1e-12)
    slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
    assert m.collective_time("all_reduce", 3000, pairs) == pytest.approx(
        stretch * (times[-1] + (3000 - sizes[-1]) * slope) + wait, rel=1e-12)
    assert m.collective_times("all_reduce", [0, 4, 1024], pairs).tolist() == pytest.approx(
        [0.0, stretch * times[2] + wait, stretch * times[10] + wait])
    # the model alike, and the hot-loop form agrees
    for kind in ("all_gather", "all_to_all", "send_recv"):
        for n in (1, 2**12, 2**20):
            assert m.collective_time(kind, n, quad) == pytest.approx(plain.collective_time(kind, n, quad) + 2 * wait, rel=1e-12)
            assert m.collective_time(kind, n, pairs) == pytest.approx(stretch * plain.collective_time(kind, n, pairs) + wait,
                                                                      rel=1e-12)
            assert m.timer(kind, quad)(n) == m.collective_time(kind, n, quad)
    # no call, no wait: nothing to send, or a group of one device
    assert m.collective_time("all_reduce", 0, pairs) == 0.0
    assert m.collective_time("all_reduce", 2**20, ((0,), (1,), (2,), (3,))) == 0.0
    # a partitioning without a measurement is unchanged; the direct model never has one
    assert m.collective_time("all_gather", 2**10, ((0, 1),)) == plain.collective_time("all_gather", 2**10, ((0, 1),))
    assert m.model_time("all_gather", 2**10, quad) == plain.model_time("all_gather", 2**10, quad)
    # one all-reduce waits once; a reduce-scatter then an all-gather wait twice
    ar = m.collective_time("all_reduce", 2**20, quad)
    rs_ag = m.collective_time("reduce_scatter", 2**20, quad) + m.collective_time("all_gather", 2**20, quad)
    launch = Cluster.preset("cpu-1x4").device.kernel_overhead
    assert rs_ag - ar == pytest.approx(launch + 2 * wait, rel=1e-9)
