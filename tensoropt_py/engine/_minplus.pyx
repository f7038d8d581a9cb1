# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled min-plus reduction of :func:`~tensoropt_py.engine.min_sum` (private).

:func:`min_of_sums_kernel` takes factors broadcastable to one shape and writes, for every
index of the axes after the first, the least over the first axis of the factors' sum. NumPy
builds that sum in full (in slabs) and then reduces it; here each output row of the
longest output axis is summed and reduced in a buffer that stays in cache, one first-axis
index at a time (for one component, the last factor's addition fused with the minimum). The
factors are added left to right, as NumPy's repeated ``+`` does, so the result is the same bit
for bit. The public, validating entry point and its NumPy reference are
:func:`tensoropt_py.engine.scalar.min_of_sums` and
:func:`tensoropt_py.engine.scalar.min_of_sums_reference`.

Given a second list of factors (a second cost component), the kernel also writes the
lexicographic minimum: the least second sum among the first-axis indices whose first sum is
within a relative ``rtol`` of the least first sum. The first pass keeps, per element, where the
least first sum is and the next least one: where that one is not within ``rtol``, the second
sum at the least is the answer, one element read per factor; only the elements with a tie take
a second pass, which sums the first component again in the same order (the same numbers).
"""
from libc.stdlib cimport malloc, free
from libc.math cimport INFINITY, fabs

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


cdef inline int _leading(const char** base, const i64* st0, const i64* ist, int F, i64 i, double* s) noexcept nogil:
    """The factors before the first one that varies along the buffer, at first-axis index ``i``,
    summed in order into ``s[0]``; returns the index of that first one (``F``: none varies)."""
    cdef int f = 0
    cdef double v
    s[0] = 0.0
    while f < F and ist[f] == 0:
        v = (<const double*> (base[f] + i * st0[f]))[0]
        s[0] = v if f == 0 else s[0] + v
        f += 1
    return f


cdef inline void _row(double* tmp, const char** base, const i64* st0, const i64* ist, int F, i64 i,
                      i64 n) noexcept nogil:
    """``tmp[t]``, ``t < n``: the sum of ``F`` factors at first-axis index ``i`` along the buffer
    (``base``: each factor's row start, ``st0``: its byte stride along the first axis, ``ist``:
    along the buffer), added left to right: the leading factors that do not vary along the
    buffer are one number each, summed first, which is how every element's sum starts."""
    cdef i64 t
    cdef double s
    cdef int f = _leading(base, st0, ist, F, i, &s)
    if f == F:
        for t in range(n):
            tmp[t] = s
        return
    _start(tmp, base[f] + i * st0[f], ist[f], n, f > 0, s)
    f += 1
    while f < F:
        _add(tmp, base[f] + i * st0[f], ist[f], n)
        f += 1


cdef inline void _row_min(double* mn, double* tmp, const char** base, const i64* st0, const i64* ist, int F,
                          i64 i, i64 n) noexcept nogil:
    """``mn[t] = min(mn[t], s[t])``, ``t < n``, where ``s`` is what :func:`_row` writes: the
    same additions in the same order, the last factor's fused with the minimum, so that the
    sum is not stored and read back (``tmp``: scratch for the sums before the last factor)."""
    cdef i64 t
    cdef double s, v
    cdef const char* p
    cdef const double* q
    cdef i64 sst
    cdef int f = _leading(base, st0, ist, F, i, &s)
    if f == F:
        for t in range(n):
            mn[t] = s if s < mn[t] else mn[t]
        return
    if f == F - 1:  # the only factor that varies along the buffer is the last
        p = base[f] + i * st0[f]
        q = <const double*> p
        sst = ist[f]
        if sst == sizeof(double):
            if f > 0:
                for t in range(n):
                    v = s + q[t]
                    mn[t] = v if v < mn[t] else mn[t]
            else:
                for t in range(n):
                    v = q[t]
                    mn[t] = v if v < mn[t] else mn[t]
        else:
            for t in range(n):
                v = (<const double*> (p + t * sst))[0]
                if f > 0:
                    v = s + v
                mn[t] = v if v < mn[t] else mn[t]
        return
    _start(tmp, base[f] + i * st0[f], ist[f], n, f > 0, s)
    f += 1
    while f < F - 1:
        _add(tmp, base[f] + i * st0[f], ist[f], n)
        f += 1
    p = base[f] + i * st0[f]
    q = <const double*> p
    sst = ist[f]
    if sst == 0:
        s = q[0]
        for t in range(n):
            v = tmp[t] + s
            mn[t] = v if v < mn[t] else mn[t]
    elif sst == sizeof(double):
        for t in range(n):
            v = tmp[t] + q[t]
            mn[t] = v if v < mn[t] else mn[t]
    else:
        for t in range(n):
            v = tmp[t] + (<const double*> (p + t * sst))[0]
            mn[t] = v if v < mn[t] else mn[t]


cdef inline double _point(const char** base, const i64* st0, const i64* ist, int F, i64 i, i64 t) noexcept nogil:
    """Element ``t`` of what :func:`_row` writes, alone: the same additions in the same order."""
    cdef double s, v
    cdef int f = _leading(base, st0, ist, F, i, &s)
    if f == F:
        return s
    v = (<const double*> (base[f] + i * st0[f] + t * ist[f]))[0]
    s = s + v if f > 0 else v
    f += 1
    while f < F:
        s = s + (<const double*> (base[f] + i * st0[f] + t * ist[f]))[0]
        f += 1
    return s


cdef void _walk(list factors, int D, const char** data, i64 (*st)[MAXD], i64* st0):
    """Each factor's data and byte strides (0 along a broadcast axis), and its stride along the
    first axis apart."""
    cdef int f, a
    cdef cnp.ndarray arr
    for f in range(len(factors)):
        arr = factors[f]
        data[f] = <const char*> cnp.PyArray_DATA(arr)
        for a in range(D):
            st[f][a] = 0 if arr.shape[a] == 1 else arr.strides[a]
        st0[f] = st[f][0]


cdef inline void _row_starts(const char** base, const char** data, i64 (*st)[MAXD], int F, int D, const i64* idx,
                             int inner) noexcept nogil:
    """Each factor's start of the output row at index ``idx`` (every axis after the first but
    the buffer's ``inner``)."""
    cdef int f, a
    for f in range(F):
        base[f] = data[f]
        for a in range(1, D):
            if a != inner:
                base[f] += idx[a] * st[f][a]


def min_of_sums_kernel(list factors, tuple shape, cnp.ndarray out, list second=None, cnp.ndarray out2=None,
                       double rtol=0.0):
    """``out[j] = min over i of sum(f[i, j] for f in factors)`` (checked input: float64 arrays
    of ``len(shape)`` dimensions, each of size ``shape[d]`` or 1 (broadcast), strides
    multiples of 8 bytes; ``out`` C-contiguous float64 of shape ``shape[1:]``). With ``second``
    (factors of the same kind) and ``out2`` (like ``out``): ``out2[j]`` = the least
    ``sum(g[i, j] for g in second)`` over the ``i`` where the first sum is at most
    ``out[j] + rtol * |out[j]|`` (+inf where ``out[j]`` is)."""
    cdef int D = len(shape), F = len(factors), F2 = 0 if second is None else len(second), f, a, inner = -1
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
    # the second component: its factors' strides, row starts and the pass's buffers
    cdef i64 st2[MAXF][MAXD]
    cdef const char* data2[MAXF]
    cdef const char* base2[MAXF]
    cdef i64 ist2[MAXF]
    cdef i64 st0[MAXF]
    cdef i64 st02[MAXF]
    cdef double* tmp2
    cdef double* mn2
    cdef double* thr
    if D < 1 or D > MAXD or F < 1 or F > MAXF or (second is not None and (F2 < 1 or F2 > MAXF)):
        raise ValueError(f"min_of_sums_kernel: {D} dimensions and {F} (second: {F2}) factors "
                         f"(1..{MAXD}, 1..{MAXF})")
    if second is not None and (out2 is None or (<object> out2).shape != (<object> out).shape):
        raise ValueError("min_of_sums_kernel: second needs out2 of out's shape")
    for a in range(D):
        dims[a] = shape[a]
    _walk(factors, D, data, st, st0)
    if F2:
        _walk(second, D, data2, st2, st02)
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
    for f in range(F2):
        ist2[f] = st2[f][inner] if inner > 0 else 0
    for a in range(1, D):
        if a != inner:
            rows *= dims[a]
    cdef i64 n_tied
    cdef double x, y
    tmp = <double*> malloc((6 if F2 else 2) * n_inner * sizeof(double))
    cdef i64* arg = <i64*> malloc((2 * n_inner if F2 else 1) * sizeof(i64))
    if tmp == NULL or arg == NULL:
        free(tmp)
        free(arg)
        raise MemoryError("min_of_sums_kernel: no memory for its row buffers")
    mn = tmp + n_inner
    tmp2 = mn + n_inner
    mn2 = tmp2 + n_inner
    thr = mn2 + n_inner
    cdef double* nxt = thr + n_inner  # per element: the least first sum but the one at arg
    cdef i64* tied = arg + n_inner  # the elements whose least first sum has a tie
    cdef char* obuf = <char*> cnp.PyArray_DATA(out)
    cdef char* obuf2 = NULL if out2 is None else <char*> cnp.PyArray_DATA(out2)
    cdef i64 inner_st_out = ost[inner] if inner > 0 else 0
    with nogil:
        for a in range(D):
            idx[a] = 0
        for row in range(rows):
            obase = 0
            for a in range(1, D):
                if a != inner:
                    obase += idx[a] * ost[a]
            _row_starts(base, data, st, F, D, idx, inner)
            _row_starts(base2, data2, st2, F2, D, idx, inner)
            for t in range(n_inner):
                mn[t] = INFINITY
            for t in range(n_inner if F2 else 0):
                nxt[t] = INFINITY
                arg[t] = 0
            for i in range(0 if F2 else dims[0]):
                _row_min(mn, tmp, base, st0, ist, F, i, n_inner)
            for i in range(dims[0] if F2 else 0):
                # also the index of the least first sum and the next least (branch-free)
                _row(tmp, base, st0, ist, F, i, n_inner)
                for t in range(n_inner):
                    x = tmp[t]
                    arg[t] = i if x < mn[t] else arg[t]
                    y = x if x > mn[t] else mn[t]
                    nxt[t] = y if y < nxt[t] else nxt[t]
                    mn[t] = x if x < mn[t] else mn[t]
            for t in range(n_inner):
                (<double*> (obuf + obase + t * inner_st_out))[0] = mn[t]
            if F2:
                # where only the least first sum is within rtol of itself, the second sum there
                # is the answer; the elements with a tie take a second pass over the first axis
                n_tied = 0
                for t in range(n_inner):
                    thr[t] = mn[t] + rtol * fabs(mn[t])
                    if mn[t] == INFINITY:  # no finite first sum: none for the second either
                        mn2[t] = INFINITY
                    elif nxt[t] <= thr[t]:
                        mn2[t] = INFINITY
                        tied[n_tied] = t
                        n_tied += 1
                    else:
                        mn2[t] = _point(base2, st02, ist2, F2, arg[t], t)
                if 4 * n_tied > n_inner:  # many: whole rows of both sums
                    for i in range(dims[0]):
                        _row(tmp, base, st0, ist, F, i, n_inner)
                        _row(tmp2, base2, st02, ist2, F2, i, n_inner)
                        for k in range(n_tied):
                            t = tied[k]
                            if tmp[t] <= thr[t] and tmp2[t] < mn2[t]:
                                mn2[t] = tmp2[t]
                elif n_tied:  # few: the sums at those elements alone
                    for i in range(dims[0]):
                        for k in range(n_tied):
                            t = tied[k]
                            if _point(base, st0, ist, F, i, t) <= thr[t]:
                                x = _point(base2, st02, ist2, F2, i, t)
                                if x < mn2[t]:
                                    mn2[t] = x
                for t in range(n_inner):
                    (<double*> (obuf2 + obase + t * inner_st_out))[0] = mn2[t]
            # next row: the odometer over the output axes but the inner one (last fastest)
            for a in range(D - 1, 0, -1):
                if a == inner:
                    continue
                idx[a] += 1
                if idx[a] < dims[a]:
                    break
                idx[a] = 0
    free(tmp)
    free(arg)
    return out
