"""Frontier tables with provenance, the engine's internal currency.

A :class:`FTable` is a ragged set of frontiers, one per *cell* (a config of a node, a
(layout-)pair of an edge, ...), in CSR form, plus for every point the global index of the
parent point in each parent table that produced it (``prov``). Leaf tables stand for the
original nodes (one point per config: the point index *is* the config) and edges (the
reduced options of each layout pair; ``options`` maps point -> option index).
:func:`tensoropt_py.engine.unroll.unroll` walks provenance back from the final points
to the leaves (TensorOpt §3.2 "Unroll").

Cost arrays of tables that are no longer needed are released (:meth:`FTable.release`);
provenance (int32 where it fits) is kept for unroll.

Memo: model graphs repeat identical layers, whose eliminations combine tables with
identical *content* (other node/edge ids, same costs, same maps, same term lists).
:meth:`Context._combine_raw` keys every sizeable combine on a hash of its inputs (the
parents' digests, term offsets and cells, epsilon) and reuses an earlier result for a
repeated key: the output costs are the same, and its provenance (point indices into
parents of identical content) is valid for the new parents, so unroll is unaffected. A
leaf's digest hashes its points; a combine's output is digested by its key, which
determines its points (hashing millions of points per step would cost more than the kernel
on repeated layers).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from ..errors import MemoryLimitError
from ..units import format_bytes
from .kernels import MAX_SLOTS, KernelBudgetExceeded, reduce_ragged, resolve_threads, run_kernel

__all__ = ["FTable", "Context", "ExactBudgetSpent", "unique_rows", "table_key", "digest_arrays"]

_I32 = np.iinfo(np.int32).max
_MAX_TERMS_PER_BATCH = 1 << 22  # terms built per kernel call by Context.combine_gen
_STAGE_FACTOR = 16.0  # stage a product when direct enumeration exceeds this many combos per term
_ESTIMATE_ROWS = 1024  # output cells whose terms estimate that (terms given as sums: Context._combine_outer)
_MEMO_MIN_TERMS = 256  # combines with fewer terms are not worth hashing
_MEMO_BYTES = 1 << 29  # bytes the memo of combine results may hold without a memory budget
_MEMO_SHARE = 4  # with a budget (max_bytes), the memo may hold up to 1/_MEMO_SHARE of it


def digest_arrays(*arrays):
    """SHA-256 of arrays' dtypes, shapes and contents, in order (no copy of a contiguous array)."""
    h = hashlib.sha256()  # hardware-accelerated on current CPUs (about 2x blake2b)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(repr((a.dtype.str, a.shape)).encode())
        h.update(a.data)
    return h.digest()


class ExactBudgetSpent(Exception):
    """An exact run would pass the terms allowed by its ``Context.switch`` (internal signal)."""

    def __init__(self, combines, terms):
        super().__init__(f"exact tracking would pass {terms} terms at combine {combines}")
        self.combines = combines
        self.terms = terms


class FTable:
    """A ragged frontier table (internal)."""

    __slots__ = ("id", "offsets", "mem", "time", "parents", "prov", "leaf", "options", "depth", "pieces", "_maxc", "pinned", "_digest", "same", "ctx")

    def __init__(self, offsets, mem, time, parents=(), prov=None, leaf=None, options=None, depth=0, pieces=None):
        self.id = -1
        self.offsets = offsets
        self.mem = mem
        self.time = time
        self.parents = tuple(parents)
        self.prov = prov
        self.leaf = leaf  # None, ("node", i) or ("edge", e)
        self.options = options
        self.depth = depth
        self.pieces = pieces  # a concatenation of tables: point i belongs to the piece holding it
        self._maxc = None
        self.pinned = False  # True: a snapshot of the working graph still needs the costs
        self._digest = None
        self.same = None  # a table of the same arrays (an edge leaf shared by edges): its digest is this one's
        self.ctx = None  # the Context that registered it (memory accounting)

    def digest(self):
        """Hash that determines the content (offsets and costs; not provenance): of the content
        itself, only while costs are held, unless the table was derived from a memo key (the
        key determines its content, so it is hashed instead of the points: see
        :meth:`Context._combine_raw`)."""
        if self._digest is None:
            self._digest = self.same.digest() if self.same is not None else digest_arrays(self.offsets, self.mem, self.time)
        return self._digest

    @property
    def max_cell(self):
        """Largest number of points in a cell."""
        if self._maxc is None:
            self._maxc = int(np.diff(self.offsets).max()) if self.n_cells else 0
        return self._maxc

    @property
    def n_cells(self):
        return self.offsets.shape[0] - 1

    @property
    def n_points(self):
        return int(self.offsets[-1])

    def nbytes(self, costs=True):
        """Bytes held by this table's arrays (with or without the cost arrays)."""
        n = self.offsets.nbytes + (self.prov.nbytes if self.prov is not None else 0)
        if costs and self.mem is not None:
            n += self.mem.nbytes + self.time.nbytes
        return n

    def release(self):
        """Drop the cost arrays (keep offsets/provenance for unroll)."""
        if self.leaf is None and not self.pinned:
            if self.mem is not None and self.ctx is not None:
                self.ctx.held_bytes -= self.mem.nbytes + self.time.nbytes
            self.mem = None
            self.time = None

    def cell(self, c):
        lo, hi = self.offsets[c], self.offsets[c + 1]
        return self.mem[lo:hi], self.time[lo:hi]

    def __repr__(self):
        return f"FTable(id={self.id}, cells={self.n_cells}, points={self.n_points}, leaf={self.leaf})"


class Context:
    """Per-run state: epsilon, threads, the registry of tables (for unroll) and counters.

    ``max_bytes``: when the arrays held by the tables (and the memo) exceed it after a
    combine, :class:`~tensoropt_py.errors.MemoryLimitError` is raised (combines are done
    in batches of at most ``_MAX_TERMS_PER_BATCH`` terms, so one step cannot overshoot
    by much). None: no limit.

    ``switch``: ``None``, or ``(epsilon, cell_points, max_terms)`` (``track(epsilon="auto")``):
    while ``self.epsilon`` is 0, the first combine whose output has a cell of more than
    ``cell_points`` points turns thinning on with that epsilon for every later combine
    (earlier tables stay exact; the depth of every table counts only the thinned steps
    behind it, so the bound ``(1 + epsilon) ** depth`` holds for the mixed run), and a
    combine that would bring the exact terms combined past ``max_terms`` raises
    :class:`ExactBudgetSpent` before it runs, with its number and the terms it would have
    reached (the caller starts over, thinned from the first step).
    """

    def __init__(self, epsilon=0.0, threads=1, max_bytes=None, switch=None):
        self.epsilon = float(epsilon)
        self.switch = switch
        self.threads = resolve_threads(threads)
        self.tables: list[FTable] = []
        self.stats = {"combines": 0, "terms": 0, "points": 0, "memo_hits": 0}
        # memo of combine results by content: model graphs repeat identical layers, whose
        # eliminations see identical tables (other node/edge ids, same costs and maps)
        # (its entries mostly alias live tables; a dropped table's arrays stay alive through it,
        # so it is counted in full and emptied, oldest first, before the budget is declared spent)
        self._memo: OrderedDict = OrderedDict()
        self._memo_bytes = 0
        self._memo_cap = _MEMO_BYTES if max_bytes is None else max(_MEMO_BYTES, int(max_bytes) // _MEMO_SHARE)
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._collected_at = 0  # held_bytes after the last collect()
        self.peak_bytes = 0
        self._leaf_cache = {}

    def register(self, tab, count=True):
        tab.id = len(self.tables)
        tab.ctx = self
        self.tables.append(tab)
        if count:
            self.held_bytes += tab.nbytes()
        used = self.used_bytes()
        if self.max_bytes is not None and used > self.max_bytes:
            self._reclaim()
            used = self.used_bytes()
            while used > self.max_bytes and self._memo:
                self._drop_oldest_memo()
                used = self.used_bytes()
        if used > self.peak_bytes:
            self.peak_bytes = used
        if self.max_bytes is not None and used > self.max_bytes:
            raise self._limit_error(f"its tables hold {format_bytes(used, binary=True)}", used)
        return tab

    def used_bytes(self):
        """Bytes the tables and the memo hold now (what ``max_bytes`` limits)."""
        return self.held_bytes + self._memo_bytes

    def _limit_error(self, what, used):
        """The :class:`MemoryLimitError` of a run that ``what`` (needing ``used`` bytes) stopped."""
        return MemoryLimitError(
            f"frontier tracking stopped: {what}, more than the limit of {format_bytes(self.max_bytes, binary=True)} "
            f"(max_memory); raise max_memory, use a larger epsilon, or exact=False with a smaller max_merged_configs",
            used_bytes=int(used),
            limit_bytes=int(self.max_bytes),
        )

    def collect(self):
        """Drop the provenance that no table still in use can reach (garbage collection).

        A table whose costs are released is kept only for unroll, and unroll only walks back
        from tables still in use (those holding costs: the working graph's, the detached
        results, a snapshot's pinned ones): most points of a released table were dominated
        later and are reached by nothing. Every released table is cut down to the points
        reached from the tables in use, and the provenance pointing into it is renumbered
        (into new arrays: the memo may share the old ones), so unroll gives the same strategies.
        Returns the bytes freed."""
        tables = self.tables
        keep = [None] * len(tables)  # per table id: the sorted points to keep (None: all)
        requests: dict[int, list] = {}
        for tab in reversed(tables):
            if tab.mem is None and tab.leaf is None:
                req = requests.pop(tab.id, [])
                keep[tab.id] = np.unique(np.concatenate(req)) if req else np.empty(0, dtype=np.int64)
            if tab.leaf is not None:
                continue
            need = keep[tab.id]
            if tab.pieces is not None:
                idx = np.arange(tab.n_points) if need is None else need
                starts = np.cumsum([0] + [p.n_points for p in tab.pieces])
                which = np.searchsorted(starts, idx, side="right") - 1
                for j, piece in enumerate(tab.pieces):
                    requests.setdefault(piece.id, []).append(idx[which == j] - starts[j])
                continue
            if tab.prov is None:
                continue
            rows = tab.prov if need is None else tab.prov[need]
            for s, par in enumerate(tab.parents):
                if par.mem is None and par.leaf is None:  # tables in use keep every point anyway
                    col = rows[:, s]
                    requests.setdefault(par.id, []).append(col[col >= 0].astype(np.int64))
        # a kept point's new index is its rank among the kept ones (``need`` is sorted): found by
        # binary search, not through a renumbering array as long as the table (mostly garbage)
        shrinking = {tab.id for tab in tables if keep[tab.id] is not None and keep[tab.id].size < tab.n_points}
        freed = 0
        for tab in tables:
            if tab.leaf is not None:
                continue
            before = tab.nbytes(costs=False)
            shrink = tab.id in shrinking
            if tab.pieces is None and tab.prov is not None:
                moved = [s for s, par in enumerate(tab.parents) if par.id in shrinking]
                if not shrink and not moved:
                    continue
                prov = tab.prov[keep[tab.id]] if shrink else tab.prov.copy()
                for s in moved:
                    col = prov[:, s]
                    ok = col >= 0
                    col[ok] = np.searchsorted(keep[tab.parents[s].id], col[ok])
                tab.prov = prov
            if shrink:  # a released table is only walked by point index: one cell is enough
                tab.offsets = np.array([0, keep[tab.id].size], dtype=np.int64)
                tab._maxc = None
            freed += before - tab.nbytes(costs=False)
        self.held_bytes -= freed
        self.stats["collected_bytes"] = self.stats.get("collected_bytes", 0) + freed
        return freed

    def _reclaim(self):
        """:meth:`collect`, unless the tables grew by less than an eighth of ``max_bytes`` since
        the last collection (which freed what it could); returns the bytes freed."""
        if self.held_bytes - self._collected_at < (self.max_bytes or 0) // 8:
            return 0
        freed = self.collect()
        self._collected_at = self.held_bytes
        return freed

    # ---- leaves -------------------------------------------------------------------------
    def node_leaf(self, i, costs):
        k = costs.shape[0]
        tab = FTable(
            np.arange(k + 1, dtype=np.int64),
            np.ascontiguousarray(costs[:, 0], dtype=np.float64),
            np.ascontiguousarray(costs[:, 1], dtype=np.float64),
            leaf=("node", i),
        )
        return self.register(tab)

    def edge_leaf(self, e, table):
        """Leaf of an edge: ``table`` (A, B, R, 2); cell a*B+b = reduced finite options.

        Edges that share one cost table (model graphs repeat identical layers, and the
        cost builder shares their tables) share the leaf's arrays too (counted once), and
        its content digest, hashed once (when a memo key first needs it) instead of once per edge."""
        key = table_key(table)
        first = self._leaf_cache.get(key)
        if first is not None:
            tab = FTable(first.offsets, first.mem, first.time, leaf=("edge", e), options=first.options)
            tab.same = first
            return self.register(tab, count=False)
        tab = self._leaf_cache[key] = self._edge_leaf(e, table)
        return tab

    def _edge_leaf(self, e, table):
        A, B, R, _ = table.shape
        mem = table[..., 0].reshape(A * B, R)
        tim = table[..., 1].reshape(A * B, R)
        if R == 1:
            tab = FTable(
                np.arange(A * B + 1, dtype=np.int64),
                np.ascontiguousarray(mem[:, 0]),
                np.ascontiguousarray(tim[:, 0]),
                leaf=("edge", e),
                options=np.zeros(A * B, dtype=np.int8),
            )
            return self.register(tab)
        finite = np.isfinite(mem) & np.isfinite(tim)
        counts = finite.sum(axis=1)
        offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        rows, opts = np.nonzero(finite)
        off2, m2, t2, idx = reduce_ragged(offs, mem[rows, opts], tim[rows, opts])
        tab = FTable(off2, m2, t2, leaf=("edge", e), options=opts[idx].astype(np.int16))
        return self.register(tab)

    # ---- the workhorse ------------------------------------------------------------------
    def combine(self, parents, term_off, term_cells, thin=None):
        """Output cell c = reduce(union over its terms of the product of parent cells).

        ``thin`` (default: when some cell has several terms) applies epsilon thinning.
        Terms that multiply more than two multi-point cells are staged: the product of
        all but the last multi-point slot is reduced first (one intermediate cell per
        distinct combination), so no term enumerates a huge Cartesian product. A staged
        product is thinned too when the step thins (a thinning step of its own, counted in
        the output's depth): a product of p and q points may keep up to p * q of them, and
        left exact it would pass them all to the next slot (a deep model's running frontier
        times a folded node kept 17,000 points per cell where the thinned one keeps 800).
        """
        S = len(parents)
        assert 1 <= S <= MAX_SLOTS
        term_off = np.ascontiguousarray(term_off, dtype=np.int64)
        term_cells = np.ascontiguousarray(term_cells, dtype=np.int64).reshape(-1, S)
        n_out = term_off.shape[0] - 1
        if thin is None:
            thin = bool(n_out and int(term_off[-1]) > n_out)
        if S > 2 and term_cells.shape[0]:
            staged = self._stage(parents, term_off, term_cells, thin)
            if staged is not None:
                parents, term_cells = staged
        return self._combine_raw(parents, term_off, term_cells, thin)

    def _stage(self, parents, term_off, term_cells, thin):
        multi = [s for s, p in enumerate(parents) if p.max_cell > 1]
        if len(multi) <= 2:
            return None
        if (term_cells[:, multi] < 0).any():
            return None
        sizes = np.stack([np.diff(parents[s].offsets)[term_cells[:, s]] for s in multi], axis=1).astype(np.float64)
        direct = float((sizes.prod(axis=1) / np.maximum(sizes.max(axis=1), 1.0)).sum())
        if direct <= _STAGE_FACTOR * term_cells.shape[0]:
            return None
        first = multi[:-1]
        firsts, inv = unique_rows(term_cells[:, first], [parents[s].n_cells for s in first])
        uniq = term_cells[firsts][:, first]
        P = self.combine([parents[s] for s in first], np.arange(uniq.shape[0] + 1), uniq, thin=thin)
        rest = [s for s in range(len(parents)) if s not in first]
        cells = np.column_stack([inv.reshape(-1)] + [term_cells[:, s] for s in rest])
        self.stats["staged"] = self.stats.get("staged", 0) + 1
        return [P] + [parents[s] for s in rest], cells

    def _memo_hit(self, key, parents, depth):
        """The memoised result of ``key`` as a new table over ``parents`` (of ``depth``
        thinning steps, :func:`_depth`), or None."""
        hit = self.recall(key)
        if hit is None:
            return None
        # same inputs (content, not identity): the same output, and provenance
        # indices are valid in these parents as well
        off, m, t, prov = hit
        self.stats["combines"] += 1
        self.stats["memo_hits"] += 1
        return self.register(_derived(FTable(off, m, t, parents, prov, depth=depth), key))

    def _run_kernel(self, parents, term_off, term_cells, eps, outer):
        """The kernel call, within what ``max_bytes`` leaves: its buffers may take the rest
        (its output arrays fill as they are freed). Past that, the memo is emptied and the
        call tried once more before :class:`MemoryLimitError` is raised, so a combine that
        would not fit stops before it takes the memory instead of the process being killed."""
        args = ([p.offsets for p in parents], [p.mem for p in parents], [p.time for p in parents], term_off,
                term_cells, eps, self.threads)
        # provenance is stored as int32 when every parent is small enough (it usually is)
        prov32 = all(p.n_points <= _I32 for p in parents)
        emptied = False
        while True:
            used = self.used_bytes()
            budget = None if self.max_bytes is None else self.max_bytes - used
            try:
                return run_kernel(*args, outer=outer, max_bytes=budget, prov32=prov32, cover_memo=self,
                                  table_keys=[p.digest for p in parents])
            except KernelBudgetExceeded as exc:
                if self._reclaim():
                    continue
                # once only: the call may fill the memo again (its cover bitsets), and a loop
                # that empties it before every try would never end
                if emptied or not self._memo:
                    need = used + exc.args[1]
                    raise self._limit_error(f"one combine step would need {format_bytes(need, binary=True)} with "
                                            f"the tables held", need) from None
                while self._memo:
                    self._drop_oldest_memo()
                emptied = True

    def _combine_raw(self, parents, term_off, term_cells, thin, key=None, outer=None):
        """The kernel call behind :meth:`combine`, memoised. ``key``: a memo key the caller
        derived from what generates the terms (:meth:`combine_gen`); None: a hash of the terms.
        ``outer``: the terms as ``(row, col)`` sums instead of ``term_cells`` (see
        :func:`~tensoropt_py.elimination.kernels.combine_outer`)."""
        n_out = term_off.shape[0] - 1
        eps = self.epsilon if thin else 0.0
        depth = _depth(parents, eps)
        if key is None and int(term_off[-1]) >= _MEMO_MIN_TERMS:
            if outer is not None:
                terms = outer
            elif all(p.n_cells < _I32 for p in parents):
                terms = (term_cells.astype(np.int32),)  # half the bytes to hash
            else:
                terms = (term_cells,)
            key = (eps, tuple(p.digest() for p in parents), digest_arrays(term_off, *terms))
            hit = self._memo_hit(key, parents, depth)
            if hit is not None:
                return hit
        switching = self.switch is not None and self.epsilon == 0.0 and n_out
        if switching and self.stats["terms"] + int(term_off[-1]) > self.switch[2]:
            # refused before it runs: the run starts over anyway
            raise ExactBudgetSpent(self.stats["combines"] + 1, self.stats["terms"] + int(term_off[-1]))
        off, m, t, prov = self._run_kernel(parents, term_off, term_cells, eps, outer)
        self.stats["combines"] += 1
        self.stats["terms"] += int(term_off[-1])
        self.stats["points"] += int(off[-1])
        if switching:
            switch_eps, cell_points, _ = self.switch
            if int(np.diff(off).max()) > cell_points:
                self.epsilon = float(switch_eps)
                self.stats["epsilon_from_combine"] = self.stats["combines"]
        if key is not None:
            # kept whatever share of the memo it takes (older entries make room): a repeated
            # layer's largest step is the one most worth keeping (left out, a mixture of experts'
            # 750 MB edge merges were recomputed in each of its 32 layers: 80 s instead of 13 s)
            self.remember(key, (off, m, t, prov))
        return self.register(_derived(FTable(off, m, t, parents, prov, depth=depth), key))

    def recall(self, key):
        """The memo's arrays under ``key`` (None when absent), now its most recent entry."""
        hit = self._memo.get(key)
        if hit is not None:
            self._memo.move_to_end(key)
        return hit

    def remember(self, key, arrays):
        """Keep the tuple ``arrays`` in the memo under ``key`` while it fits the memo's bytes
        (the oldest entries are dropped to make room; a larger one is not kept)."""
        nbytes = sum(a.nbytes for a in arrays)
        if nbytes <= self._memo_cap:
            old = self._memo.pop(key, None)  # two slots of one call can key the same bitsets
            if old is not None:
                self._memo_bytes -= sum(a.nbytes for a in old)
            self._memo[key] = arrays
            self._memo_bytes += nbytes
            while self._memo_bytes > self._memo_cap:
                self._drop_oldest_memo()

    def _drop_oldest_memo(self):
        _, old = self._memo.popitem(last=False)
        self._memo_bytes -= sum(a.nbytes for a in old)

    def combine_gen(self, parents, n_out, terms_per_cell, make_terms=None, thin=None, terms_key=None,
                    make_outer=None):
        """Like :meth:`combine` for regular term lists built in batches of output cells.

        ``make_terms(lo, hi)`` returns the ``((hi-lo)*terms_per_cell, S)`` term cells of
        output cells ``lo..hi-1`` (``terms_per_cell`` terms each), so huge term lists are
        never materialised at once; the batches are glued by a concatenation table.

        ``make_outer(lo, hi)`` (instead of ``make_terms``): the terms as sums ``(row (S,
        hi-lo), col (S, terms_per_cell))``, handed to the kernel as they are: nothing is
        written out, not even where a product must be staged (:meth:`_combine_outer`).

        ``terms_key``: bytes that determine every term the batches can hold (a digest of
        the small arrays they are built from). The memo is then keyed on it, so a repeated
        batch is found without building (or hashing) its terms; the caller vouches for the key.
        """
        if (make_terms is None) == (make_outer is None):
            raise TypeError("combine_gen takes one of make_terms and make_outer")
        if thin is None:
            thin = terms_per_cell > 1
        batch = max(1, _MAX_TERMS_PER_BATCH // max(terms_per_cell, 1))
        if n_out <= batch:
            return self._combine_batch(parents, 0, n_out, terms_per_cell, make_terms, thin, terms_key, make_outer)
        pieces = []
        for lo in range(0, n_out, batch):
            hi = min(n_out, lo + batch)
            pieces.append(self._combine_batch(parents, lo, hi, terms_per_cell, make_terms, thin, terms_key,
                                              make_outer))
        counts = np.concatenate([np.diff(p.offsets) for p in pieces])
        off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        tab = FTable(
            off,
            np.concatenate([p.mem for p in pieces]),
            np.concatenate([p.time for p in pieces]),
            depth=max(p.depth for p in pieces),
            pieces=pieces,
        )
        if all(p._digest is not None for p in pieces):  # determined by its pieces' derivations
            tab._digest = hashlib.sha256(b"pieces" + b"".join(p._digest for p in pieces)).digest()
        for p in pieces:
            p.release()
        return self.register(tab)

    def _combine_batch(self, parents, lo, hi, terms_per_cell, make_terms, thin, terms_key, make_outer):
        """Output cells ``lo..hi-1`` of :meth:`combine_gen`."""
        term_off = np.arange(hi - lo + 1, dtype=np.int64) * terms_per_cell
        staged = sum(p.max_cell > 1 for p in parents) > 2
        key = None
        # a staged combine memoises its own steps instead
        if terms_key is not None and int(term_off[-1]) >= _MEMO_MIN_TERMS and not staged:
            eps = self.epsilon if thin else 0.0
            key = (eps, tuple(p.digest() for p in parents), terms_key, lo, hi, terms_per_cell)
            hit = self._memo_hit(key, parents, _depth(parents, eps))
            if hit is not None:
                self.stats["memo_terms_skipped"] = self.stats.get("memo_terms_skipped", 0) + 1
                return hit
        if make_outer is not None:
            row, col = make_outer(lo, hi)
            if staged:
                return self._combine_outer(parents, term_off, row, col, thin)
            return self._combine_raw(parents, term_off, None, thin, key=key, outer=(row, col))
        if key is None:
            return self.combine(parents, term_off, make_terms(lo, hi), thin=thin)
        cells = np.ascontiguousarray(make_terms(lo, hi), dtype=np.int64).reshape(-1, len(parents))
        return self._combine_raw(parents, term_off, cells, thin, key=key)

    def _combine_outer(self, parents, term_off, row, col, thin):
        """:meth:`combine` of terms given as sums ``row (S, n) + col (S, U)``, staged as
        :meth:`_stage` would (when direct enumeration is too dear, the product of all multi-point
        slots but the last is reduced first), without writing the ``n * U`` terms out: the
        staged cells are those of the distinct rows of the first slots, times the U columns."""
        multi = [s for s, p in enumerate(parents) if p.max_cell > 1]
        n, U = row.shape[1], col.shape[1]
        if len(multi) <= 2 or n == 0 or U == 0:
            return self._combine_raw(parents, term_off, None, thin, outer=(row, col))
        # the direct enumeration's work per term, estimated on evenly spread rows
        pick = np.unique(np.linspace(0, n - 1, min(n, _ESTIMATE_ROWS)).astype(np.int64))
        prod = np.ones((pick.size, U))
        largest = np.ones((pick.size, U))
        for s in multi:
            size = np.diff(parents[s].offsets).astype(np.float64)[row[s][pick][:, None] + col[s][None, :]]
            prod *= size
            np.maximum(largest, size, out=largest)
        if float((prod / largest).mean()) <= _STAGE_FACTOR:
            return self._combine_raw(parents, term_off, None, thin, outer=(row, col))
        first = multi[:-1]
        rows = row[first].T
        low = rows.min(axis=0)
        firsts, inv = unique_rows(rows - low, [int(r) + 1 for r in rows.max(axis=0) - low])
        base, add = rows[firsts].T, col[first]  # staged cell f * U + u: the one term base[:, f] + add[:, u]

        def make_outer(lo, hi):
            c = np.arange(lo, hi)
            return np.ascontiguousarray(base[:, c // U] + add[:, c % U]), np.zeros((len(first), 1), dtype=np.int64)

        # built and combined in batches (combine_gen): the F * U staged terms are never all
        # written out at once, so this step's memory is the kernel's, under its byte budget
        staged = self.combine_gen([parents[s] for s in first], firsts.shape[0] * U, 1, make_outer=make_outer,
                                  thin=thin, terms_key=digest_arrays(np.array([U]), base, add))
        rest = [s for s in range(len(parents)) if s not in first]
        new_row = np.concatenate([(inv * U)[None, :], row[rest]])
        new_col = np.concatenate([np.arange(U, dtype=np.int64)[None, :], col[rest]])
        self.stats["staged"] = self.stats.get("staged", 0) + 1
        return self._combine_raw([staged] + [parents[s] for s in rest], term_off, None, thin, outer=(new_row, new_col))


def _derived(tab, key):
    """``tab``, the output of the combine of memo key ``key`` (None: no key), with the digest
    of that key: the key determines the output's content (its parents' digests, the terms,
    epsilon), so hashing it stands for hashing the points (a derived table's digest never
    equals a content digest, so a repeat is found when it is derived alike)."""
    if key is not None:
        tab._digest = hashlib.sha256(b"derived" + repr(key).encode()).digest()
    return tab


def _depth(parents, eps):
    """Thinning steps behind a combine of ``parents``: theirs, plus one when it thins."""
    return max(p.depth for p in parents) + (1 if eps > 0 else 0)


def table_key(table):
    """Identity of an edge cost array's memory (views of one array give the same key)."""
    return (table.__array_interface__["data"][0], table.shape, table.strides)


def unique_rows(rows, radices=None):
    """``np.unique(rows, axis=0, return_index=True, return_inverse=True)`` without the rows:
    the index of the first occurrence of every distinct row (rows in lexicographic order) and
    every row's position among them, for rows of non-negative integers below ``radices`` (one
    per column; None: each column's maximum + 1), via one mixed-radix int64 key per row when
    it fits (much faster than sorting rows).

    >>> first, inv = unique_rows(np.array([[1, 0], [0, 2], [1, 0]]))
    >>> first.tolist(), inv.tolist()
    ([1, 0], [1, 0, 1])
    """
    rows = np.asarray(rows)
    if radices is None:
        radices = rows.max(axis=0) + 1 if rows.shape[0] else np.ones(rows.shape[1], dtype=np.int64)
    total = 1
    for r in radices:
        total *= max(int(r), 1)
    if total >= 1 << 62:
        _, first, inv = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    key = np.zeros(rows.shape[0], dtype=np.int64)
    for j, r in enumerate(radices):
        key = key * max(int(r), 1) + rows[:, j]
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)
