# cython: language_level=3
"""Compiled kernels of :mod:`tensoropt_py.cost.reschedule`: the closure of a move graph from a
placement (:func:`expand_closure`, against the module's expansion by ``_place_moves``) and a
single-source Dijkstra over its CSR arrays.

The Dijkstra is exactly the search of :func:`tensoropt_py.cost.reschedule.dijkstra_py` (the pure-Python
reference): nodes are popped in ``(distance, push counter)`` order, neighbours relaxed in
CSR order with a strict ``<``, settled nodes skipped, so the pop order, the distances and
the predecessor edges are identical to the reference (and to the original ``heapq`` search
over layouts).

The priority queue exploits that rescheduling distances take few distinct values (sums of
a few collective times): entries of equal distance pop in push order, i.e. first in first
out, so the queue is a FIFO list per distinct distance (found through a hash table on the
distance's bits) plus a binary heap of the distinct distances that have entries. The heap
then holds a few hundred values instead of every push.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcpy

cnp.import_array()


cdef struct Queue:
    # entries: linked FIFO lists of nodes
    int* ent_v
    int* ent_next
    int n_ent
    # buckets: one per distinct distance
    double* bd
    int* bhead
    int* btail
    char* binheap
    int n_b
    # hash table: distance bits -> bucket (-1 empty), capacity a power of two
    int* table
    Py_ssize_t cap
    # binary heap of bucket ids by distance
    int* heap
    int size


cdef inline uint64_t _bits(double d) noexcept nogil:
    cdef uint64_t b
    if d == 0.0:
        d = 0.0  # -0.0 and 0.0 are one distance
    memcpy(&b, &d, sizeof(double))
    return b


cdef inline Py_ssize_t _slot(uint64_t b, Py_ssize_t cap) noexcept nogil:
    b ^= b >> 33
    b *= <uint64_t> 0xff51afd7ed558ccd
    b ^= b >> 33
    return <Py_ssize_t> (b & <uint64_t> (cap - 1))


cdef int _grow(Queue* q) noexcept nogil:
    cdef Py_ssize_t newcap = q.cap * 2, i, s
    cdef int* t = <int*> malloc(newcap * sizeof(int))
    if t == NULL:
        return -1
    for i in range(newcap):
        t[i] = -1
    for i in range(q.n_b):
        s = _slot(_bits(q.bd[i]), newcap)
        while t[s] != -1:
            s = (s + 1) & (newcap - 1)
        t[s] = <int> i
    free(q.table)
    q.table = t
    q.cap = newcap
    return 0


cdef inline void _heap_up(Queue* q, int b) noexcept nogil:
    cdef int i = q.size, j
    cdef double d = q.bd[b]
    q.size += 1
    while i > 0:
        j = (i - 1) >> 1
        if d < q.bd[q.heap[j]]:
            q.heap[i] = q.heap[j]
            i = j
        else:
            break
    q.heap[i] = b


cdef inline void _heap_pop(Queue* q) noexcept nogil:
    cdef int last, i = 0, child
    cdef double d
    q.size -= 1
    if q.size == 0:
        return
    last = q.heap[q.size]
    d = q.bd[last]
    while True:
        child = 2 * i + 1
        if child >= q.size:
            break
        if child + 1 < q.size and q.bd[q.heap[child + 1]] < q.bd[q.heap[child]]:
            child += 1
        if q.bd[q.heap[child]] < d:
            q.heap[i] = q.heap[child]
            i = child
        else:
            break
    q.heap[i] = last


cdef inline int _push(Queue* q, double d, int v) noexcept nogil:
    cdef uint64_t key = _bits(d)
    cdef Py_ssize_t s = _slot(key, q.cap)
    cdef int b, k
    while True:
        b = q.table[s]
        if b == -1:
            b = q.n_b
            q.n_b += 1
            q.bd[b] = d
            q.bhead[b] = -1
            q.btail[b] = -1
            q.binheap[b] = 0
            q.table[s] = b
            if 2 * q.n_b > q.cap:
                if _grow(q) != 0:
                    return -1
            break
        if _bits(q.bd[b]) == key:
            break
        s = (s + 1) & (q.cap - 1)
    k = q.n_ent
    q.n_ent += 1
    q.ent_v[k] = v
    q.ent_next[k] = -1
    if q.btail[b] == -1:
        q.bhead[b] = k
    else:
        q.ent_next[q.btail[b]] = k
    q.btail[b] = k
    if not q.binheap[b]:
        q.binheap[b] = 1
        _heap_up(q, b)
    return 0


def dijkstra(const cnp.int64_t[::1] indptr, const cnp.int32_t[::1] indices, const double[::1] weights,
             int source, const cnp.int32_t[::1] targets, double[::1] dist, cnp.int32_t[::1] prev,
             cnp.int8_t[::1] done):
    """Settle nodes from ``source`` until every node of ``targets`` is settled (all if empty).

    ``dist`` (inf), ``prev`` (-1: CSR edge that reached the node) and ``done`` (0) must be
    initialised by the caller. Returns the number of settled nodes.
    """
    cdef Py_ssize_t n = indptr.shape[0] - 1
    cdef Py_ssize_t m = indices.shape[0]
    cdef Py_ssize_t cap = m + 2
    cdef Queue q
    cdef char* want = <char*> malloc((n + 1) * sizeof(char))
    q.ent_v = <int*> malloc(cap * sizeof(int))
    q.ent_next = <int*> malloc(cap * sizeof(int))
    q.bd = <double*> malloc(cap * sizeof(double))
    q.bhead = <int*> malloc(cap * sizeof(int))
    q.btail = <int*> malloc(cap * sizeof(int))
    q.binheap = <char*> malloc(cap * sizeof(char))
    q.heap = <int*> malloc(cap * sizeof(int))
    q.cap = 256
    q.table = <int*> malloc(q.cap * sizeof(int))
    q.n_ent = 0
    q.n_b = 0
    q.size = 0
    cdef bint failed = False
    if (want == NULL or q.ent_v == NULL or q.ent_next == NULL or q.bd == NULL or q.bhead == NULL
            or q.btail == NULL or q.binheap == NULL or q.heap == NULL or q.table == NULL):
        failed = True
    cdef Py_ssize_t i, k, e
    cdef Py_ssize_t remaining = 0
    cdef Py_ssize_t settled = 0
    cdef double d, nd
    cdef int u, v, b
    cdef bint all_targets = targets.shape[0] == 0
    if not failed:
        with nogil:
            for i in range(q.cap):
                q.table[i] = -1
            for i in range(n):
                want[i] = 0
            if not all_targets:
                for i in range(targets.shape[0]):
                    k = targets[i]
                    if want[k] == 0 and done[k] == 0:
                        want[k] = 1
                        remaining += 1
            if all_targets or remaining > 0:
                dist[source] = 0.0
                if _push(&q, 0.0, source) != 0:
                    failed = True
            while q.size > 0 and not failed:
                # pop the oldest entry of the smallest distance
                b = q.heap[0]
                k = q.bhead[b]
                u = q.ent_v[k]
                d = q.bd[b]
                q.bhead[b] = q.ent_next[k]
                if q.bhead[b] == -1:
                    q.btail[b] = -1
                    q.binheap[b] = 0
                    _heap_pop(&q)
                if done[u]:
                    continue
                done[u] = 1
                settled += 1
                for e in range(indptr[u], indptr[u + 1]):
                    v = indices[e]
                    nd = d + weights[e]
                    # ``done[v]`` is tested after the (rarely true) improvement test: the same
                    # decision as the reference's skip-then-compare, with a predictable branch
                    if nd < dist[v] and not done[v]:
                        dist[v] = nd
                        prev[v] = <cnp.int32_t> e
                        if _push(&q, nd, v) != 0:
                            failed = True
                            break
                if not all_targets and want[u]:
                    remaining -= 1
                    if remaining == 0:
                        break
    free(want); free(q.ent_v); free(q.ent_next); free(q.bd); free(q.bhead); free(q.btail)
    free(q.binheap); free(q.heap); free(q.table)
    if failed:
        raise MemoryError()
    return settled


# --- the move graph's closure ----------------------------------------------------------------
# A placement of A fine axes (each on a tensor dimension 0..r-1, replicated -1 or partial -2) is
# the integer code sum((place[a] + 2) * base**a), base = r + 2. A move is the key
# ((bytes << A) | axes mask) * 8 + kind, kinds in the order of ``moves``.

cdef enum:
    _MAX_RANK = 16
    _MAX_AXES = 24

cdef struct Grow:
    void* data
    Py_ssize_t n
    Py_ssize_t cap
    size_t item


cdef int _reserve(Grow* g, Py_ssize_t need) noexcept nogil:
    cdef Py_ssize_t cap = g.cap
    cdef void* p
    if need <= cap:
        return 0
    while cap < need:
        cap = cap * 2 if cap > 0 else 1024
    p = realloc(g.data, cap * g.item)
    if p == NULL:
        return -1
    g.data = p
    g.cap = cap
    return 0


cdef struct Expansion:
    Grow codes      # int64: node codes, in discovery order
    Grow indptr     # int64: per expanded node, the end of its edges
    Grow targets    # int32: edge targets (node ids)
    Grow moves      # int32: edge moves, as indices into ``keys``
    Grow keys       # int64: the distinct move keys, in the order of first use
    long long* slots  # open addressing on the move keys: index into ``keys`` + 1, 0 empty
    Py_ssize_t nslots  # a power of two, at least twice the keys
    cnp.int32_t* code2id
    long long n0
    int A


cdef inline Py_ssize_t _key_slot(long long key, Py_ssize_t nslots) noexcept nogil:
    # Fibonacci hashing: the keys' low bits (kind, axes) repeat, the product spreads them
    return <Py_ssize_t> ((<uint64_t> key * 0x9E3779B97F4A7C15ULL) >> 32) & (nslots - 1)


cdef int _grow_slots(Expansion* x) noexcept nogil:
    """Double the key table (or make its first) and place every key again."""
    cdef Py_ssize_t n = x.nslots * 2 if x.nslots > 0 else 16, s, i
    cdef long long* slots = <long long*> calloc(n, sizeof(long long))
    cdef const long long* keys = <long long*> x.keys.data
    if slots == NULL:
        return -1
    for i in range(x.keys.n):
        s = _key_slot(keys[i], n)
        while slots[s] != 0:
            s = (s + 1) & (n - 1)
        slots[s] = i + 1
    free(x.slots)
    x.slots = slots
    x.nslots = n
    return 0


cdef inline long long _move_index(Expansion* x, long long key) noexcept nogil:
    """Index of ``key`` among the distinct keys, appended at first use; -1 out of memory."""
    cdef Py_ssize_t s
    cdef long long i
    if 2 * (x.keys.n + 1) > x.nslots and _grow_slots(x) != 0:
        return -1
    s = _key_slot(key, x.nslots)
    while x.slots[s] != 0:
        i = x.slots[s] - 1
        if (<long long*> x.keys.data)[i] == key:
            return i
        s = (s + 1) & (x.nslots - 1)
    if _reserve(&x.keys, x.keys.n + 1) != 0:
        return -1
    i = x.keys.n
    (<long long*> x.keys.data)[i] = key
    x.keys.n += 1
    x.slots[s] = i + 1
    return i


cdef int _emit(Expansion* x, int kind, long long mask, long long nbytes, long long after) noexcept nogil:
    cdef long long v = x.code2id[after], m
    if v < 0:
        v = x.n0 + x.codes.n
        if _reserve(&x.codes, x.codes.n + 1) != 0:
            return -1
        (<long long*> x.codes.data)[x.codes.n] = after
        x.codes.n += 1
        x.code2id[after] = <cnp.int32_t> v
    m = _move_index(x, (((nbytes << x.A) | mask) << 3) | kind)
    if m < 0 or _reserve(&x.targets, x.targets.n + 1) != 0 or _reserve(&x.moves, x.moves.n + 1) != 0:
        return -1
    (<cnp.int32_t*> x.targets.data)[x.targets.n] = <cnp.int32_t> v
    x.targets.n += 1
    (<cnp.int32_t*> x.moves.data)[x.moves.n] = <cnp.int32_t> m
    x.moves.n += 1
    return 0


cdef int _expand_node(Expansion* x, long long code, int r, int A, const long long* profile,
                      const long long* sizes, const long long* powers) noexcept nogil:
    """The moves of one placement, in the order of ``_place_moves``."""
    cdef int ax[_MAX_RANK][_MAX_AXES]
    cdef int nax[_MAX_RANK]
    cdef int rep[_MAX_AXES]
    cdef int par[_MAX_AXES]
    cdef int sharded[_MAX_RANK]
    cdef int cnt[_MAX_RANK]
    cdef int comb[_MAX_AXES]
    cdef long long split[_MAX_RANK]
    cdef int last[_MAX_RANK]
    cdef int base = r + 2
    cdef int a, j, i, k, t, p, nrep = 0, npar = 0, ns = 0
    cdef long long c = code, total = 1, splits = 1, local, grow, mask, after
    for j in range(r):
        nax[j] = 0
        total *= profile[j]
    for a in range(A):
        p = <int> (c % base) - 2
        c //= base
        if p >= 0:
            ax[p][nax[p]] = a
            nax[p] += 1
        elif p == -1:
            rep[nrep] = a
            nrep += 1
        else:
            par[npar] = a
            npar += 1
    for j in range(r):
        split[j] = 1
        for k in range(nax[j]):
            split[j] *= sizes[ax[j][k]]
        splits *= split[j]
        last[j] = ax[j][nax[j] - 1] if nax[j] else -1
        if nax[j]:
            sharded[ns] = j
            ns += 1
    local = total // splits
    # slice: a replicated axis -> shards of dimension j (free)
    for t in range(nrep):
        a = rep[t]
        for j in range(r):
            if a > last[j] and profile[j] % (split[j] * sizes[a]) == 0:
                if _emit(x, 0, 1LL << a, 0, code + (j + 1) * powers[a]) != 0:
                    return -1
    # all-gather: the innermost k_j axes of each sharded dimension -> replicated, for every
    # (k_j) but all zero, in itertools.product order
    if ns:
        for i in range(ns):
            cnt[i] = 0
        while True:
            i = ns - 1
            while i >= 0:
                cnt[i] += 1
                if cnt[i] <= nax[sharded[i]]:
                    break
                cnt[i] = 0
                i -= 1
            if i < 0:
                break
            mask = 0
            grow = 1
            after = code
            for i in range(ns):
                j = sharded[i]
                for k in range(nax[j] - cnt[i], nax[j]):
                    a = ax[j][k]
                    mask |= 1LL << a
                    grow *= sizes[a]
                    after += (1 - (j + 2)) * powers[a]
            if _emit(x, 1, mask, local * grow, after) != 0:
                return -1
    # all-reduce and reduce-scatter of every combination of partial axes
    for k in range(1, npar + 1):
        for i in range(k):
            comb[i] = i
        while True:
            mask = 0
            grow = 1
            after = code
            for i in range(k):
                a = par[comb[i]]
                mask |= 1LL << a
                grow *= sizes[a]
                after += powers[a]  # partial (code 0) -> replicated (code 1)
            if _emit(x, 2, mask, local, after) != 0:
                return -1
            for j in range(r):
                if par[comb[0]] > last[j] and profile[j] % (split[j] * grow) == 0:
                    after = code
                    for i in range(k):
                        after += (j + 2) * powers[par[comb[i]]]
                    if _emit(x, 3, mask, local, after) != 0:
                        return -1
            i = k - 1
            while i >= 0 and comb[i] == npar - k + i:
                i -= 1
            if i < 0:
                break
            comb[i] += 1
            for t in range(i + 1, k):
                comb[t] = comb[t - 1] + 1
    # all-to-all: the innermost k axes of dimension i -> shards of dimension j
    for t in range(ns):
        i = sharded[t]
        for k in range(1, nax[i] + 1):
            mask = 0
            grow = 1
            for p in range(nax[i] - k, nax[i]):
                mask |= 1LL << ax[i][p]
                grow *= sizes[ax[i][p]]
            for j in range(r):
                if j != i and ax[i][nax[i] - k] > last[j] and profile[j] % (split[j] * grow) == 0:
                    after = code
                    for p in range(nax[i] - k, nax[i]):
                        after += (j - i) * powers[ax[i][p]]
                    if _emit(x, 4, mask, local, after) != 0:
                        return -1
    return 0


def expand_closure(const cnp.int64_t[::1] profile, const cnp.int64_t[::1] sizes, long long start,
                   cnp.int32_t[::1] code2id, long long n0):
    """Every placement reachable from code ``start`` that ``code2id`` does not know yet.

    ``code2id`` (``(r + 2) ** A`` entries, -1: unknown) gets the new nodes' ids, from ``n0`` on
    in discovery order. Returns ``(codes, indptr, targets, moves, keys)``: the new nodes' codes,
    their edges in CSR form (``indptr`` of ``len(codes) + 1`` offsets from 0, target ids, and
    each edge's move as an index into ``keys``), and the distinct move keys in the order of
    their first use: the same nodes and edges in the same order as the pure-Python expansion
    of :class:`tensoropt_py.cost.reschedule._MoveSkeleton`. Checks are the caller's.
    """
    cdef int r = profile.shape[0], A = sizes.shape[0]
    cdef long long powers[_MAX_AXES]
    cdef long long prof[_MAX_RANK]
    cdef long long siz[_MAX_AXES]
    cdef Expansion x
    cdef Py_ssize_t k = 0
    cdef int a, failed = 0
    if r > _MAX_RANK or A > _MAX_AXES:
        raise ValueError(f"expand_closure: rank {r} or {A} axes past {_MAX_RANK} / {_MAX_AXES}")
    powers[0] = 1
    for a in range(1, A):
        powers[a] = powers[a - 1] * (r + 2)
    for a in range(r):
        prof[a] = profile[a]
    for a in range(A):
        siz[a] = sizes[a]
    x.codes = Grow(NULL, 0, 0, sizeof(long long))
    x.indptr = Grow(NULL, 0, 0, sizeof(long long))
    x.targets = Grow(NULL, 0, 0, sizeof(cnp.int32_t))
    x.moves = Grow(NULL, 0, 0, sizeof(cnp.int32_t))
    x.keys = Grow(NULL, 0, 0, sizeof(long long))
    x.slots = NULL
    x.nslots = 0
    x.code2id = &code2id[0]
    x.n0 = n0
    x.A = A
    with nogil:
        if _reserve(&x.codes, 1) != 0 or _reserve(&x.indptr, 1) != 0:
            failed = 1
        else:
            (<long long*> x.codes.data)[0] = start
            x.codes.n = 1
            x.code2id[start] = <cnp.int32_t> n0
            (<long long*> x.indptr.data)[0] = 0
            x.indptr.n = 1
            while k < x.codes.n:
                if (_expand_node(&x, (<long long*> x.codes.data)[k], r, A, prof, siz, powers) != 0
                        or _reserve(&x.indptr, x.indptr.n + 1) != 0):
                    failed = 1
                    break
                (<long long*> x.indptr.data)[x.indptr.n] = x.targets.n
                x.indptr.n += 1
                k += 1
    try:
        if failed:
            raise MemoryError("expand_closure: out of memory")
        return (_to_array(&x.codes, np.int64), _to_array(&x.indptr, np.int64),
                _to_array(&x.targets, np.int32), _to_array(&x.moves, np.int32), _to_array(&x.keys, np.int64))
    finally:
        free(x.codes.data)
        free(x.indptr.data)
        free(x.targets.data)
        free(x.moves.data)
        free(x.keys.data)
        free(x.slots)


cdef object _to_array(Grow* g, dtype):
    out = np.empty(g.n, dtype=dtype)
    cdef cnp.ndarray arr = out
    if g.n:
        memcpy(cnp.PyArray_DATA(arr), g.data, g.n * g.item)
    return out
