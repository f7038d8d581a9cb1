"""CostGraph / LayoutEdge validation, evaluate, brute force and the random generators."""

import numpy as np
import pytest

from tensoropt_py.errors import CostGraphError, InvalidInputError
from tensoropt_py.engine import CostGraph, LayoutEdge, brute_force_frontier, evaluate
from tensoropt_py.engine.random_graphs import random_chain, random_layered_dag, random_small_dag


def n(k, v=1.0):
    return np.full((k, 2), v)


def z(*shape):
    return np.zeros(shape)


def test_str_and_basic_properties():
    cg = CostGraph([n(2), n(3), n(1)], [(0, 1, z(2, 3, 2)), (1, 2, LayoutEdge([0, 1, 1], [0], z(2, 1, 2)))])
    assert str(cg) == "CostGraph(nodes=3, edges=2, K<=3)"
    assert cg.n_nodes == 3 and cg.n_edges == 2 and cg.n_configs == (2, 3, 1)
    assert isinstance(cg.node_costs, tuple) and isinstance(cg.edges, tuple)
    assert cg.topological_order == (0, 1, 2)
    with pytest.raises(AttributeError):
        cg.node_costs = ()
    assert not cg.node_costs[0].flags.writeable


def test_node_costs_are_copied():
    a = n(2)
    cg = CostGraph([a], [])
    a[0, 0] = 99
    assert cg.node_costs[0][0, 0] == 1.0


@pytest.mark.parametrize(
    "nodes, edges, match",
    [
        ([], [], "at least one node"),
        ([np.zeros((2, 3))], [], r"node 0: costs must have shape \(K, 2\)"),
        ([n(2), np.zeros((0, 2))], [], r"node 1: costs must have shape"),
        ([n(2), np.array([[1.0, np.nan]])], [], "node 1 has NaN"),
        ([np.array([[1.0, -2.0]])], [], "node 0 has negative cost -2.0"),
        ([np.array([[1.0, np.inf]])], [], "node 0: every one of its 1 configs is forbidden"),
        ([np.array([[-np.inf, 1.0]])], [], "node 0 has negative cost -inf"),
        ([n(2), n(2)], [(0, 2, z(2, 2, 2))], "edge 0: target node 2 does not exist"),
        ([n(2), n(2)], [(-1, 1, z(2, 2, 2))], "edge 0: source node -1 does not exist"),
        ([n(2), n(2)], [(0, 1, z(2, 2, 2)), (1, 1, z(2, 2, 2))], "edge 1: self-loop on node 1"),
        ([n(2), n(3)], [(0, 1, z(2, 2, 2))], r"edge 0 \(0->1\): cost must have shape \(2, 3, 2\)"),
        ([n(2), n(2)], [(0, 1, z(2, 2, 3))], r"edge 0 \(0->1\): cost must have shape"),
        ([n(2), n(2)], [(0, 1, np.full((2, 2, 2), np.nan))], r"edge 0 \(0->1\) has NaN"),
        ([n(2), n(2)], [(0, 1, np.full((2, 2, 2), -1.0))], r"edge 0 \(0->1\) has negative cost"),
        ([n(2), n(2)], [(0, 1, np.full((2, 2, 2), -np.inf))], r"negative cost -inf"),
        ([n(2), n(2)], [(0, 1, "abc")], r"edge 0 \(0->1\): cost is not a float array"),
        ([n(2), n(2)], [(0, 1)], "edge 0: expected a"),
        ([n(2), n(2)], [(0.0, 1, z(2, 2, 2))], "edge 0: source node must be an int"),
        ([n(2), n(2)], [(0, 1, LayoutEdge([0, 1, 0], [0, 0], z(2, 1, 2)))], r"src_layout has 3 entries, node 0 has K=2"),
        ([n(2), n(2)], [(0, 1, LayoutEdge([0, 1], [0], z(2, 1, 2)))], r"dst_layout has 1 entries, node 1 has K=2"),
    ],
)
def test_validation_errors(nodes, edges, match):
    with pytest.raises(CostGraphError, match=match):
        CostGraph(nodes, edges)


def test_all_options_infinite_is_a_forbidden_pair():
    cost = np.zeros((2, 2, 3, 2))
    cost[1, 0, :, 1] = np.inf
    cg = CostGraph([n(2), n(2)], [(0, 1, cost)])
    fr = brute_force_frontier(cg)
    assert [1, 0] not in fr.choices.tolist()
    m, t = evaluate(cg, [[1, 0]])
    assert m[0] == np.inf and t[0] == np.inf
    tab = np.zeros((2, 2, 2, 2))
    tab[1, 1, :, 0] = np.inf
    le = LayoutEdge([0, 1, 1], [1, 0], tab)
    cg = CostGraph([n(3), n(2)], [(0, 1, le)])
    assert np.isinf(evaluate(cg, [[1, 0]])[0][0])
    assert np.isfinite(evaluate(cg, [[0, 0]])[0][0])


@pytest.mark.parametrize(
    "args, match",
    [
        (([0, 2], [0], z(2, 1, 2)), r"src_layout\[1\] = 2 is out of range \[0, 2\)"),
        (([0, 1], [-1], z(2, 1, 2)), r"dst_layout\[0\] = -1 is out of range"),
        (([0.5, 1], [0], z(2, 1, 2)), "src_layout must hold integers"),
        (([[0, 1]], [0], z(2, 1, 2)), "src_layout must be a non-empty 1-d"),
        (([0, 1], [0], z(2, 1, 3)), r"table must have shape \(A, B, 2\) or \(A, B, R, 2\)"),
    ],
)
def test_layout_edge_validation(args, match):
    with pytest.raises(CostGraphError, match=match):
        LayoutEdge(*args)


def test_layout_edge_dense_and_str():
    tab = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2)
    le = LayoutEdge([1, 0], [2, 2, 0, 1], tab)
    d = le.dense()
    assert d.shape == (2, 4, 2)
    assert np.array_equal(d[0, 3], tab[1, 1])
    assert str(le) == "LayoutEdge(K_u=2, K_v=4, A=2, B=3, R=1)"


def test_multi_components_isolated_and_k1_are_valid():
    cg = CostGraph([n(1), n(2), n(3), n(1)], [(0, 1, z(1, 2, 2)), (0, 1, z(1, 2, 2, 2))])
    assert cg.components() == ((0, 1), (2,), (3,))
    assert cg.n_strategies() == 1 * 2 * 3 * 1 * 2


def test_evaluate_matches_manual_sum_and_validates():
    rng = np.random.default_rng(0)
    nodes = [rng.uniform(0, 5, (3, 2)), rng.uniform(0, 5, (2, 2))]
    cost = rng.uniform(0, 1, (3, 2, 2, 2))
    le_tab = rng.uniform(0, 1, (2, 1, 2))
    cg = CostGraph(nodes, [(0, 1, cost), (0, 1, LayoutEdge([0, 1, 1], [0, 0], le_tab))])
    ch = np.array([[2, 1], [0, 0]])
    ech = np.array([[1, 0], [0, 0]])
    m, t = evaluate(cg, ch, ech)
    exp0 = nodes[0][2] + nodes[1][1] + cost[2, 1, 1] + le_tab[1, 0]
    assert np.allclose([m[0], t[0]], exp0)
    with pytest.raises(InvalidInputError, match=r"choices\[:, 0\] must be in \[0, 3\)"):
        evaluate(cg, [[3, 0]], [[0, 0]])
    with pytest.raises(InvalidInputError, match=r"edge_choices\[:, 0\] must be in \[0, 2\)"):
        evaluate(cg, [[0, 0]], [[2, 0]])
    with pytest.raises(InvalidInputError, match="choices must have shape"):
        evaluate(cg, [[0, 0, 0]])
    with pytest.raises(InvalidInputError, match="CostGraph"):
        evaluate("x", [[0]])


def test_brute_force_small_and_refusal():
    cg = CostGraph([np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([[0.0, 0.0]])], [(0, 1, z(2, 1, 2))])
    fr = brute_force_frontier(cg)
    assert fr.memory.tolist() == [1.0, 2.0] and fr.choices.tolist() == [[0, 0], [1, 0]]
    big = random_chain(12, 4, seed=0)
    with pytest.raises(InvalidInputError, match="brute force would enumerate 16777216 strategies"):
        brute_force_frontier(big)


def test_brute_force_skips_absent_options():
    cost = np.zeros((1, 1, 2, 2))
    cost[0, 0, 0] = [np.inf, 0.0]
    cost[0, 0, 1] = [5.0, 5.0]
    cg = CostGraph([n(1, 0.0), n(1, 0.0)], [(0, 1, cost)])
    fr = brute_force_frontier(cg)
    assert fr.memory.tolist() == [5.0] and fr.edge_choices.tolist() == [[1]]


def test_generators_are_deterministic_and_realistic():
    a = random_layered_dag(5, 3, 8, layouts=4, options=2, seed=3)
    b = random_layered_dag(5, 3, 8, layouts=4, options=2, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a.node_costs, b.node_costs))
    mem = np.concatenate([c[:, 0] for c in a.node_costs])
    tim = np.concatenate([c[:, 1] for c in a.node_costs])
    assert 1e4 < mem.min() and mem.max() < 2e9 and 1e-6 < tim.min() and tim.max() < 0.2
    assert all(isinstance(e[2], LayoutEdge) for e in a.edges)
    c = random_chain(4, 5, options=3, seed=1)
    assert c.n_options(0) == 3
    s = random_small_dag(6, seed=5)
    assert s.n_nodes == 6
    with pytest.raises(InvalidInputError, match="n must be an integer >= 1"):
        random_chain(0, 3)
