# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled hot path of the frontier engine (private).

One kernel does all the work: :func:`combine_kernel` builds, for every output cell of a
ragged "frontier table", the reduced union over a list of *terms*, each term being the
product of one cell from each of ``S`` parent tables (Alg. 1 applied to Eq. 4-7 and to
line 6 of Alg. 3).  Every parent cell must already be a frontier (memory ascending,
time strictly descending), so a product of cells is a union of *shifted* copies of the
largest cell (copies whose shift is dominated by another copy's shift are dropped
up front). The reduced union merges these lists one by one, term by term, into the cell's
frontier (skipping a term or a list whose ideal corner the frontier dominates, and
galloping over the runs of a list that one frontier point dominates), which is linear in
the frontier's size per list that adds points and the fastest while it stays within
``STAIR_LIMIT`` points and its work within ``HEAP_WORK_FACTOR`` times the heap's estimated
comparisons (a merge moves the frontier with ``memcpy``, far cheaper per point than a heap's
sift: a Llama-8B chain join whose cells pass 26,000 points before thinning takes 1.9 s merged
one by one and 3.4 s by the heap);
past that, a k-way heap merge that drops a list as soon as its smallest time cannot
beat the best time found so far and gallops over dominated points. Both visit points in
(memory, time, list) order and keep a point when its time beats every earlier one, so
they give the same points with the same provenance. In a cell of many large terms of several
lists each, the one-by-one merge first passes each list through a filter: a table of the
frontier's least time below each of ``_BUCKETS`` memory buckets (rebuilt from the frontier
once the list points met since pay for it) drops the points that a frontier point of a lower
bucket dominates, which no merge order keeps (four list points at a time where the CPU has
AVX2, chosen when the module loads; ``_use_simd`` switches it for tests: the same points
either way). Most lists there run just above the frontier,
each point against another step of it, and are dropped whole without being built
(``benchmarks/bench_scale.py --cases transformer16_terms`` counts the points it would drop,
given each sampled cell's whole frontier, in the default Transformer@16 run's costliest
combine). In a cell of outer terms (a node elimination's: one per config of the node
eliminated), a term is skipped when an earlier term with the same base slot has, in every
slot, a cell covering its cell (``cover_bitsets``, ``_cell_skips``): it could only add
points that the earlier term's dominate, as summed (42% of the costliest combine's terms).
Where a term's candidate points are many, a term is also skipped when another one strictly
dominates it (``_slack_skips``): per slot, every point of its cell weakly dominated by a point
of the other's delayed by some time, the least delays summing below zero by a margin above any
rounding. A node elimination's configs often differ by a delay in one slot that another more
than makes up for (``transformer16_dominated`` in ``benchmarks/bench_scale.py``: in the costliest
join of the frontier so far with a layer, 57 to 72% of the terms covered or strictly dominated,
30 to 46% covered); the delays of a slot whose row is shared by many output cells are kept per row (one
frontier so far for every cell: each pair of its cells is walked once).
Output points carry their
provenance: the global point index of the parent point of every slot (``-1`` for an
absent slot).

:func:`sweep_kernel` takes the outer terms whose slots all hold single points but one (the
first or the last), with a summed memory that depends on the term only (a node's own cost
and an edge of one memory: a layout edge not yet summed with anything). The output cells
that share a row of the multi-point slot then see one sequence of points in memory order,
each shifted in time by the term and the cell, and one pass over it serves them all: per
point, a test against every cell's best time so far (branch-free, or four cells at a time
with AVX2), and the cells it beats keep it. In the default Transformer@16 run, the node eliminations of this form took 4.6 s
of the 9.8 s its steps take on one thread with the general kernel, and 1.7 s with the sweep. The general kernel
merges each cell's lists instead (the same points and provenance; ``transformer16_sweep``
in ``benchmarks/bench_scale.py`` compares the default Transformer@16 run with and without it).

The pure NumPy reference of this kernel is
:func:`tensoropt_py.elimination.reference.combine_reference`; both must agree exactly,
provenance included.  Public, validating entry points live in
:mod:`tensoropt_py.elimination.kernels`.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove, memset
from libc.math cimport INFINITY, NAN, fabs
from libc.stdint cimport INT64_MAX, uint64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

ctypedef long long i64

cdef extern from *:
    """
    static inline long long _tensoropt_atomic_add(long long* p, long long v) {
        return __atomic_add_fetch(p, v, __ATOMIC_RELAXED);
    }

    /* The filter's bucket of memory m: x = (m - lo) * inv, 0 at or below 0, top at or above
       top, else truncated (the AVX2 scan below does the same operations on four at once). */
    static inline long long _tensoropt_bucket(double m, double lo, double inv, double top) {
        double x = (m - lo) * inv;
        return x <= 0.0 ? 0 : (x >= top ? (long long) top : (long long) x);
    }

    /* First index in [j, end) of a list (memories bm, times bt, shifted by (sm, st)) whose
       point is faster than below[its bucket], or end: _first_unfiltered's test, point by point. */
    static long long _tensoropt_scan_plain(const double* bm, const double* bt, double sm, double st,
                                           long long j, long long end, const double* below,
                                           double lo, double inv, double top) {
        for (; j < end; j++)
            if (below[_tensoropt_bucket(bm[j] + sm, lo, inv, top)] > bt[j] + st)
                return j;
        return end;
    }

    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    #include <immintrin.h>
    /* The same, four points at a time (the same operations on each: the same buckets) */
    __attribute__((target("avx2")))
    static long long _tensoropt_scan_avx2(const double* bm, const double* bt, double sm, double st,
                                          long long j, long long end, const double* below,
                                          double lo, double inv, double top) {
        const __m256d vsm = _mm256_set1_pd(sm), vst = _mm256_set1_pd(st), vlo = _mm256_set1_pd(lo);
        const __m256d vinv = _mm256_set1_pd(inv), vzero = _mm256_setzero_pd(), vtop = _mm256_set1_pd(top);
        for (; j + 4 <= end; j += 4) {
            __m256d x = _mm256_mul_pd(_mm256_sub_pd(_mm256_add_pd(_mm256_loadu_pd(bm + j), vsm), vlo), vinv);
            x = _mm256_blendv_pd(x, vzero, _mm256_cmp_pd(x, vzero, _CMP_LE_OQ));
            x = _mm256_blendv_pd(x, vtop, _mm256_cmp_pd(x, vtop, _CMP_GE_OQ));
            __m256d f = _mm256_i32gather_pd(below, _mm256_cvttpd_epi32(x), 8);
            __m256d t = _mm256_add_pd(_mm256_loadu_pd(bt + j), vst);
            int mask = _mm256_movemask_pd(_mm256_cmp_pd(f, t, _CMP_GT_OQ));
            if (mask)
                return j + __builtin_ctz(mask);
        }
        return _tensoropt_scan_plain(bm, bt, sm, st, j, end, below, lo, inv, top);
    }
    /* Whether t0 + st[j] < best[j] for some j < n (the sweep's test of a point against every
       cell of its group), four cells at a time */
    __attribute__((target("avx2")))
    static int _tensoropt_any_faster_avx2(const double* st, const double* best, double t0, long long n) {
        const __m256d vt = _mm256_set1_pd(t0);
        long long j = 0;
        for (; j + 4 <= n; j += 4) {
            __m256d c = _mm256_add_pd(vt, _mm256_loadu_pd(st + j));
            if (_mm256_movemask_pd(_mm256_cmp_pd(c, _mm256_loadu_pd(best + j), _CMP_LT_OQ)))
                return 1;
        }
        for (; j < n; j++)
            if (t0 + st[j] < best[j])
                return 1;
        return 0;
    }
    static int _tensoropt_avx2(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2");
    }
    #else
    #define _tensoropt_scan_avx2 _tensoropt_scan_plain
    static int _tensoropt_any_faster_avx2(const double* st, const double* best, double t0, long long n) {
        return 0;  /* never called: no AVX2 */
    }
    static int _tensoropt_avx2(void) { return 0; }
    #endif
    """
    i64 _atomic_add "_tensoropt_atomic_add"(i64* p, i64 v) nogil
    i64 _bucket "_tensoropt_bucket"(double m, double lo, double inv, double top) nogil
    i64 _scan_plain "_tensoropt_scan_plain"(const double* bm, const double* bt, double sm, double st, i64 j, i64 end,
                                            const double* below, double lo, double inv, double top) nogil
    i64 _scan_avx2 "_tensoropt_scan_avx2"(const double* bm, const double* bt, double sm, double st, i64 j, i64 end,
                                          const double* below, double lo, double inv, double top) nogil
    int _any_faster_avx2 "_tensoropt_any_faster_avx2"(const double* st, const double* best, double t0, i64 n) nogil
    int _cpu_avx2 "_tensoropt_avx2"() nogil

cdef enum:
    MAXS = 6
    _HEAP_WORK_FACTOR = 8
    _SP_STRIDE = 4  # doubles per SP: a staircase's times are read with this stride
    _BUCKETS = 512  # memory buckets of a cell's dominance filter
    _FILTER_MIN_POINTS = 4096  # candidate points from which a cell uses the filter
    _FILTER_MIN_TERM_POINTS = 64  # ... and per term (a cell's setup reads every term once)
    _FILTER_MIN_TERMS = 32  # ... in this many terms (one term's shifted lists: the merge's gallops do better)
    _FILTER_MIN_LISTS = 2  # ... of this many lists each on average (terms of one list each: likewise)
    _COVER_WORDS = 8  # 64-bit words of a cell's cover bitsets: covers apply to cells of 512 terms or fewer
    _SCAN_RUN = 32  # list points the filter tests one by one before galloping over a run of filtered ones

cdef bint _simd_scan = _cpu_avx2() != 0


def _use_simd(bint on):
    """Let the dominance filter test four list points at a time, and the sweep test a point against
    four cells at a time, where the CPU has AVX2 (``on``, the default where it has), or one by
    one: the same points either way (private; tests compare both with the reference). Returns
    whether they now do."""
    global _simd_scan
    _simd_scan = on and _cpu_avx2() != 0
    return _simd_scan


def _first_unfiltered_of(cnp.ndarray mem, cnp.ndarray tim, double sm, double st, i64 j, i64 end,
                         cnp.ndarray below, double lo, double inv):
    """The dominance filter on one list (private, for tests): the first index from ``j`` whose
    point, shifted by ``(sm, st)``, is faster than ``below`` (``FILTER_BUCKETS`` non-increasing
    times) at the bucket of its memory, ``(memory - lo) * inv`` clamped and truncated; ``end``
    if none. Times must fall weakly along the list (the filter gallops over them)."""
    _require_c(mem, np.float64, "memory")
    _require_c(tim, np.float64, "time")
    _require_c(below, np.float64, "below")
    if below.shape[0] != _BUCKETS or not 0 <= j <= end <= mem.shape[0] or tim.shape[0] != mem.shape[0]:
        raise ValueError("_first_unfiltered_of: bad shapes or range")
    cdef Buf B
    memset(&B, 0, sizeof(Buf))
    B.below = <double*> cnp.PyArray_DATA(below)
    B.buckets_lo = lo
    B.buckets_inv = inv
    return _first_unfiltered(&B, <const double*> cnp.PyArray_DATA(mem), <const double*> cnp.PyArray_DATA(tim),
                             sm, st, j, end)


MAX_SLOTS = MAXS
STAIR_LIMIT = 65536
HEAP_WORK_FACTOR = _HEAP_WORK_FACTOR
FILTER_BUCKETS = _BUCKETS
MAX_COVER_TERMS = 64 * _COVER_WORDS


class KernelBudgetExceeded(MemoryError):
    """The combine kernel's buffers would pass the byte budget of the call: ``args`` is
    ``(budget, bytes they would have held)``."""


cdef struct Src:
    int S
    const i64* offs[MAXS]
    const double* mem[MAXS]
    const double* tim[MAXS]
    const i64* term_off
    const i64* term_cells
    const i64* outer_row
    const i64* outer_col
    i64 n_rows
    i64 U
    double eps
    bint filter_cells  # the cells hold enough candidate points on average to look at each
    # covered outer terms (see _cell_skips): per slot, cover bitsets of its distinct row values
    # and each output cell's index among them; NULL cover[0]: every term is visited
    const uint64_t* cover[MAXS]
    const i64* row_index[MAXS]
    bint slack  # skip the outer terms that another term strictly dominates (_slack_skips)
    const i64* delay_class[MAXS]  # ... per slot, each output cell's row class, whose delays are kept (NULL: none)
    i64 delay_classes[MAXS]  # ... and how many classes
    i64 W  # 64-bit words per bitset of U terms (0: no term is skipped)


cdef struct Lst:
    i64 pos
    i64 end
    double sm
    double st
    double hm
    double ht
    int base
    i64 fixed[MAXS]


cdef struct HE:
    double m
    double t
    i64 li


cdef struct SP:
    double m
    double t
    i64 li
    i64 pos


if sizeof(SP) != _SP_STRIDE * sizeof(double):  # _first_faster reads a staircase's times with this stride
    raise ImportError(f"_kernels: a staircase point takes {sizeof(SP)} bytes, not {_SP_STRIDE} doubles")

cdef struct Buf:
    SP* sa
    SP* sb
    i64 scap
    Lst* lists
    i64 lcap
    i64* ord
    char* keep
    HE* heap
    double* om
    double* ot
    i64* op
    i64 ocap
    i64 n
    int err
    i64* used  # bytes of buffers held by every worker of the call (shared)
    i64 budget  # most bytes they may hold together; -1: no limit
    i64 hint_lo  # at least this many staircase points have memory <= hint_m (-1: no search yet in the cell)
    double hint_m  # the first memory of the list searched last
    bint over  # a growth was refused for the budget
    i64 wanted  # the bytes the workers would have held with it
    double* below  # below[k]: the least time of the staircase points in the memory buckets below k
    bint filter_on  # the cell uses the filter
    bint buckets_stale  # the staircase has changed since ``below`` was built (it stays an upper bound)
    i64 buckets_credit  # list points met since ``below`` was built: it is rebuilt once they pay for it
    double buckets_lo  # memory of bucket 0's lower edge
    double buckets_inv  # buckets per unit of memory
    uint64_t* skip  # the covered terms of the current cell (W words; _cell_skips)
    int* term_base  # the base slot of each of its U terms
    i64* term_lo  # per term and slot (U x S): its cell's first point (_slack_skips)
    i64* term_n  # ... its points
    double* term_sum  # ... its least memory, least time and time magnitude (U x S x 3)
    double* delay[MAXS]  # per slot with row classes, the delays (_slack) of the pairs of terms met (classes x U x U, NaN: not yet)
    char* delay_exact[MAXS]  # ... whether each is the delay itself or a lower bound of it (a walk stopped early)


cdef inline bint _less(HE* a, HE* b) noexcept nogil:
    if a.m < b.m:
        return True
    if a.m > b.m:
        return False
    if a.t < b.t:
        return True
    if a.t > b.t:
        return False
    return a.li < b.li


cdef inline void _sift_down(HE* heap, i64 n, i64 i) noexcept nogil:
    cdef HE x = heap[i]
    cdef i64 c
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(&heap[c + 1], &heap[c]):
            c += 1
        if _less(&heap[c], &x):
            heap[i] = heap[c]
            i = c
        else:
            break
    heap[i] = x


cdef i64 _budgeted(i64* used, i64 budget, i64* wanted, i64 cap, i64 need, i64 least, i64 unit) noexcept nogil:
    """A capacity of at least ``need`` (and ``least``) items of ``unit`` bytes, doubling from
    ``cap``, its growth counted in ``used`` against ``budget`` (shared by a call's workers;
    -1: no limit); -1 (nothing counted, the bytes it would have made in ``wanted``) when that
    would pass it."""
    cdef i64 new = cap if cap >= least else least
    cdef i64 total
    while new < need:
        new *= 2
    if budget >= 0:
        total = _atomic_add(used, (new - cap) * unit)
        if total > budget:
            _atomic_add(used, -(new - cap) * unit)
            wanted[0] = total
            return -1
    return new


cdef i64 _capacity(Buf* B, i64 cap, i64 need, i64 least, i64 unit) noexcept nogil:
    """:func:`_budgeted` for a combine worker's buffers (``B.over`` set when refused)."""
    cdef i64 new = _budgeted(B.used, B.budget, &B.wanted, cap, need, least, unit)
    if new < 0:
        B.over = True
    return new


cdef inline int _resize(void** p, size_t nbytes) noexcept nogil:
    """``realloc`` in place of ``p[0]``; -1 (``p[0]`` untouched) when out of memory."""
    cdef void* q = realloc(p[0], nbytes)
    if q == NULL:
        return -1
    p[0] = q
    return 0


cdef int _grow_lists(Buf* B, i64 need) noexcept nogil:
    cdef i64 cap
    if need <= B.lcap:
        return 0
    cap = _capacity(B, B.lcap, need, 64, sizeof(Lst) + sizeof(HE) + sizeof(i64) + sizeof(char))
    if (cap < 0 or _resize(<void**> &B.lists, cap * sizeof(Lst)) or _resize(<void**> &B.heap, cap * sizeof(HE))
            or _resize(<void**> &B.ord, cap * sizeof(i64)) or _resize(<void**> &B.keep, cap * sizeof(char))):
        return -1
    B.lcap = cap
    return 0


cdef int _grow_out(Buf* B, i64 need, int S) noexcept nogil:
    cdef i64 cap
    if need <= B.ocap:
        return 0
    cap = _capacity(B, B.ocap, need, 256, 2 * sizeof(double) + S * sizeof(i64))
    if (cap < 0 or _resize(<void**> &B.om, cap * sizeof(double)) or _resize(<void**> &B.ot, cap * sizeof(double))
            or _resize(<void**> &B.op, cap * S * sizeof(i64))):
        return -1
    B.ocap = cap
    return 0


cdef int _grow_stairs(Buf* B, i64 need) noexcept nogil:
    cdef i64 cap
    if need <= B.scap:
        return 0
    cap = _capacity(B, B.scap, need, 256, 2 * sizeof(SP))
    if cap < 0 or _resize(<void**> &B.sa, cap * sizeof(SP)) or _resize(<void**> &B.sb, cap * sizeof(SP)):
        return -1
    B.scap = cap
    return 0


cdef inline bint _before(SP* p, double m, double t, i64 li) noexcept nogil:
    """Whether staircase point ``p`` comes before point (m, t) of list ``li`` in (memory,
    time, list index) order."""
    return p.m < m or (p.m == m and (p.t < t or (p.t == t and p.li < li)))


cdef inline i64 _gallop_staircase(SP* a, i64 i, i64 n, double m, double t, i64 li) noexcept nogil:
    """First index from ``i`` (whose point comes before (m, t, li)) whose point does not."""
    cdef i64 lo = i, step = 1, hi = i + 1, mid
    while hi < n and _before(&a[hi], m, t, li):
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    lo += 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _before(&a[mid], m, t, li):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef inline i64 _first_faster(const double* tim, i64 stride, double shift, i64 lo, i64 end,
                              double best) noexcept nogil:
    """First index ``i`` in ``lo .. end`` of a sequence of falling times (``tim[i * stride] +
    shift``: a list's times, or a staircase's read through its points) below ``best``
    (``end`` if none), galloping from ``lo``."""
    cdef i64 step = 1, hi, mid
    if lo >= end or tim[lo * stride] + shift < best:
        return lo
    hi = lo + 1
    while hi < end and tim[hi * stride] + shift >= best:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > end:
        hi = end
    lo += 1
    while lo < hi:
        mid = (lo + hi) // 2
        if tim[mid * stride] + shift < best:
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef inline i64 _settle(const double* bm, const double* bt, double sm, double st, i64 pos, i64 end) noexcept nogil:
    """Where to start a list at ``pos`` when its next shifted memories round to the same
    value: at the first of those points with the least shifted time (times fall weakly along
    a list), the first of them in (memory, time, index) order, as the reference sorts its
    candidates (it dominates or ties the others)."""
    cdef double m = bm[pos] + sm
    cdef i64 e = pos
    while e + 1 < end and bm[e + 1] + sm == m:
        e += 1
    while bt[pos] + st != bt[e] + st:
        pos += 1
    return pos


cdef inline i64 _append_point(SP* b, i64 k, double m, double t, i64 li, i64 pos) noexcept nogil:
    """Append point ``pos`` of list ``li`` (shifted to (m, t), faster than every point kept) to
    the staircase ``b[:k]``; returns its new length. A last point of the same memory is
    replaced (shifted memories may round to one value: the faster one stays)."""
    if k > 0 and b[k - 1].m == m:
        k -= 1
    b[k].m = m
    b[k].t = t
    b[k].li = li
    b[k].pos = pos
    return k + 1


cdef inline i64 _bucket_of(Buf* B, double m) noexcept nogil:
    """Bucket of memory ``m``: non-decreasing in ``m`` (clamped), whatever the rounding, so a
    point of a lower bucket has less memory."""
    return _bucket(m, B.buckets_lo, B.buckets_inv, _BUCKETS - 1)


cdef void _build_buckets(Buf* B, i64 n) noexcept nogil:
    """``below`` of staircase ``B.sa[:n]`` (times fall along it: the last point of the buckets
    below ``k`` is their fastest)."""
    cdef i64 p, b, k = 0
    cdef double best = INFINITY
    for p in range(n):
        b = _bucket_of(B, B.sa[p].m)
        while k <= b:
            B.below[k] = best
            k += 1
        best = B.sa[p].t
    while k < _BUCKETS:
        B.below[k] = best
        k += 1
    B.buckets_stale = False
    B.buckets_credit = 0


cdef inline i64 _first_unfiltered(Buf* B, const double* bm, const double* bt, double sm, double st, i64 j,
                                i64 end) noexcept nogil:
    """First index from ``j`` of a list (shifted by (sm, st)) whose point is faster than every
    staircase point of a lower bucket: each point before it has a staircase point of less
    memory and no more time, so it cannot be kept, in any merge order."""
    cdef double f
    cdef i64 stop
    while j < end:
        # each point in turn, up to _SCAN_RUN of them (four at a time where the CPU can)
        stop = j + _SCAN_RUN if j + _SCAN_RUN < end else end
        if _simd_scan:
            j = _scan_avx2(bm, bt, sm, st, j, stop, B.below, B.buckets_lo, B.buckets_inv, _BUCKETS - 1)
        else:
            j = _scan_plain(bm, bt, sm, st, j, stop, B.below, B.buckets_lo, B.buckets_inv, _BUCKETS - 1)
        if j < stop or j == end:
            return j
        # a long run of filtered points: the points after the last of time >= its f lie in
        # its bucket or above, where below <= f, and are galloped over
        f = B.below[_bucket_of(B, bm[j - 1] + sm)]
        j = _first_faster(bt, 1, st, j, end, f)
    return end


cdef inline i64 _filtered_from(Buf* B, i64 n, const double* bm, const double* bt, double sm, double st, i64 j,
                          i64 end) noexcept nogil:
    """:func:`_first_unfiltered` against staircase ``B.sa[:n]``, ``below`` rebuilt first when it
    is stale and the list points met since it was built pay for that."""
    # a list filtered when it was built is met again at its merge and its points that passed
    # count twice: rebuilding that much sooner measured about 1% faster on the Transformer@16
    # (one core) than counting them once
    B.buckets_credit += end - j
    if B.buckets_stale and B.buckets_credit >= _BUCKETS + n:
        _build_buckets(B, n)
    if B.below[_bucket_of(B, bm[j] + sm)] <= bt[end - 1] + st:
        return end  # its ideal corner is dominated: every point is
    return _first_unfiltered(B, bm, bt, sm, st, j, end)


cdef i64 _merge_into(Src* src, Buf* B, i64 n, i64 li, i64 limit, i64* work) noexcept nogil:
    """Frontier of staircase ``B.sa[:n]`` (from lists before ``li``) and list ``li`` into
    ``B.sb``; returns its length, -1 past ``limit`` points, -2 out of memory; adds its work to
    ``work`` (one per search or gallop, and the points of a merge). In (memory, time, list
    index) order, keeping a point when its time beats every earlier one (and
    replacing the last one kept when their memory is equal: shifted memories may round to
    one value): the heap merge's order and rules, so the points and their provenance are
    those of the heap merge."""
    cdef Lst* L = &B.lists[li]
    cdef const double* bm = src.mem[L.base]
    cdef const double* bt = src.tim[L.base]
    cdef SP* a = B.sa
    cdef SP* b
    cdef i64 i, j = L.pos, k, lo, hi, mid, e
    cdef double best, lm, lt
    if B.filter_on:
        # most lists of a costly cell run just above its frontier, each point against another
        # step of it, which the searches below would walk point by point: the filter skips the
        # points that a staircase point of a lower bucket dominates
        j = _filtered_from(B, n, bm, bt, L.sm, L.st, j, L.end)
        if j == L.end:
            return n
    # one search: the staircase points of memory <= the list's first point's (memories in a
    # staircase are distinct). A term's lists are shifts of one cell along a frontier, so they
    # start at rising memories: the search gallops on from the last one (2.1 -> 1.8 s for a
    # Transformer layer's 3.5 million terms). A merge keeps every point of less memory than
    # the list's first and one point at most of equal memory, so the count stays a lower bound.
    lm = bm[j] + L.sm
    lo = 0
    hi = n
    if B.hint_lo >= 0 and lm >= B.hint_m:
        lo = B.hint_lo
        k = 1
        while lo + k <= n and a[lo + k - 1].m <= lm:
            lo += k
            k *= 2
        if lo + k < hi:
            hi = lo + k  # a[lo + k - 1].m > lm: the count is below lo + k
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid].m <= lm:
            lo = mid + 1
        else:
            hi = mid
    B.hint_lo = lo
    B.hint_m = lm
    # the whole list is dominated when its ideal corner (least memory, least time) is
    # (ties: a point equal to the corner is the list's only point, kept if of lower index)
    lt = bt[L.end - 1] + L.st
    if lo > 0 and a[lo - 1].t <= lt and (a[lo - 1].m < lm or a[lo - 1].t < lt or a[lo - 1].li < li):
        return n
    # staircase points of less memory than the list's first point come first and stay
    i = lo - 1 if lo > 0 and a[lo - 1].m == lm else lo
    work[0] += 1
    # find the list's first point that beats every earlier one, without writing anything:
    # up to it, the staircase's points all stay (each beats the ones before it), and a list
    # without such a point leaves the staircase as it is. Galloping both ways: a list point
    # that the staircase point before it dominates (time ``best``) is followed by a run of
    # points that point dominates too (more memory, time still >= best), skipped at once.
    while True:
        lm = bm[j] + L.sm
        lt = bt[j] + L.st
        if i < n and _before(&a[i], lm, lt, li):
            i = _gallop_staircase(a, i, n, lm, lt, li)
        best = a[i - 1].t if i > 0 else INFINITY
        if lt < best:
            break
        j = _first_faster(bt, 1, L.st, j + 1, L.end, best)
        if B.filter_on:
            j = _first_unfiltered(B, bm, bt, L.sm, L.st, j, L.end)
        work[0] += 2
        if j == L.end:
            return n
    work[0] += n + L.end - j
    if _grow_stairs(B, n + L.end - j) != 0:
        return -2
    a = B.sa
    b = B.sb
    memcpy(b, a, i * sizeof(SP))
    k = i
    # merge, by runs: staircase points before the next list point are all kept once the
    # first is (their times fall), and dominated runs of either side are galloped over
    while i < n and j < L.end:
        lm = bm[j] + L.sm
        lt = bt[j] + L.st
        if _before(&a[i], lm, lt, li):
            if a[i].t < best:
                e = _gallop_staircase(a, i, n, lm, lt, li)
                memcpy(&b[k], &a[i], (e - i) * sizeof(SP))
                k += e - i
                best = a[e - 1].t
                i = e
            else:
                i = _first_faster(&a[0].t, _SP_STRIDE, 0.0, i + 1, n, best)
        elif lt < best:
            k = _append_point(b, k, lm, lt, li, j)
            best = lt
            j += 1
        else:
            j = _first_faster(bt, 1, L.st, j + 1, L.end, best)
    # one side is left, a frontier itself: drop its points up to the first that beats best
    i = _first_faster(&a[0].t, _SP_STRIDE, 0.0, i, n, best)
    if i < n:
        memcpy(&b[k], &a[i], (n - i) * sizeof(SP))
        k += n - i
    # (a list's shifted times may round to one value: each point must still beat the last)
    j = _first_faster(bt, 1, L.st, j, L.end, best)
    while j < L.end:
        lt = bt[j] + L.st
        if lt < best:
            k = _append_point(b, k, bm[j] + L.sm, lt, li, j)
            best = lt
        j += 1
    if k > limit:
        return -1
    B.sb = B.sa
    B.sa = b
    B.buckets_stale = True
    return k


cdef inline bint _dominated(SP* a, i64 n, double m, double t) noexcept nogil:
    """Whether a point of staircase ``a[:n]`` has memory <= m and time <= t (binary search:
    the last point of memory <= m has the least time among them)."""
    cdef i64 lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid].m <= m:
            lo = mid + 1
        else:
            hi = mid
    return lo > 0 and a[lo - 1].t <= t


cdef int _stair_add(Src* src, Buf* B, i64 l0, i64 l1, i64* st, i64 limit, bint bounded) noexcept nogil:
    """Merge lists ``l0..l1-1`` one by one into the cell's staircase (cheap while it stays
    short; a heap merge pays log(lists) per point instead). ``st``: the staircase's state
    ``(points, work, points of the lists so far)``. Returns 0; 1 when it would pass ``limit``
    points or, if ``bounded``, visit more points than ``HEAP_WORK_FACTOR`` times the heap's
    estimated comparisons (the cell then goes to the heap merge); -1 out of memory."""
    cdef i64 li, n, depth = 1
    for li in range(l0, l1):
        st[2] += B.lists[li].end - B.lists[li].pos
    while (1 << depth) < l1:
        depth += 1
    for li in range(l0, l1):
        n = _merge_into(src, B, st[0], li, limit, &st[1])
        if n == -2:
            return -1
        if n == -1:
            return 1
        st[0] = n
        if bounded and st[1] > _HEAP_WORK_FACTOR * st[2] * depth + l1:
            return 1
    return 0


cdef int _stair_output(Src* src, Buf* B, i64 n) noexcept nogil:
    """Append staircase ``B.sa[:n]`` to the output, with provenance; -1 out of memory."""
    cdef i64 p, w
    cdef int s, S = src.S
    cdef Lst* L
    if _grow_out(B, B.n + n, S) != 0:
        return -1
    for p in range(n):
        w = B.n + p
        L = &B.lists[B.sa[p].li]
        B.om[w] = B.sa[p].m
        B.ot[w] = B.sa[p].t
        for s in range(S):
            if s == L.base:
                B.op[w * S + s] = B.sa[p].pos
            else:
                B.op[w * S + s] = L.fixed[s]
    B.n += n
    return 0


cdef inline bint _shift_less(Lst* L, i64 a, i64 b) noexcept nogil:
    if L[a].sm < L[b].sm:
        return True
    if L[a].sm > L[b].sm:
        return False
    if L[a].st < L[b].st:
        return True
    if L[a].st > L[b].st:
        return False
    return a < b


cdef void _sift_max(i64* a, i64 root, i64 n, Lst* L) noexcept nogil:
    cdef i64 child, tmp
    while True:
        child = 2 * root + 1
        if child >= n:
            break
        if child + 1 < n and _shift_less(L, a[child], a[child + 1]):
            child += 1
        if _shift_less(L, a[root], a[child]):
            tmp = a[root]
            a[root] = a[child]
            a[child] = tmp
            root = child
        else:
            break


cdef i64 _prune_shifts(Buf* B, i64 lo, i64 hi) noexcept nogil:
    """Keep, among lists lo..hi-1 (same base cell, different shifts), those whose shift is
    not weakly dominated by an earlier one in (sm, st, index) order; compact in place
    (enumeration order preserved). Returns the new end."""
    cdef i64 n = hi - lo
    cdef i64 i, end, tmp, w
    cdef double best
    cdef i64* a = B.ord
    if n < 2:
        return hi
    # shifts along one frontier (the usual case) come as a staircase already: none dominated
    for i in range(lo + 1, hi):
        if not (B.lists[i].sm > B.lists[i - 1].sm and B.lists[i].st < B.lists[i - 1].st):
            break
    else:
        return hi
    for i in range(n):
        a[i] = lo + i
    i = n // 2 - 1
    while i >= 0:
        _sift_max(a, i, n, B.lists)
        i -= 1
    end = n - 1
    while end > 0:
        tmp = a[0]
        a[0] = a[end]
        a[end] = tmp
        _sift_max(a, 0, end, B.lists)
        end -= 1
    best = INFINITY
    for i in range(n):
        if B.lists[a[i]].st < best:
            B.keep[a[i] - lo] = 1
            best = B.lists[a[i]].st
        else:
            B.keep[a[i] - lo] = 0
    w = lo
    for i in range(n):
        if B.keep[i]:
            if w != lo + i:
                B.lists[w] = B.lists[lo + i]
            w += 1
    return w


cdef inline const i64* _term_cells(Src* src, i64 c, i64 t, i64* ocells) noexcept nogil:
    """The parent cells of term ``t`` of output cell ``c`` (written to ``ocells`` for outer terms)."""
    cdef int s
    if src.outer_row == NULL:
        return src.term_cells + t * src.S
    for s in range(src.S):
        ocells[s] = src.outer_row[s * src.n_rows + c] + src.outer_col[s * src.U + t - src.term_off[c]]
    return ocells


cdef inline bint _covers(const double* m, const double* t, i64 pa, i64 na, i64 pb, i64 nb) noexcept nogil:
    """Whether every point of frontier ``pb .. pb+nb`` is weakly dominated by a point of frontier
    ``pa .. pa+na`` (both memory ascending, time descending; an empty second one is covered)."""
    cdef i64 j, q, end
    if nb == 0:
        return True
    if na == 0 or m[pa] > m[pb] or t[pa + na - 1] > t[pb + nb - 1]:
        return False
    j = pa
    end = pa + na
    for q in range(pb, pb + nb):
        while j + 1 < end and m[j + 1] <= m[q]:
            j += 1
        if t[j] > t[q]:
            return False
    return True


cdef int _cell_skips(Src* src, Buf* B, i64 c) noexcept nogil:
    """Mark in ``B.skip`` the terms of outer cell ``c`` that no output point can come from. With
    cover bitsets, term ``v`` is skipped when a term ``u < v`` with the same base slot has, in
    every slot, a cell covering ``v``'s (every point weakly dominated). Each point of ``v`` is
    then weakly dominated by a point of ``u``, as the kernel sums them (same slots in the same
    order, and rounding is monotone), and ``u``'s lists come first, so a tie keeps ``u``'s
    point: the cell's frontier, provenance included, is the same without ``v``. With
    ``src.slack``, the terms that another one strictly dominates go too (:func:`_slack_skips`).
    Returns -1 when the buffers cannot be had."""
    cdef i64 U = src.U, W = src.W, u, w, cell, size, best
    cdef int s, b
    cdef uint64_t x
    cdef const uint64_t* rowbits[MAXS]
    cdef uint64_t group[MAXS * _COVER_WORDS]  # per base slot, its terms (W <= _COVER_WORDS)
    if B.skip == NULL:
        B.skip = <uint64_t*> malloc(W * sizeof(uint64_t))
        B.term_base = <int*> malloc(U * sizeof(int))
        if B.skip == NULL or B.term_base == NULL:
            return -1
    if src.slack and B.term_lo == NULL:
        B.term_lo = <i64*> malloc(U * src.S * sizeof(i64))
        B.term_n = <i64*> malloc(U * src.S * sizeof(i64))
        B.term_sum = <double*> malloc(3 * U * src.S * sizeof(double))
        if B.term_lo == NULL or B.term_n == NULL or B.term_sum == NULL:
            return -1
    for w in range(MAXS * W):
        group[w] = 0
    for u in range(U):  # the kernel's base: the first slot of the largest cell
        best = -1
        b = 0
        for s in range(src.S):
            cell = src.outer_row[s * src.n_rows + c] + src.outer_col[s * U + u]
            size = src.offs[s][cell + 1] - src.offs[s][cell]
            if src.slack:
                _summarise(src, B, u * src.S + s, s, src.offs[s][cell], size)
            if size > best:
                best = size
                b = s
        B.term_base[u] = b
        group[b * W + (u >> 6)] |= (<uint64_t> 1) << (u & 63)
    for w in range(W):
        B.skip[w] = 0
    if src.cover[0] != NULL:
        for s in range(src.S):
            rowbits[s] = src.cover[s] + src.row_index[s][c] * U * W
        for u in range(U):
            if (B.skip[u >> 6] >> (u & 63)) & 1:
                continue  # what a covered term covers, the term covering it does too (same base)
            b = B.term_base[u]
            for w in range(u >> 6, W):
                x = group[b * W + w]
                for s in range(src.S):
                    x &= rowbits[s][u * W + w]
                if w == (u >> 6):
                    x &= ~((((<uint64_t> 1) << (u & 63)) << 1) - 1)  # only later terms
                B.skip[w] |= x
    if src.slack and _slack_skips(src, B, c) != 0:
        return -1
    return 0


#: Margin, relative to the summed magnitudes of the times compared, by which a term must beat
#: another to skip it (:func:`_slack_skips`): it exceeds the rounding of the kernel's sums of at
#: most ``MAXS`` slots (under ``MAXS * 2**-53`` of those magnitudes) and of the slacks' own
#: differences and sums many times over, so a skipped point is beaten in the kernel's arithmetic
#: too, and never tied.
cdef double _SLACK_MARGIN = 2.0 ** -44


cdef inline double _slack(const double* m, const double* t, i64 pv, i64 nv, i64 pu, i64 nu,
                          double allow) noexcept nogil:
    """The least delay ``d`` such that every point of frontier ``pv .. pv+nv`` is weakly
    dominated by a point of frontier ``pu .. pu+nu`` shifted ``d`` later (both memory ascending,
    time descending; ``inf`` where the first has a point of less memory than any of the
    second's); stops early with a value ``>= allow`` once it gets there."""
    cdef i64 j = pu, end = pu + nu, q
    cdef double worst = -INFINITY, d
    if m[pu] > m[pv]:
        return INFINITY
    for q in range(pv, pv + nv):
        while j + 1 < end and m[j + 1] <= m[q]:
            j += 1
        d = t[j] - t[q]  # the fastest point of the second within this point's memory
        if d > worst:
            worst = d
            if worst >= allow:
                return worst
        elif d != d:
            return INFINITY
    return worst


cdef inline void _summarise(Src* src, Buf* B, i64 k, int s, i64 lo, i64 n) noexcept nogil:
    """Entry ``k`` (term x slot) of ``B.term_lo``, ``B.term_n`` and ``B.term_sum``: the cell of
    slot ``s`` at points ``lo .. lo+n``."""
    B.term_lo[k] = lo
    B.term_n[k] = n
    if n > 0:
        B.term_sum[3 * k] = src.mem[s][lo]
        B.term_sum[3 * k + 1] = src.tim[s][lo + n - 1]
        B.term_sum[3 * k + 2] = fabs(src.tim[s][lo]) + fabs(src.tim[s][lo + n - 1])


cdef inline bint _beats(Src* src, Buf* B, i64 v, i64 u, double** keep, char** exact) noexcept nogil:
    """Whether term ``u`` strictly dominates term ``v`` of the current cell (see
    :func:`_slack_skips`; ``keep`` and ``exact``: per slot, the delays kept for the cell's row
    class, or NULL), walking the cells only while the delays can still sum below the margin."""
    cdef i64 U = src.U, S = src.S, i = v * U + u, a, b, na, nb
    cdef int s, k, base = B.term_base[v]
    cdef double lb = 0.0, margin = 0.0, acc, d, allow
    cdef double bound[MAXS]
    cdef const double* tv = B.term_sum + 3 * v * S
    cdef const double* tu = B.term_sum + 3 * u * S
    for s in range(S):
        if B.term_n[u * S + s] <= 0 or tu[3 * s] > tv[3 * s]:
            return False
        bound[s] = tu[3 * s + 1] - tv[3 * s + 1]  # the fastest points' delay
        if keep[s] != NULL and keep[s][i] == keep[s][i]:
            bound[s] = keep[s][i]  # the delay, or a bound of it, met before
        lb += bound[s]
        margin += tu[3 * s + 2] + tv[3 * s + 2]
    margin *= _SLACK_MARGIN
    if not lb < -margin:
        return False
    acc = lb
    for k in range(S):
        s = k + (k >= base) if k < S - 1 else base  # the base slot, of the largest cells, last
        acc -= bound[s]  # this slot's bound, replaced by its delay
        allow = -margin - acc
        if keep[s] != NULL and keep[s][i] == keep[s][i] and (exact[s][i] or keep[s][i] >= allow):
            d = keep[s][i]
        else:
            a = B.term_lo[u * S + s]
            na = B.term_n[u * S + s]
            b = B.term_lo[v * S + s]
            nb = B.term_n[v * S + s]
            d = _slack(src.mem[s], src.tim[s], b, nb, a, na, allow)
            if keep[s] != NULL:
                keep[s][i] = d
                exact[s][i] = d < allow
        acc += d
        if not acc < -margin:
            return False
    return True


cdef int _slack_skips(Src* src, Buf* B, i64 c) noexcept nogil:
    """Mark in ``B.skip`` (``B.term_*`` set by :func:`_cell_skips` for output cell ``c``) the
    terms ``v`` that another term ``u`` of the same base slot strictly dominates: in each slot
    ``s``, every point of ``v``'s cell is weakly dominated by a point of ``u``'s delayed by
    ``d_s`` (:func:`_slack`), and the delays sum below ``-margin``. Each point of ``v`` is then
    beaten in time, at no more memory, by a sum of ``u``'s points, so it is on no frontier and
    ties none; where ``u`` is skipped too, what beats ``u``'s points beats ``v``'s (the delays
    add up, and no term beats itself), so every skipped point is beaten by a point of a term the
    kernel visits. ``u``'s fastest points bound each ``d_s`` from below, and ``v``'s least
    memory must be within ``u``'s: most pairs fail there; the rest are walked slot by slot, the
    base slot (the largest cells) last, only while the delays can still sum below
    ``-margin``. Returns -1 when a buffer cannot be had."""
    cdef i64 U = src.U, S = src.S, u, v, r, i, n
    cdef int s
    cdef double* keep[MAXS]
    cdef char* exact[MAXS]
    for s in range(S):  # the delays kept of each slot with row classes: the pairs of this cell's class
        keep[s] = NULL
        exact[s] = NULL
        if src.delay_class[s] == NULL:
            continue
        if B.delay[s] == NULL:
            n = src.delay_classes[s] * U * U
            B.delay[s] = <double*> malloc(n * sizeof(double))
            B.delay_exact[s] = <char*> malloc(n * sizeof(char))
            if B.delay[s] == NULL or B.delay_exact[s] == NULL:
                return -1
            for i in range(n):
                B.delay[s][i] = NAN
        r = src.delay_class[s][c] * U * U
        keep[s] = B.delay[s] + r
        exact[s] = B.delay_exact[s] + r
    for v in range(U):
        if (B.skip[v >> 6] >> (v & 63)) & 1:
            continue
        for s in range(S):
            if B.term_n[v * S + s] <= 0:
                break  # an empty term adds nothing: the kernel passes it at once
        else:
            for u in range(U):
                if u != v and B.term_base[u] == B.term_base[v] and _beats(src, B, v, u, keep, exact):
                    B.skip[v >> 6] |= (<uint64_t> 1) << (v & 63)
                    break
    return 0


cdef inline bint _skipped(Src* src, Buf* B, i64 c, i64 t) noexcept nogil:
    """Whether ``_cell_skips`` marked term ``t`` of cell ``c``."""
    cdef i64 u = t - src.term_off[c]
    return src.W > 0 and (B.skip[u >> 6] >> (u & 63)) & 1


cdef void _filter_start(Src* src, Buf* B, i64 c) noexcept nogil:
    """Turn the dominance filter on for cell ``c`` (empty, its buckets spanning the memories of
    its terms) when it has ``_FILTER_MIN_TERMS`` terms or more, of at least
    ``_FILTER_MIN_POINTS`` candidate points in all, and ``_FILTER_MIN_TERM_POINTS`` points and
    ``_FILTER_MIN_LISTS`` lists per term."""
    cdef i64 t, k, lo, sz, terms = src.term_off[c + 1] - src.term_off[c]
    cdef i64 ocells[MAXS]
    cdef const i64* cells
    cdef double mlo = INFINITY, mhi = -INFINITY, least, most, prod, points = 0.0, lists = 0.0
    cdef i64 largest
    cdef int s
    for t in range(src.term_off[c], src.term_off[c + 1]):
        if _skipped(src, B, c, t):
            continue
        cells = _term_cells(src, c, t, ocells)
        least = 0.0
        most = 0.0
        prod = 1.0
        largest = 1
        for s in range(src.S):
            if cells[s] < 0:
                continue
            lo = src.offs[s][cells[s]]
            sz = src.offs[s][cells[s] + 1] - lo
            if sz <= 0:
                prod = 0.0
                break
            least += src.mem[s][lo]
            most += src.mem[s][lo + sz - 1]
            prod *= sz
            if sz > largest:
                largest = sz
        if prod > 0.0:
            points += prod
            lists += prod / largest
            if least < mlo:
                mlo = least
            if most > mhi:
                mhi = most
    if (terms < _FILTER_MIN_TERMS or points < _FILTER_MIN_POINTS or points < _FILTER_MIN_TERM_POINTS * terms
            or lists < _FILTER_MIN_LISTS * terms or not mhi > mlo):
        return
    if B.below == NULL:
        B.below = <double*> malloc(_BUCKETS * sizeof(double))
        if B.below == NULL:  # the filter only saves work: go without it
            return
    for k in range(_BUCKETS):
        B.below[k] = INFINITY
    B.buckets_lo = mlo
    B.buckets_inv = _BUCKETS / (mhi - mlo)
    B.buckets_stale = False
    B.buckets_credit = 0
    B.filter_on = True


cdef int _process(Src* src, i64 c0, i64 c1, Buf* B, i64* counts, i64 stair_limit) noexcept nogil:
    """Fill ``B`` with the reduced (and thinned) frontier of cells ``c0 .. c1-1``.
    ``stair_limit``: merge a cell's lists one by one while its frontier stays within this
    many points and the work within ``HEAP_WORK_FACTOR`` times the heap's (-1: always), else
    (0: never) with the heap."""
    cdef int S = src.S
    cdef int s, base, rc
    cdef i64 c, t, nl, nl0, hn, start, w, i, lo_, hi_, mid, li, g, n, first
    cdef i64 lo[MAXS]
    cdef i64 sz[MAXS]
    cdef i64 idx[MAXS]
    cdef i64 ocells[MAXS]
    cdef i64 bsize
    cdef const i64* cells
    cdef Lst* l
    cdef double sm, st, m, tt, best, lim
    cdef bint ok, done, stair
    cdef i64 stair_state[3]
    cdef const double* btim
    for c in range(c0, c1):
        nl = 0
        stair = stair_limit != 0
        stair_state[0] = 0
        stair_state[1] = 0
        stair_state[2] = 0
        B.hint_lo = -1
        B.filter_on = False
        if src.W > 0 and _cell_skips(src, B, c) != 0:
            B.err = 1
            return -1
        if stair and src.filter_cells:
            _filter_start(src, B, c)
        for t in range(src.term_off[c], src.term_off[c + 1]):
            if _skipped(src, B, c, t):
                continue
            cells = _term_cells(src, c, t, ocells)
            base = -1
            bsize = -1
            ok = True
            for s in range(S):
                if cells[s] < 0:
                    sz[s] = 0
                    continue
                lo[s] = src.offs[s][cells[s]]
                sz[s] = src.offs[s][cells[s] + 1] - lo[s]
                if sz[s] <= 0:
                    ok = False
                    break
                if sz[s] > bsize:
                    bsize = sz[s]
                    base = s
            if not ok or base < 0:
                continue
            if stair and stair_state[0] > 0:
                # the whole term is dominated when its ideal corner is: summed like its lists'
                # points (base last), from each cell's least memory and least time (rounding is
                # monotone, so no point of the term falls below the corner)
                sm = 0.0
                st = 0.0
                for s in range(S):
                    if s != base and cells[s] >= 0:
                        sm = sm + src.mem[s][lo[s]]
                        st = st + src.tim[s][lo[s] + sz[s] - 1]
                if _dominated(B.sa, stair_state[0], src.mem[base][lo[base]] + sm,
                              src.tim[base][lo[base] + sz[base] - 1] + st):
                    continue
            for s in range(S):
                idx[s] = 0
            nl0 = nl
            while True:
                if nl >= B.lcap:
                    if _grow_lists(B, nl + 1) != 0:
                        B.err = 1
                        return -1
                l = &B.lists[nl]
                l.base = base
                l.end = lo[base] + sz[base]
                sm = 0.0
                st = 0.0
                for s in range(S):
                    if s == base or cells[s] < 0:
                        l.fixed[s] = -1
                    else:
                        g = lo[s] + idx[s]
                        l.fixed[s] = g
                        sm = sm + src.mem[s][g]
                        st = st + src.tim[s][g]
                l.sm = sm
                l.st = st
                first = lo[base]
                if B.filter_on and stair and stair_state[0] > 0:
                    # a list the filter drops is never built (its points cannot be kept, in the
                    # heap merge either): the points before ``first`` are dominated
                    first = _filtered_from(B, stair_state[0], src.mem[base], src.tim[base], sm, st, first, l.end)
                if first < l.end:
                    l.pos = _settle(src.mem[base], src.tim[base], sm, st, first, l.end)
                    l.hm = src.mem[base][l.pos] + sm
                    l.ht = src.tim[base][l.pos] + st
                    nl += 1
                done = True
                for s in range(S):
                    if s == base or cells[s] < 0:
                        continue
                    idx[s] += 1
                    if idx[s] < sz[s]:
                        done = False
                        break
                    idx[s] = 0
                if done:
                    break
            nl = _prune_shifts(B, nl0, nl)
            if stair:
                rc = _stair_add(src, B, nl0, nl, stair_state, stair_limit if stair_limit > 0 else INT64_MAX,
                                stair_limit > 0)
                if rc < 0:
                    B.err = 1
                    return -1
                stair = rc == 0
        start = B.n
        if stair:
            if _stair_output(src, B, stair_state[0]) != 0:
                B.err = 1
                return -1
            nl = 0  # merged: nothing is left for the heap
        # k-way merge + reduce
        for i in range(nl):
            B.heap[i].m = B.lists[i].hm
            B.heap[i].t = B.lists[i].ht
            B.heap[i].li = i
        hn = nl
        i = hn // 2 - 1
        while i >= 0:
            _sift_down(B.heap, hn, i)
            i -= 1
        best = INFINITY
        while hn > 0:
            li = B.heap[0].li
            l = &B.lists[li]
            m = B.heap[0].m
            tt = B.heap[0].t
            base = l.base
            if tt < best:
                if B.n > start and B.om[B.n - 1] == m:
                    w = B.n - 1
                else:
                    if B.n >= B.ocap:
                        if _grow_out(B, B.n + 1, S) != 0:
                            B.err = 1
                            return -1
                    w = B.n
                    B.n += 1
                B.om[w] = m
                B.ot[w] = tt
                for s in range(S):
                    if s == base:
                        B.op[w * S + s] = l.pos
                    else:
                        B.op[w * S + s] = l.fixed[s]
                best = tt
                l.pos += 1
            btim = src.tim[base]
            if l.pos < l.end and btim[l.end - 1] + l.st < best:
                # galloping search for the first point with time < best (usually l.pos)
                lo_ = l.pos
                if btim[lo_] + l.st < best:
                    hi_ = lo_
                else:
                    mid = 1
                    hi_ = lo_ + 1
                    while hi_ < l.end - 1 and btim[hi_] + l.st >= best:
                        lo_ = hi_ + 1
                        mid *= 2
                        hi_ = hi_ + mid
                    if hi_ > l.end - 1:
                        hi_ = l.end - 1
                while lo_ < hi_:
                    mid = (lo_ + hi_) // 2
                    if btim[mid] + l.st < best:
                        hi_ = mid
                    else:
                        lo_ = mid + 1
                lo_ = _settle(src.mem[base], btim, l.sm, l.st, lo_, l.end)
                l.pos = lo_
                B.heap[0].m = src.mem[base][lo_] + l.sm
                B.heap[0].t = btim[lo_] + l.st
                _sift_down(B.heap, hn, 0)
            else:
                hn -= 1
                if hn > 0:
                    B.heap[0] = B.heap[hn]
                    _sift_down(B.heap, hn, 0)
        n = B.n - start
        if src.eps > 0.0 and n > 1:
            # epsilon thinning, scanning from the min-time end: drop a point when the last
            # kept point (lower time) has memory <= (1 + eps) * its memory; the min-memory
            # point stays, so the least memory of a cell is exact (and of the run)
            w = start + n - 1
            i = start + n - 2
            while i >= start:
                lim = (1.0 + src.eps) * B.om[i]
                if B.om[w] > lim or i == start:
                    w -= 1
                    if w != i:
                        B.om[w] = B.om[i]
                        B.ot[w] = B.ot[i]
                        memcpy(&B.op[w * S], &B.op[i * S], S * sizeof(i64))
                i -= 1
            if w > start:
                n = start + n - w
                memmove(&B.om[start], &B.om[w], n * sizeof(double))
                memmove(&B.ot[start], &B.ot[w], n * sizeof(double))
                memmove(&B.op[start * S], &B.op[w * S], n * S * sizeof(i64))
                B.n = start + n
        counts[c - c0] = B.n - start
    return 0


cdef class _Worker:
    cdef Src src
    cdef Buf buf
    cdef i64 c0
    cdef i64 c1
    cdef i64 stair_limit
    cdef object counts

    def __cinit__(self):
        self.buf.lists = NULL
        self.buf.sa = NULL
        self.buf.sb = NULL
        self.buf.scap = 0
        self.buf.heap = NULL
        self.buf.ord = NULL
        self.buf.keep = NULL
        self.buf.om = NULL
        self.buf.ot = NULL
        self.buf.op = NULL
        self.buf.lcap = 0
        self.buf.ocap = 0
        self.buf.n = 0
        self.buf.err = 0
        self.buf.used = NULL
        self.buf.budget = -1
        self.buf.over = False
        self.buf.wanted = 0
        self.buf.below = NULL
        self.buf.filter_on = False
        self.buf.skip = NULL
        self.buf.term_base = NULL
        self.buf.term_lo = NULL
        self.buf.term_n = NULL
        self.buf.term_sum = NULL
        for s in range(MAXS):
            self.buf.delay[s] = NULL
            self.buf.delay_exact[s] = NULL

    def __dealloc__(self):
        free(self.buf.lists)
        free(self.buf.sa)
        free(self.buf.sb)
        free(self.buf.ord)
        free(self.buf.keep)
        free(self.buf.heap)
        free(self.buf.om)
        free(self.buf.ot)
        free(self.buf.op)
        free(self.buf.below)
        free(self.buf.skip)
        free(self.buf.term_base)
        free(self.buf.term_lo)
        free(self.buf.term_n)
        free(self.buf.term_sum)
        for s in range(MAXS):
            free(self.buf.delay[s])
            free(self.buf.delay_exact[s])

    def run(self):
        cdef i64* cnt = <i64*> cnp.PyArray_DATA(self.counts)
        cdef int rc
        with nogil:
            rc = _process(&self.src, self.c0, self.c1, &self.buf, cnt, self.stair_limit)
        if rc != 0:
            if self.buf.over:
                raise KernelBudgetExceeded(self.buf.budget, self.buf.wanted)
            raise MemoryError("combine kernel: out of memory")
        return self.buf.n


def _require_c(arr, dtype, what):
    """Refuse an array the kernel would misread through its raw pointer."""
    want = f"combine kernel: {what} must be a C-contiguous {np.dtype(dtype).name} ndarray"
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{want}, got {type(arr).__name__}")
    if arr.dtype != dtype or not arr.flags.c_contiguous:
        raise ValueError(f"{want}, got {arr.dtype} {'C-contiguous' if arr.flags.c_contiguous else 'strided'}")


def _filter_worth_it(list offs, cnp.ndarray term_off):
    """Whether the cells' terms are large enough, from the mean points per cell of each slot,
    for the dominance filter to pay for its setup."""
    cdef double per_term = 1.0, largest = 1.0, size
    for o in offs:
        size = o[o.shape[0] - 1] / max(o.shape[0] - 1, 1)
        per_term *= size
        largest = max(largest, size)
    terms = term_off[term_off.shape[0] - 1] / max(term_off.shape[0] - 1, 1)
    return (terms >= _FILTER_MIN_TERMS and per_term >= _FILTER_MIN_TERM_POINTS and per_term / largest >= _FILTER_MIN_LISTS
            and per_term * terms >= _FILTER_MIN_POINTS)


def cover_bitsets(cnp.ndarray offs, cnp.ndarray mem, cnp.ndarray tim, cnp.ndarray rows, cnp.ndarray col):
    """``bits[r, u]``, ``ceil(U / 64)`` words: bit ``v`` is set when cell ``rows[r] + col[u]`` of
    the table ``(offs, mem, tim)`` covers cell ``rows[r] + col[v]`` (every point of the second
    weakly dominated by a point of the first; ``v != u``). Only dtypes and layout are checked
    (C-contiguous int64 / float64): the caller vouches that the sums are cells of the table."""
    _require_c(offs, np.int64, "offsets")
    _require_c(mem, np.float64, "memory")
    _require_c(tim, np.float64, "time")
    _require_c(rows, np.int64, "rows")
    _require_c(col, np.int64, "col")
    cdef i64 R = rows.shape[0], U = col.shape[0], W = (U + 63) // 64, r, u, v, a
    out = np.zeros((R, U, W), dtype=np.uint64)
    cdef uint64_t* bits = <uint64_t*> cnp.PyArray_DATA(out)
    cdef const i64* o = <const i64*> cnp.PyArray_DATA(offs)
    cdef const double* m = <const double*> cnp.PyArray_DATA(mem)
    cdef const double* t = <const double*> cnp.PyArray_DATA(tim)
    cdef const i64* rv = <const i64*> cnp.PyArray_DATA(rows)
    cdef const i64* cl = <const i64*> cnp.PyArray_DATA(col)
    # per row value, each term's cell: start, size and its corner (least memory, least time),
    # which a covering cell must weakly dominate (most pairs fail there)
    starts = np.empty(U, dtype=np.int64)
    sizes = np.empty(U, dtype=np.int64)
    corners = np.empty((U, 2), dtype=np.float64)
    cdef i64* st = <i64*> cnp.PyArray_DATA(starts)
    cdef i64* sz = <i64*> cnp.PyArray_DATA(sizes)
    cdef double* cn = <double*> cnp.PyArray_DATA(corners)
    cdef double cm, ct
    with nogil:
        for r in range(R):
            for u in range(U):
                a = rv[r] + cl[u]
                st[u] = o[a]
                sz[u] = o[a + 1] - o[a]
                cn[2 * u] = m[o[a]] if sz[u] > 0 else INFINITY
                cn[2 * u + 1] = t[o[a + 1] - 1] if sz[u] > 0 else INFINITY
            for u in range(U):
                cm = cn[2 * u]
                ct = cn[2 * u + 1]
                for v in range(U):
                    if (v != u and (sz[v] == 0 or (cm <= cn[2 * v] and ct <= cn[2 * v + 1]))
                            and _covers(m, t, st[u], sz[u], st[v], sz[v])):
                        bits[(r * U + u) * W + (v >> 6)] |= (<uint64_t> 1) << (v & 63)
    return out


cdef int _point_at_covers(Src* src, object covers) except -1:
    """Point ``src`` (its slots, ``U`` and ``n_rows`` set) at ``covers``: per slot, cover bitsets
    (uint64, shape ``(R, U, W)``) and each output cell's row index (int64, ``n_rows``), checked
    as the kernel would read them; ``U <= 512``. The caller keeps the arrays alive."""
    cdef int s
    cdef cnp.ndarray arr
    if src.U > MAX_COVER_TERMS or len(covers[0]) != src.S or len(covers[1]) != src.S:
        raise ValueError(f"combine kernel: covers need U <= {MAX_COVER_TERMS} and one bitset and row index per slot")
    src.W = (src.U + 63) // 64
    for s in range(src.S):
        arr = covers[0][s]
        _require_c(arr, np.uint64, "cover bitsets")
        if arr.ndim != 3 or arr.shape[1] != src.U or arr.shape[2] != src.W:
            raise ValueError(f"combine kernel: cover bitsets of slot {s} must have shape (R, {src.U}, {src.W})")
        src.cover[s] = <const uint64_t*> cnp.PyArray_DATA(arr)
        arr = covers[1][s]
        _require_c(arr, np.int64, "cover row index")
        if arr.ndim != 1 or arr.shape[0] != src.n_rows:
            raise ValueError(f"combine kernel: cover row index of slot {s} must have {src.n_rows} entries")
        src.row_index[s] = <const i64*> cnp.PyArray_DATA(arr)
    return 0


cdef int _point_at_slack(Src* src, object slack) except -1:
    """Point ``src`` at ``slack`` (see :func:`combine_kernel`), checked as the kernel reads it."""
    cdef int s
    cdef cnp.ndarray arr
    src.slack = slack is not None
    for s in range(MAXS):
        src.delay_class[s] = NULL
        src.delay_classes[s] = 0
    if slack is None:
        return 0
    if src.outer_row == NULL or src.U > MAX_COVER_TERMS or len(slack) != src.S:
        raise ValueError(f"combine kernel: slack needs outer terms, at most {MAX_COVER_TERMS} per cell, and an "
                         "entry per slot")
    src.W = (src.U + 63) // 64
    for s in range(src.S):
        if slack[s] is None:
            continue
        arr = slack[s]
        _require_c(arr, np.int64, "delay classes")
        if arr.ndim != 1 or arr.shape[0] != src.n_rows or (src.n_rows and arr.min() < 0):
            raise ValueError(f"combine kernel: the delay classes of slot {s} must be {src.n_rows} non-negative ints")
        src.delay_class[s] = <const i64*> cnp.PyArray_DATA(arr)
        src.delay_classes[s] = arr.max() + 1 if src.n_rows else 0
    return 0


def _run_workers(list workers, object executor):
    """Run every worker (on ``executor`` when there are several); every one finishes before
    anything is raised: they read the inputs and count into the call's ``used``, which the
    caller may free once this returns."""
    if executor is None or len(workers) <= 1:
        for wk in workers:
            wk.run()
        return
    futures = [executor.submit(wk.run) for wk in workers]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


def combine_kernel(list offs, list mems, list tims, cnp.ndarray term_off, object term_cells,
                   double eps, object chunk_bounds, object executor=None, i64 stair_limit=STAIR_LIMIT,
                   object outer=None, i64 max_bytes=-1, bint prov32=False, object covers=None,
                   object slack=None):
    """Run the combine kernel (no validation: call it through ``kernels.combine_ragged``).

    Parameters
    ----------
    offs, mems, tims : list of ndarray
        Per parent slot: CSR offsets (int64), memory and time (float64), C-contiguous.
    term_off : ndarray of int64, shape (n_out + 1,)
    term_cells : ndarray of int64, shape (n_terms, S), or None with ``outer``
    eps : float
        Epsilon-thinning factor (0 = exact reduce).
    chunk_bounds : sequence of int
        Cell boundaries ``0 = b0 < b1 < ... = n_out`` of the independent work chunks.
    executor : concurrent.futures.Executor or None
        Runs the chunks in parallel (the kernel releases the GIL).
    stair_limit : int
        A cell's lists are merged one by one into its frontier while that stays within this
        many points and the merging within ``HEAP_WORK_FACTOR`` times the heap's estimated
        comparisons, else by a heap (the result is the same); -1: always one by one, 0: always
        the heap (tests compare both with the reference).
    outer : None or (row, col)
        Terms given as sums instead of ``term_cells``: int64 arrays ``row`` (S, n_out) and
        ``col`` (S, U), C-contiguous; every cell has ``U`` terms (``term_off = U * arange``)
        and term ``u`` of cell ``c`` takes cell ``row[s, c] + col[s, u]`` of slot ``s``
        (node eliminations' terms have this form: they need not be written out).
    max_bytes : int
        Most bytes the workers' buffers may hold together (the output arrays are filled as
        the buffers are freed); -1: no limit. Past it, :class:`KernelBudgetExceeded`.
    prov32 : bool
        Return the provenance as int32 (the caller vouches that every parent has fewer than
        2**31 points): half the bytes, converted while the buffers are copied out.
    covers : None or (bitsets, row_index)
        With ``outer``: per slot, :func:`cover_bitsets` of its distinct row values and the
        index of each output cell's row among them (int64, n_out); the terms they prove
        covered are skipped (``U <= 512``). The result is the same without them.
    slack : None or list
        With ``outer`` (``U <= 512``): skip the terms another term of the same base slot
        strictly dominates (``_slack_skips``: per slot, every point of the cell weakly dominated
        by a point of the other's delayed by some time, the delays summing below zero by a
        margin). Per slot, None or the class of each output cell's row (int64, n_out): the
        delays between the terms' cells are kept per class (``classes * U * U`` doubles per
        worker), so that each pair is walked once. The result is the same without it.

    Returns
    -------
    offsets, memory, time, prov
    """
    cdef int S = len(offs)
    cdef int s
    cdef Src src
    cdef _Worker wk
    cdef i64 k, tot, pos, nb
    if S < 1 or S > MAXS:
        raise ValueError(f"combine kernel supports 1..{MAXS} slots, got {S}")
    # the kernel reads raw pointers: an array of another dtype or layout would be misread
    for s in range(S):
        _require_c(offs[s], np.int64, "offsets")
        _require_c(mems[s], np.float64, "memory")
        _require_c(tims[s], np.float64, "time")
    _require_c(term_off, np.int64, "term_off")
    if outer is None:
        _require_c(term_cells, np.int64, "term_cells")
    else:
        for arr in outer:
            _require_c(arr, np.int64, "outer terms")
    src.S = S
    for s in range(S):
        src.offs[s] = <const i64*> cnp.PyArray_DATA(offs[s])
        src.mem[s] = <const double*> cnp.PyArray_DATA(mems[s])
        src.tim[s] = <const double*> cnp.PyArray_DATA(tims[s])
    cdef cnp.ndarray row, col
    src.term_off = <const i64*> cnp.PyArray_DATA(term_off)
    n_out = term_off.shape[0] - 1
    src.term_cells = NULL
    src.outer_row = NULL
    src.outer_col = NULL
    if outer is None:
        src.term_cells = <const i64*> cnp.PyArray_DATA(term_cells)
    else:
        row, col = outer
        src.outer_row = <const i64*> cnp.PyArray_DATA(row)
        src.outer_col = <const i64*> cnp.PyArray_DATA(col)
        src.n_rows = row.shape[1]
        src.U = col.shape[1]
    src.eps = eps
    src.filter_cells = _filter_worth_it(offs, term_off)
    for s in range(MAXS):
        src.cover[s] = NULL
        src.row_index[s] = NULL
    src.W = 0
    if covers is not None:
        if outer is None:
            raise ValueError("combine kernel: covers need outer terms")
        _point_at_covers(&src, covers)
    _point_at_slack(&src, slack)
    used = np.zeros(1, dtype=np.int64)
    cdef i64* used_p = <i64*> cnp.PyArray_DATA(used)
    workers = []
    bounds = list(chunk_bounds)
    for k in range(len(bounds) - 1):
        if bounds[k + 1] <= bounds[k]:
            continue
        wk = _Worker()
        wk.src = src
        wk.c0 = bounds[k]
        wk.c1 = bounds[k + 1]
        wk.stair_limit = stair_limit
        wk.buf.used = used_p
        wk.buf.budget = max_bytes
        wk.counts = np.zeros(bounds[k + 1] - bounds[k], dtype=np.int64)
        workers.append(wk)
    _run_workers(workers, executor)
    tot = 0
    for wk in workers:
        tot += wk.buf.n
    out_m = np.empty(tot, dtype=np.float64)
    out_t = np.empty(tot, dtype=np.float64)
    out_p = np.empty((tot, S), dtype=np.int32 if prov32 else np.int64)
    counts = np.zeros(n_out + 1, dtype=np.int64)
    cdef double* pm = <double*> cnp.PyArray_DATA(out_m)
    cdef double* pt = <double*> cnp.PyArray_DATA(out_t)
    cdef i64* pp = <i64*> cnp.PyArray_DATA(out_p)
    cdef cnp.int32_t* pp32 = <cnp.int32_t*> cnp.PyArray_DATA(out_p)
    pos = 0
    for wk in workers:
        nb = wk.buf.n
        if nb > 0:
            memcpy(pm + pos, wk.buf.om, nb * sizeof(double))
            memcpy(pt + pos, wk.buf.ot, nb * sizeof(double))
            if prov32:
                for k in range(nb * S):
                    pp32[pos * S + k] = <cnp.int32_t> wk.buf.op[k]
            else:
                memcpy(pp + pos * S, wk.buf.op, nb * S * sizeof(i64))
        pos += nb
        # the output arrays fill as the workers' buffers go: the call never holds both in full
        free(wk.buf.om)
        free(wk.buf.ot)
        free(wk.buf.op)
        wk.buf.om = NULL
        wk.buf.ot = NULL
        wk.buf.op = NULL
        counts[wk.c0 + 1: wk.c1 + 1] = wk.counts
    offsets = np.cumsum(counts)
    return offsets, out_m, out_t, out_p


def outer_skip_mask(list offs, list mems, list tims, cnp.ndarray row, cnp.ndarray col, object covers,
                    object slack=None):
    """``(n_out, U)`` bool: the terms :func:`combine_kernel` skips given ``covers`` (None: no
    bitsets) and ``slack`` (as ``_cell_skips`` marks them; for tests against the reference)."""
    cdef Src src
    cdef _Worker wk = _Worker()
    cdef int S = len(offs), s
    cdef i64 c, u, n_out = row.shape[1], U = col.shape[1]
    for s in range(S):
        _require_c(offs[s], np.int64, "offsets")
        _require_c(mems[s], np.float64, "memory")
        _require_c(tims[s], np.float64, "time")
        src.offs[s] = <const i64*> cnp.PyArray_DATA(offs[s])
        src.mem[s] = <const double*> cnp.PyArray_DATA(mems[s])
        src.tim[s] = <const double*> cnp.PyArray_DATA(tims[s])
        src.cover[s] = NULL
    _require_c(row, np.int64, "outer terms")
    _require_c(col, np.int64, "outer terms")
    src.S = S
    src.outer_row = <const i64*> cnp.PyArray_DATA(row)
    src.outer_col = <const i64*> cnp.PyArray_DATA(col)
    src.n_rows = n_out
    src.U = U
    src.W = 0
    if covers is not None:
        _point_at_covers(&src, covers)
    _point_at_slack(&src, slack)
    out = np.zeros((n_out, U), dtype=bool)
    if src.W == 0:
        return out
    for c in range(n_out):
        if _cell_skips(&src, &wk.buf, c) != 0:
            raise MemoryError("outer_skip_mask: out of memory")
        for u in range(U):
            out[c, u] = (wk.buf.skip[u >> 6] >> (u & 63)) & 1
    return out


# ---- the sweep: outer terms whose slots but the first hold one point of one memory --------
#
# A node elimination's terms often sum one multi-point cell of the first slot (chosen by the
# output cell's row of that slot and the term) with single points of the other slots (the
# node's own cost and an edge to a neighbour not yet eliminated), whose memory does not
# depend on the output cell. Every output cell of a *group* (one row value of the first
# slot) then sees the same points in the same memory order, each shifted in time only. One
# pass over them in (memory, term, point) order, keeping per output cell the least time so
# far, yields the reduced union of every cell of the group at once: the same points and
# provenance as the general kernel (which visits them in (memory, time, list) order and keeps
# a point when it beats every earlier time; ties go to the earlier term and point).

cdef struct Sweep:
    int S
    const i64* offs[MAXS]
    const double* mem[MAXS]
    const double* tim[MAXS]
    const i64* row
    const i64* col
    i64 n_out
    i64 U
    const i64* cells  # output cells ordered by group
    const i64* group_off
    int multi  # the slot of many points per cell: the first or the last
    int n_fixed  # with multi 0: slots 1 .. n_fixed have the same row for every output cell
    double eps


cdef struct SweepPoints:
    # points of a sweep: memory, time, term and point of the multi-point slot
    double* m
    double* t
    i64* u
    i64* g
    i64 cap
    i64 n


cdef struct SweepBuf:
    # per group: the shifts of every (term, cell) and each term's least one
    double* st
    double* sm
    double* min_st
    char* alt  # a one-point term summed onto slot 0 (its point's time is in its shifts)
    i64 tcap
    # per group: the best time so far of each cell, and its last record
    double* best
    i64* last
    i64 gcap
    # per group: the heap of the terms' next points
    HE* heap
    i64* pos
    i64 hcap
    # records of the group: point kept for a cell (overwritten at equal memory), and its cell
    SweepPoints rec
    i64* rj
    i64* count
    i64* place
    # the worker's output: thinned points of its cells, in its groups' order
    SweepPoints out
    i64* used
    i64 budget
    bint over
    i64 wanted
    int err


cdef int _sweep_reserve(SweepBuf* B, i64 cap, i64 need, i64 unit, i64* out) noexcept nogil:
    """:func:`_budgeted` for a sweep worker's buffers, into ``out[0]``; -1 (``B.over`` set)
    when refused."""
    out[0] = _budgeted(B.used, B.budget, &B.wanted, cap, need, 64, unit)
    if out[0] < 0:
        B.over = True
        return -1
    return 0


cdef int _sweep_grow(SweepBuf* B, SweepPoints* P, i64 need, i64** cells) noexcept nogil:
    """Room for ``need`` points in ``P`` (and their cells in ``cells[0]``, unless NULL)."""
    cdef i64 cap
    if need <= P.cap:
        return 0
    if _sweep_reserve(B, P.cap, need, 2 * sizeof(double) + (3 if cells != NULL else 2) * sizeof(i64), &cap) != 0:
        return -1
    if (_resize(<void**> &P.m, cap * sizeof(double)) or _resize(<void**> &P.t, cap * sizeof(double))
            or _resize(<void**> &P.u, cap * sizeof(i64)) or _resize(<void**> &P.g, cap * sizeof(i64))
            or (cells != NULL and _resize(<void**> cells, cap * sizeof(i64)))):
        return -1
    P.cap = cap
    return 0


cdef void _sweep_free(SweepPoints* P) noexcept nogil:
    free(P.m)
    free(P.t)
    free(P.u)
    free(P.g)


cdef int _sweep_grow_group(SweepBuf* B, i64 U, i64 G) noexcept nogil:
    """Room for the per-group arrays of ``U`` terms and ``G`` cells."""
    cdef i64 cap
    if U * G > B.tcap:
        if _sweep_reserve(B, B.tcap, U * G, sizeof(double), &cap) != 0:
            return -1
        if _resize(<void**> &B.st, cap * sizeof(double)):
            return -1
        B.tcap = cap
    if U > B.hcap:
        if _sweep_reserve(B, B.hcap, U, sizeof(HE) + sizeof(i64) + 2 * sizeof(double) + sizeof(char), &cap) != 0:
            return -1
        if (_resize(<void**> &B.heap, cap * sizeof(HE)) or _resize(<void**> &B.pos, cap * sizeof(i64))
                or _resize(<void**> &B.sm, cap * sizeof(double)) or _resize(<void**> &B.min_st, cap * sizeof(double))
                or _resize(<void**> &B.alt, cap * sizeof(char))):
            return -1
        B.hcap = cap
    if G > B.gcap:
        if _sweep_reserve(B, B.gcap, G, sizeof(double) + 3 * sizeof(i64), &cap) != 0:
            return -1
        if (_resize(<void**> &B.best, cap * sizeof(double)) or _resize(<void**> &B.last, cap * sizeof(i64))
                or _resize(<void**> &B.count, cap * sizeof(i64)) or _resize(<void**> &B.place, cap * sizeof(i64))):
            return -1
        B.gcap = cap
    return 0


cdef inline i64 _single_point(Sweep* src, int s, i64 c, i64 u) noexcept nogil:
    """The global index of the one point of slot ``s``'s cell for output cell ``c`` and term
    ``u``, or -1 where that cell is empty."""
    cdef i64 cell = src.row[s * src.n_out + c] + src.col[s * src.U + u]
    cdef i64 p0 = src.offs[s][cell]
    return p0 if src.offs[s][cell + 1] > p0 else -1


cdef int _sweep_group(Sweep* src, SweepBuf* B, i64 grp, i64* cell_start, i64* cell_count) noexcept nogil:
    """Reduce (and thin) every output cell of group ``grp``; append them to ``B``'s output."""
    cdef int S = src.S
    cdef int s
    cdef int ms = src.multi
    cdef i64 g0 = src.group_off[grp]
    cdef i64 G = src.group_off[grp + 1] - g0
    cdef const i64* cells = src.cells + g0
    cdef i64 U = src.U
    cdef i64 n_out = src.n_out
    cdef i64 u, j, c, cell, p0, lo, hi, hn, a, r, k, w, i, n, start
    cdef double sm, st, base_sm, base_st, m, t0, cand, most, lim
    cdef double* strow
    cdef double* best
    cdef i64* last
    cdef int hit
    cdef bint ok, any_ok, same_sm, alt
    cdef const double* mm = src.mem[ms]
    cdef const double* tm = src.tim[ms]
    cdef const i64* om = src.offs[ms]
    if _sweep_grow_group(B, U, G) != 0:
        return -1
    a = src.row[ms * n_out + cells[0]]  # the group's row of the multi-point slot
    # every term's shift towards each cell: the other slots' single points, summed in slot
    # order as the general kernel sums them onto its base slot's points. The base is the
    # multi-point slot where its cell is the largest, else (every cell one point) slot 0, and
    # the term is then one point (``alt``) summed in that order. Leading slots whose row is
    # the same for every cell are summed once per term.
    hn = 0
    for u in range(U):
        B.alt[u] = False
        r = a + src.col[ms * U + u]
        lo = om[r]
        hi = om[r + 1]
        if hi <= lo:
            continue
        alt = ms != 0 and hi - lo == 1
        base_sm = 0.0
        base_st = 0.0
        ok = True
        if not alt:
            for s in range(1, src.n_fixed + 1):
                cell = src.row[s * n_out + cells[0]] + src.col[s * U + u]
                p0 = src.offs[s][cell]
                if src.offs[s][cell + 1] <= p0:
                    ok = False
                    break
                base_sm = base_sm + src.mem[s][p0]
                base_st = base_st + src.tim[s][p0]
            if not ok:
                continue
        strow = B.st + u * G
        any_ok = False
        same_sm = True
        B.min_st[u] = INFINITY
        for j in range(G):
            c = cells[j]
            sm = base_sm
            st = base_st
            ok = True
            # alt: slots 1.. onto slot 0's point; else every slot but the multi-point one
            for s in range(1 if alt else (src.n_fixed + 1 if ms == 0 else 0), S):
                if s == ms:
                    if not alt:
                        continue
                    p0 = lo
                else:
                    p0 = _single_point(src, s, c, u)
                    if p0 < 0:
                        ok = False
                        break
                sm = sm + src.mem[s][p0]
                st = st + src.tim[s][p0]
            if ok and alt:
                p0 = _single_point(src, 0, c, u)
                if p0 < 0:
                    ok = False
                else:
                    sm = src.mem[0][p0] + sm
                    st = src.tim[0][p0] + st
            if not ok:
                strow[j] = INFINITY
                continue
            if any_ok and sm != B.sm[u]:
                same_sm = False
            B.sm[u] = sm
            any_ok = True
            strow[j] = st
            if st < B.min_st[u]:
                B.min_st[u] = st
        if not same_sm:
            B.err = 2  # the caller vouched for one memory per term
            return -1
        if not any_ok:
            continue
        B.alt[u] = alt
        B.pos[u] = lo
        B.heap[hn].m = B.sm[u] if alt else mm[lo] + B.sm[u]
        B.heap[hn].t = 0.0
        B.heap[hn].li = u
        hn += 1
    # the heap orders by (memory, term): with t fixed at 0, _less breaks ties by term
    i = hn // 2 - 1
    while i >= 0:
        _sift_down(B.heap, hn, i)
        i -= 1
    best = B.best
    last = B.last
    for j in range(G):
        best[j] = INFINITY
        last[j] = -1
    most = INFINITY  # the largest best time over the cells: a point slower than it helps none
    B.rec.n = 0
    while hn > 0:
        u = B.heap[0].li
        m = B.heap[0].m
        k = B.pos[u]
        t0 = 0.0 if B.alt[u] else tm[k]
        if t0 + B.min_st[u] < most:
            strow = B.st + u * G
            # a test of every cell first (branch-free, or four at a time): most points better none
            if _simd_scan:
                hit = _any_faster_avx2(strow, best, t0, G)
            else:
                hit = 0
                for j in range(G):
                    hit = hit | (t0 + strow[j] < best[j])
            if hit:
                for j in range(G):
                    cand = t0 + strow[j]
                    if cand < best[j]:
                        best[j] = cand
                        w = last[j]
                        if w < 0 or B.rec.m[w] != m:
                            if B.rec.n >= B.rec.cap and _sweep_grow(B, &B.rec, B.rec.n + 1, &B.rj) != 0:
                                return -1
                            w = B.rec.n
                            B.rec.n += 1
                            B.rj[w] = j
                            last[j] = w
                        B.rec.m[w] = m
                        B.rec.t[w] = cand
                        B.rec.u[w] = u
                        B.rec.g[w] = k
                most = best[0]
                for j in range(1, G):
                    if best[j] > most:
                        most = best[j]
        k += 1
        r = a + src.col[ms * U + u]
        if k < om[r + 1]:
            B.pos[u] = k
            B.heap[0].m = mm[k] + B.sm[u]
            _sift_down(B.heap, hn, 0)
        else:
            hn -= 1
            if hn > 0:
                B.heap[0] = B.heap[hn]
                _sift_down(B.heap, hn, 0)
    # the records by cell (each cell's in memory order), thinned as the kernel thins
    for j in range(G):
        B.count[j] = 0
    for i in range(B.rec.n):
        B.count[B.rj[i]] += 1
    if _sweep_grow(B, &B.out, B.out.n + B.rec.n, NULL) != 0:
        return -1
    start = B.out.n
    for j in range(G):
        B.place[j] = start
        start += B.count[j]
    for i in range(B.rec.n):
        j = B.rj[i]
        w = B.place[j]
        B.place[j] += 1
        B.out.m[w] = B.rec.m[i]
        B.out.t[w] = B.rec.t[i]
        B.out.u[w] = B.rec.u[i]
        B.out.g[w] = B.rec.g[i]
    start = B.out.n
    w = B.out.n  # where the next cell's kept points go
    for j in range(G):
        n = B.count[j]
        cell_start[cells[j]] = w
        if src.eps > 0.0 and n > 1:
            # from the min-time end: drop a point when the last kept one has memory <=
            # (1 + eps) * its memory; the min-memory point stays
            hi = start + n - 1
            i = start + n - 2
            k = hi  # the last kept point
            while i >= start:
                lim = (1.0 + src.eps) * B.out.m[i]
                if B.out.m[k] > lim or i == start:
                    k -= 1
                    B.out.m[k] = B.out.m[i]
                    B.out.t[k] = B.out.t[i]
                    B.out.u[k] = B.out.u[i]
                    B.out.g[k] = B.out.g[i]
                i -= 1
            n = start + n - k
            lo = k
        else:
            lo = start
        if w != lo:
            memmove(&B.out.m[w], &B.out.m[lo], n * sizeof(double))
            memmove(&B.out.t[w], &B.out.t[lo], n * sizeof(double))
            memmove(&B.out.u[w], &B.out.u[lo], n * sizeof(i64))
            memmove(&B.out.g[w], &B.out.g[lo], n * sizeof(i64))
        cell_count[cells[j]] = n
        start += B.count[j]
        w += n
    B.out.n = w
    return 0


cdef class _SweepWorker:
    cdef Sweep src
    cdef SweepBuf buf
    cdef i64 g0
    cdef i64 g1
    cdef object starts
    cdef object counts

    def __cinit__(self):
        memset(&self.buf, 0, sizeof(SweepBuf))  # no buffers, no counts, no error
        self.buf.budget = -1

    def __dealloc__(self):
        free(self.buf.st)
        free(self.buf.sm)
        free(self.buf.min_st)
        free(self.buf.alt)
        free(self.buf.best)
        free(self.buf.last)
        free(self.buf.heap)
        free(self.buf.pos)
        _sweep_free(&self.buf.rec)
        free(self.buf.rj)
        free(self.buf.count)
        free(self.buf.place)
        _sweep_free(&self.buf.out)

    def run(self):
        cdef i64* st = <i64*> cnp.PyArray_DATA(self.starts)
        cdef i64* ct = <i64*> cnp.PyArray_DATA(self.counts)
        cdef i64 grp
        cdef int rc = 0
        with nogil:
            for grp in range(self.g0, self.g1):
                rc = _sweep_group(&self.src, &self.buf, grp, st, ct)
                if rc != 0:
                    break
        if rc != 0:
            if self.buf.over:
                raise KernelBudgetExceeded(self.buf.budget, self.buf.wanted)
            if self.buf.err == 2:
                raise ValueError("sweep kernel: a term's single points have different memory across its group")
            raise MemoryError("sweep kernel: out of memory")
        return self.buf.out.n


def sweep_kernel(list offs, list mems, list tims, cnp.ndarray row, cnp.ndarray col, int multi, cnp.ndarray cells,
                 cnp.ndarray group_off, double eps, object group_bounds, object executor=None, i64 max_bytes=-1,
                 bint prov32=False):
    """:func:`combine_kernel` with ``outer`` terms, by a sweep per group (no validation: call
    it through ``kernels.run_kernel``, which checks that the terms have this form).

    Every slot but ``multi`` (the first or the last) holds single-point cells whose memory,
    summed over those slots, depends on the term only, not on the output cell. ``cells``
    lists the output cells by group (one value of ``row[multi]`` each; group ``g`` is
    ``cells[group_off[g]:group_off[g+1]]``);
    ``group_bounds`` splits the groups into chunks for ``executor``. The other arguments and
    the result are as for :func:`combine_kernel`: the same points and provenance.
    """
    cdef int S = len(offs)
    cdef int s
    cdef Sweep src
    cdef _SweepWorker wk
    cdef i64 n_out = row.shape[1]
    cdef i64 c, k, q, tot, cnt, st
    if S < 2 or S > MAXS:
        raise ValueError(f"sweep kernel supports 2..{MAXS} slots, got {S}")
    for s in range(S):
        _require_c(offs[s], np.int64, "offsets")
        _require_c(mems[s], np.float64, "memory")
        _require_c(tims[s], np.float64, "time")
    for arr in (row, col):
        _require_c(arr, np.int64, "outer terms")
    for arr in (cells, group_off):
        _require_c(arr, np.int64, "sweep groups")
    src.S = S
    for s in range(S):
        src.offs[s] = <const i64*> cnp.PyArray_DATA(offs[s])
        src.mem[s] = <const double*> cnp.PyArray_DATA(mems[s])
        src.tim[s] = <const double*> cnp.PyArray_DATA(tims[s])
    src.row = <const i64*> cnp.PyArray_DATA(row)
    src.col = <const i64*> cnp.PyArray_DATA(col)
    src.n_out = n_out
    src.U = col.shape[1]
    src.cells = <const i64*> cnp.PyArray_DATA(cells)
    src.group_off = <const i64*> cnp.PyArray_DATA(group_off)
    if multi != 0 and multi != S - 1:
        raise ValueError(f"sweep kernel: the multi-point slot must be the first or the last, got {multi}")
    src.multi = multi
    src.n_fixed = 0
    while multi == 0 and src.n_fixed + 1 < S and row[src.n_fixed + 1].min() == row[src.n_fixed + 1].max():
        src.n_fixed += 1
    src.eps = eps
    used = np.zeros(1, dtype=np.int64)
    starts = np.zeros(n_out, dtype=np.int64)
    counts = np.zeros(n_out, dtype=np.int64)
    owner = np.zeros(n_out, dtype=np.int64)
    workers = []
    bounds = list(group_bounds)
    for k in range(len(bounds) - 1):
        if bounds[k + 1] <= bounds[k]:
            continue
        wk = _SweepWorker()
        wk.src = src
        wk.g0 = bounds[k]
        wk.g1 = bounds[k + 1]
        wk.buf.used = <i64*> cnp.PyArray_DATA(used)
        wk.buf.budget = max_bytes
        wk.starts = starts
        wk.counts = counts
        owner[cells[group_off[bounds[k]]:group_off[bounds[k + 1]]]] = len(workers)
        workers.append(wk)
    _run_workers(workers, executor)
    tot = int(counts.sum())
    out_m = np.empty(tot, dtype=np.float64)
    out_t = np.empty(tot, dtype=np.float64)
    out_p = np.empty((tot, S), dtype=np.int32 if prov32 else np.int64)
    cdef double* pm = <double*> cnp.PyArray_DATA(out_m)
    cdef double* pt = <double*> cnp.PyArray_DATA(out_t)
    cdef i64* pp = <i64*> cnp.PyArray_DATA(out_p)
    cdef cnp.int32_t* pp32 = <cnp.int32_t*> cnp.PyArray_DATA(out_p)
    cdef i64* ps = <i64*> cnp.PyArray_DATA(starts)
    cdef i64* pc = <i64*> cnp.PyArray_DATA(counts)
    cdef i64* po = <i64*> cnp.PyArray_DATA(owner)
    cdef const i64* prow = src.row
    cdef const i64* pcol = src.col
    cdef i64 U = src.U
    cdef i64 u, v
    cdef SweepBuf* bufs[64]
    cdef list chunks = workers
    cdef i64 n_wk = len(workers)
    if n_wk > 64:
        raise ValueError("sweep kernel: at most 64 chunks")
    for k in range(n_wk):
        wk = chunks[k]
        bufs[k] = &wk.buf
    q = 0
    with nogil:
        for c in range(n_out):
            cnt = pc[c]
            if cnt == 0:
                continue
            st = ps[c]
            for k in range(cnt):
                pm[q] = bufs[po[c]].out.m[st + k]
                pt[q] = bufs[po[c]].out.t[st + k]
                u = bufs[po[c]].out.u[st + k]
                v = bufs[po[c]].out.g[st + k]
                if prov32:
                    pp32[q * S + src.multi] = <cnp.int32_t> v
                else:
                    pp[q * S + src.multi] = v
                for s in range(S):
                    if s == src.multi:
                        continue
                    v = src.offs[s][prow[s * n_out + c] + pcol[s * U + u]]
                    if prov32:
                        pp32[q * S + s] = <cnp.int32_t> v
                    else:
                        pp[q * S + s] = v
                q += 1
    offsets = np.zeros(n_out + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, out_m, out_t, out_p
