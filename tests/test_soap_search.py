"""minimize() on toy objectives; MCMC vs exhaustive search (FlexFlow §8.3); memory caps."""

import math

import pytest

from tensoropt_py.cluster import Cluster
from tensoropt_py.errors import InfeasibleError, InvalidInputError
from tensoropt_py.soap import (
    ConfigSpace,
    SoapConfig,
    Simulator,
    data_parallel,
    data_parallel_config,
    exhaustive,
    minimize,
    parallel_dims,
    search,
)
from tensoropt_py.soap.search import _gray
from tensoropt_py.soap.testing import lenet_graph, mlp_graph, rnn_graph


# -- minimize --------------------------------------------------------------------------------


def test_minimize_1d_quadratic():
    r = minimize(40, lambda x, rng: x + int(rng.choice([-1, 1])), lambda x: (x - 7) ** 2, budget=2000, seed=1)
    assert r.best == 7 and r.best_score == 0
    assert r.best_iteration <= r.iterations <= 2000


def test_minimize_escapes_local_minimum():
    # f has a local minimum at 2 (f=1) and the global one at 9 (f=0), barrier f=3 between them
    f = {0: 5, 1: 3, 2: 1, 3: 3, 4: 3, 5: 3, 6: 3, 7: 3, 8: 2, 9: 0, 10: 4}

    def propose(x, rng):
        return min(10, max(0, x + int(rng.choice([-1, 1]))))

    greedy = minimize(2, propose, f.__getitem__, budget=3000, beta=100.0, seed=0, patience=None)
    assert greedy.best == 2  # essentially never accepts the uphill move
    mh = minimize(2, propose, f.__getitem__, budget=3000, beta=1.0, seed=0, patience=None)
    assert mh.best == 9 and mh.best_score == 0


def test_minimize_discrete_2d_and_determinism():
    target = (3, -2)

    def score(p):
        return abs(p[0] - target[0]) + 2 * abs(p[1] - target[1])

    def propose(p, rng):
        j = int(rng.integers(2))
        q = list(p)
        q[j] += int(rng.choice([-1, 1]))
        return tuple(q)

    a = minimize((0, 0), propose, score, budget=500, seed=3, record=True)
    b = minimize((0, 0), propose, score, budget=500, seed=3, record=True)
    assert a.best == target and (a.history, a.iterations) == (b.history, b.iterations)
    assert all(x >= y for x, y in zip(a.history, a.history[1:]))  # best never gets worse


def test_minimize_patience_and_inf():
    # every candidate is inadmissible: never accepted; stops after half the budget without improvement
    r = minimize(0, lambda x, rng: x + 1, lambda x: 0.0 if x == 0 else math.inf, budget=100, seed=0)
    assert r.accepted == 0 and r.best == 0 and r.stop_reason == "patience" and r.iterations == 50
    with pytest.raises(InvalidInputError):
        minimize(0, lambda x, rng: x, lambda x: 0.0, budget=-1)


def test_gray_code_visits_every_tuple_once():
    radices = [3, 2, 4]
    cur = [0, 0, 0]
    seen = {tuple(cur)}
    for j, v in _gray(radices):
        assert abs(cur[j] - v) == 1
        cur[j] = v
        seen.add(tuple(cur))
    assert len(seen) == 24


# -- search quality (FlexFlow §8.3: LeNet and a 2-step RNNLM on 4 devices) ----------------------


def _choices(g, per_op):
    out = []
    for op in g.operators:
        cs = [data_parallel_config(op, range(4))]
        if op.kind.value != "input":
            cs += [SoapConfig((), (d,)) for d in per_op.get("single", (0,))]
            params = [d for d in parallel_dims(op) if op.loop_dim(d).kind.value == "parameter"]
            if params and op.loop_dim(params[0]).size % 4 == 0 and op.name in per_op.get("model", ()):
                cs.append(SoapConfig(((params[0], 4),), (0, 1, 2, 3)))
        out.append(list(dict.fromkeys(cs)))
    return out


@pytest.mark.parametrize(
    "name,graph,model_ops",
    [
        ("lenet", lambda: lenet_graph(batch=64), ("conv2", "fc1", "fc2")),
        ("rnn", lambda: rnn_graph(batch=64, steps=2, vocab=8192, hidden=1024), ("embed0", "cell0_0", "cell0_1", "out0", "out1")),
    ],
)
def test_mcmc_finds_exhaustive_optimum(name, graph, model_ops):
    g = graph()
    cl = Cluster.preset("v100-2x8")
    sim = Simulator(g, cl, 4)
    space = ConfigSpace(g, range(4), choices=_choices(g, {"model": model_ops}))
    assert 200 <= space.size() <= 3000
    best_t, best_s, n = exhaustive(sim, space)
    assert best_s != data_parallel(g, range(4))  # the optimum is not plain data parallelism
    strat, res = search(g, cl, 4, budget=1500, seed=0, space=space, simulator=sim)
    assert res.time == best_t
    assert sim.simulate(strat).time == best_t


def test_search_memory_cap_respected_and_infeasible():
    g = mlp_graph(batch=32, width=512, layers=2)
    cl = Cluster.preset("v100-2x8")
    sim = Simulator(g, cl, 4)
    dp = sim.simulate(data_parallel(g, range(4)))
    cap = 0.6 * dp.peak_memory  # data parallel replicates every weight: over the cap
    for seed in range(3):
        strat, res, stats = search(g, cl, 4, memory_cap=cap, budget=300, seed=seed, simulator=sim, return_stats=True)
        assert res.peak_memory <= cap
        assert sim.simulate(strat).peak_memory <= cap
        assert stats["infeasible"] > 0
    with pytest.raises(InfeasibleError) as e:
        search(g, cl, 4, memory_cap=1000, budget=50, seed=0, simulator=sim)
    assert e.value.min_memory > 1000


def test_search_deterministic_and_initial_candidates():
    g = mlp_graph(batch=32, width=256, layers=2)
    cl = Cluster.preset("cpu-1x4")
    a = search(g, cl, 4, budget=200, seed=5)
    b = search(g, cl, 4, budget=200, seed=5)
    assert a[0] == b[0] and a[1].time == b[1].time
    # a given initial strategy is never worse than the result
    single = Simulator(g, cl, 4).simulate(data_parallel(g, [0]))
    s, r = search(g, cl, 4, budget=60, seed=1, initial=[single.strategy], include_data_parallel=False, num_random=0)
    assert r.time <= single.time


def test_search_full_and_delta_simulation_walk_the_same_chain():
    g = lenet_graph(batch=32)
    cl = Cluster.preset("v100-2x8")
    sd, rd, a = search(g, cl, 8, budget=120, seed=2, return_stats=True)
    sf, rf, b = search(g, cl, 8, budget=120, seed=2, delta=False, return_stats=True)
    assert sd == sf and rd.time == rf.time
    assert (a["accepted"], a["best_iteration"]) == (b["accepted"], b["best_iteration"])
