# cython: language_level=3
"""Compiled single-source Dijkstra over a CSR move graph (see :mod:`tensoropt_py.cost.reschedule`).

Exactly the search of :func:`tensoropt_py.cost.reschedule.dijkstra_py` (the pure-Python
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
from libc.stdlib cimport free, malloc
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
