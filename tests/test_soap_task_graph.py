"""Task graphs with makespans computed by hand; full vs delta simulation on random mutations."""

import numpy as np
import pytest

from tensoropt_py.errors import InvalidInputError
from tensoropt_py.soap import task_graph as tgm
from tensoropt_py.soap.task_graph import BACKENDS, TaskGraph

BACKEND_NAMES = sorted(BACKENDS)


def test_compiled_backend_is_built():
    # the Cython event loop is the default; a missing build would silently fall back to Python
    assert "cython" in BACKENDS and tgm._default_backend == "cython"


def test_chain_on_one_device():
    tg = TaskGraph()
    a, b, c = (tg.add_task(k, 0, x) for k, x in (("a", 1.0), ("b", 2.0), ("c", 3.0)))
    tg.add_dep(a, b)
    tg.add_dep(b, c)
    assert tg.simulate() == 6.0
    assert [(t.start, t.end) for t in (a, b, c)] == [(0.0, 1.0), (1.0, 3.0), (3.0, 6.0)]


def test_chain_across_devices_with_transfer():
    # a on device 0 -> transfer on a link -> b on device 1
    tg = TaskGraph()
    a = tg.add_task("a", 0, 1.0)
    x = tg.add_task("x", ("link", 0, 1), 0.5)
    b = tg.add_task("b", 1, 2.0)
    tg.add_dep(a, x)
    tg.add_dep(x, b)
    assert tg.simulate() == 3.5
    assert (b.ready, b.start) == (1.5, 1.5)


def test_fork_join_two_devices():
    # s (dev 0, 1) forks to l (dev 0, 3) and r (dev 1, 2); j (dev 0, 1) joins: 1 + max(3, 2) + 1
    tg = TaskGraph()
    s = tg.add_task("s", 0, 1.0)
    l = tg.add_task("l", 0, 3.0)
    r = tg.add_task("r", 1, 2.0)
    j = tg.add_task("j", 0, 1.0)
    for a, b in ((s, l), (s, r), (l, j), (r, j)):
        tg.add_dep(a, b)
    assert tg.simulate() == 5.0
    assert (r.start, r.end, j.ready, j.start) == (1.0, 3.0, 4.0, 4.0)
    # both branches on device 0: they serialise: 1 + 3 + 2 + 1
    tg2 = TaskGraph()
    s, l, r, j = (tg2.add_task(k, 0, x) for k, x in (("s", 1.0), ("l", 3.0), ("r", 2.0), ("j", 1.0)))
    for a, b in ((s, l), (s, r), (l, j), (r, j)):
        tg2.add_dep(a, b)
    assert tg2.simulate() == 7.0
    # FIFO by ready time, ties by key: "l" < "r"
    assert tg2.device_order(0) == ["s", "l", "r", "j"]


@pytest.mark.parametrize("shared", [True, False])
def test_two_transfers_shared_vs_distinct_links(shared):
    # a (dev 0) sends to b (dev 1) and c (dev 2): 2 s transfers each, then 1 s of compute
    tg = TaskGraph()
    a = tg.add_task("a", 0, 1.0)
    x1 = tg.add_task("x1", "bus" if shared else ("link", 0, 1), 2.0)
    x2 = tg.add_task("x2", "bus" if shared else ("link", 0, 2), 2.0)
    b = tg.add_task("b", 1, 1.0)
    c = tg.add_task("c", 2, 1.0)
    for p, q in ((a, x1), (a, x2), (x1, b), (x2, c)):
        tg.add_dep(p, q)
    if shared:  # serialised on one link: 1 + 2 + 2 + 1
        assert tg.simulate() == 6.0
        assert (x2.start, c.start) == (3.0, 5.0)
    else:  # concurrent: 1 + 2 + 1
        assert tg.simulate() == 4.0
        assert x1.start == x2.start == 1.0


def test_bad_tasks_raise():
    tg = TaskGraph()
    with pytest.raises(InvalidInputError, match="positive"):
        tg.add_task("z", 0, 0.0)
    a = tg.add_task("a", 0, 1.0)
    with pytest.raises(InvalidInputError, match="already"):
        tg.add_task("a", 0, 1.0)
    b = tg.add_task("b", 0, 1.0)
    tg.add_dep(a, b)
    tg.add_dep(b, a)
    with pytest.raises(InvalidInputError, match="cycle"):
        tg.simulate()


def _random_dag(rng, tg, n, devices, start=0):
    tasks = [tg.add_task(start + k, int(rng.integers(devices)), float(rng.integers(1, 5)) / 4) for k in range(n)]
    return tasks


@pytest.mark.parametrize("backend", BACKEND_NAMES)
@pytest.mark.parametrize("seed", range(6))
def test_delta_equals_full_on_random_mutations(seed, backend):
    """Random DAG; repeatedly remove/add tasks and edges and change times; update() == simulate()."""
    rng = np.random.default_rng(seed)
    tg = TaskGraph(backend)
    tasks = _random_dag(rng, tg, 60, 4)
    for k in range(150):
        a, b = sorted(rng.choice(len(tasks), 2, replace=False))
        tg.add_dep(tasks[a], tasks[b])  # edges go forward in creation order: a DAG
    tg.simulate()
    next_key = 1000
    for step in range(40):
        alive = [t for t in tasks if t.alive]
        op = rng.integers(4)
        if op == 0 and len(alive) > 10:
            tg.remove_task(alive[int(rng.integers(len(alive)))])
        elif op == 1:
            t = tg.add_task(next_key, int(rng.integers(4)), float(rng.integers(1, 5)) / 4)
            next_key += 1
            # new task after a random old one and before another (keeps a DAG by creation order)
            i = int(rng.integers(len(alive)))
            tg.add_dep(alive[i], t)
            tasks.append(t)
        elif op == 2:
            tg.set_exe(alive[int(rng.integers(len(alive)))], float(rng.integers(1, 9)) / 4)
        else:
            a, b = sorted(rng.choice(len(alive), 2, replace=False))
            tg.add_dep(alive[a], alive[b])
        m = tg.update()
        tg.check()
        delta = tg.timeline()
        full_m = tg.simulate()
        assert m == full_m
        assert tg.timeline() == delta


def _mutation_run(backend, seed, keyf, broken=False, monkeypatch=None):
    """Random DAG with keys ``keyf(k)``; random mutations, each followed by update() (or, with
    ``broken``, an update that re-simulates nothing); returns the timelines after each update
    and after a full simulation of the same graph."""
    rng = np.random.default_rng(seed)
    tg = TaskGraph(backend)
    if broken:
        monkeypatch.setattr(tg, "_scan_dirty", lambda dirty: (float("inf"), []))
    tasks = [tg.add_task(keyf(k), int(rng.integers(3)), float(rng.integers(1, 5)) / 4) for k in range(40)]
    for _ in range(100):
        a, b = sorted(rng.choice(len(tasks), 2, replace=False))
        tg.add_dep(tasks[a], tasks[b])
    out = [(tg.simulate(), tg.timeline(), None)]
    for step in range(25):
        alive = [t for t in tasks if t.alive]
        if step % 6 == 0:
            tg.remove_task(alive[int(rng.integers(len(alive)))])
        elif step % 6 == 3:  # bulk removal (compiled on that backend), a task listed twice
            x, y = (alive[j] for j in rng.choice(len(alive), 2, replace=False))
            tg.remove_tasks([x, y, x])
        elif step % 3 == 1:
            tg.set_exe(alive[int(rng.integers(len(alive)))], float(rng.integers(1, 9)) / 4)
        else:
            t = tg.add_task(keyf(1000 + step), int(rng.integers(3)), 0.5)
            tg.add_dep(alive[int(rng.integers(len(alive)))], t)
            tasks.append(t)
        m = tg.update()
        delta = tg.timeline()
        other = TaskGraph(backend)  # the same graph built from scratch
        new = {t.key: other.add_task(t.key, t.device, t.exe) for t in tasks if t.alive}
        for t in tasks:
            if t.alive:
                for s in t.succs:
                    other.add_dep(new[t.key], new[s.key])
        out.append((m, delta, (other.simulate(), other.timeline())))
    return out


KEYS = {
    "ints": lambda k: k,
    # tuples of small ints of different lengths (packed int64 codes; a prefix sorts first)
    "small-tuples": lambda k: (1, k % 5, k) if k % 2 else ((0, k // 4) if k % 4 == 0 else (0, k // 4, 0)),
    # some elements too large to pack: codes mixed with object comparisons
    "mixed-tuples": lambda k: (k % 2, k * 1000) if k % 3 == 0 else (k % 2, k),
    "strings": lambda k: f"t{k:05d}",
}


@pytest.mark.parametrize("keys", sorted(KEYS))
@pytest.mark.parametrize("seed", range(3))
def test_backends_identical_and_delta_equals_full(seed, keys):
    """Compiled and reference event loops give bit-identical timelines, full and delta; and
    every delta timeline equals a full simulation of a freshly built copy of the graph."""
    runs = {b: _mutation_run(b, seed, KEYS[keys]) for b in BACKEND_NAMES}
    ref = runs["python"]
    for b, run in runs.items():
        assert run == ref, b
        for m, delta, full in run[1:]:
            assert (m, delta) == full


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_delta_check_can_fail(backend, monkeypatch):
    """The delta == full comparison catches an update that skips needed re-simulation."""
    run = _mutation_run(backend, 0, KEYS["small-tuples"], broken=True, monkeypatch=monkeypatch)
    assert any(delta != full[1] for _, delta, full in run[1:])


def test_key_codes_preserve_tuple_order():
    if "cython" not in BACKENDS:
        pytest.skip("compiled backend not built")
    Task = BACKENDS["cython"][0]
    rng = np.random.default_rng(0)
    keys = {tuple(int(x) for x in rng.integers(0, 4095, int(rng.integers(0, 6)))) for _ in range(3000)}
    keys |= {(1,), (1, 0), (1, 0, 0), (0, 4094), (4094, 4094, 4094, 4094, 4094), ()}
    tasks = [Task(k, 0, 1.0) for k in keys]
    assert all(t.kcode >= 0 for t in tasks)
    assert [t.key for t in sorted(tasks, key=lambda t: t.kcode)] == sorted(keys)
    for k in ((4095,), (-1,), (1, 2, 3, 4, 5, 6), (1.0,), (True,), "a", 7):
        assert Task(k, 0, 1.0).kcode == -1


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_queries_between_remove_and_update(backend):
    """Removed tasks leave the device orders lazily; queries before update() never see them."""
    tg = TaskGraph(backend)
    a, b, c = (tg.add_task(k, 0, x) for k, x in (("a", 1.0), ("b", 2.0), ("c", 3.0)))
    tg.add_dep(a, b)
    tg.add_dep(b, c)
    assert tg.simulate() == 6.0
    tg.remove_task(c)
    assert tg.device_order(0) == ["a", "b"] and tg.makespan() == 3.0
    tg.check()
    tg.remove_task(b)
    assert tg.update() == 1.0 and tg.device_order(0) == ["a"]
    tg.check()
    tg.remove_task(a)
    assert tg.update() == 0.0 and tg.device_order(0) == [] and tg.dtasks == {}
