# cython: language_level=3
"""Compiled task-graph event loop (see :mod:`tensoropt_py.soap.task_graph`).

Exactly the pure-Python reference of :mod:`.task_graph` (``PyTask``, ``_drain_py``,
``_prepare_full_py``, ``_prepare_suffix_py``, ``_scan_dirty_py``): the ready queue pops tasks
in increasing ``(ready, key)`` order (keys are unique, so that order is the same as the
reference's ``heapq`` of tuples whatever the heap), and the float operations are the same in
the same order, so timelines are bit-for-bit identical. The speed comes from :class:`Task`
being an extension type (typed fields), a binary heap of tasks compared in C (ready time,
then a packed int64 code of the key when the key is a tuple of small ints, as the
simulator's keys are; other keys compare as Python objects), and the loops running in C.
"""


cdef enum:
    KBITS = 12  # bits per key element of the packed key code
    KLEN = 5    # elements at most


cdef long long _key_code(key):
    """Order-preserving int64 code of a tuple of at most 5 ints in 0..4094 (-1 otherwise).

    Elements are stored as ``x + 1`` in 12-bit fields, most significant first, missing ones as
    0, so codes compare like the tuples (a prefix sorts first); other keys compare as objects.
    """
    cdef long long code = 0
    cdef long long v
    cdef Py_ssize_t m
    if type(key) is not tuple:
        return -1
    m = len(<tuple>key)
    if m > KLEN:
        return -1
    for x in <tuple>key:
        if type(x) is not int or not 0 <= x < (1 << KBITS) - 1:
            return -1
        v = x
        code = (code << KBITS) | (v + 1)
    return code << (KBITS * (KLEN - m))


cdef class Task:
    """A node of the task graph (FlexFlow Table 3); compiled twin of ``task_graph.Task``."""

    cdef public object key
    cdef public object device
    cdef public double exe
    cdef public set preds
    cdef public set succs
    cdef public double ready
    cdef public double start
    cdef public double end
    cdef public bint placed
    cdef public bint alive
    cdef public Py_ssize_t npend
    cdef readonly long long kcode

    def __init__(self, key, device, double exe):
        self.key = key
        self.kcode = _key_code(key)
        self.device = device
        self.exe = exe
        self.preds = set()
        self.succs = set()
        self.ready = 0.0
        self.start = 0.0
        self.end = 0.0
        self.placed = False
        self.alive = True
        self.npend = 0

    def __repr__(self):
        return f"Task({self.key!r}, dev={self.device!r}, exe={self.exe:.3g}, start={self.start:.6g}, end={self.end:.6g})"


cdef inline bint _before(Task a, Task b):
    """``(a.ready, a.key) < (b.ready, b.key)`` (keys are unique)."""
    if a.ready < b.ready:
        return True
    if a.ready > b.ready:
        return False
    if a.kcode >= 0 and b.kcode >= 0:
        return a.kcode < b.kcode
    return a.key < b.key


cdef inline void _sift_down(list h, Py_ssize_t i, Task t):
    """Place ``t`` at hole ``i`` of the heap ``h``, moving it down."""
    cdef Py_ssize_t n = len(h)
    cdef Py_ssize_t c
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(<Task>h[c + 1], <Task>h[c]):
            c += 1
        if _before(<Task>h[c], t):
            h[i] = h[c]
            i = c
        else:
            break
    h[i] = t


cdef inline void _push(list h, Task t):
    cdef Py_ssize_t i = len(h)
    cdef Py_ssize_t j
    h.append(t)
    while i > 0:
        j = (i - 1) >> 1
        if _before(t, <Task>h[j]):
            h[i] = h[j]
            i = j
        else:
            break
    h[i] = t


cdef inline Task _pop(list h):
    cdef Task last = <Task>h.pop()
    cdef Task top
    if not h:
        return last
    top = <Task>h[0]
    _sift_down(h, 0, last)
    return top


cdef void _heapify(list h):
    cdef Py_ssize_t i
    for i in range(len(h) // 2 - 1, -1, -1):
        _sift_down(h, i, <Task>h[i])


cdef class _Dev:
    """A device's state during one drain: its order and the end of its last task."""
    cdef list tl
    cdef double le
    cdef bint idle


def drain(list heap, dict last, dict dtasks):
    """Compiled ``task_graph._drain_py``, except that ``heap`` is a heap of tasks ordered by
    ``(ready, key)`` (from :func:`prepare_full`/:func:`prepare_suffix`) rather than of tuples.
    The state of each device is looked up once per call (in ``last``/``dtasks``) and kept in a
    :class:`_Dev`; ``last`` is not updated (the reference's final ``last`` is never used)."""
    cdef Py_ssize_t n = 0
    cdef Task t, x
    cdef double r, s, e
    cdef list tl
    cdef object d, v
    cdef dict devs = {}
    cdef _Dev dv
    while heap:
        t = _pop(heap)
        r = t.ready
        n += 1
        d = t.device
        o = devs.get(d)
        if o is None:
            dv = _Dev()
            tl = dtasks.get(d)
            if tl is None:
                tl = []
                dtasks[d] = tl
            dv.tl = tl
            v = last.get(d, last)
            if v is last:  # a device whose order was not cut: continue after its last task
                dv.idle = not tl
                dv.le = (<Task?>tl[len(tl) - 1]).end if tl else 0.0
            elif v is None:
                dv.idle = True
                dv.le = 0.0
            else:
                dv.idle = False
                dv.le = v
            devs[d] = dv
        else:
            dv = <_Dev>o
        s = r if dv.idle or dv.le <= r else dv.le
        e = s + t.exe
        t.start = s
        t.end = e
        t.placed = True
        dv.le = e
        dv.idle = False
        dv.tl.append(t)
        for o in t.succs:
            x = <Task?>o
            if e > x.ready:
                x.ready = e
            x.npend -= 1
            if x.npend == 0:
                _push(heap, x)
    return n


def prepare_full(tasks):
    """Compiled ``task_graph._prepare_full_py``: reset every task, return the initial heap."""
    cdef list heap = []
    cdef Task t
    for o in tasks:
        t = <Task?>o
        t.npend = len(t.preds)
        t.ready = 0.0
        t.placed = False
        if t.npend == 0:
            heap.append(t)
    _heapify(heap)
    return heap


def prepare_suffix(list suffix):
    """Compiled ``task_graph._prepare_suffix_py``: ready/pending of the tasks to re-simulate."""
    cdef list heap = []
    cdef Task t, p
    cdef double r
    cdef Py_ssize_t n
    for o in suffix:
        (<Task?>o).placed = False
    for o in suffix:
        t = <Task?>o
        r = 0.0
        n = 0
        for q in t.preds:
            p = <Task?>q
            if p.placed:
                if p.end > r:
                    r = p.end
            else:
                n += 1
        t.ready = r
        t.npend = n
        if n == 0:
            heap.append(t)
    _heapify(heap)
    return heap


def scan_dirty(list dirty):
    """Compiled ``task_graph._scan_dirty_py``: ``(T0, fresh)`` of the changed tasks."""
    cdef double t0 = float("inf")
    cdef double r
    cdef list fresh = []
    cdef set seen = set()
    cdef Task t, p
    cdef bint complete
    for o in dirty:
        t = <Task?>o
        if not t.alive or t in seen:
            continue
        seen.add(t)
        if t.placed:
            if t.ready < t0:
                t0 = t.ready
        else:
            fresh.append(t)
        r = 0.0
        complete = True
        for q in t.preds:
            p = <Task?>q
            if not p.placed:
                complete = False
                break
            if p.end > r:
                r = p.end
        if complete and r < t0:
            t0 = r
    return t0, fresh


cdef inline Task _new_task(dict tasks, list dirty, key, device, double exe):
    """``TaskGraph.add_task`` for the compiled backend (``exe`` already checked)."""
    if key in tasks:
        from ..errors import InvalidInputError

        raise InvalidInputError(f"task key {key!r} already in the task graph")
    cdef Task t = Task(key, device, exe)
    tasks[key] = t
    dirty.append(t)
    return t


cdef inline void _dep(list dirty, Task a, Task b):
    """``TaskGraph.add_dep``."""
    if b not in a.succs:
        a.succs.add(b)
        b.preds.add(a)
        dirty.append(b)


cdef inline Task _transfer(tg, dict tasks, list dirty, dict links, link, tuple key, a, b, double nb,
                           double min_time):
    """The transfer task ``key`` of ``nb`` bytes from device ``a`` to ``b`` (latency + bytes /
    bandwidth of their link, at least ``min_time``)."""
    cdef tuple r = links.get((a, b))
    if r is None:
        r = link(a, b)
    cdef double x = <double>r[1] + nb * <double>r[2]
    if not x >= min_time:
        x = min_time
    if not x < float("inf"):
        tg._check_exe_of(key, x)  # raises
    return _new_task(tasks, dirty, key, r[0], x)


def build_edge(tg, Py_ssize_t e, tuple ov, tuple du, tuple dv, list Fu, list Fv, Bu, Bv,
               dict links, link, double min_time):
    """Compiled ``Simulator._build_edge`` loop (the reference is its Python branch): the
    transfer tasks and dependencies of graph edge ``e`` for overlaps ``ov`` of ``(p, q,
    bytes)``; ``links``/``link``: the simulator's link cache and its filling method. Returns
    the new tasks in the reference's order."""
    cdef dict tasks = tg.tasks
    cdef list dirty = tg._dirty
    cdef list out = []
    cdef bint bwd = Bu is not None and Bv is not None
    cdef Py_ssize_t p, q
    cdef double nb
    cdef Task t
    for item in ov:
        p = (<tuple>item)[0]
        q = (<tuple>item)[1]
        nb = (<tuple>item)[2]
        a = du[p]
        b = dv[q]
        if a == b:
            _dep(dirty, <Task?>Fu[p], <Task?>Fv[q])
            if bwd:
                _dep(dirty, <Task?>(<list>Bv)[q], <Task?>(<list>Bu)[p])
            continue
        t = _transfer(tg, tasks, dirty, links, link, (1, e, p, q), a, b, nb, min_time)
        _dep(dirty, <Task?>Fu[p], t)
        _dep(dirty, t, <Task?>Fv[q])
        out.append(t)
        if bwd:
            t = _transfer(tg, tasks, dirty, links, link, (3, e, q, p), b, a, nb, min_time)
            _dep(dirty, <Task?>(<list>Bv)[q], t)
            _dep(dirty, t, <Task?>(<list>Bu)[p])
            out.append(t)
    return out


def remove_tasks(tg, tasks):
    """Compiled ``TaskGraph.remove_task`` over every task of ``tasks`` (in order)."""
    cdef dict byk = tg.tasks
    cdef list dirty = tg._dirty
    cdef double cut = tg._cut
    cdef Py_ssize_t ndead = tg._ndead
    cdef Task t, p, s
    for o in tasks:
        t = <Task?>o
        if not t.alive:
            continue
        t.alive = False
        del byk[t.key]
        if t.placed:
            if t.ready < cut:
                cut = t.ready
            ndead += 1
            t.placed = False
        for q in t.preds:
            (<Task?>q).succs.discard(t)
        for q in t.succs:
            s = <Task?>q
            s.preds.discard(t)
            dirty.append(s)
        t.preds = set()
        t.succs = set()
    tg._cut = cut
    tg._ndead = ndead


def cut_suffix(dict dtasks, double t0, list suffix, dict last, Py_ssize_t ndead):
    """Compiled ``task_graph._cut_suffix_py``."""
    cdef list tl
    cdef Py_ssize_t lo, hi, mid, i, j, m
    cdef Task t
    for d, o in dtasks.items():
        tl = <list>o
        m = len(tl)
        if m == 0 or (<Task?>tl[m - 1]).ready < t0:
            continue
        lo = 0
        hi = m
        while lo < hi:  # first task ready at or after T0
            mid = (lo + hi) >> 1
            if (<Task?>tl[mid]).ready < t0:
                lo = mid + 1
            else:
                hi = mid
        i = lo
        for j in range(i, m):
            t = <Task?>tl[j]
            if ndead == 0 or t.alive:
                suffix.append(t)
        del tl[i:]
        last[d] = (<Task?>tl[i - 1]).end if i else None
