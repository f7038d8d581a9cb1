"""Task graphs and their simulation: full (FlexFlow Alg. 1) and delta (Alg. 2).

A :class:`TaskGraph` holds tasks (an execution time on one *device*: a processor, or a
communication link modelled as a device that runs transfers) and dependencies. Simulation sets
every task's ``ready`` (latest end of its predecessors, 0 without any), ``start`` and ``end``.

Semantics (assumptions A1-A4 of FlexFlow §5): every device runs its tasks one at a time, in
FIFO order of their ready time, ties broken by the task's ``key`` (a canonical, comparable
identifier, so the order never depends on the history of the graph):

* ``start = max(ready, end of the previous task on the device)``, ``end = start + exe``.

Because every task takes a strictly positive time (``exe > 0`` is required), Alg. 1's global
ready queue dequeues tasks in increasing ``(ready, key)`` order, so the order of each device
is exactly its tasks sorted by ``(ready, key)`` and the timeline is the unique solution of the
equations above. :meth:`TaskGraph.simulate` is Alg. 1. :meth:`TaskGraph.update` is Alg. 2:
after tasks or dependencies were added/removed (or an ``exe`` changed), it re-evaluates only
the tasks whose inputs changed, repositions them in their device's order and propagates
changes to successors and to the next task on the device, Bellman-Ford style, until nothing
changes; the fixed point it reaches is the same unique solution, so both give *identical*
(bit-for-bit) timelines. The tests check this on random change sequences.

Backends. The event loop and the per-task loops around it (``_drain_py``, ``_prepare_full_py``,
``_prepare_suffix_py``, ``_scan_dirty_py``, ``_cut_suffix_py``, :meth:`TaskGraph.remove_tasks`)
have a compiled twin in ``_simulate.pyx`` working on an extension-type ``Task`` with a C heap
ordered by ``(ready, key)``; :data:`BACKENDS` maps ``"python"`` (the reference) and ``"cython"``
(the default when built) to them. Both give bit-identical timelines (tested). A graph keeps the
backend it was created with (:func:`set_backend` changes the default for new graphs).

Removal is lazy: :meth:`TaskGraph.remove_task` leaves a placed task in its device order, since
the next :meth:`TaskGraph.update` cuts every order at ``T0 <=`` its ready time and drops it with
the cut suffix; queries in between purge the orders first.

Where the time goes (``benchmarks/bench_simulator.py``): a change to one operator shifts most
later tasks: measured on the zoo's small_cnn and small_transformer (4 to 64 devices), after a
random single-operator change about 72% of all tasks are new or get a different timeline entry
(80-84% are re-simulated from ``T0``); stopping the re-simulation once it reconverges to the old
timeline would save at most ~3% (the last changed task is nearly always among the last in
``(ready, key)`` order), so the delta simulation's cost is the re-simulation itself, hence the
compiled event loop.

Examples
--------
A chain ``a -> b`` on one device plus an independent ``c`` on another:

>>> tg = TaskGraph()
>>> a = tg.add_task("a", 0, 1.0); b = tg.add_task("b", 0, 2.0); c = tg.add_task("c", 1, 2.5)
>>> tg.add_dep(a, b)
>>> tg.simulate()
3.0
>>> tg.set_exe(c, 4.0); tg.update()
4.0
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify, heappop, heappush
from operator import attrgetter

from ..errors import InvalidInputError

__all__ = ["Task", "TaskGraph", "BACKENDS", "set_backend"]


class PyTask:
    """A node of the task graph (FlexFlow Table 3); pure-Python reference of ``_simulate.Task``."""

    __slots__ = ("key", "device", "exe", "preds", "succs", "ready", "start", "end", "placed", "alive", "npend")

    def __init__(self, key, device, exe: float):
        self.key = key
        self.device = device
        self.exe = exe
        self.preds: set = set()
        self.succs: set = set()
        self.ready = 0.0
        self.start = 0.0
        self.end = 0.0
        self.placed = False  # in its device's order with a simulated timeline
        self.alive = True
        self.npend = 0

    def __repr__(self):
        return f"Task({self.key!r}, dev={self.device!r}, exe={self.exe:.3g}, start={self.start:.6g}, end={self.end:.6g})"


_ready = attrgetter("ready")


def _check_exe(key, exe):
    exe = float(exe)
    if not exe > 0.0 or exe == float("inf"):
        raise InvalidInputError(f"task {key!r} must take a positive finite time, got {exe!r}")
    return exe


def _drain_py(heap, last, dtasks) -> int:
    """Run the ready queue to exhaustion (the event loop of FlexFlow's Alg. 1 and 2).

    ``heap`` holds ``(ready, key, task)`` of tasks whose predecessors are placed; ``last``
    maps a device to the end of its last kept task (None: idle), and a device missing
    from it continues after the last task in ``dtasks``. Placed tasks are appended to
    ``dtasks``. Returns the number of tasks placed.
    """
    n = 0
    missing = last  # sentinel: no entry yet
    while heap:
        r, k, t = heappop(heap)
        n += 1
        d = t.device
        le = last.get(d, missing)
        if le is missing:  # a device whose order was not cut: continue after its last task
            tl = dtasks.get(d)
            le = tl[-1].end if tl else None
        s = r if le is None or le <= r else le
        e = s + t.exe
        t.start = s
        t.end = e
        t.placed = True
        last[d] = e
        tl = dtasks.get(d)
        if tl is None:
            dtasks[d] = [t]
        else:
            tl.append(t)
        for x in t.succs:
            if e > x.ready:
                x.ready = e
            x.npend -= 1
            if not x.npend:
                heappush(heap, (x.ready, x.key, x))
    return n


def _prepare_full_py(tasks) -> list:
    """Reset every task for a full simulation; returns the initial ready queue (a heap)."""
    heap = []
    for t in tasks:
        t.npend = len(t.preds)
        t.ready = 0.0
        t.placed = False
        if not t.npend:
            heap.append((0.0, t.key, t))
    heapify(heap)
    return heap


def _prepare_suffix_py(suffix: list) -> list:
    """Unplace the tasks to re-simulate, set their ready time and pending count from their
    placed predecessors; returns the initial ready queue (a heap)."""
    for t in suffix:
        t.placed = False
    heap = []
    for t in suffix:
        r = 0.0
        n = 0
        for p in t.preds:
            if p.placed:
                if p.end > r:
                    r = p.end
            else:
                n += 1
        t.ready = r
        t.npend = n
        if not n:
            heap.append((r, t.key, t))
    heapify(heap)
    return heap


def _scan_dirty_py(dirty: list):
    """``(T0, fresh)`` of the tasks changed since the last simulation (see :meth:`TaskGraph.update`):
    the smallest old ready time of a placed changed task and the latest end of the predecessors of
    every changed task whose predecessors are all placed (inf if none); ``fresh``: the unplaced
    (new) alive ones, without duplicates, in first-seen order."""
    t0 = float("inf")
    fresh = []
    seen = set()
    for t in dirty:
        if not t.alive or t in seen:
            continue
        seen.add(t)
        if t.placed:
            if t.ready < t0:
                t0 = t.ready
        else:
            fresh.append(t)
        # lower bound of the new ready time (it may have lost its latest predecessor)
        r = 0.0
        for p in t.preds:
            if not p.placed:
                break  # a new predecessor: t becomes ready after it, so after T0
            if p.end > r:
                r = p.end
        else:
            if r < t0:
                t0 = r
    return t0, fresh


def _cut_suffix_py(dtasks: dict, t0: float, suffix: list, last: dict, ndead: int):
    """Cut every device order at ``T0``: move its tasks ready at or after ``T0`` (alive ones, when
    ``ndead`` removed tasks are still in the orders) to ``suffix`` and set ``last[d]`` to the end
    of its last kept task (None: none kept). Devices with nothing ready from ``T0`` on are left
    out of ``last``."""
    for d, tl in dtasks.items():
        if not tl or tl[-1].ready < t0:
            continue  # nothing on d is ready at or after T0
        i = bisect_left(tl, t0, key=_ready)  # (ready, key) >= (T0,) iff ready >= T0
        if ndead:
            suffix.extend([t for t in tl[i:] if t.alive])
        else:
            suffix.extend(tl[i:])
        del tl[i:]
        last[d] = tl[i - 1].end if i else None


#: Simulation backends: name -> (task class, drain, prepare_full, prepare_suffix, scan_dirty, cut_suffix). "python" is
#: the reference; "cython" (``_simulate.pyx``, when built) computes identical timelines faster.
BACKENDS = {"python": (PyTask, _drain_py, _prepare_full_py, _prepare_suffix_py, _scan_dirty_py, _cut_suffix_py)}
try:
    from . import _simulate
except ImportError:  # pragma: no cover - extension not built
    _simulate = None
else:
    BACKENDS["cython"] = (_simulate.Task, _simulate.drain, _simulate.prepare_full, _simulate.prepare_suffix,
                          _simulate.scan_dirty, _simulate.cut_suffix)

_default_backend = "cython" if "cython" in BACKENDS else "python"
Task = BACKENDS[_default_backend][0]


def set_backend(name: str) -> str:
    """Select the backend of task graphs created from now on; returns the previous one."""
    global _default_backend
    if name not in BACKENDS:
        raise InvalidInputError(f"unknown task-graph backend {name!r}; available: {sorted(BACKENDS)}")
    prev, _default_backend = _default_backend, name
    return prev


class TaskGraph:
    """Tasks, dependencies, per-device FIFO orders and the simulated timeline."""

    __slots__ = ("tasks", "dtasks", "_dirty", "_cut", "simulated", "pops", "backend", "_ndead",
                 "_task", "_drain", "_prepare_full", "_prepare_suffix", "_scan_dirty", "_cut_suffix")

    def __init__(self, backend: str | None = None):
        if backend is None:
            backend = _default_backend
        if backend not in BACKENDS:
            raise InvalidInputError(f"unknown task-graph backend {backend!r}; available: {sorted(BACKENDS)}")
        self.backend = backend
        (self._task, self._drain, self._prepare_full, self._prepare_suffix,
         self._scan_dirty, self._cut_suffix) = BACKENDS[backend]
        self.tasks: dict = {}  # key -> Task
        self.dtasks: dict = {}  # device -> list of Task, sorted by (ready, key)
        self._dirty: list[Task] = []
        self._cut = float("inf")  # earliest ready time of a task removed since the last simulation
        self._ndead = 0  # removed tasks still in the device orders
        self.simulated = False
        self.pops = 0  # tasks (re)evaluated by the last simulate()/update()

    # -- construction -------------------------------------------------------------------------

    def add_task(self, key, device, exe: float) -> Task:
        """Add a task with a unique ``key``, running ``exe`` (> 0) seconds on ``device``."""
        if key in self.tasks:
            raise InvalidInputError(f"task key {key!r} already in the task graph")
        t = self._task(key, device, _check_exe(key, exe))
        self.tasks[key] = t
        self._dirty.append(t)
        return t

    def add_dep(self, a: Task, b: Task):
        """``b`` cannot start before ``a`` ends."""
        if b not in a.succs:
            a.succs.add(b)
            b.preds.add(a)
            self._dirty.append(b)

    @staticmethod
    def _check_exe_of(key, exe):
        return _check_exe(key, exe)

    def set_exe(self, t: Task, exe: float):
        t.exe = _check_exe(t.key, exe)
        self._dirty.append(t)

    def remove_task(self, t: Task):
        """Remove ``t`` and its dependencies (its successors and device neighbour get re-evaluated)."""
        if not t.alive:
            return
        t.alive = False
        del self.tasks[t.key]
        if t.placed:
            # it stays in its device's order until the next update() (which re-simulates from
            # T0 <= its ready time, so drops it with the cut suffix) or query (_purge)
            if t.ready < self._cut:
                self._cut = t.ready
            self._ndead += 1
            t.placed = False
        for p in t.preds:
            p.succs.discard(t)
        for s in t.succs:
            s.preds.discard(t)
            self._dirty.append(s)
        t.preds = set()
        t.succs = set()

    def remove_tasks(self, tasks):
        """:meth:`remove_task` of every task of ``tasks``, in order (compiled on that backend)."""
        if self.backend == "cython":
            _simulate.remove_tasks(self, tasks)
        else:
            for t in tasks:
                self.remove_task(t)

    def __len__(self):
        return len(self.tasks)

    # -- full simulation (Alg. 1) ---------------------------------------------------------------

    def simulate(self) -> float:
        """Simulate every task from scratch (FlexFlow Alg. 1); returns the makespan."""
        tasks = self.tasks.values()
        heap = self._prepare_full(tasks)
        dtasks: dict = {}
        n = self._drain(heap, {}, dtasks)
        if n != len(self.tasks):
            stuck = [t.key for t in tasks if not t.placed][:5]
            raise InvalidInputError(f"the task graph has a dependency cycle (tasks never ready: {stuck}...)")
        self.dtasks = dtasks
        self._dirty = []
        self._cut = float("inf")
        self._ndead = 0
        self.simulated = True
        self.pops = n
        return self.makespan()

    # -- delta simulation (Alg. 2) --------------------------------------------------------------

    def update(self) -> float:
        """Re-simulate only what the changes since the last simulation affect (FlexFlow Alg. 2).

        The changes (added/removed tasks and dependencies, new ``exe``) cannot affect any task
        whose ready time is earlier than the *cut* ``T0``: the smallest old ready time of a
        removed or modified task, and the latest end of the predecessors of every new or modified
        task whose predecessors are all simulated (a lower bound of its new ready time; a task
        with a new predecessor becomes ready after that one). Tasks ready before ``T0`` keep their timeline and their place
        in the device orders; the others (the suffix of every device order from ``T0`` on, plus
        the new tasks) are re-simulated with Alg. 1's ready queue, starting from each device's
        last kept task. The result is the full simulation's timeline (its queue pops the kept
        tasks first, then the suffix in the same order). Falls back to :meth:`simulate` if the
        graph was never simulated. Returns the makespan.
        """
        if not self.simulated:
            return self.simulate()
        inf = float("inf")
        t0, fresh = self._scan_dirty(self._dirty)
        t0 = min(t0, self._cut)
        self._cut = inf
        self._dirty = []
        if t0 == inf:
            self.pops = 0
            return self.makespan()
        dtasks = self.dtasks
        last = {}
        suffix = fresh
        self._cut_suffix(dtasks, t0, suffix, last, self._ndead)
        self._ndead = 0  # every removed task was in a cut suffix (its ready time >= T0)
        heap = self._prepare_suffix(suffix)
        n = self._drain(heap, last, dtasks)
        if n != len(suffix):
            raise InvalidInputError("the task graph has a dependency cycle")
        for d in [d for d, tl in dtasks.items() if not tl]:
            del dtasks[d]
        self.pops = n
        return self.makespan()

    # -- queries ------------------------------------------------------------------------------

    def _purge(self):
        """Drop removed tasks from the device orders (queries between remove_task and update)."""
        for d in list(self.dtasks):
            tl = self.dtasks[d]
            keep = [t for t in tl if t.alive]
            if len(keep) != len(tl):
                if keep:
                    self.dtasks[d] = keep
                else:
                    del self.dtasks[d]
        self._ndead = 0

    def makespan(self) -> float:
        """Latest end of any task (the last task of each device ends last on it)."""
        if self._ndead:
            self._purge()
        m = 0.0
        for tl in self.dtasks.values():
            if tl:
                e = tl[-1].end
                if e > m:
                    m = e
        return m

    def timeline(self) -> dict:
        """``key -> (device, ready, start, end)`` of every task."""
        return {t.key: (t.device, t.ready, t.start, t.end) for t in self.tasks.values()}

    def device_order(self, device) -> list:
        """Keys of the tasks of ``device`` in execution order."""
        if self._ndead:
            self._purge()
        return [t.key for t in self.dtasks.get(device, ())]

    def check(self):
        """Assert the timeline satisfies the simulation equations (for tests)."""
        if self._ndead:
            self._purge()
        for d, tl in self.dtasks.items():
            prev = None
            for t in tl:
                assert t.alive and t.placed and t.device == d
                r = max((p.end for p in t.preds), default=0.0)
                assert r == t.ready, (t, r)
                s = r if prev is None else max(r, prev.end)
                assert s == t.start and t.end == s + t.exe, t
                if prev is not None:
                    assert (prev.ready, prev.key) < (t.ready, t.key)
                prev = t
        assert sum(len(tl) for tl in self.dtasks.values()) == len(self.tasks)
