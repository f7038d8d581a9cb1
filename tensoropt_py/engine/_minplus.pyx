# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled min-plus reduction of :func:`~tensoropt_py.engine.min_sum` (private).

:func:`min_of_sums_kernel` takes factors broadcastable to one shape and writes, for every
index of the axes after the first, the least over the first axis of the factors' sum. NumPy
builds that sum in full (in slabs) and then reduces it; here each output row of the
longest output axis is summed and reduced in a buffer that stays in cache, one first-axis
index at a time. The factors are added left to right, as NumPy's repeated ``+`` does, so
the result is the same bit for bit. The public, validating entry point and its NumPy
reference are :func:`tensoropt_py.engine.scalar.min_of_sums` and
:func:`tensoropt_py.engine.scalar.min_of_sums_reference`.
"""
from libc.stdlib cimport malloc, free
from libc.math cimport INFINITY

cimport numpy as cnp

cnp.import_array()

ctypedef long long i64

cdef enum:
    MAXD = 64  # NumPy's own limit on dimensions
    MAXF = 64

MAX_DIMS = MAXD
MAX_FACTORS = MAXF


cdef inline void _start(double* tmp, const char* p, i64 st, i64 n, bint shifted, double s) noexcept nogil:
    """``tmp[t] = s + *(p + t * st)`` (or without ``s`` unless ``shifted``) for ``t < n``:
    the first factor that varies along the buffer (``st``: its byte stride there)."""
    cdef i64 t
    cdef const double* q = <const double*> p
    if st == sizeof(double):
        if shifted:
            for t in range(n):
                tmp[t] = s + q[t]
        else:
            for t in range(n):
                tmp[t] = q[t]
    elif shifted:
        for t in range(n):
            tmp[t] = s + (<const double*> (p + t * st))[0]
    else:
        for t in range(n):
            tmp[t] = (<const double*> (p + t * st))[0]


cdef inline void _add(double* tmp, const char* p, i64 st, i64 n) noexcept nogil:
    """``tmp[t] += *(p + t * st)`` for ``t < n`` (``st``: byte stride, 0 broadcasts)."""
    cdef i64 t
    cdef const double* q = <const double*> p
    cdef double v
    if st == 0:
        v = q[0]
        for t in range(n):
            tmp[t] = tmp[t] + v
    elif st == sizeof(double):
        for t in range(n):
            tmp[t] = tmp[t] + q[t]
    else:
        for t in range(n):
            tmp[t] = tmp[t] + (<const double*> (p + t * st))[0]


def min_of_sums_kernel(list factors, tuple shape, cnp.ndarray out):
    """``out[j] = min over i of sum(f[i, j] for f in factors)`` (checked input: float64 arrays
    of ``len(shape)`` dimensions, each of size ``shape[d]`` or 1 (broadcast), strides
    multiples of 8 bytes; ``out`` C-contiguous float64 of shape ``shape[1:]``)."""
    cdef int D = len(shape), F = len(factors), f, a, inner = -1
    cdef i64 dims[MAXD]
    cdef i64 st[MAXF][MAXD]
    cdef i64 ost[MAXD]
    cdef const char* data[MAXF]
    cdef i64 idx[MAXD]
    cdef const char* base[MAXF]
    cdef i64 n_inner = 1, rows = 1, row, i, t, obase, k
    cdef double* tmp
    cdef double* mn
    cdef i64 ist[MAXF]  # byte stride of each factor along the buffer's axis (0: none)
    cdef double s = 0.0, v
    cdef cnp.ndarray arr
    if D < 1 or D > MAXD or F < 1 or F > MAXF:
        raise ValueError(f"min_of_sums_kernel: {D} dimensions and {F} factors (1..{MAXD}, 1..{MAXF})")
    for a in range(D):
        dims[a] = shape[a]
    for f in range(F):
        arr = factors[f]
        data[f] = <const char*> cnp.PyArray_DATA(arr)
        for a in range(D):
            st[f][a] = 0 if arr.shape[a] == 1 else arr.strides[a]
    # output strides in bytes (C order over shape[1:])
    k = sizeof(double)
    for a in range(D - 1, 0, -1):
        ost[a] = k
        k *= dims[a]
    for a in range(1, D):  # the longest output axis is summed in the buffer, the others row by row
        if inner < 0 or dims[a] > dims[inner]:
            inner = a
    if inner > 0:
        n_inner = dims[inner]
    for f in range(F):
        ist[f] = st[f][inner] if inner > 0 else 0
    for a in range(1, D):
        if a != inner:
            rows *= dims[a]
    tmp = <double*> malloc(2 * n_inner * sizeof(double))
    if tmp == NULL:
        raise MemoryError("min_of_sums_kernel: no memory for its row buffers")
    mn = tmp + n_inner
    cdef char* obuf = <char*> cnp.PyArray_DATA(out)
    cdef i64 inner_st_out = ost[inner] if inner > 0 else 0
    with nogil:
        for a in range(D):
            idx[a] = 0
        for row in range(rows):
            obase = 0
            for a in range(1, D):
                if a != inner:
                    obase += idx[a] * ost[a]
            for f in range(F):
                base[f] = data[f]
                for a in range(1, D):
                    if a != inner:
                        base[f] += idx[a] * st[f][a]
            for t in range(n_inner):
                mn[t] = INFINITY
            for i in range(dims[0]):
                # the leading factors that do not vary along the buffer are one number each:
                # summed first, in their order, which is how every element's sum starts
                f = 0
                while f < F and ist[f] == 0:
                    v = (<const double*> (base[f] + i * st[f][0]))[0]
                    s = v if f == 0 else s + v
                    f += 1
                if f == F:
                    for t in range(n_inner):
                        mn[t] = s if s < mn[t] else mn[t]
                    continue
                _start(tmp, base[f] + i * st[f][0], ist[f], n_inner, f > 0, s)
                f += 1
                while f < F:
                    _add(tmp, base[f] + i * st[f][0], ist[f], n_inner)
                    f += 1
                for t in range(n_inner):  # a store every time: branch-free, so it vectorises
                    mn[t] = tmp[t] if tmp[t] < mn[t] else mn[t]
            for t in range(n_inner):
                (<double*> (obuf + obase + t * inner_st_out))[0] = mn[t]
            # next row: the odometer over the output axes but the inner one (last fastest)
            for a in range(D - 1, 0, -1):
                if a == inner:
                    continue
                idx[a] += 1
                if idx[a] < dims[a]:
                    break
                idx[a] = 0
    free(tmp)
    return out
