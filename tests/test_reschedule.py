"""Rescheduling: Dijkstra vs brute-force enumeration, identity, fwd/bwd symmetry, triangle inequality."""

import itertools
import math

import pytest

from tensoropt_py.cluster import Cluster
from tensoropt_py.cost.comm import CommModel
from tensoropt_py.cost.reschedule import Rescheduler, moves
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.space.layout import PARTIAL, REPLICATE, Layout

CL = Cluster.preset("v100-2x8")


@pytest.fixture(scope="module")
def rs():
    return Rescheduler(CommModel(CL))


def brute(rs, shape, src, dst, max_len):
    """Cheapest sequence of at most max_len moves, by exhaustive enumeration."""
    best = math.inf
    frontier = [(src, 0.0)]
    for _ in range(max_len):
        nxt = []
        for lay, t in frontier:
            for kind, axes, after, nbytes in moves(shape, 4, lay):
                nt = t + rs.step_time(kind, nbytes, lay.sizes, axes)
                if after == dst:
                    best = min(best, nt)
                nxt.append((after, nt))
        # keep the cheapest arrival per layout at this length (exact for "at most max_len" minima)
        d = {}
        for lay, t in nxt:
            if t < d.get(lay, math.inf):
                d[lay] = t
        frontier = list(d.items())
    return best


def layouts(sizes, ndim, partial=True):
    opts = [REPLICATE] + list(range(ndim)) + ([PARTIAL] if partial else [])
    for place in itertools.product(opts, repeat=len(sizes)):
        yield Layout(sizes, place)


@pytest.mark.parametrize("sizes,shape", [((2, 2), (8, 4)), ((2, 2, 2), (8, 8))])
def test_dijkstra_equals_brute_force(rs, sizes, shape):
    srcs = [l for l in layouts(sizes, len(shape)) if l.fits(shape)]
    dsts = [l for l in layouts(sizes, len(shape), partial=False) if l.fits(shape)]
    checked = 0
    for i, src in enumerate(srcs):
        for dst in dsts[i % 3::3]:  # a deterministic third of the pairs keeps the test fast
            if src == dst:
                continue
            p = rs.path(shape, "float32", src, dst)
            b = brute(rs, shape, src, dst, 4)
            assert p.time <= b + 1e-15
            if len(p.steps) <= 4:
                assert p.time == pytest.approx(b, rel=1e-12, abs=1e-15), (src, dst, str(p))
            # the path is valid: its steps chain src to dst and sum to its time
            assert p.steps[0].before == src and p.steps[-1].after == dst
            assert sum(s.time for s in p.steps) == pytest.approx(p.time)
            checked += 1
    assert checked > 20


def test_identity_costs_zero(rs):
    for lay in layouts((2, 2, 2), 2):
        if lay.fits((8, 8)):
            p = rs.path((8, 8), "float32", lay, lay)
            assert p.time == 0.0 and p.steps == ()


def test_forward_backward_symmetry(rs):
    """all-gather forward <-> reduce-scatter backward (consumer gradient partial)."""
    shape = (64, 1024)
    a = Layout((2, 2, 2), (0, 0, 0))
    b = Layout((2, 2, 2), (REPLICATE,) * 3)
    b_grad = Layout((2, 2, 2), (PARTIAL,) * 3)
    fwd = rs.path(shape, "float32", a, b)
    bwd = rs.backward(shape, "float32", a, b, b_grad)
    assert [s.kind for s in fwd.steps] and all(s.kind == "all_gather" for s in fwd.steps)
    assert all(s.kind == "reduce_scatter" for s in bwd.steps)
    assert bwd.time == pytest.approx(fwd.time, rel=1e-9)
    # a replicated consumer gradient only needs a free slice back
    assert rs.backward(shape, "float32", a, b).time == 0.0


def test_triangle_inequality(rs):
    shape = (8, 8)
    lays = [l for l in layouts((2, 2, 2), 2, partial=False) if l.fits(shape)][::3]
    for x, y, z in itertools.product(lays[:8], repeat=3):
        assert rs.time(shape, "float32", x, z) <= rs.time(shape, "float32", x, y) + rs.time(shape, "float32", y, z) + 1e-15


def test_groups_and_bytes(rs):
    p = rs.path((16, 16), "float32", Layout((2, 2), (PARTIAL, REPLICATE)), Layout((2, 2), (REPLICATE, REPLICATE)))
    assert [(s.kind, s.groups, s.nbytes) for s in p.steps] == [("all_reduce", ((0, 2), (1, 3)), 16 * 16 * 4)]
    assert p.time == pytest.approx(CommModel(CL).collective_time("all_reduce", 1024, ((0, 2), (1, 3))))


def test_cross_mesh_grids(rs):
    # 6 devices: mesh [2,3] vs [3,2] grids connect through free re-expressions
    src = Layout((2, 3), (0, REPLICATE))
    dst = Layout((3, 2), (REPLICATE, 0))
    p = rs.path((12, 6), "float32", src, dst)
    assert math.isfinite(p.time) and p.time > 0


def test_bad_inputs(rs):
    with pytest.raises(InvalidInputError, match="does not divide"):
        rs.path((3, 4), "float32", Layout((2,), (0,)), Layout((2,), (REPLICATE,)))
    with pytest.raises(InvalidInputError, match="partial"):
        rs.path((4, 4), "float32", Layout((2,), (0,)), Layout((2,), (PARTIAL,)))
    with pytest.raises(InvalidInputError, match="dtype"):
        rs.path((4, 4), "float99", Layout((2,), (0,)), Layout((2,), (REPLICATE,)))
