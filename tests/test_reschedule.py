"""Rescheduling: Dijkstra vs brute-force enumeration, identity, fwd/bwd symmetry, triangle inequality."""

import heapq
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


# -- the move-graph engine vs the reference search -----------------------------------------------

import numpy as np  # noqa: E402

from tensoropt_py.cost.reschedule import ReferenceRescheduler, _place_moves, dijkstra_py  # noqa: E402


@pytest.mark.parametrize("sizes,shape", [((2, 2, 2), (8, 8)), ((2, 3), (12, 6)), ((2, 2, 2, 2), (16, 6, 8))])
def test_place_moves_equal_moves(sizes, shape):
    for lay in layouts(sizes, len(shape)):
        if lay.fits(shape):
            want = [(k, ax, after.place, nb) for k, ax, after, nb in moves(shape, 4, lay)]
            assert _place_moves(shape, 4, lay.sizes, lay.place) == want


def test_compiled_move_closure_equals_python_reference():
    # the compiled expansion of a skeleton (placements as integer codes) against the expansion by
    # _place_moves: the same nodes in the same order, the same edges and moves, closure after
    # closure from several starts
    pytest.importorskip("tensoropt_py.cost._reschedule")
    from tensoropt_py.cost.reschedule import _MoveSkeleton

    rng = np.random.default_rng(3)
    for _ in range(200):
        sizes = tuple(int(x) for x in rng.choice([2, 2, 3, 4], size=rng.integers(1, 6)))
        n = math.prod(sizes)
        profile = tuple(math.gcd(int(d), n) for d in rng.choice([1, 2, 3, 6, 8, 12, 16, 48, 64, 96], rng.integers(1, 5)))
        compiled, reference = _MoveSkeleton(profile, sizes), _MoveSkeleton(profile, sizes, compiled=False)
        assert compiled._code2id is not None and reference._code2id is None
        for _ in range(3):
            start = tuple(int(p) for p in rng.integers(-2, len(profile), size=len(sizes)))
            assert compiled.id_of(start) == reference.id_of(start)
            assert compiled.node(start) == reference.node(start)
        assert compiled.places == reference.places and compiled.move_info == reference.move_info
        for x, y in zip(compiled.csr(), reference.csr()):
            assert np.array_equal(x, y)

def _random_csr(rng, n, deg, mode):
    rows = [rng.choice(n, size=rng.integers(0, deg + 1)) for _ in range(n)]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.concatenate(rows).astype(np.int32) if indptr[-1] else np.zeros(0, dtype=np.int32)
    m = len(indices)
    if mode == 0:  # few distinct distances, many ties: exercises the push-order tie-breaking
        w = rng.integers(0, 4, size=m) * 0.25
    elif mode == 1:
        w = rng.random(m) * 1e-3
    else:  # free moves (+0.0 and -0.0) among collective-like times
        w = np.where(rng.random(m) < 0.4, np.where(rng.random(m) < 0.5, 0.0, -0.0), rng.choice([1e-6, 3e-6, 2e-5], m))
    return indptr, indices, np.asarray(w, dtype=np.float64)


def _dijkstra_both(fn, indptr, indices, w, s, targets):
    n = len(indptr) - 1
    dist, prev, done = np.full(n, np.inf), np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.int8)
    settled = fn(indptr, indices, w, s, np.asarray(targets, dtype=np.int32), dist, prev, done)
    return settled, dist, prev, done


def test_compiled_dijkstra_equals_python_reference():
    compiled = pytest.importorskip("tensoropt_py.cost._reschedule").dijkstra
    rng = np.random.default_rng(0)
    for trial in range(150):
        n = int(rng.integers(1, 120))
        indptr, indices, w = _random_csr(rng, n, 8, trial % 3)
        s = int(rng.integers(n))
        for targets in ([], rng.choice(n, size=min(n, 3), replace=False).tolist()):
            a = _dijkstra_both(compiled, indptr, indices, w, s, targets)
            b = _dijkstra_both(dijkstra_py, indptr, indices, w, s, targets)
            assert a[0] == b[0]
            for x, y in zip(a[1:], b[1:]):
                assert np.array_equal(x, y)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled-closures", "python-closures"])
@pytest.mark.parametrize("sizes,shape,other", [((2, 2, 2), (8, 8), None), ((2, 2, 2, 2), (16, 12, 8), None),
                                               ((2, 3), (12, 6), (3, 2))])
def test_fast_rescheduler_equals_reference(sizes, shape, other, compiled, monkeypatch):
    if compiled:
        pytest.importorskip("tensoropt_py.cost._reschedule")
    else:  # move graphs too large for the compiled closure's table take the Python expansion
        import tensoropt_py.cost.reschedule as reschedule

        monkeypatch.setattr(reschedule, "_MAX_CODES", 0)
    fast, ref = Rescheduler(CommModel(CL)), ReferenceRescheduler(CommModel(CL))
    lays = [l for l in layouts(sizes, len(shape)) if l.fits(shape)]
    srcs = lays[::3]
    dsts = [l for l in lays if not l.is_partial][::2]
    if other is not None:  # targets on another fine grid (re-expressed or multi-grid search)
        dsts += [l for l in layouts(other, len(shape), partial=False) if l.fits(shape)]
    m = fast.matrix(shape, "float32", srcs, dsts)
    assert all((skel._code2id is not None) == compiled for skel in fast._skeletons.values())
    assert np.array_equal(m, ref.matrix(shape, "float32", srcs, dsts))
    assert fast.matrix(shape, "float32", srcs, dsts) is m  # cached
    plain = [l for l in srcs if not l.is_partial][:4]
    both = fast.matrices([(shape, "float32", dsts, plain), (shape, "float16", srcs, dsts[:5])])
    assert np.array_equal(both[0], ref.matrix(shape, "float32", dsts, plain))
    assert np.array_equal(both[1], ref.matrix(shape, "float16", srcs, dsts[:5]))
    fresh = Rescheduler(CommModel(CL))  # paths before any matrix
    for i, src in enumerate(srcs[:12]):
        assert np.array_equal(fresh.times(shape, "float32", src, dsts), ref.times(shape, "float32", src, dsts))
        for dst in dsts[i % 4::4]:
            assert fresh.time(shape, "float32", src, dst) == ref.time(shape, "float32", src, dst)
            if math.isfinite(ref.time(shape, "float32", src, dst)):
                for rs in (fresh, fast):
                    assert rs.path(shape, "float32", src, dst) == ref.path(shape, "float32", src, dst)
                    assert rs.backward(shape, "float32", dst, dst, src) == ref.backward(shape, "float32", dst, dst, src)
            else:
                with pytest.raises(InvalidInputError, match="no rescheduling"):
                    fresh.path(shape, "float32", src, dst)


def test_threaded_batches_equal_reference(monkeypatch):
    # the searches of a batch run on 3 threads (however small) in waves of a few, with a run
    # cache small enough to evict between waves: every matrix stays the reference's, and the
    # pool ran searches
    import threading

    import tensoropt_py.cost.reschedule as reschedule

    monkeypatch.setattr(Rescheduler, "WAVE_NODES", 2000)
    monkeypatch.setattr(Rescheduler, "THREAD_MIN_EDGES", 0)
    monkeypatch.setattr(Rescheduler, "RUN_CACHE_NODES", 1500)
    ran_on, search = set(), reschedule._search

    def spy(*args):
        ran_on.add(threading.get_ident())
        return search(*args)

    monkeypatch.setattr(reschedule, "_search", spy)
    fast, ref = Rescheduler(CommModel(CL), threads=3), ReferenceRescheduler(CommModel(CL))
    shape = (16, 12, 8)
    lays = [l for l in layouts((2, 2, 2, 2), len(shape)) if l.fits(shape)]
    srcs, dsts = lays[::2], [l for l in lays if not l.is_partial][::3]
    requests = [(shape, "float32", srcs, dsts), (shape, "float16", srcs[::3], dsts[::2]),
                ((32, 12, 8), "float32", srcs[1::4], dsts)]
    for m, (sh, dt, a, b) in zip(fast.matrices(requests), requests):
        assert np.array_equal(m, ref.matrix(sh, dt, a, b))
    assert ran_on - {threading.get_ident()}
    assert fast.cache_info()["searches"] > len(srcs)
    # a second batch: sources met before (their runs cached or evicted), targets not asked before
    more = [(shape, "float32", srcs[::-1], dsts[1::2])]
    assert np.array_equal(fast.matrices(more)[0], ref.matrix(*more[0]))


def test_rescheduler_threads_checked():
    with pytest.raises(InvalidInputError, match="threads"):
        Rescheduler(CommModel(CL), threads=0)
    assert Rescheduler(CommModel(CL), threads=None).threads >= 1


def test_fast_rescheduler_errors_match_reference():
    fast, ref = Rescheduler(CommModel(CL)), ReferenceRescheduler(CommModel(CL))
    ok, bad = Layout((2, 2), (0, -1)), Layout((2, 2), (1, 1))  # dim 1 of (8, 2) cannot split in 4
    part = Layout((2, 2), (PARTIAL, -1))
    for args in [((8, 2), [ok, ok], [ok, bad]), ((8, 2), [ok, bad], [ok]), ((8, 2), [ok], [part]),
                 ((8, 2), [ok], [Layout((2,), (0,))])]:
        with pytest.raises(InvalidInputError) as e1:
            fast.matrix(args[0], "float32", args[1], args[2])
        with pytest.raises(InvalidInputError) as e2:
            ref.matrix(args[0], "float32", args[1], args[2])
        assert str(e1.value) == str(e2.value)
    assert fast.matrix((8, 2), "float32", [], [ok]).shape == (0, 1)
    assert fast.times((8, 2), "float32", bad, []).shape == (0,)


@pytest.mark.parametrize("make", ["fast", "reference"])
def test_one_collective_where_a_chain_only_saves_latency(make):
    """S0 -> R and P -> R over 8 devices of one H100 machine: one collective, not a chain of 2-device ones.

    Each collective call pays the device's launch cost, so the shortest path only chains
    collectives where that saves more than the extra launches.
    """
    from tensoropt_py.cost.reschedule import ReferenceRescheduler

    cm = CommModel(Cluster.preset("h100-4x8"))
    r = Rescheduler(cm) if make == "fast" else ReferenceRescheduler(cm)
    fine = (2, 2, 2)  # the fine axes of a 1-D mesh of 8
    p = r.path((1024, 1024), "float32", Layout(fine, (0, 0, 0)), Layout(fine, (-1, -1, -1)))
    assert [s.kind for s in p.steps] == ["all_gather"]
    assert p.steps[0].groups == (tuple(range(8)),)
    assert p.time == pytest.approx(cm.collective_time("all_gather", 1024 * 1024 * 4, (tuple(range(8)),)))
    q = r.path((1024, 1024), "float32", Layout(fine, (PARTIAL,) * 3), Layout(fine, (REPLICATE,) * 3))
    assert [s.kind for s in q.steps] == ["all_reduce"]


# -- launches and bytes: the chain against exhaustive searches (issue: chains of 2-device collectives) ----

def _send_bytes(kind, nbytes, g):
    """Bytes one device sends in a ring collective over ``g`` devices (exact: ``nbytes`` divides by ``g``)."""
    if kind == "slice":
        return 0
    share, rest = divmod((g - 1) * nbytes, g)
    assert rest == 0, (kind, nbytes, g)
    return 2 * share if kind == "all_reduce" else share


def _group(sizes, kind, axes):
    return math.prod(sizes[a] for a in axes) if kind != "slice" else 1


class LaunchBandwidthModel:
    """A communication model of launches and bytes only: ``launch`` seconds per call plus one second per byte sent.

    With ``launch`` below the smallest difference in bytes two chains can have, the
    cheapest chain is the one that sends the fewest bytes and, among those, makes the fewest
    calls: the property the rescheduler must have when launches cost something.
    """

    def __init__(self, launch):
        self.launch = launch

    def collective_time(self, kind, nbytes, groups):
        return self.launch + _send_bytes(kind, nbytes, len(groups[0]))


def _lex_brute(shape, src):
    """Fewest (bytes sent, collectives) to every layout reachable from ``src``: label-correcting search to a fixpoint.

    Independent of the rescheduler's Dijkstra: integer costs compared as tuples, every
    layout relaxed again until nothing improves.
    """
    best = {src: (0, 0)}
    work = [src]
    while work:
        lay = work.pop()
        b, c = best[lay]
        for kind, axes, after, nbytes in moves(shape, 4, lay):
            cand = (b + _send_bytes(kind, nbytes, _group(lay.sizes, kind, axes)), c + (kind != "slice"))
            if cand < best.get(after, (math.inf, math.inf)):
                best[after] = cand
                work.append(after)
    return best


def _fewest_collectives_by_bytes(shape, src, max_bytes, moves_of):
    """``{(layout, bytes sent): fewest collectives}`` over every chain from ``src`` sending at most ``max_bytes``.

    States ``(layout, bytes)`` are settled in ``(bytes, collectives)`` order: no move lowers either.
    """
    best = {(src, 0): 0}
    heap = [(0, 0, 0, src)]
    tie = itertools.count(1)
    done = set()
    while heap:
        b, c, _, lay = heapq.heappop(heap)
        if (lay, b) in done:
            continue
        done.add((lay, b))
        for kind, sent, after in moves_of(lay):
            nb, nc = b + sent, c + (kind != "slice")
            if nb <= max_bytes and nc < best.get((after, nb), math.inf):
                best[(after, nb)] = nc
                heapq.heappush(heap, (nb, nc, next(tie), after))
    return best


def _min_time_brute(rs, shape, src):
    """Cheapest seconds to every layout reachable from ``src``: Bellman-Ford-style relaxation to a fixpoint."""
    best = {src: 0.0}
    work = [src]
    while work:
        lay = work.pop()
        t = best[lay]
        for kind, axes, after, nbytes in moves(shape, 4, lay):
            nt = t + rs.step_time(kind, nbytes, lay.sizes, axes)
            if nt < best.get(after, math.inf) * (1 - 1e-12):
                best[after] = nt
                work.append(after)
    return best


def _mesh_pairs(mesh_shape, ndim):
    """(src, dst) layouts of a ``mesh_shape`` mesh: per mesh dim Shard(d), R or P; targets without P."""
    from tensoropt_py.space.mesh import Mesh

    mesh = Mesh(mesh_shape)
    codes = list(range(ndim)) + [REPLICATE, PARTIAL]

    def lay(pl):
        return Layout(mesh.fine_sizes, tuple(pl[m] for m, axes in enumerate(mesh.fine_of_axis) for _ in axes))

    srcs = list(itertools.product(codes, repeat=len(mesh_shape)))
    dsts = [d for d in srcs if PARTIAL not in d]
    return [(lay(s), lay(d)) for s in srcs for d in dsts if s != d]


def _chain(p):
    steps = [s for s in p.steps if s.kind != "slice"]
    return sum(_send_bytes(s.kind, s.nbytes, len(s.groups[0])) for s in steps), len(steps)


MESHES = [(8,), (2, 4)]


@pytest.mark.parametrize("mesh_shape", MESHES)
@pytest.mark.parametrize("make", ["fast", "reference"])
def test_fewest_bytes_then_fewest_launches(mesh_shape, make):
    """Under launches + bytes, every chain sends the fewest bytes and, for those bytes, makes the fewest calls."""
    shape = (8, 8, 16)
    cm = LaunchBandwidthModel(2.0 ** -8)  # bytes sent are multiples of 64: calls only break ties
    r = Rescheduler(cm) if make == "fast" else ReferenceRescheduler(cm)
    pairs = _mesh_pairs(mesh_shape, len(shape))
    oracle = {}
    for src, dst in pairs:
        if src not in oracle:
            oracle[src] = _lex_brute(shape, src)
        assert _chain(r.path(shape, "float32", src, dst)) == oracle[src][dst], (src, dst)
    assert len(pairs) == {(8,): 16, (2, 4): 384}[mesh_shape]


@pytest.mark.parametrize("mesh_shape", MESHES)
def test_preset_chains_are_cheapest_and_never_longer_at_equal_bytes(mesh_shape):
    """On h100-4x8 the chain is the cheapest, and no chain that sends the same bytes makes fewer calls.

    A preset property, not a law of the model: splitting one ring collective over ``g``
    devices into a chain over factors of ``g`` sends the same bytes and saves ring steps
    (``7 - (1 + 3) = 3`` for 8 = 2 x 4) at one launch per extra call. h100-4x8 charges
    ``L = 5 us`` per launch and ``a = 1 us`` per step, so ``3 a < L`` and one call wins;
    with v100-2x8's ``a = 2 us`` the model rightly prefers the chain.
    """
    shape = (64, 64, 64)
    rs = Rescheduler(CommModel(Cluster.preset("h100-4x8")))
    pairs = _mesh_pairs(mesh_shape, len(shape))
    chains = {(s, d): rs.path(shape, "float32", s, d) for s, d in pairs}
    by_src = {}
    for (src, dst), p in chains.items():
        by_src.setdefault(src, []).append((dst, p))
    cache = {}

    def moves_of(lay):  # (kind, bytes sent, after) of every move, enumerated once per layout
        out = cache.get(lay)
        if out is None:
            out = cache[lay] = [(k, _send_bytes(k, nb, _group(lay.sizes, k, ax)), after)
                                for k, ax, after, nb in moves(shape, 4, lay)]
        return out

    for src, items in by_src.items():
        times = _min_time_brute(rs, shape, src)
        fewest = _fewest_collectives_by_bytes(shape, src, max(_chain(p)[0] for _, p in items), moves_of)
        for dst, p in items:
            assert p.time == pytest.approx(times[dst], rel=1e-12), (src, dst, str(p))
            nbytes, ncoll = _chain(p)
            assert fewest[(dst, nbytes)] >= ncoll, (src, dst, str(p))


@pytest.mark.parametrize("preset", ["h100-4x8", "v100-2x8"])
def test_partial_to_replicated_on_2x4_is_the_derived_optimum(preset):
    """(P,P) -> (R,R) on a 2x4 mesh of one machine, derived from the model.

    Every chain that reduces the partial sum sends at least ``2 (g-1)/g n = 1.75 n`` bytes
    per device; those that send exactly that are one all-reduce over the 8 devices (one
    launch ``L``, ``2 x 7`` ring steps of latency ``a``) or a reduce-scatter -> all-reduce ->
    all-gather hierarchy over 2 and 4 devices (3 launches, ``(1 + 3) x 2`` ring steps, the
    same bandwidth term); a shorter chain that is not one all-reduce sends more bytes.
    So one all-reduce is the optimum iff ``L + 14 a <= 3 L + 8 a``, i.e. ``6 a <= 2 L``,
    and the three-step hierarchy otherwise (for large tensors, where extra bytes cost more
    than a launch). h100-4x8 (L = 5 us, a = 1 us): one all-reduce; v100-2x8 (a = 2 us): three.
    """
    cl = Cluster.preset(preset)
    cm = CommModel(cl)
    rs = Rescheduler(cm)
    shape = (256, 256, 256)
    src = Layout((2, 2, 2), (PARTIAL,) * 3)
    dst = Layout((2, 2, 2), (REPLICATE,) * 3)
    p = rs.path(shape, "float32", src, dst)
    launch, a = cl.device.kernel_overhead, cl.intra_link.latency
    nbytes, ncoll = _chain(p)
    assert nbytes == 2 * 7 * math.prod(shape) * 4 // 8
    if 6 * a <= 2 * launch:
        assert [s.kind for s in p.steps] == ["all_reduce"] and p.steps[0].groups == (tuple(range(8)),)
    else:
        assert [s.kind for s in p.steps] == ["reduce_scatter", "all_reduce", "all_gather"]
        assert p.time < cm.collective_time("all_reduce", math.prod(shape) * 4, (tuple(range(8)),))
    assert p.time == pytest.approx(_min_time_brute(rs, shape, src)[dst], rel=1e-12)


@pytest.mark.parametrize("preset", ["h100-4x8", "v100-2x8"])
def test_shard_to_replicated_on_8_is_the_derived_optimum(preset):
    """S0 -> R on a 1-D mesh of 8 (one machine), derived from the model.

    Every way to gather sends the same ``7/8`` of the tensor per device; they differ in
    launches ``L`` and ring steps ``a``: one all-gather over 8 costs ``L + 7 a``, a chain
    over 2 and 4 devices (either order) ``2 L + 4 a``, three over 2 devices ``3 L + 3 a``.
    The cheapest of the three decides how many collectives the path has.
    """
    cl = Cluster.preset(preset)
    rs = Rescheduler(CommModel(cl))
    launch, a = cl.device.kernel_overhead, cl.intra_link.latency
    options = {1: launch + 7 * a, 2: 2 * launch + 4 * a, 3: 3 * launch + 3 * a}
    want = min(options, key=options.get)
    shape = (1024, 1024)
    p = rs.path(shape, "float32", Layout((2, 2, 2), (0, 0, 0)), Layout((2, 2, 2), (REPLICATE,) * 3))
    assert [s.kind for s in p.steps] == ["all_gather"] * want
    assert _chain(p) == (7 * 1024 * 1024 * 4 // 8, want)
