"""IOPDDL problem files: reading and writing, the contest's scoring, and solves against brute force."""

import itertools
import json

import numpy as np
import pytest

from tensoropt_py.engine import brute_force_peak_frontier
from tensoropt_py.engine.iopddl import IopddlProblem, read_iopddl, solution_cost, solve_iopddl, write_iopddl
from tensoropt_py.engine.random_graphs import random_cyclic_graph, random_interval_usage
from tensoropt_py.errors import InfeasibleError, InvalidInputError


def _raw(seed, n=6, limit=True):
    """A random problem written the way the contest's files are (integer costs, 1e18 sentinels)."""
    rng = np.random.default_rng(seed)
    ks = rng.integers(1, 4, size=n)
    starts = rng.integers(0, 6, size=n)
    intervals = [[int(s), int(s + rng.integers(0, 4))] for s in starts]
    costs = [[int(c) for c in rng.integers(0, 20, size=k)] for k in ks]
    for c in costs:  # a forbidden strategy now and then (never the last one left)
        if len(c) > 1 and rng.random() < 0.3:
            c[0] = 10**18
    usages = [[int(u) for u in rng.integers(0, 10, size=k)] for k in ks]
    pairs = [[int(u), int(v)] for u, v in itertools.combinations(range(n), 2) if rng.random() < 0.45]
    pair_costs = []
    for u, v in pairs:
        c = [int(x) for x in rng.integers(0, 10, size=ks[u] * ks[v])]
        if len(c) > 1 and rng.random() < 0.15:
            c[int(rng.integers(len(c)))] = 10**18
        pair_costs.append(c)
    problem = {"name": f"random{seed}", "nodes": {"intervals": intervals, "costs": costs, "usages": usages},
               "edges": {"nodes": pairs, "costs": pair_costs}}
    if limit:
        problem["usage_limit"] = int(rng.integers(8, 30))
    return {"problem": problem}


def _contest_score(raw, solution):
    """The contest's own evaluation, written from its definition: None when infeasible."""
    p = raw["problem"]
    nodes, edges = p["nodes"], p["edges"]
    cost = 0
    horizon = max([e for _, e in nodes["intervals"]] + [0])
    load = [0] * horizon
    for i, s in enumerate(solution):
        cost += nodes["costs"][i][s]
        start, end = nodes["intervals"][i]
        for t in range(start, end):
            load[t] += nodes["usages"][i][s]
    for (u, v), c in zip(edges["nodes"], edges["costs"]):
        cost += c[solution[u] * len(nodes["costs"][v]) + solution[v]]
    if cost >= 10**18 or ("usage_limit" in p and max(load + [0]) > p["usage_limit"]):
        return None
    return cost


def _solutions(raw):
    return itertools.product(*[range(len(c)) for c in raw["problem"]["nodes"]["costs"]])


@pytest.mark.parametrize("seed", range(12))
def test_scoring_matches_the_contest_definition(seed):
    raw = _raw(seed)
    problem = read_iopddl(raw)
    for sol in _solutions(raw):
        want = _contest_score(raw, sol)
        if want is None:
            with pytest.raises(InfeasibleError):
                solution_cost(problem, sol)
        else:
            assert solution_cost(problem, sol) == want


@pytest.mark.parametrize("seed", range(12))
def test_solve_equals_brute_force(seed):
    raw = _raw(seed)
    problem = read_iopddl(raw)
    scores = [s for s in (_contest_score(raw, sol) for sol in _solutions(raw)) if s is not None]
    if not scores:
        with pytest.raises(InfeasibleError):
            solve_iopddl(problem)
        return
    r = solve_iopddl(problem)
    assert r.optimal and r.time == min(scores)
    assert solution_cost(problem, r.choices) == min(scores)
    # the brute-force peak frontier agrees: its fastest point within the limit
    bf = brute_force_peak_frontier(problem.cost_graph, problem.usage)
    assert bf.time[bf.peak <= problem.usage_limit].min() == min(scores)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_write_then_read_gives_the_same_problem(tmp_path, suffix):
    cg = random_cyclic_graph(n_nodes=8, max_k=3, edge_prob=0.4, forbidden_prob=0.1, max_options=1, seed=3)
    usage = random_interval_usage(cg, max_span=4, seed=3)
    problem = IopddlProblem("roundtrip", cg, usage, 5e8)
    path = tmp_path / f"p{suffix}"
    write_iopddl(problem, path)
    back = read_iopddl(path)
    assert back.name == "roundtrip" and back.usage_limit == 5e8
    for a, b in zip(problem.usage.usage, back.usage.usage):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(problem.usage.start, back.usage.start)
    rng = np.random.default_rng(0)
    for _ in range(50):
        sol = [int(rng.integers(c.shape[0])) for c in cg.node_costs]
        try:
            want = solution_cost(problem, sol)
        except InfeasibleError:
            with pytest.raises(InfeasibleError):
                solution_cost(back, sol)
            continue
        assert solution_cost(back, sol) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_no_usage_limit_means_unbounded(seed):
    raw = _raw(seed, limit=False)
    problem = read_iopddl(raw)
    assert problem.usage_limit == float("inf")
    scores = [s for s in (_contest_score(raw, sol) for sol in _solutions(raw)) if s is not None]
    if not scores:  # every solution uses a forbidden pair
        with pytest.raises(InfeasibleError, match="forbidden"):
            solve_iopddl(problem)
    else:
        assert solve_iopddl(problem).time == min(scores)


@pytest.mark.parametrize("edit, match", [
    (lambda p: p.pop("problem"), "no 'problem' entry"),
    (lambda p: p["problem"]["nodes"].pop("usages"), "no 'usages' entry"),
    (lambda p: p["problem"]["nodes"]["usages"].pop(), "need one of each per node"),
    (lambda p: p["problem"]["nodes"]["usages"][0].append(1), "node 0 has"),
    (lambda p: p["problem"]["edges"]["nodes"].__setitem__(0, [0, 1, 2]), "edge 0 joins 3 nodes"),
    (lambda p: p["problem"]["edges"]["nodes"].__setitem__(0, [0, 99]), "names node 99"),
    (lambda p: p["problem"]["edges"]["costs"][0].append(1), "strategy pairs"),
    (lambda p: p["problem"]["nodes"]["costs"].__setitem__(1, []), "costs of node 1"),
    (lambda p: p["problem"].__setitem__("usage_limit", -1), "usage_limit"),
])
def test_bad_problems_are_named(edit, match):
    raw = _raw(0)
    raw["problem"]["edges"]["nodes"][0] = [0, 1]
    k0, k1 = (len(raw["problem"]["nodes"]["costs"][i]) for i in (0, 1))
    raw["problem"]["edges"]["costs"][0] = [1] * (k0 * k1)
    edit(raw)
    with pytest.raises(InvalidInputError, match=match):
        read_iopddl(raw)


def test_unreadable_files_are_named(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        read_iopddl(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not a readable IOPDDL JSON file"):
        read_iopddl(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_raw(2)))
    assert read_iopddl(good).cost_graph.n_nodes == 6


def test_solution_of_wrong_length_is_refused():
    problem = read_iopddl(_raw(0))
    with pytest.raises(InvalidInputError):
        solution_cost(problem, [0])


def test_cli_solves_a_problem_file(tmp_path, capsys):
    from tensoropt_py.cli import main

    raw = _raw(7)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    out = tmp_path / "s.json"
    assert main(["iopddl", str(path), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    best = min(s for s in (_contest_score(raw, sol) for sol in _solutions(raw)) if s is not None)
    assert got["optimal"] and got["cost"] == best == _contest_score(raw, got["solution"])
    assert "(optimal)" in capsys.readouterr().out


def test_solver_memory_bound_is_checked_and_applied():
    problem = read_iopddl(_raw(5))
    with pytest.raises(InvalidInputError, match="max_memory"):
        solve_iopddl(problem, max_memory=-1)
    with pytest.raises(InvalidInputError, match="too wide"):
        solve_iopddl(problem, max_memory=64)
