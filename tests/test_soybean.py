"""SOYBEAN's tiling model (tensoropt_py.baselines.soybean) against the paper and brute force.

Numbers come from the seed text (../shared/seeds/004_24978e33a7d2789f.txt) and its
restatement (../shared/notes/soybean.md); each test names the paragraph it derives from.
Hand derivations are written out where the paper gives only the rule.
"""

import itertools
import random

import numpy as np
import pytest

import tensoropt_py as to
from tensoropt_py import baselines as bl
from tensoropt_py.baselines.soybean import (
    RED, REP, BatchOnly, Contraction, CutResult, Elementwise, MatMul, TilingGraph, Update, brute_force, conversion_fraction,
    decode_choices, exact_k_cuts, flatten, format_tiling, graph_from_model, k_cuts, matmul_cost, mlp_graph, one_cut,
    conv_layouts, parse_tiling, reorder_cuts, section_2_2_traffic, tiling_cost,
)
from tensoropt_py.engine import evaluate
from tensoropt_py.errors import InvalidInputError
from tensoropt_py.graph import zoo
from tensoropt_py.plan import Plan

R, C = 0, 1


def one_matmul(x=(400, 300), w=(300, 200)):
    """Notes §3 setup: X 400x300 (120000), W 300x200 (60000), Y = XW 400x200 (80000)."""
    return TilingGraph((("X", x), ("W", w), ("Y", (x[0], w[1]))), (MatMul("fwd", "X", "W", "Y"),))


def paper_mlp():
    """§2.2: five fully connected layers of 300 units, batch 400 (Eq. 1: element-wise functions ignored)."""
    return mlp_graph(batch=400, sizes=(300,) * 6)


# ----------------------------------------------------------------------------------------------
# §4.2.1 conversion costs: the ghost-area rule, checked against an explicit two-device count
# ----------------------------------------------------------------------------------------------
def _region(t, d, shape):
    """Boolean mask of what device d (0/1) holds (or needs) under basic tiling t."""
    m = np.zeros(shape, dtype=bool)
    if t == R:
        m[d * shape[0] // 2:(d + 1) * shape[0] // 2, :] = True
    elif t == C:
        m[:, d * shape[1] // 2:(d + 1) * shape[1] // 2] = True
    else:
        m[:] = True
    return m


def _ghost_area(src, dst, shape=(4, 6)):
    """§4.2.1: the area a device needs minus what it already holds, summed over both devices.

    ``red`` holds a full-size partial sum: every needed element lacks the other device's part.
    """
    total = 0
    for d in (0, 1):
        need = _region(dst, d, shape)
        if src == RED:
            total += need.sum()
        else:
            total += (need & ~_region(src, d, shape)).sum()
    return total / (shape[0] * shape[1])


@pytest.mark.parametrize("src,dst", [(a, b) for a in (R, C, REP, RED) for b in (R, C, REP)])
def test_conversion_fraction_is_the_ghost_area(src, dst):
    # §4.2.1 "Computing the cost of tiling conversion": ghost area minus held area. red -> r
    # is 2 (each device needs the other's whole partial), red -> R/C is 1 (a reduce-scatter).
    assert conversion_fraction(src, dst) == _ghost_area(src, dst)


def test_notes_section3_T1_conversions():
    # notes §3 T1, |M| = 120000: R->C 60000; R->r 120000; r->C 0; red->R 120000; red->r 240000
    M = 120000
    got = [conversion_fraction(a, b) * M for a, b in [(R, C), (R, REP), (REP, C), (RED, R), (RED, REP)]]
    assert got == [60000, 120000, 0, 120000, 240000]
    with pytest.raises(InvalidInputError, match="red"):
        conversion_fraction(R, RED)


def test_notes_section3_T2_aligned_and_reductions():
    # notes §3 T2 (X 400x300, W 300x200, Y 400x200): R x r -> R = 0; r x C -> C = 0;
    # C x R -> R = |Z| = 80000 (A3 then reduce-scatter); C x R -> r = 160000 (all-reduce)
    g = one_matmul()
    assert tiling_cost(g, {"X": "R", "W": "r", "Y": "R"}) == 0
    assert tiling_cost(g, {"X": "r", "W": "C", "Y": "C"}) == 0
    assert tiling_cost(g, {"X": "C", "W": "R", "Y": "R"}) == 80000
    assert tiling_cost(g, {"X": "C", "W": "R", "Y": "r"}) == 160000
    assert matmul_cost(C, R, R, (120000, 60000, 80000)) == (80000, "A3")


def test_fig7_unaligned_C_times_r_goes_through_aligned_R_times_r():
    # §4.2.1, Fig. 7(b): C x r = R is computed by converting X from C to R (A1): the fetched
    # area is half of X. A2 would cost |X| + |Z|/2, A3 |Z|.
    assert matmul_cost(C, REP, R, (120000, 60000, 80000)) == (60000, "A1")


def test_transposed_operand_swaps_R_and_C():
    # notes §1.2 (derived rule): a transpose swaps R and C and leaves r alone. dW = X^T dY
    # with X row-split reads X^T column-split: aligned A3, the reduction of dW.
    g = TilingGraph((("X", (8, 4)), ("dY", (8, 6)), ("dW", (4, 6))), (MatMul("dW", "X", "dY", "dW", x_t=True),))
    assert tiling_cost(g, {"X": "R", "dY": "R", "dW": "r"}) == 2 * 24
    assert tiling_cost(g, {"X": "C", "dY": "r", "dW": "R"}) == 0  # X^T is R: A1


# ----------------------------------------------------------------------------------------------
# §4.1 tilings of data, model and hybrid parallelism (derivations in the comments)
# ----------------------------------------------------------------------------------------------
def _kind(m):
    return "W" if m.startswith("W") else "dW" if m.startswith("dW") else "dY" if m.startswith("dY") else "act"


def test_section41_data_parallel_costs_the_gradient_all_reduce():
    # §4.1 T_data: weights r, everything else R. Per layer: forward A1 (0), dX A1 (0), dW = X^T dY
    # is A3 (red) then the update into W's r: 2|W| (red -> R -> r, or red -> r with dW r).
    g = paper_mlp()
    params = 5 * 300 * 300
    t = {m: ("r" if _kind(m) == "W" else "R") for m in g.matrix_names}
    assert tiling_cost(g, t) == 2 * params
    # 4 devices, gradients replicated too: red -> r on every cut, on the whole W (never
    # split), weighted 1 and 2 by Thm 1: 2(n - 1)|W| with n = 4 (notes §1.7)
    t = {m: ("rr" if _kind(m) in ("W", "dW") else "RR") for m in g.matrix_names}
    assert tiling_cost(g, t) == 2 * (4 - 1) * params
    # gradients row-split (T_data's "R otherwise"): the inner cut reduce-scatters half a
    # gradient tile and gathers it: 2|W| + 2 * (|W|/2 + |W|/2) = 4|W|
    t = {m: ("rr" if _kind(m) == "W" else "RR") for m in g.matrix_names}
    assert tiling_cost(g, t) == 4 * params


def test_section41_model_parallel():
    # §4.1 T_model on two devices: weights R, activations C, activation gradients r (the
    # weight gradients R, "computed locally"). Per layer (X, Y, dY 120000, W 90000):
    #   forward X(C) W(R) -> Y(C): A3, red -> C = |Y| = 120000 (A1 210000, A2 165000);
    #   dX = dY(r) W^T(C) -> dY_prev(r): A2, C -> r = |dY| = 120000 (A1 210000, A3 285000);
    #   dW = X^T(R) dY(r) -> dW(R): A1, free; the update R -> R is free.
    # Five forward matmuls and four dX matmuls (none for the input): 9 * 120000.
    g = paper_mlp()
    t = {m: {"W": "R", "dW": "R", "act": "C", "dY": "r"}[_kind(m)] for m in g.matrix_names}
    assert tiling_cost(g, t) == 9 * 120000


def test_section41_hybrid_on_four_devices():
    # §4.1 T_hybrid: weights rR, activations RC, others (dY, dW) Rr; Thm 1: c = delta_1 + 2 delta_2.
    #   cut 1 is T_data: per layer dW red -> R (90000) and its update R -> r (90000): delta_1 = 5 * 180000.
    #   cut 2 on the tile graph (activations and dY 60000, W 90000, dW 45000), letters W R, act C, dY r, dW r:
    #     forward A3 red -> C 60000; dX A2 C -> r 60000; dW A1 then R -> r 45000; update r -> R free:
    #     delta_2 = 5 * (60000 + 45000) + 4 * 60000 = 765000.
    g = paper_mlp()
    t = {m: {"W": "rR", "act": "RC", "dY": "Rr", "dW": "Rr"}[_kind(m)] for m in g.matrix_names}
    assert tiling_cost(g, t) == 5 * 180000 + 2 * 765000


def test_section41_tilings_never_beat_the_optimum():
    g = paper_mlp()
    best1, best2 = one_cut(g), k_cuts(g, 2)
    assert best1.cost <= 2 * 5 * 90000 and best1.cost <= 9 * 120000
    assert best2.cost <= 5 * 180000 + 2 * 765000
    assert best1.cost == tiling_cost(g, best1.tilings) and best2.cost == tiling_cost(g, best2.tilings)


# ----------------------------------------------------------------------------------------------
# §2.2 arithmetic
# ----------------------------------------------------------------------------------------------
def test_section22_arithmetic():
    # §2.2: parameters 300x300x5x4B = 1.8MB, activations 400x300x5x4B = 2.4MB; on 16 GPUs data
    # parallelism 1.8 x 16 x 2 = 57.6MB, model parallelism 2.4 x 16 x 2 = 76.8MB; hybrid with 4
    # groups of 4: 14.4 + 4 x 4.8 = 33.6MB, saving 41.7% and 56.2%.
    dp, mp, hy = section_2_2_traffic(5, 300, 400, 16, groups=4)
    assert (dp, mp, hy) == pytest.approx((57.6e6, 76.8e6, 33.6e6))
    assert round(100 * (1 - hy / dp), 1) == 41.7 and round(100 * (1 - hy / mp), 1) == 56.2
    # "If the batch size is 300 while the layer size is 400, model parallelism becomes better."
    dp, mp, _ = section_2_2_traffic(5, 400, 300, 16)
    assert mp < dp
    with pytest.raises(InvalidInputError, match="3 groups do not divide 16 devices"):
        section_2_2_traffic(5, 300, 400, 16, groups=3)


def test_section22_arithmetic_is_not_the_tiling_model():
    # notes §1.7: the §2.2 count is n x 2 x |W|; the tiling model's data parallelism (gradients
    # replicated) is 2(n - 1)|W|: on 4 devices 6|W| against 8|W|, in elements x 4 bytes.
    g = paper_mlp()
    t = {m: ("rr" if _kind(m) in ("W", "dW") else "RR") for m in g.matrix_names}
    dp, _, _ = section_2_2_traffic(5, 300, 400, 4)
    assert tiling_cost(g, t) * 4 == pytest.approx(dp * (4 - 1) / 4)
    # On 16 devices the per-cut minimum of Eq. 2 leaves A3 (all-reduce of the 90000-element
    # dW, 2 x 90000) once the batch tiles are small: cut 3 A1 costs 15000 + 30000 + 90000 =
    # 135000, cut 4 7500 + 15000 + 90000 = 112500. Per layer 180000 + 2 x 180000 + 4 x
    # 135000 + 8 x 112500 = 1980000, not 2 x 15 x 90000 = 2700000.
    t = {m: ("rrrr" if _kind(m) in ("W", "dW") else "RRRR") for m in g.matrix_names}
    assert tiling_cost(g, t) == 5 * 1980000


def test_mlp_graph_has_the_papers_matmuls():
    # §4.2.2: "For an N-layer MLP network, there are 3N matrix multiplications (forward,
    # backward and gradient computation)"; the input's gradient is never needed, so 3N - 1 here.
    g = paper_mlp()
    assert sum(isinstance(op, MatMul) for op in g.ops) == 3 * 5 - 1
    assert sum(isinstance(op, Update) for op in g.ops) == 5


# ----------------------------------------------------------------------------------------------
# Thm 1-3, flattening, order of cuts
# ----------------------------------------------------------------------------------------------
def test_def1_and_thm2_flattening():
    # Def. 1: T^2 has the 9 compositions RR, RC, Rr, CR, CC, Cr, rR, rC, rr; Thm 2: flattened,
    # T^2 = {R^2, C^2, r^2, RC, Rr, Cr} (6), and T^k has (k+1)(k+2)/2 classes.
    T2 = ["".join(p) for p in itertools.product("RCr", repeat=2)]
    assert T2 == ["RR", "RC", "Rr", "CR", "CC", "Cr", "rR", "rC", "rr"]
    assert len({frozenset(flatten(parse_tiling(t)).items()) for t in T2}) == 6
    for k in (1, 2, 3, 4):
        classes = {frozenset(flatten(p).items()) for p in itertools.product((R, C, REP), repeat=k)}
        assert len(classes) == (k + 1) * (k + 2) // 2
    assert format_tiling(parse_tiling("rRC")) == "rRC"
    with pytest.raises(InvalidInputError, match="unknown letter"):
        parse_tiling("RX")


@pytest.mark.parametrize("k", [2, 3])
def test_thm1_total_is_the_weighted_sum_of_cuts(k):
    # Thm 1: c_k = sum_i 2^(k-i) delta_i, the outermost cut weighted 1 (Algorithm 1: c_k = delta_k + 2 c_{k-1})
    g = mlp_graph(batch=64, sizes=(32, 64, 16), activation=True, loss=True)
    r = k_cuts(g, k)
    assert len(r.deltas) == k
    assert r.cost == sum(2 ** i * d for i, d in enumerate(r.deltas))
    assert r.cost == tiling_cost(g, r.tilings)


@pytest.mark.parametrize("shape", [(400, 300), (64, 32, 16)])
def test_thm3_greediness_holds_for_the_k_cut_result(shape):
    # Thm 3: delta_i <= 2 delta_{i-1} (outermost first here: delta_outer <= 2 delta_inner):
    # a tile is at least half its matrix, so no inner cut costs less than half the outer one.
    g = paper_mlp() if len(shape) == 2 else mlp_graph(batch=shape[0], sizes=shape[1:] * 3, activation=True)
    r = k_cuts(g, 3)
    for outer, inner in zip(r.deltas, r.deltas[1:]):
        assert outer <= 2 * inner


def test_order_of_cuts_is_irrelevant_for_partitioned_tilings():
    # §4.4: "the order of the tiling applied will not influence the total communication cost".
    # Holds when no tensor is replicated: every cut converts the whole matrix once.
    rng = random.Random(3)
    g = mlp_graph(batch=16, sizes=(8, 16, 8), activation=True, loss=True)
    for _ in range(20):
        t = {m: tuple(rng.choice((R, C)) for _ in range(3)) for m in g.matrix_names}
        base = tiling_cost(g, t)
        for perm in itertools.permutations(range(3)):
            assert tiling_cost(g, reorder_cuts(t, perm)) == base


def test_order_of_cuts_matters_with_replication():
    # The same claim fails once a cut replicates (module docstring, "Findings"): a gradient
    # stored Rr updated into a weight stored rr costs |G| (outer groups swap halves), the
    # swapped tiling rR -> rr costs 2|G|; the ghost area on 4 devices is 2|G| for both.
    g = TilingGraph((("G", (4, 4)), ("W", (4, 4))), (Update("u", "G", "W"),))
    t = {"G": "Rr", "W": "rr"}
    assert tiling_cost(g, t) == 16
    assert tiling_cost(g, reorder_cuts(t, (1, 0))) == 32


# ----------------------------------------------------------------------------------------------
# brute force
# ----------------------------------------------------------------------------------------------
def random_graph(rng, nops):
    dims = [2, 4, 8]
    mats, ops = {}, []

    def new(shape):
        name = f"M{len(mats)}"
        mats[name] = shape
        return name

    new((rng.choice(dims), rng.choice(dims)))
    for i in range(nops):
        u = rng.random()
        names = list(mats)
        if u < 0.65:
            x = rng.choice(names)
            xt, yt = rng.random() < 0.3, rng.random() < 0.3
            m, k = mats[x][::-1] if xt else mats[x]
            n = rng.choice(dims)
            want = (n, k) if yt else (k, n)
            old = [c for c in names if c != x and mats[c] == want]
            y = rng.choice(old) if old and rng.random() < 0.4 else new(want)
            ops.append(MatMul(f"o{i}", x, y, new((m, n)), xt, yt))
        elif u < 0.8:
            a = rng.choice(names)
            ops.append(Elementwise(f"o{i}", (a,), (new(mats[a]),)))
        elif u < 0.9:
            a = rng.choice(names)
            ops.append(Update(f"o{i}", a, new(mats[a])))
        else:
            a = rng.choice(names)
            ops.append(BatchOnly(f"o{i}", (a,), (new(mats[a]),), (), ()))
    return TilingGraph(tuple(mats.items()), tuple(ops))


def _tiny_graphs(seed, count, max_mats):
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        g = random_graph(rng, rng.randint(1, 3))
        if len(g.matrices) <= max_mats:
            out.append(g)
    return out


def test_one_cut_dp_equals_brute_force():
    # §4.2.2: "The algorithm searches for all possible tilings and therefore guarantees optimal"
    for g in _tiny_graphs(0, 25, 6):
        assert one_cut(g).cost == brute_force(g, 1), g


def test_one_cut_dp_equals_brute_force_on_a_training_graph():
    g = mlp_graph(batch=8, sizes=(4, 8, 3))  # forward, dX, dW and updates of two layers: 9 matrices
    r = one_cut(g)
    assert r.cost == brute_force(g, 1) == tiling_cost(g, r.tilings)


def test_k_cut_search_equals_exhaustive_enumeration():
    # every 2-cut tiling of every tensor enumerated (9 per matrix) against the joint DP over
    # T^2 and against Algorithm 1 (which matches on these tiny graphs; see the next test)
    for g in _tiny_graphs(1, 8, 4):
        full = brute_force(g, 2)
        assert exact_k_cuts(g, 2).cost == full, g
        assert k_cuts(g, 2).cost == full, g


def test_algorithm1_is_not_always_optimal():
    # §4.4 sketches an optimality proof; it does not hold under Thm 1's own accounting. Four
    # layers of 16 units, batch 12 (the §2.2 "batch 300, width 400" shape, scaled): the
    # first cut has several optima; the joint optimum's first cut is one of them (960), but
    # Algorithm 1's OneCut picks another, which leaves bigger tiles (Y1 replicated, not
    # column-split) to the inner cut: 960 + 2 x 576 against 960 + 2 x 480.
    g = mlp_graph(batch=12, sizes=(16,) * 5)
    greedy, joint = k_cuts(g, 2), exact_k_cuts(g, 2)
    assert (greedy.cost, joint.cost) == (2112, 1920)
    assert joint.cost == tiling_cost(g, joint.tilings)
    assert greedy.deltas == (960, 576)
    assert tiling_cost(g, {m: s[:1] for m, s in joint.tilings.items()}) == greedy.deltas[0]
    assert (greedy.text("Y1"), joint.text("Y1")) == ("rr", "Cr")


def test_even_tilings_only():
    # §4.1: only even tilings; a dimension of 6 splits once, not twice
    g = TilingGraph((("X", (6, 8)), ("W", (8, 8)), ("Y", (6, 8))), (MatMul("f", "X", "W", "Y"),))
    r = k_cuts(g, 2)
    assert all(flatten(t).get(R, 0) <= 1 for m, t in r.tilings.items() if m in ("X", "Y"))
    with pytest.raises(InvalidInputError, match="uneven"):
        tiling_cost(g, {"X": "RR", "W": "rr", "Y": "RR"})


def test_bad_graphs_and_tilings_name_the_problem():
    with pytest.raises(InvalidInputError, match="do not match"):
        TilingGraph((("X", (4, 6)), ("W", (4, 2)), ("Y", (4, 2))), (MatMul("f", "X", "W", "Y"),))
    with pytest.raises(InvalidInputError, match="declared twice"):
        TilingGraph((("X", (4, 6)), ("X", (4, 6))), ())
    with pytest.raises(InvalidInputError, match="lacks tensor 'Y'"):
        tiling_cost(one_matmul(), {"X": "R", "W": "r"})
    with pytest.raises(InvalidInputError, match="number of cuts must be an integer >= 0, got -1"):
        k_cuts(one_matmul(), -1)


# ----------------------------------------------------------------------------------------------
# a zoo model: SOYBEAN's tiling decoded into a Plan our cost model and executor take
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp4():
    fr = to.frontier("mlp", "cpu-1x4", devices=4, exact=True)
    return fr, to.Cluster.preset("cpu-1x4")


def test_zoo_mlp_plan_is_valid_and_costed_by_our_model(mlp4, tmp_path):
    fr, cl = mlp4
    mcg = fr.model_cost_graph
    plan = bl.soybean(cluster=cl, cost_graph=mcg)
    assert plan.method == "soybean" and plan.devices == 4
    assert plan.notes[0].startswith("SOYBEAN communication")
    # costed by plan_from_choices: the CostGraph re-adds to the plan's memory and time
    m, t = evaluate(mcg.cost_graph, plan.choices, plan.edge_choices)
    assert plan.additive_memory == pytest.approx(m[0], rel=1e-12) and plan.time == pytest.approx(t[0], rel=1e-12)
    assert Plan.from_json(plan.to_json()) == plan
    # in our space, so weakly dominated by the exact frontier
    assert np.any((fr.memory <= plan.memory * (1 + 1e-9)) & (fr.time <= plan.time * (1 + 1e-9)))
    # the configurations are the decoded SOYBEAN tiling (and standalone gives the same plan)
    tg, links = graph_from_model(mcg.graph)
    result = k_cuts(tg, 2)
    choices, _ = decode_choices(mcg, links, result)
    assert plan.choices == tuple(int(c) for c in choices)
    assert bl.soybean("mlp", "cpu-1x4", 4).choices == plan.choices


def test_decoding_the_data_parallel_tiling_gives_data_parallelism(mlp4):
    # mapping table (module docstring): forward A1, dX A1, dW A3 all split the batch; the
    # element-wise and batch-only operators P_0: that is our data-parallel configuration
    fr, _ = mlp4
    mcg = fr.model_cost_graph
    tg, links = graph_from_model(mcg.graph)
    aligned = {}
    for op in tg.ops:
        if isinstance(op, MatMul):
            aligned[op.name] = ("A3",) * 2 if op.name.endswith(":dW") else ("A1",) * 2
        elif isinstance(op, Update):
            aligned[op.name] = (None, None)
        else:
            aligned[op.name] = (0, 0)
    choices, notes = decode_choices(mcg, links, CutResult({}, aligned, 0.0))
    assert notes == ()
    assert list(choices) == list(mcg.data_parallel_choice())


def test_decoding_rule_majority_then_forward(mlp4):
    # "dX replicated while X is column-split" has no configuration. Cut 1: forward A3 (splits
    # i), dX A1 (b), dW A1 (o) all disagree: the forward's i is used. Cut 2: forward A1 (b),
    # dX A2 (i), dW A3 (b): the majority b. Both are noted.
    fr, _ = mlp4
    mcg = fr.model_cost_graph
    tg, links = graph_from_model(mcg.graph)
    base = {op.name: ((0, 0) if not isinstance(op, (MatMul, Update)) else (None, None) if isinstance(op, Update)
                      else ("A3", "A3") if op.name.endswith(":dW") else ("A1", "A1")) for op in tg.ops}
    node = mcg.op_names.index("fc1")
    odd = dict(base, **{"fc1:fwd": ("A3", "A1"), "fc1:dX": ("A1", "A2"), "fc1:dW": ("A1", "A3")})
    choices, notes = decode_choices(mcg, links, CutResult({}, odd, 0.0))
    cfg = mcg.configs[node][choices[node]]
    names = [d.name for d in mcg.graph.operator("fc1").loop_dims]
    assert [names[f] for f in cfg.fine] == ["i", "b"]
    assert notes == ("fc1 cut 1: fwd A3 (i), dX A1 (b), dW A1 (o) -> i",
                     "fc1 cut 2: fwd A1 (b), dX A2 (i), dW A3 (b) -> b")


def test_soybean_plan_next_to_the_frontier(mlp4, tmp_path):
    fr, cl = mlp4
    plan = bl.soybean(cluster=cl, cost_graph=fr.model_cost_graph)
    fig = fr.plot(tmp_path / "soybean.png", baselines={"SOYBEAN": plan})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "SOYBEAN" in labels
    assert (tmp_path / "soybean.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_soybean_refuses_what_it_cannot_model():
    import dataclasses

    three = dataclasses.replace(to.Cluster.preset("cpu-1x4"), devices_per_machine=3)
    with pytest.raises(InvalidInputError, match="power-of-two device count, got 3"):
        bl.soybean(zoo.mlp(batch=6, sizes=(6, 6)), three, 3)
    # a transformer block keeps too many tensors live for the exact level DP (§4.2.2's
    # worst case): refused with the number, and left out of all_baselines
    g = zoo.small_transformer(batch=2, seq_len=8, hidden=16, heads=2, layers=1, vocab=32)
    with pytest.raises(InvalidInputError, match="too wide for the exact search"):
        k_cuts(graph_from_model(g)[0], 1)


def test_cnn_convolutions_split_batch_or_channels_and_the_rest_the_batch():
    # §4.5: "Tiling on batch dimension leads to data parallelism while tiling on channel
    # dimensions leads to model parallelism. Tilings on image and kernel dimensions are ...
    # ignored"; "for all other operators, we only allow partitioning on the batch dimension"
    tg, links = graph_from_model(zoo.small_cnn(batch=4, image_size=12))
    kinds = {link.op: link.kind for link in links}
    assert kinds["conv1"] == kinds["conv2"] == "conv" and kinds["pool1"] == "batch" and kinds["fc1"] == "linear"
    for role in ("fwd", "dX", "dW"):
        for _, *codes, _ in conv_layouts(role):
            assert set(codes) <= {0, 1, REP, RED}  # batch (0), channels (1), replicated, partial
    pool = [op for op in tg.ops if op.name == "pool1"][0]
    assert isinstance(pool, BatchOnly)
    r = k_cuts(tg, 2)
    assert r.cost == tiling_cost(tg, r.tilings)
    assert all(a == (0, 0) for name, a in r.aligned.items() if name.startswith(("pool", "flatten", "loss")))
    with pytest.raises(InvalidInputError, match="role must be"):
        conv_layouts("bwd")


def test_conv_aligned_layouts_by_hand_and_brute_force():
    # a convolution x [2, 2, 4, 4] (b, ci), w [2, 2, 3, 3] (co, ci), y [2, 2, 4, 4] (b, co):
    # each aligned layout is free when the tensors are already in it; the input-channel
    # split leaves y as red partial sums: reduce-scattering it over the channels costs |y|
    def graph(role="fwd"):
        return TilingGraph((("x", (2, 2, 4, 4)), ("w", (2, 2, 3, 3)), ("y", (2, 2, 4, 4))),
                           (Contraction("c", "x", "w", "y", conv_layouts(role), (2, 2, 2)),))
    g = graph()
    assert tiling_cost(g, {"x": "P0", "w": "r", "y": "P0"}) == 0       # data parallel
    assert tiling_cost(g, {"x": "r", "w": "P0", "y": "P1"}) == 0       # output channels
    assert tiling_cost(g, {"x": "P1", "w": "P1", "y": "r"}) == 2 * 64  # input channels, all-reduce of y
    for role in ("fwd", "dX", "dW"):
        assert one_cut(graph(role)).cost == brute_force(graph(role), 1) == 0
    with pytest.raises(InvalidInputError, match="bad tilings"):
        TilingGraph((("x", (2, 2)), ("w", (2, 2)), ("y", (2, 2))),
                    (Contraction("c", "x", "w", "y", (("A1", 5, REP, 0, 0),), (2,)),))
