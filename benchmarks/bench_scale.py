"""The engine at scale, in one run (prints a table; no asserts).

Cases (each in a fresh subprocess with a time limit, so the script always finishes):

* ``transformer16_track``: ``track`` of the CostGraph of ``to.frontier("transformer",
  "v100-2x8", devices=16)`` with default settings: seconds, points, heuristic eliminations, whether the exact fastest/smallest
  strategies had to be added (anchors), where ``epsilon="auto"`` thinned (or the exact start it gave
  up), peak bytes of the frontier tables;
* ``fastest``: the frontier's fastest and smallest points vs the OptCNN baseline and vs
  the exact single-objective optima (:func:`tensoropt_py.engine.min_sum`), and the
  measured gap of the frontier's ``min(time + lam * memory)`` to the exact optimum for
  several ``lam`` (how approximate the default frontier is, measured);
* ``fastest_ties``: the fastest anchor where several strategies share the least time: on zoo
  models at 8 devices of ``v100-2x8`` (and the Transformer at 16), the first pass of
  :func:`~tensoropt_py.engine.min_sum` at ``lam = 0`` (least time alone), whether its decoding
  met a tie, and the smallest of the fastest strategies (time, then memory, and the weighted
  solve the anchors use past 5e7 terms): memories and seconds; and random integer-cost chains,
  whose fastest strategies tie often, tracked with heuristics and epsilon (anchors on), on 1
  and 2 threads, with each tie solve and without one (the first fastest strategy the
  one-component solve finds): how many fastest ends equal the exact frontier's (time and
  memory), how many ties were reported unsolved, and how many frontiers the two thread counts
  agree on;
* ``transformer16_limits``: what stands between that case and seconds: ``track`` without
  anchors at epsilon 1e-3, 3e-3 and 1e-2 (seconds, points, proven bound, product terms and
  points combined), and the configs the relaxation bounds prove useless given its default
  frontier (run ``transformer16_track`` first) for 12, 24 and 48 weights;
* ``transformer16_terms``: how the terms of that case's costliest combine end (100 sampled
  output cells against their exact frontiers): how many add nothing to their cell, how many of
  those the kernel's test of the ideal corner would skip, and how many lower bounds of ``time +
  lam * memory`` for 4 or 16 weights would; how many of the cells' frontier points lie on
  their lower convex hull (the only ones a weighted sum can find); and how many of the terms'
  points the kernel's memory-bucket filter would drop given the cell's whole frontier (a
  point is dropped when a frontier point of a lower bucket is no slower); and the share of its
  terms the kernel skips as covered (``outer_skip_mask``), with the combine's seconds with and
  without skipping them;
* ``transformer16_skip``: the default ``track`` of ``transformer16_track`` with and without the
  kernel skipping covered outer terms (``skip_covered``), twice each, alternated;
* ``transformer16_dominated``: the same with and without the kernel skipping the outer terms
  another term strictly dominates (``skip_dominated``), twice each, alternated, and at epsilon
  1e-3 without anchors on one thread; in a third run of that kind, the kernel calls where it
  applies, each timed both ways (best of 2), and for the costliest one its cells and the share of
  its terms covered (``outer_skip_mask``) and covered or strictly dominated
  (``dominated=True``); and whether the frontiers and strategies are the same;
* ``transformer16_sweep``: the same with and without the sweep kernel (node eliminations
  whose terms sum one multi-point cell with single points of one memory reduce every output
  cell of a row together), twice each, alternated, and whether the frontiers are the same;
* ``transformer16_covers``: the same with and without keeping the cover bitsets of a table that
  recurs (a repeated layer's table joined with each new frontier of the model so far) for the
  next call on it, twice each, alternated: seconds, calls to the compiled bitsets and their
  seconds summed over the threads that ran them, and whether the frontiers are the same;
* ``transformer16_simd``: the same with the kernels testing points one by one and four at a
  time (the dominance filter's list points, the sweep's cells; AVX2, where the CPU has it),
  twice each, alternated, and whether the frontiers are the same;
* ``transformer16_hub_first``: the same with and without eliminating a hub before its
  neighbour where the driver estimates that cheaper (the first encoder and decoder layers'
  input), twice each, alternated: seconds, hubs so eliminated, and how far the frontiers differ
  (the two orders round differently) and whether their strategies are the same;
* ``transformer16_anchors_beside``: the same with the exact fastest and smallest strategies (the
  anchors) solved beside the run while it goes on (in a process of their own) and solved after
  it, twice each, alternated: wall and CPU seconds (the process's included), the anchors' seconds
  after the run and beside it, which ends were solved beside it, and whether the frontiers are
  the same;
* ``transformer16_anchors_process``: the default ``track`` of ``transformer16_track`` without
  anchors, with them on a thread of the run's process, and with them in a process of their own
  (the default), four each, alternated: seconds, their medians, the anchors' seconds beside the
  run, the ends they solved and the seconds of anchors left after the run, and whether the
  frontiers of the two ways are the same;
* ``anchors_small``: the default ``track`` of the Transformer, BERT-large, GPT-2 and VGG-16 on 2
  and 4 devices with the anchors where the default puts them (in a process of their own from
  ``_PROCESS_MIN_LEAF_BYTES`` of leaf tables, else after the run), in a process, on a thread,
  after the run, and without anchors, alternated, three rounds (``--track-threads``): leaf bytes,
  where the default put them, and median seconds;
* ``anchors_starved``: the default ``track`` of the Transformer on 4 devices while as many
  CPU-bound programs as there are cores run beside it, with its anchors where the default puts
  them (a process of their own), on a thread given up where starved, on a thread waited for
  however long it takes, after the run, and without anchors, twice each, alternated
  (``--track-threads``): seconds, why the anchors beside the run were given up, and whether the
  frontiers with anchors are the same;
* ``transformer16_tie_solve``: the same with the fastest anchor's tie of least time solved by
  the weighted solve on a thread at the least CPU priority, and left unsolved on a thread at
  normal priority, four each, alternated (``--track-threads``): seconds, the anchors'
  seconds after the run, whether the tie was solved, and whether the frontiers are the same;
* ``transformer16_min_sum``: the anchors' two exact solves (:func:`~tensoropt_py.engine.min_sum` on
  the configs the relaxation bounds leave possible given that case's frontier; run
  ``transformer16_track`` first) with the numeric pass replaying the plan of the value-less pass
  and choosing its steps again, twice each, alternated: seconds, configs kept, and whether the
  optima are the same; then each ``min_sum`` with its reductions compiled
  (:func:`~tensoropt_py.engine.scalar.min_of_sums`, for the smallest
  :func:`~tensoropt_py.engine.scalar.lex_min_of_sums`) and in NumPy, three times each, alternated;
* ``transformer16_outside``: whether bounds on the rest of the graph could drop the points of
  that case's tables early (``transformer16_track`` first): 40 sampled cells of each node
  elimination's output of 40,000 points or more, and for each point whether every strategy
  through it is provably weakly dominated by the default frontier (the oracle: what the run
  returns in the end). The rest of the graph, given a cell's boundary configs ``(a, b)``, costs
  at least ``max(LB(a), LB(b)) - P`` in ``time + lam * memory`` (``LB``: the relaxation bounds
  of :func:`~tensoropt_py.engine.screen.relaxation_bounds` for 24 weights, ``P``: the cell's
  own least), so a point ``p`` can go when no strategy the bounds allow puts ``p`` plus the rest
  outside the region the frontier dominates (:func:`~tensoropt_py.engine.screen.screen_out`, each
  point bounded like a config); reported with the ideal corner alone (least time
  and least memory of the rest) and with the 24 weights, with the gaps between the frontier's
  least ``time + lam * memory`` and the bound of the whole graph for those weights;
* ``transformer16_parts``: where that case's time goes, on one thread: the node eliminations
  and folds of each layer (by the scope of the operator's name), apart from the joins of the
  running frontier with each layer (a step next to the one-config ``input`` operator, which the
  frontier of the model so far rides on), for each heuristic run; the exact start given up and
  the anchors. Then, for three hub operators (whose configs become a second dimension of the
  tables), the exact least ``time + lam * memory`` (:func:`~tensoropt_py.engine.min_sum`) with
  the hub fixed to each of 8 sampled configs, above the whole graph's optimum (in %), for
  ``lam = 0`` and the median slope of the default frontier, and how many of the hub's configs
  the frontier uses;
* ``transformer16_join_order``: the kernel calls of those joins (epsilon 1e-3, one thread, no
  anchors), their seconds in all, and for the three costliest: how many configs of the node
  eliminated (its terms) reach the thinned output, and the call's seconds (best of 3) with its
  terms in their own order, reversed, and with the terms of most output points first (an
  oracle); the output is the same in every order;
* ``cli_frontier``: ``tensoropt-py frontier --model transformer --cluster v100-2x8 --devices 16``
  as a user runs it, twice, each in a fresh interpreter: wall seconds, the stages it prints
  (cost graph, tracking, each tracked point's peak memory) and the rest (imports, the plan of the
  point picked under the memory cap, printing), and the points;
* ``threads``: ``track`` on the Transformer at ``--thread-devices`` devices with
  ``threads=1, 2, ...`` (``--threads``), epsilon 1e-3 without anchors, and with default settings
  (seconds, speedup over the first count, and the seconds of the exact start given up and of
  the anchors, which run on one thread);
* ``cyclic``: random cyclic graphs with 1e18 sentinels: exact ``track`` (both methods)
  vs brute force (count of identical frontiers) and ``min_sum`` vs brute force;
* ``mesh_loss``: what the hierarchical mesh space (``meshes="hierarchical"``,
  :mod:`tensoropt_py.space.mesh`) loses where the full space is computable:
  ``min(time + lam * memory)`` (additive memory) in both spaces for several ``lam``
  (``lam = 0``: the fastest strategy; ``inf``: the least memory) and the relative gaps, on
  the one-layer zoo Transformer at 16 devices of ``v100-2x8`` (exact optima,
  :func:`~tensoropt_py.engine.min_sum`) and, with ``--llama-loss``, a two-layer Llama-8B
  at 8 devices of ``h100-4x8`` (the default frontiers' minima: too wide for ``min_sum``);
* ``interval_peak``: memory as a peak over live intervals (IOPDDL-style), on random cyclic
  graphs with 1e18 sentinels: (a) small graphs, ``peak_frontier`` and
  ``min_time_under_peak`` (at the midpoints between frontier peaks) vs brute force (count of
  identical results); (b) 200 to 1000 nodes, 4 configs, sparse local cycles, at three peak
  limits between the least possible and the fastest strategy's peak: root Lagrangian solve
  (``max_nodes=1``) time vs its lower bound (gap %), seconds;
* ``iopddl``: IOPDDL contest files (:mod:`tensoropt_py.engine.iopddl`) of 2,000, 10,000 and
  50,000 nodes (6 strategies each, sparse local cycles, 1e18 sentinels, a usage limit halfway
  between the least possible and the fastest strategy's peak): written as ``.json.gz``, read,
  solved at the root (``max_nodes=1``), the solution scored again from the file: seconds,
  cost, lower bound and gap;
* ``candidates``: ``track(candidates=r)`` (restricted to promising configs, see
  :mod:`tensoropt_py.engine.screen`) vs the default and the exact frontier on Transformers
  with many configs per operator (``--candidate-graphs``, e.g. one layer on 16 devices):
  seconds, and the time lost at equal memory against the exact frontier;
* ``candidates_full``: the whole 16-device Transformer with ``track(candidates=r)``
  (``--candidate-counts``) against the default frontier of ``transformer16_track`` (run that
  case first): seconds (and those of the bounds and of the exact optima), configs kept, and the
  time lost at equal memory;
* ``candidates_oracle``: candidate configs chosen by an oracle on the whole 16-device
  Transformer, a choice no cheap one can beat by much: its graph restricted to the configs
  that the default frontier of ``transformer16_track`` uses (run that case first), united over
  the operators of equal node costs so that repeated layers stay repeated, tracked with
  default settings (no anchors) and with no heuristic step (``exact=True``,
  ``max_memory=--max-memory``): configs kept, seconds, points, heuristic steps, and the time
  lost at equal memory against the default frontier;
* ``mixtral``: a Mixtral-8x7B-shaped mixture-of-experts model (32 layers, hidden 4096, GQA
  32/8, 8 experts of FFN 14336, top-2, vocab 32000, batch 32 x 4096; 46.7 B parameters)
  imported from Hugging Face on the meta device, its frontier asked of ``to.frontier`` with
  default settings on the ``--llama-devices`` (the plain space, and with recomputation, sharded
  optimizer state and bf16-mixed): seconds (all, build, track, every tracked point's peak),
  points, proven bound, the fastest point's gap to a lower bound, the least memory and the
  fastest time, peak resident memory; and the space with those levers tracked with
  ``max_memory=--max-memory`` (seconds, points, memo hits, peak table bytes);
* ``paper16``: the paper's other models at its 16-device setting (``--paper-models``: the zoo
  ``wide_resnet`` and ``rnn`` on 16 devices of ``v100-2x8``), tracked with default settings:
  build and track seconds, points, heuristic eliminations, where ``epsilon="auto"`` thinned,
  the anchors and the end gaps, with the paper's FT-LDP seconds (Table 3, 48 cores) beside;
  with ``--paper-uncapped``, a model whose run restricted or fixed configs for the work cap
  (``max_step_work``) is tracked again without it: seconds, points, and the time lost at equal
  memory each way;
* ``build_threads``: the cost graphs of the Llama- and Mixtral-shaped models of the ``llama`` and
  ``mixtral`` cases (``--llama-layers`` decoder layers) on the ``--llama-devices``, built with the
  rescheduling searches on each of ``--threads``, alternated, twice: seconds, the searches, and
  whether every thread count gave identical arrays;
* ``llama``: a Llama-3-8B-shaped model (32 layers, hidden 4096, GQA 32/8, FFN 14336,
  vocab 128256, batch 32 x 2048) imported from Hugging Face on the meta device, built
  with the default mesh space (hierarchical past 16 devices) and tracked with default
  settings and ``max_memory=--max-memory`` on 32 devices of ``h100-4x8`` and 64 of
  ``h100-8x8`` (``--llama-devices``; ``--llama-layers`` for a shallower model): import,
  build and track seconds, configurations per operator, points, peak table bytes, peak
  resident memory, and for an end whose exact optimum is out of reach (too wide for
  ``min_sum``) its gap to the relaxation lower bound after descent (``end_gaps``), with the
  points the descents added and the largest fall of min(time + lam * memory) they gave;
* ``llama_anchors_process``: that model's default ``track`` on the same devices with its anchors
  beside the run on a thread and in a process of their own (the default), alternated, twice
  each: seconds, where the anchors ran, their seconds beside the run and after it, and whether
  the frontiers are the same.

Usage: python benchmarks/bench_scale.py [--cases transformer16_track transformer16_skip transformer16_dominated transformer16_sweep transformer16_covers transformer16_simd transformer16_hub_first transformer16_limits transformer16_terms transformer16_outside
       transformer16_parts transformer16_join_order anchors_small anchors_starved fastest cli_frontier threads cyclic interval_peak iopddl candidates candidates_full candidates_oracle mesh_loss paper16 build_threads llama mixtral] [--timeout 600] [--threads 1 2] [--thread-devices 8] [--max-memory 4e9]
       [--candidate-graphs 1x16] [--paper-models wide_resnet rnn] [--paper-uncapped] [--llama-devices 32 64]
       [--llama-layers 32] [--llama-loss]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T16_FRONTIER = os.path.join(tempfile.gettempdir(), "_bench_scale_t16.npz")

_PRE = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
import numpy as np
import tensoropt_py as to
from tensoropt_py.graph import zoo
from tensoropt_py.cost.builder import build_cost_graph
from tensoropt_py.engine import track, min_sum, brute_force_frontier
def out(**kw):
    print(json.dumps(kw), flush=True)
T16_FRONTIER = {t16_frontier!r}  # the default Transformer@16 frontier, written by case transformer16_track
def t16_frontier():
    if not os.path.exists(T16_FRONTIER):
        raise SystemExit(T16_FRONTIER + " is missing: run --cases transformer16_track first")
    return np.load(T16_FRONTIER)
def import_causal_lm(kind, batch, seq, **config):
    # a Hugging Face causal LM ("Llama", "Mixtral") built from a config on the meta device, no weights
    import torch, transformers
    from tensoropt_py.graph import from_torch
    cfg = getattr(transformers, kind + "Config")(use_cache=False, **config)
    with torch.device("meta"):
        model = getattr(transformers, kind + "ForCausalLM")(cfg)
    ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    return from_torch(model, kwargs={{"input_ids": ids, "labels": ids}})
def import_llama(layers):  # Llama-3-8B's shapes (GQA 32/8, FFN 14336, vocab 128256), batch 32 x 2048
    return import_causal_lm("Llama", 32, 2048, num_hidden_layers=layers, hidden_size=4096, num_attention_heads=32,
                            num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
                            max_position_embeddings=2048)
def import_mixtral(layers):  # Mixtral-8x7B's shapes (8 experts, top-2, vocab 32000), batch 32 x 4096
    return import_causal_lm("Mixtral", 32, 4096, num_hidden_layers=layers, hidden_size=4096, num_attention_heads=32,
                            num_key_value_heads=8, intermediate_size=14336, vocab_size=32000, num_local_experts=8,
                            num_experts_per_tok=2, max_position_embeddings=4096)
def gaps(fr, ref):
    # time lost at equal memory for every point of ref that fr covers (fr has a point of no more
    # memory), how many it does not, and the worst gap of min(time + lam * memory); where fr
    # loses more than 1%: at how many points of ref, and how far above ref's least memory
    g = np.array([fr.time[fr.memory <= m * (1 + 1e-12)].min() / t - 1 if fr.memory[0] <= m * (1 + 1e-12) else np.nan
                  for m, t in zip(ref.memory, ref.time)])
    lg = max((fr.time + l * fr.memory).min() / (ref.time + l * ref.memory).min() - 1 for l in np.geomspace(1e-13, 1e-8, 30))
    cov = g[~np.isnan(g)]
    over = ref.memory[np.nan_to_num(g) > 0.01] / ref.memory[0] - 1
    return dict(worst_gap_pct=100 * float(cov.max()), median_gap_pct=100 * float(np.median(cov)),
                matched=float(np.mean(cov <= 1e-12)), uncovered=int(np.isnan(g).sum()), worst_lam_gap_pct=100 * float(lg),
                ref_points=int(g.size), over_1pct=int(over.size),
                over_1pct_memory_pct=[100 * float(over.min()), 100 * float(over.max())] if over.size else None)
"""

CASES = {
    "transformer16_track": r"""
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
t0 = time.perf_counter()
fr = track(cg, threads={threads})
t1 = time.perf_counter()
st = fr.stats
out(case="transformer16_track", seconds=t1 - t0, points=len(fr), heuristic=fr.n_heuristic,
    work_capped=st.get("work_capped", 0), work_restricted=st.get("work_restricted", 0), epsilon=fr.epsilon,
    bound=fr.memory_bound_factor, epsilon_from_combine=st.get("epsilon_from_combine"),
    auto_exact_attempt=st.get("auto_exact_attempt"),
    anchors=str(st.get("anchors"))[:80], anchor_ties=st.get("anchor_ties"), anchor_s=st.get("anchor_seconds"), peak_gib=st["peak_table_bytes"] / 2**30,
    fastest=[float(fr.memory[-1]), float(fr.time[-1])], smallest=[float(fr.memory[0]), float(fr.time[0])])
np.savez(T16_FRONTIER, memory=fr.memory, time=fr.time, choices=fr.choices)
""",
    "fastest": r"""
from tensoropt_py.baselines import optcnn
g = zoo.transformer(); cl = to.Cluster.preset("v100-2x8")
cg = build_cost_graph(g, cl, 16).cost_graph
d = t16_frontier()
m, t = d["memory"], d["time"]
t0 = time.perf_counter(); p = optcnn(g, cl, 16); t1 = time.perf_counter()
out(case="optcnn", seconds=t1 - t0, memory=p.memory, time=p.time, frontier_fastest_time=float(t.min()))
for lam in [0.0, 1e-11, 3e-11, 1e-10, 3e-10, float("inf")]:
    t0 = time.perf_counter(); o = min_sum(cg, lam); s = time.perf_counter() - t0
    fmin = float(m.min()) if np.isinf(lam) else float((t + lam * m).min())
    out(case="min_sum", lam=lam, seconds=s, exact=o.value, frontier=fmin, rel_gap=(fmin - o.value) / o.value,
        memory=o.memory, time=o.time)
""",
    "fastest_ties": r"""
import importlib
scalar = importlib.import_module("tensoropt_py.engine.scalar")
track_mod = importlib.import_module("tensoropt_py.engine.track")
from tensoropt_py.engine.random_graphs import random_chain
for name, devices in (("transformer", 8), ("wide_resnet", 8), ("bert_large", 8), ("gpt2", 8), ("vgg16", 8),
                      ("rnn", 8), ("transformer", 16)):
    cg = build_cost_graph(getattr(zoo, name)(), to.Cluster.preset("v100-2x8"), devices).cost_graph
    t0 = time.perf_counter()
    try:
        first, tied, work = scalar._min_sum_within(cg, 0.0, scalar.MAX_FACTOR_ENTRIES, scalar.MAX_FACTOR_ENTRIES, 2e9)
    except Exception as exc:
        out(case="fastest_ties", model=name, devices=devices, error=f"{{type(exc).__name__}}: {{exc}}"[:200])
        continue
    t1 = time.perf_counter()
    row = dict(case="fastest_ties", model=name, devices=devices, work=work, first_s=t1 - t0, tied=tied,
               first_memory=first.memory, time=first.time)
    if tied and work <= 4e8:
        smallest = scalar._smallest_of_fastest(cg, first, scalar.MAX_FACTOR_ENTRIES, np.inf, None)
        row.update(tie_solve_s=time.perf_counter() - t1, smallest_memory=smallest.memory, smallest_time=smallest.time,
                   memory_saved=1 - smallest.memory / first.memory)
    if tied:  # the weighted solve (the anchors' past 5e7 terms), on the whole graph
        t2 = time.perf_counter()
        weighted = scalar._smallest_of_fastest(cg, first, scalar.MAX_FACTOR_ENTRIES, 0.0, None)
        row.update(weighted_s=time.perf_counter() - t2, weighted_proven=weighted is not None,
                   weighted_memory=None if weighted is None else weighted.memory,
                   weighted_time=None if weighted is None else weighted.time)
    out(**row)
rng = np.random.default_rng(0)
cases = [(int(rng.integers(5, 30)), int(rng.integers(3, 15)), int(rng.integers(2, 5)) if rng.random() < 0.5 else None,
          int(rng.integers(1, 3)), int(rng.integers(1 << 30))) for _ in range(300)]
kwargs = dict(max_merged_configs=10000, max_step_work=1e3, epsilon=0.01)
most, weight = track_mod._TIE_MAX_WORK, scalar._TIE_WEIGHT
track_mod._ANCHORS_IN_PROCESS = False  # the anchors on a thread, which sees the settings below
for label, cap, w in (("time, then memory", most, weight), ("weighted", 0, weight), ("first fastest found", 0, 0.0)):
    track_mod._TIE_MAX_WORK, scalar._TIE_WEIGHT = cap, w
    equal, agree, unproven, excess, t0 = 0, 0, 0, [], time.perf_counter()
    for n, k, layouts, options, seed in cases:
        cg = random_chain(n, k, layouts=layouts, options=options, seed=seed, integer_costs=True)
        exact = track(cg, exact=True)
        runs = [track(cg, threads=threads, **kwargs) for threads in (1, 2)]
        i, j = int(np.argmin(exact.time)), int(np.argmin(runs[0].time))
        equal += bool(runs[0].time[j] == exact.time[i] and runs[0].memory[j] == exact.memory[i])
        excess.append(runs[0].memory[j] / exact.memory[i] - 1)
        agree += bool(np.array_equal(runs[0].memory, runs[1].memory) and np.array_equal(runs[0].time, runs[1].time))
        unproven += "anchor_ties" in runs[0].stats
    out(case="fastest_ties_chains", anchor=label, chains=len(cases), fastest_end_exact=equal, threads_agree=agree,
        ties_reported=unproven,
        worst_memory_excess=float(max(excess)), median_excess_where_worse=float(np.median([e for e in excess if e > 0]))
        if any(e > 0 for e in excess) else 0.0, seconds=time.perf_counter() - t0)
track_mod._TIE_MAX_WORK, scalar._TIE_WEIGHT = most, weight
track_mod._ANCHORS_IN_PROCESS = True
""",
    "transformer16_limits": r"""
from tensoropt_py.engine.screen import lam_grid, relaxation_bounds, screen_out
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
for eps in (1e-3, 3e-3, 1e-2):
    t0 = time.perf_counter(); fr = track(cg, epsilon=eps, anchors=False); s = time.perf_counter() - t0
    out(case="epsilon", epsilon=eps, seconds=s, points=len(fr), bound=fr.memory_bound_factor,
        terms=fr.stats["terms"], output_points=fr.stats["points"])
d = t16_frontier()
for n in (12, 24, 48):
    t0 = time.perf_counter(); rb = relaxation_bounds(cg, lam_grid(cg, n)); s = time.perf_counter() - t0
    drop = screen_out(rb, d["memory"], d["time"])
    out(case="screen", weights=n, bounds_seconds=s, configs=int(sum(cg.n_configs)),
        proven_useless=int(sum(int(x.sum()) for x in drop)))
""",
    "transformer16_terms": r"""
# how the terms of the default run's costliest combine end: sampled output cells, every term
# (a product of one cell of each parent) against the exact frontier of its output cell
import tensoropt_py.elimination.table as tab_mod
from tensoropt_py.engine.algebra import frontier_indices
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
costliest = [0.0, None]
run_kernel = tab_mod.run_kernel
def timed(*args, **kw):
    t0 = time.perf_counter(); res = run_kernel(*args, **kw); s = time.perf_counter() - t0
    if s > costliest[0] and kw.get("outer") is not None:
        costliest[:] = [s, (args, kw["outer"])]
    return res
tab_mod.run_kernel = timed
track(cg, threads=1)
tab_mod.run_kernel = run_kernel
(offs, mems, tims, *_), (row, col) = costliest[1]
S, n_out, U = len(offs), row.shape[1], col.shape[1]
def dominated(fm, ft, m, t):
    i = np.searchsorted(fm, m, side="right") - 1
    return (i >= 0) & (ft[np.maximum(i, 0)] <= t)
lam_scale = np.median(np.concatenate(tims)) / np.median(np.concatenate(mems))
weights = {{n: lam_scale * np.geomspace(1e-2, 1e2, n) for n in (4, 16)}}
counts = dict(terms=0, dominated=0, by_corner=0, **{{f"by_{{n}}_weights": 0 for n in weights}})
hull = points = term_points = by_buckets = 0
from tensoropt_py.elimination._kernels import FILTER_BUCKETS as n_buckets
for c in np.random.default_rng(0).choice(n_out, min(n_out, 100), replace=False):
    cells = [[(offs[s][row[s, c] + col[s, u]], offs[s][row[s, c] + col[s, u] + 1]) for s in range(S)] for u in range(U)]
    prods = []
    for term in cells:
        m, t = np.zeros(1), np.zeros(1)
        for s, (lo, hi) in enumerate(term):
            m = (m[:, None] + mems[s][lo:hi][None, :]).ravel(); t = (t[:, None] + tims[s][lo:hi][None, :]).ravel()
        prods.append((m, t, term))
    allm = np.concatenate([p[0] for p in prods]); allt = np.concatenate([p[1] for p in prods])
    keep = frontier_indices(allm, allt)
    fm, ft = allm[keep], allt[keep]
    kept_by = set(np.repeat(np.arange(U), [p[0].size for p in prods])[keep].tolist())  # terms with a frontier point
    # points on the lower convex hull of the cell's frontier (found by some weighted sum)
    h = []
    for q in zip(fm, ft):
        while len(h) >= 2 and (h[-1][0] - h[-2][0]) * (q[1] - h[-2][1]) - (h[-1][1] - h[-2][1]) * (q[0] - h[-2][0]) <= 0:
            h.pop()
        h.append(q)
    hull += len(h); points += fm.size
    # the kernel's filter with the cell's whole frontier: buckets from the terms' least memory to
    # their most, each holding the least time of the frontier points below it
    lo = min(p[0].min() for p in prods); inv = n_buckets / (max(p[0].max() for p in prods) - lo)
    bucket = lambda m: np.clip((m - lo) * inv, 0, n_buckets - 1).astype(np.int64)
    below = np.full(n_buckets + 1, np.inf)
    np.minimum.at(below, bucket(fm) + 1, ft)
    below = np.minimum.accumulate(below)[:n_buckets]
    for m, t, _ in prods:
        term_points += m.size; by_buckets += int(np.count_nonzero(below[bucket(m)] <= t))
    # the frontier's outer corners: where a point must go to be kept
    cm = np.concatenate([fm, [np.inf]]); ct = np.concatenate([[np.inf], ft])
    for u, (m, t, term) in enumerate(prods):
        counts["terms"] += 1
        if u in kept_by:
            continue
        counts["dominated"] += 1  # the term adds nothing to its cell's frontier
        corner_m, corner_t = m.min(), t.min()
        if dominated(fm, ft, corner_m, corner_t):
            counts["by_corner"] += 1
            continue
        rel = (cm > corner_m) & (ct > corner_t)
        for n, lams in weights.items():
            bound = np.array([sum(float((tims[s][lo:hi] + lam * mems[s][lo:hi]).min()) for s, (lo, hi) in enumerate(term))
                              for lam in lams])
            if (np.max(bound[None, :] - lams[None, :] * cm[rel][:, None], axis=1) >= ct[rel]).all():
                counts[f"by_{{n}}_weights"] += 1
# the terms the kernel skips as covered (outer_skip_mask), and the combine with and without skipping
from tensoropt_py.elimination.kernels import combine_outer, outer_skip_mask
tables, eps = list(zip(offs, mems, tims)), costliest[1][0][5]
covered = outer_skip_mask(tables, row, col)
runs, results = {{}}, []
for mode in ("never", "auto", "never", "auto"):
    t0 = time.perf_counter(); results.append(combine_outer(tables, row, col, epsilon=eps, validate=False, skip_covered=mode))
    runs.setdefault(mode, []).append(time.perf_counter() - t0)
same = all(np.array_equal(a, b) for res in results[1:] for a, b in zip(res, results[0]))
out(case="terms", combine_seconds=costliest[0], cells=n_out, terms_per_cell=U, slots=S, sampled_cells=min(n_out, 100),
    **counts, frontier_points=points, on_convex_hull=hull, term_points=term_points, dropped_by_buckets=by_buckets,
    covered_skipped=float(covered.mean()), combine_s_without_skipping=runs["never"], combine_s_skipping=runs["auto"],
    same_output=bool(same))
""",
    "transformer16_skip": r"""
# the default track with and without skipping covered outer terms (the kernel's skip_covered), alternated
import tensoropt_py.elimination.table as tab_mod
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
run_kernel = tab_mod.run_kernel
def never(*args, **kw):
    return run_kernel(*args, **{{**kw, "skip_covered": "never"}})
runs = {{}}
for mode in ("never", "auto", "never", "auto"):
    tab_mod.run_kernel = never if mode == "never" else run_kernel
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    runs.setdefault(mode + "_points", len(fr))
tab_mod.run_kernel = run_kernel
out(case="transformer16_skip", threads={threads}, seconds_without_skipping=runs["never"], seconds_skipping=runs["auto"],
    points=[runs["never_points"], runs["auto_points"]])
""",
    "transformer16_dominated": r"""
# the default track with and without skipping the outer terms another strictly dominates (the
# kernel's skip_dominated), alternated; then on one thread at epsilon 1e-3 without anchors, with
# the kernel calls where "auto" skips them timed both ways, and the costliest one's share of terms
# covered and strictly dominated; the frontiers and strategies are compared bit for bit
import tensoropt_py.elimination.table as tab_mod
import tensoropt_py.elimination.kernels as kernels_mod
from tensoropt_py.elimination.kernels import outer_skip_mask
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
run_kernel = tab_mod.run_kernel
def never(*args, **kw):
    return run_kernel(*args, **{{**kw, "skip_dominated": "never"}})
def same(a, b):
    return bool(np.array_equal(a.memory, b.memory) and np.array_equal(a.time, b.time)
                and np.array_equal(a.choices, b.choices))
runs, fronts = {{}}, {{}}
def alternated(prefix, **settings):
    for mode in ("never", "auto", "never", "auto"):
        tab_mod.run_kernel = never if mode == "never" else run_kernel
        t0 = time.perf_counter(); fr = track(cg, **settings)
        runs.setdefault(prefix + mode, []).append(time.perf_counter() - t0)
        fronts.setdefault(prefix + mode, fr)
alternated("", threads={threads})
alternated("one_", threads=1, epsilon=1e-3, anchors=False)
calls = []
def timing(offs, mems, tims, term_off, term_cells, eps, threads, *args, **kw):
    outer = kw.get("outer")
    if outer is None or not kernels_mod._skip_dominated(offs, outer, "auto"):
        return run_kernel(offs, mems, tims, term_off, term_cells, eps, threads, *args, **kw)
    spent = {{}}
    for mode in ("never", "auto", "never", "auto"):
        t0 = time.perf_counter()
        res = run_kernel(offs, mems, tims, term_off, term_cells, eps, threads, *args, **{{**kw, "skip_dominated": mode}})
        spent[mode] = min(spent.get(mode, np.inf), time.perf_counter() - t0)
    calls.append((spent["never"], spent["auto"], list(zip(offs, mems, tims)), outer))
    return res
tab_mod.run_kernel = timing
track(cg, threads=1, epsilon=1e-3, anchors=False)
tab_mod.run_kernel = run_kernel
costliest = max(calls, key=lambda c: c[0])
tables, (row, col) = costliest[2], costliest[3]
covered = outer_skip_mask(tables, row, col)
dominated = outer_skip_mask(tables, row, col, dominated=True)
out(case="transformer16_dominated", threads={threads}, seconds_without=runs["never"], seconds_with=runs["auto"],
    one_thread_seconds_without=runs["one_never"], one_thread_seconds_with=runs["one_auto"],
    points=[len(fronts["never"]), len(fronts["auto"])],
    same_frontier=same(fronts["never"], fronts["auto"]) and same(fronts["one_never"], fronts["one_auto"]),
    calls=len(calls), calls_seconds_without=sum(c[0] for c in calls), calls_seconds_with=sum(c[1] for c in calls),
    costliest_cells=[int(o.shape[0] - 1) for o, _, _ in tables], costliest_terms=int(covered.size),
    costliest_covered=float(covered.mean()), costliest_covered_or_dominated=float(dominated.mean()),
    costliest_seconds=[costliest[0], costliest[1]])
""",
    "transformer16_sweep": r"""
# the default track with and without the sweep kernel (run_kernel's sweep), alternated; the
# frontiers and strategies are compared bit for bit
import tensoropt_py.elimination.table as tab_mod
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
run_kernel = tab_mod.run_kernel
def never(*args, **kw):
    return run_kernel(*args, **{{**kw, "sweep": "never"}})
runs, fronts = {{}}, {{}}
for mode in ("never", "auto", "never", "auto"):
    tab_mod.run_kernel = never if mode == "never" else run_kernel
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    fronts.setdefault(mode, fr)
tab_mod.run_kernel = run_kernel
a, b = fronts["never"], fronts["auto"]
out(case="transformer16_sweep", threads={threads}, seconds_without_sweep=runs["never"], seconds_with_sweep=runs["auto"],
    points=[len(a), len(b)], same_frontier=bool(np.array_equal(a.memory, b.memory) and np.array_equal(a.time, b.time)
                                                and np.array_equal(a.choices, b.choices)))
""",
    "transformer16_covers": r"""
# the default track with and without keeping cover bitsets for tables that recur (run_kernel's
# cover_memo), alternated; the frontiers and strategies are compared bit for bit
import threading
import tensoropt_py.elimination.table as tab_mod
import tensoropt_py.elimination.kernels as kernels_mod
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
run_kernel, compiled = tab_mod.run_kernel, kernels_mod._kernels
def forgetting(*args, **kw):
    return run_kernel(*args, **{{**kw, "cover_memo": None}})
spent, lock = [0.0, 0], threading.Lock()
class Counting:  # the compiled module, its cover_bitsets timed (they run on the kernel's threads)
    def __getattr__(self, name):
        return getattr(compiled, name)
    def cover_bitsets(self, *args):
        t0 = time.perf_counter(); bits = compiled.cover_bitsets(*args); s = time.perf_counter() - t0
        with lock:
            spent[0] += s; spent[1] += 1
        return bits
kernels_mod._kernels = Counting()
runs, fronts = {{}}, {{}}
for mode in ("forget", "keep", "forget", "keep"):
    tab_mod.run_kernel = forgetting if mode == "forget" else run_kernel
    spent[:] = [0.0, 0]
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    runs.setdefault(mode + "_bitsets", (spent[1], round(spent[0], 3)))
    fronts.setdefault(mode, fr)
tab_mod.run_kernel = run_kernel
kernels_mod._kernels = compiled
a, b = fronts["forget"], fronts["keep"]
out(case="transformer16_covers", threads={threads}, seconds_recomputing=runs["forget"], seconds_keeping=runs["keep"],
    bitset_calls_and_seconds=[runs["forget_bitsets"], runs["keep_bitsets"]], points=[len(a), len(b)],
    same_frontier=bool(np.array_equal(a.memory, b.memory) and np.array_equal(a.time, b.time)
                       and np.array_equal(a.choices, b.choices)))
""",
    "transformer16_simd": r"""
# the default track with the kernels testing points one by one and four at a time (AVX2, where
# the CPU has it), alternated; the frontiers and strategies are compared bit for bit
from tensoropt_py.elimination import _kernels
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
runs, fronts = {{}}, {{}}
available = _kernels._use_simd(True)
for on in (False, True, False, True):
    _kernels._use_simd(on)
    mode = "simd" if on else "one_by_one"
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    fronts.setdefault(mode, fr)
_kernels._use_simd(True)
a, b = fronts["one_by_one"], fronts["simd"]
out(case="transformer16_simd", threads={threads}, avx2=available, seconds_one_by_one=runs["one_by_one"],
    seconds_four_at_a_time=runs["simd"], points=[len(a), len(b)],
    same_frontier=bool(np.array_equal(a.memory, b.memory) and np.array_equal(a.time, b.time)
                       and np.array_equal(a.choices, b.choices)))
""",
    "transformer16_hub_first": r"""
# the default track with and without eliminating a hub before its neighbour where that costs
# less (driver._hub_first), alternated; the two orders sum the same terms in another order, so
# the frontiers are compared to the last bits of rounding
import tensoropt_py.elimination.driver as driver
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
hub_first = driver._hub_first
def never(*args, **kw):
    return None
runs, fronts, fired = {{}}, {{}}, {{}}
for mode in ("plain", "hub_first", "plain", "hub_first"):
    driver._hub_first = hub_first if mode == "hub_first" else never
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    fronts.setdefault(mode, fr)
    fired.setdefault(mode, fr.stats["hub_first"])
driver._hub_first = hub_first
a, b = fronts["plain"], fronts["hub_first"]
same_size = len(a) == len(b)
out(case="transformer16_hub_first", threads={threads}, seconds_plain=runs["plain"], seconds_hub_first=runs["hub_first"],
    hubs_first=fired["hub_first"], points=[len(a), len(b)],
    max_rel_diff=(float(max(np.abs(b.memory / a.memory - 1).max(), np.abs(b.time / a.time - 1).max()))
                  if same_size else None),
    same_strategies=bool(same_size and np.array_equal(a.choices, b.choices)))
""",
    "transformer16_anchors_beside": r"""
# the default track with the anchors solved beside the run (in a process of their own, from the
# exact start given up on) and after it, alternated: wall and CPU seconds (the process's
# included), the anchors' seconds after the run and beside it, and whether the frontiers are the same
import importlib, resource
track_mod = importlib.import_module("tensoropt_py.engine.track")
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
runs, cpu, after, beside, fronts = {{}}, {{}}, {{}}, {{}}, {{}}
for mode in ("after", "beside", "after", "beside"):
    track_mod._BACKGROUND_ANCHORS = mode == "beside"
    r0 = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    r1 = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]  # the process, reaped
    cpu.setdefault(mode, []).append(sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(r0, r1)))
    after.setdefault(mode, []).append(fr.stats["anchor_seconds"])
    beside.setdefault(mode, []).append(fr.stats.get("anchor_background_seconds"))
    fronts.setdefault(mode, fr)
track_mod._BACKGROUND_ANCHORS = True
a, b = fronts["after"], fronts["beside"]
out(case="transformer16_anchors_beside", threads={threads}, seconds_after=runs["after"], seconds_beside=runs["beside"],
    cpu_after=cpu["after"], cpu_beside=cpu["beside"], anchor_s_after=after["after"], anchor_s_beside=after["beside"],
    background_s=beside["beside"], solved_beside=b.stats.get("anchors_beside"), points=[len(a), len(b)],
    same_frontier=bool(len(a) == len(b) and np.allclose(a.memory, b.memory, rtol=1e-12, atol=0)
                       and np.allclose(a.time, b.time, rtol=1e-12, atol=0)))
""",
    "transformer16_anchors_process": r"""
# what solving the anchors beside the run costs it: track without anchors, with them on a thread
# of this process, and with them in a process of their own (the default), alternated, four each:
# seconds, their medians, the seconds the anchors took beside the run, and whether the frontiers
# of the two ways are the same
import importlib
track_mod = importlib.import_module("tensoropt_py.engine.track")
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
runs, beside, fronts = {{}}, {{}}, {{}}
for mode in ("none", "thread", "process") * 4:
    track_mod._ANCHORS_IN_PROCESS = mode == "process"
    t0 = time.perf_counter()
    fr = track(cg, threads={threads}, anchors=mode != "none")
    runs.setdefault(mode, []).append(time.perf_counter() - t0)
    if mode != "none":
        assert fr.stats["anchors_beside_in"] == mode, fr.stats.get("anchors_beside_in")
        beside.setdefault(mode, []).append([round(fr.stats["anchor_background_seconds"], 3),
                                            list(fr.stats["anchors_beside"]), round(fr.stats["anchor_seconds"], 3)])
        fronts.setdefault(mode, set()).add((fr.memory.tobytes(), fr.time.tobytes()))
track_mod._ANCHORS_IN_PROCESS = True
out(case="transformer16_anchors_process", threads={threads}, seconds=runs,
    median={{k: float(np.median(v)) for k, v in runs.items()}},
    beside_seconds_used_after=beside, same_frontier=fronts["thread"] == fronts["process"] and len(fronts["thread"]) == 1)
""",
    "anchors_small": r"""
# where the anchors beside the run gain on graphs of a few devices: the default track of zoo models on
# 2 and 4 devices of v100-2x8, with the anchors as the default places them (in a process of their own
# from _PROCESS_MIN_LEAF_BYTES of leaf tables, else after the run), in a process, on a thread, after
# the run, and without anchors, alternated, three rounds: leaf bytes, where the default put them, and
# the median seconds of each
import importlib
track_mod = importlib.import_module("tensoropt_py.engine.track")
least = track_mod._PROCESS_MIN_LEAF_BYTES
for name in ("transformer", "bert_large", "gpt2", "vgg16"):
    for devices in (2, 4):
        cg = build_cost_graph(getattr(zoo, name)(), to.Cluster.preset("v100-2x8"), devices).cost_graph
        runs, placed = {{}}, set()
        for mode in ("default", "process", "thread", "after", "none") * 3:
            track_mod._ANCHORS_IN_PROCESS = mode != "thread"
            track_mod._PROCESS_MIN_LEAF_BYTES = 0 if mode == "process" else least
            track_mod._BACKGROUND_ANCHORS = mode != "after"
            t0 = time.perf_counter()
            fr = track(cg, threads={threads}, anchors=mode != "none")
            runs.setdefault(mode, []).append(time.perf_counter() - t0)
            if mode == "default":
                placed.add(fr.stats.get("anchors_beside_in", "after"))
        track_mod._ANCHORS_IN_PROCESS, track_mod._PROCESS_MIN_LEAF_BYTES, track_mod._BACKGROUND_ANCHORS = True, least, True
        out(case="anchors_small", model=name, devices=devices, leaf_bytes=track_mod.leaf_bytes(cg), default_in=sorted(placed),
            median={{k: round(float(np.median(v)), 3) for k, v in runs.items()}})
""",
    "anchors_starved": r"""
# the default track of the Transformer on 4 devices of v100-2x8 while as many CPU-bound programs as
# there are cores run beside it: with its anchors where the default puts them (a process of their
# own, ended where starved once the run has ended), on a thread (given up where starved), on a
# thread waited for however long it takes, after the run, and without anchors, alternated, twice
# each: seconds, why the anchors beside the run were given up, and whether the frontiers with
# anchors are the same
import importlib, subprocess
track_mod = importlib.import_module("tensoropt_py.engine.track")
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 4).cost_graph
share = track_mod._ANCHORS_STARVED_SHARE
hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count())]
runs, ended, fronts = {{}}, {{}}, {{}}
try:
    for mode in ("default", "thread", "thread_waited_for", "after", "none") * 2:
        track_mod._ANCHORS_IN_PROCESS = not mode.startswith("thread")
        track_mod._ANCHORS_STARVED_SHARE = -1.0 if mode == "thread_waited_for" else share
        track_mod._BACKGROUND_ANCHORS = mode != "after"
        t0 = time.perf_counter()
        fr = track(cg, threads={threads}, anchors=mode != "none")
        runs.setdefault(mode, []).append(round(time.perf_counter() - t0, 2))
        if mode != "none":
            ended.setdefault(mode, []).append(fr.stats.get("anchors_beside_ended"))
            fronts.setdefault(mode, set()).add((fr.memory.tobytes(), fr.time.tobytes()))
finally:
    for hog in hogs:
        hog.kill()
track_mod._ANCHORS_IN_PROCESS, track_mod._ANCHORS_STARVED_SHARE, track_mod._BACKGROUND_ANCHORS = True, share, True
out(case="anchors_starved", threads={threads}, busy_programs=len(hogs), seconds=runs, ended=ended,
    same_frontier=len(set.union(*fronts.values())) == 1)
""",
    "transformer16_tie_solve": r"""
# the default track with the fastest anchor's weighted tie solve on a thread at the least CPU
# priority (as it is), and with the tie left unsolved on a thread at normal priority, alternated,
# four rounds: wall seconds, the anchors' seconds after the run, whether the tie was solved, and
# whether the frontiers are the same
import importlib
track_mod = importlib.import_module("tensoropt_py.engine.track")
scalar = importlib.import_module("tensoropt_py.engine.scalar")
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
lower, weight = track_mod._behind_the_run, scalar._TIE_WEIGHT
track_mod._ANCHORS_IN_PROCESS = False  # the anchors on a thread, which sees the settings below
runs, after, solved, fronts = {{}}, {{}}, {{}}, {{}}
for mode in ("unsolved", "solved") * 4:
    track_mod._behind_the_run, scalar._TIE_WEIGHT = (lower, weight) if mode == "solved" else (lambda: None, 0.0)
    t0 = time.perf_counter(); fr = track(cg, threads={threads}); runs.setdefault(mode, []).append(time.perf_counter() - t0)
    after.setdefault(mode, []).append(fr.stats["anchor_seconds"])
    solved.setdefault(mode, []).append("anchor_ties" not in fr.stats)
    fronts.setdefault(mode, fr)
track_mod._behind_the_run, scalar._TIE_WEIGHT = lower, weight
track_mod._ANCHORS_IN_PROCESS = True
a, b = fronts["unsolved"], fronts["solved"]
out(case="transformer16_tie_solve", threads={threads}, seconds_unsolved=runs["unsolved"], seconds_solved=runs["solved"],
    median_unsolved=float(np.median(runs["unsolved"])), median_solved=float(np.median(runs["solved"])),
    anchor_s_unsolved=after["unsolved"], anchor_s_solved=after["solved"], tie_solved=[all(solved["unsolved"]),
    all(solved["solved"])], points=[len(a), len(b)],
    same_frontier=bool(len(a) == len(b) and np.allclose(a.memory, b.memory, rtol=1e-12, atol=0)
                       and np.allclose(a.time, b.time, rtol=1e-12, atol=0)))
""",
    "transformer16_min_sum": r"""
# the anchors' exact solves (min_sum on the configs the relaxation bounds leave possible given the
# default frontier's ends) with the numeric pass replaying the plan of the value-less pass, and
# choosing its steps again, alternated
from tensoropt_py.engine.scalar import _eliminate, MAX_FACTOR_ENTRIES
from tensoropt_py.engine.screen import relaxation_bounds, restrict
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
d = t16_frontier()
rb = relaxation_bounds(cg, [0.0])
for lam, row, limit in ((0.0, 0, float(d["time"].min())), (float("inf"), -1, float(d["memory"].min()))):
    keep = [np.flatnonzero(b[row] <= limit * (1 + 1e-9)) for b in rb.bounds]
    g = restrict(cg, keep)
    runs, found = {{}}, {{}}
    for mode in ("choose", "replay", "choose", "replay"):
        t0 = time.perf_counter()
        work, plan = _eliminate(g, lam, MAX_FACTOR_ENTRIES, numeric=False)
        opt, _ = _eliminate(g, lam, MAX_FACTOR_ENTRIES, numeric=True, plan=plan if mode == "replay" else None)
        runs.setdefault(mode, []).append(time.perf_counter() - t0)
        found.setdefault(mode, (opt.memory, opt.time))
    out(case="transformer16_min_sum", lam=lam, configs_kept=int(sum(k.size for k in keep)), configs=int(sum(cg.n_configs)),
        seconds_choose=runs["choose"], seconds_replay=runs["replay"], same=found["choose"] == found["replay"],
        memory=found["replay"][0], time=found["replay"][1])
    # its reductions compiled (min_of_sums; for inf, the lexicographic lex_min_of_sums) and in NumPy's slabs, alternated
    import importlib
    minplus = importlib.import_module("tensoropt_py.engine.scalar")._minplus
    most = minplus.MAX_FACTORS
    runs, found = {{}}, {{}}
    for mode in ("numpy", "compiled") * 3:
        minplus.MAX_FACTORS = most if mode == "compiled" else 0
        t0 = time.perf_counter(); opt = min_sum(g, lam); runs.setdefault(mode, []).append(time.perf_counter() - t0)
        found.setdefault(mode, (opt.value, opt.choices.tobytes()))
    minplus.MAX_FACTORS = most
    out(case="transformer16_min_sum_reductions", lam=lam, seconds_numpy=runs["numpy"], seconds_compiled=runs["compiled"],
        same=found["numpy"] == found["compiled"])
""",
    "transformer16_outside": r"""
# bounds on the rest of the graph against the points of the default run's large tables
import tensoropt_py.elimination.driver as driver
from tensoropt_py.engine.screen import RelaxationBounds, lam_grid, relaxation_bounds, screen_out
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
rng = np.random.default_rng(0)
sampled = []  # per table: boundary nodes, their class maps, and the points of 40 random cells
eliminate_node = driver.eliminate_node
def recording(g, i):
    (h, _), (j, _) = sorted(g.adj[i].items())
    eliminate_node(g, i)
    e = g.adj[h][j]
    T = e.table
    if T.n_points >= 40_000:
        hmap, jmap, sh, sj, _ = e.view(h)
        cells = rng.choice(T.n_cells, min(T.n_cells, 40), replace=False)
        sampled.append((h, j, hmap * sh, jmap * sj, [(c, T.mem[T.offsets[c]:T.offsets[c + 1]].copy(),
                                                      T.time[T.offsets[c]:T.offsets[c + 1]].copy()) for c in cells]))
driver.eliminate_node = recording
track(cg, threads=1)
driver.eliminate_node = eliminate_node
d = t16_frontier()
fm, ft = d["memory"], d["time"]
rb = relaxation_bounds(cg, lam_grid(cg, 24))
lams = rb.lams
points = tables = 0
kept = dict(corner=0, weights=0)
for h, j, hpart, jpart, cells in sampled:
    tables += 1
    for c, pm, pt in cells:
        hs, js = np.nonzero(hpart[:, None] + jpart[None, :] == c)
        bound = np.maximum(rb.bounds[h][:, np.unique(hs)].min(axis=1), rb.bounds[j][:, np.unique(js)].min(axis=1))
        rest = bound[:-1] - (pt[None, :] + lams[:, None] * pm[None, :]).min(axis=1)
        # each point plus the rest, bounded like a config of its own: screen_out drops it when no
        # strategy the bounds allow lands outside the region the frontier dominates
        through = np.vstack([rest[:, None] + pt[None, :] + lams[:, None] * pm[None, :], bound[-1] - pm.min() + pm[None, :]])
        points += pm.size
        for name, rows in (("corner", [0, -1]), ("weights", slice(None))):
            cut = RelaxationBounds(lams[:1] if name == "corner" else lams, (through[rows],), rb.tree_edges)
            kept[name] += int((~screen_out(cut, fm, ft, max_corners=fm.size)[0]).sum())
whole = np.array([max(b[k].min() for b in rb.bounds) for k in range(lams.size)])  # bounds of the whole graph
gap = (ft[None, :] + lams[:, None] * fm[None, :]).min(axis=1) / whole - 1
out(case="outside", tables=tables, sampled_points=points, weights=int(lams.size), frontier_points=int(fm.size),
    kept_by_corner=kept["corner"], kept_by_weights=kept["weights"],
    bound_gap_pct=[100 * float(gap.min()), 100 * float(gap.max())])
""",
    "transformer16_parts": r"""
# where the default run's time goes, on one thread, and how near the optimum the hubs' configs are
import importlib
import tensoropt_py.elimination.driver as driver
from tensoropt_py.engine.screen import restrict
track_mod = importlib.import_module("tensoropt_py.engine.track")  # the module (the package exports the function)
built = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16)
cg, names = built.cost_graph, built.op_names
carrier = names.index("input")  # one config; the running frontier of the model so far rides on edges to it
state = dict(attempt=-1, run=0)
steps = []  # (attempt, run, part, seconds)
def timed(step):
    def wrapper(g, i, *args, **kwargs):
        part = "join" if carrier in g.adj[i] else names[i].split(".")[0]
        t0 = time.perf_counter()
        result = step(g, i, *args, **kwargs)
        steps.append((state["attempt"], state["run"], part, time.perf_counter() - t0))
        return result
    return wrapper
def attempt(run):  # a tracking attempt (the exact start given up is the first of two)
    def wrapper(*args, **kwargs):
        state.update(attempt=state["attempt"] + 1, run=0)
        return run(*args, **kwargs)
    return wrapper
def finished(finish_run):  # the end of a heuristic run: the next steps are the resumed one's
    def wrapper(*args, **kwargs):
        result = finish_run(*args, **kwargs)
        state["run"] += 1
        return result
    return wrapper
driver.eliminate_node = timed(driver.eliminate_node)
driver.fold_leaf = timed(driver.fold_leaf)
driver.eliminate_hub_first = timed(driver.eliminate_hub_first)
track_mod._run = attempt(track_mod._run)
track_mod._finish_run = finished(track_mod._finish_run)
t0 = time.perf_counter()
fr = track(cg, threads=1)
total = time.perf_counter() - t0
kept = [(run, part, s) for a, run, part, s in steps if a == state["attempt"]]  # the attempt that finished
runs = []
for r in sorted({{run for run, _, _ in kept}}):
    layers = {{}}
    joins = []
    for run, part, s in kept:
        if run != r:
            continue
        if part == "join":
            joins.append(s)
        else:
            layers[part] = layers.get(part, 0.0) + s
    runs.append(dict(within={{k: round(v, 3) for k, v in layers.items()}}, joins=len(joins), join_s=round(sum(joins), 3)))
stepped = sum(s for _, _, s in kept)
out(case="parts", seconds=total, exact_start_s=(fr.stats.get("auto_exact_attempt") or {{}}).get("seconds"),
    anchor_s=fr.stats.get("anchor_seconds"), steps_s=stepped, runs=runs)
# the hubs (nodes whose configs become a second dimension of the tables): the exact least
# time + lam * memory with the hub fixed to a config, against the whole graph's, for sampled configs
rng = np.random.default_rng(0)
slopes = -np.diff(fr.time) / np.diff(fr.memory)
lams = (0.0, float(np.median(slopes[np.isfinite(slopes) & (slopes > 0)])))
best = {{lam: min_sum(cg, lam).value for lam in lams}}
for hub in ("encoder.dropout", "encoder1.ln1", "encoder5.ln2"):
    i = names.index(hub)
    K = cg.n_configs[i]
    excess = {{lam: [] for lam in lams}}
    for k in rng.choice(K, size=min(K, 8), replace=False):
        keep = [np.arange(n) for n in cg.n_configs]
        keep[i] = np.array([k])
        sub = restrict(cg, keep)
        for lam in lams:
            excess[lam].append(100 * (min_sum(sub, lam).value / best[lam] - 1))
    out(case="parts_hub", hub=hub, configs=int(K), used_by_frontier=int(np.unique(fr.choices[:, i]).size),
        excess_pct={{f"{{lam:.3g}}": [round(float(x), 3) for x in sorted(v)] for lam, v in excess.items()}})
""",
    "transformer16_join_order": r"""
# the joins of the running frontier with each layer (node eliminations next to the model's input,
# which carries that frontier), their three costliest kernel calls: how many configs of the node
# eliminated reach the thinned output, and each call again with its terms in other orders
# (natural, reversed, and most output points first: an oracle); the same frontiers every time
import tensoropt_py.elimination.driver as driver
import tensoropt_py.elimination.table as tab_mod
from tensoropt_py.elimination.kernels import run_kernel
built = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16)
cg, names = built.cost_graph, built.op_names
carrier = names.index("input")
state = dict(join=False)
calls = []  # (seconds, kernel arguments) of the joins' kernel calls
kernel = tab_mod.run_kernel
def recording(*args, **kwargs):
    t0 = time.perf_counter(); result = kernel(*args, **kwargs); s = time.perf_counter() - t0
    if state["join"] and kwargs.get("outer") is not None:
        calls.append((s, args, kwargs["outer"]))
    return result
eliminate_node = driver.eliminate_node
def joining(g, i, *args, **kwargs):
    state["join"] = carrier in g.adj[i]
    try:
        return eliminate_node(g, i, *args, **kwargs)
    finally:
        state["join"] = False
tab_mod.run_kernel = recording
driver.eliminate_node = joining
t0 = time.perf_counter()
track(cg, threads=1, epsilon=1e-3, anchors=False)
total = time.perf_counter() - t0
tab_mod.run_kernel, driver.eliminate_node = kernel, eliminate_node
out(case="joins", seconds=total, kernel_calls=len(calls), kernel_s=sum(c[0] for c in calls))
for s, (offs, mems, tims, term_off, _, eps, _), (row, col) in sorted(calls, key=lambda c: -c[0])[:3]:
    def timed(order):
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            res = run_kernel(offs, mems, tims, term_off, None, eps, 1, outer=(row, np.ascontiguousarray(col[:, order])))
            best = min(best, time.perf_counter() - t0)
        return best, res
    U = col.shape[1]
    natural, res = timed(np.arange(U))
    # the term of every output point: its cell of the slot whose row is the same for every output cell
    slot = next(k for k in range(row.shape[0]) if np.unique(row[k]).size == 1 and np.diff(offs[k]).max() > 1)
    owner = np.searchsorted(offs[slot], res[3][:, slot], side="right") - 1
    given = np.bincount(np.searchsorted(row[slot, 0] + col[slot], owner), minlength=U)
    row_out = dict(terms=int(U), output_cells=int(row.shape[1]), terms_in_output=int((given > 0).sum()), natural_s=natural)
    for name, order in (("reversed", np.arange(U)[::-1]), ("oracle", np.argsort(-given, kind="stable"))):
        s_, other = timed(order)
        assert all(np.array_equal(a, b) for a, b in zip(res[:3], other[:3]))
        row_out[name + "_s"] = s_
    out(case="join_order", **row_out)
""",
    "cli_frontier": r"""
import re, subprocess
# the command a user runs, in a fresh interpreter, twice: wall seconds, the stages the
# command prints (build, track, the points' peak memory), and the rest (imports, the picked plan,
# printing)
cmd = [sys.executable, "-m", "tensoropt_py", "frontier", "--model", "transformer", "--cluster", "v100-2x8",
       "--devices", "16", "--quiet"]
for run in range(2):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    stages = re.search(r"built in ([0-9.]+) s, frontier tracked in ([0-9.]+) s, its points' peak memory in ([0-9.]+) s",
                       proc.stdout)
    build, track_s, peaks = (float(x) for x in stages.groups())
    points = int(re.search(r"([0-9]+) points", proc.stdout).group(1))
    out(case="cli_frontier", run=run, seconds=wall, build_s=build, track_s=track_s, peaks_s=peaks,
        rest_s=wall - build - track_s - peaks, points=points)
""",
    "threads": r"""
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), {devices}).cost_graph
first = {{}}
for th in {threads_list}:
    t0 = time.perf_counter(); fr = track(cg, epsilon=1e-3, threads=th, anchors=False); s = time.perf_counter() - t0
    first.setdefault("eps", s)
    out(case="threads", devices={devices}, threads=th, seconds=s, speedup=first["eps"] / s, points=len(fr))
    # the default settings: the exact start given up and the anchors run on one thread
    t0 = time.perf_counter(); fr = track(cg, threads=th); s = time.perf_counter() - t0
    first.setdefault("default", s)
    out(case="threads_default", devices={devices}, threads=th, seconds=s, speedup=first["default"] / s, points=len(fr),
        exact_start_s=(fr.stats.get("auto_exact_attempt") or {{}}).get("seconds"), anchor_s=fr.stats.get("anchor_seconds"))
""",
    "cyclic": r"""
from tensoropt_py.engine.random_graphs import random_cyclic_graph
from tensoropt_py.errors import InfeasibleError
same = {{"ldp": 0, "elimination": 0}}; n = 0; infeasible = 0; ms_ok = 0; tb = tt = 0.0
for seed in range(200):
    cg = random_cyclic_graph(n_nodes=7, max_k=3, edge_prob=0.5, forbidden_prob=0.05, seed=seed)
    if cg.n_strategies() > 300_000:
        continue
    t0 = time.perf_counter(); bf = brute_force_frontier(cg); tb += time.perf_counter() - t0
    if len(bf) == 0:
        infeasible += 1
        continue
    n += 1
    for meth in same:
        t0 = time.perf_counter(); fr = track(cg, method=meth, exact=True); tt += time.perf_counter() - t0
        same[meth] += int(np.array_equal(fr.memory, bf.memory) and np.array_equal(fr.time, bf.time))
    ms_ok += int(all(np.isclose(min_sum(cg, lam).value, (bf.time + lam * bf.memory).min(), rtol=1e-12)
                     for lam in (0.0, 1e-9, 1e-6)))
out(case="cyclic", graphs=n, infeasible=infeasible, same_ldp=same["ldp"], same_elimination=same["elimination"],
    min_sum_ok=ms_ok, brute_s=tb, track_s=tt)
""",
    "mesh_loss": r"""
import warnings
from tensoropt_py.engine.scalar import min_sum
# (name, model, preset, devices, how): "min_sum" = exact optima; "track" = the default frontier's minima
# (min_sum cannot eliminate the Llama graph: a factor of 7e9 entries)
cases = [("transformer@16", lambda: zoo.transformer(layers=1), "v100-2x8", 16, "min_sum")]
if {llama_loss}:
    cases.append(("llama2@8", lambda: import_llama(2), "h100-4x8", 8, "track"))
lams = [0.0, 1e-12, 1e-11, 1e-10, 1e-9, float("inf")]
for name, make, preset, n, how in cases:
    g, cl = make(), to.Cluster.preset(preset)
    res = {{}}
    for space in ("all", "hierarchical"):
        t0 = time.perf_counter(); mcg = build_cost_graph(g, cl, n, meshes=space); tb = time.perf_counter() - t0
        t0 = time.perf_counter()
        if how == "min_sum":
            best = [min_sum(mcg.cost_graph, lam).value for lam in lams[:-1]] + [min_sum(mcg.cost_graph, lams[-1]).memory]
            points = None
        else:
            fr = track(mcg.cost_graph)
            best = [float((fr.time + lam * fr.memory).min()) for lam in lams[:-1]] + [float(fr.memory.min())]
            points = len(fr)
        ts = time.perf_counter() - t0
        res[space] = best
        out(case="mesh_loss", model=name, devices=n, meshes=space, how=how, max_configs=max(mcg.cost_graph.n_configs),
            build_s=tb, solve_s=ts, points=points, fastest_s=best[0], least_memory_gb=best[-1] / 1e9)
    rel = [(h - a) / a for a, h in zip(res["all"], res["hierarchical"])]
    worst = int(np.argmax(rel))
    out(case="mesh_loss_gap", model=name, devices=n, how=how, lams=lams, rel_gaps=rel, worst_gap=rel[worst],
        worst_lam=lams[worst], fastest_gap=rel[0], least_memory_gap=rel[-1])
""",
    "interval_peak": r"""
from tensoropt_py.engine import brute_force_peak_frontier, evaluate_peak, min_time_under_peak, peak_frontier
from tensoropt_py.engine.random_graphs import random_cyclic_graph, random_interval_usage, random_sparse_cyclic_graph
from tensoropt_py.errors import InfeasibleError
def versus_brute_force(problems, limits_of):
    # peak_frontier and min_time_under_peak (at the limits limits_of(brute-force peaks) gives)
    # against brute force on small (cost graph, usage) problems; a limit refused counts as a miss
    n = same_fr = exact_fr = solves = same_min = 0; tb = tf = tm = 0.0
    for cg, usage in problems:
        t0 = time.perf_counter(); bf = brute_force_peak_frontier(cg, usage); tb += time.perf_counter() - t0
        if len(bf) == 0:
            continue
        n += 1
        t0 = time.perf_counter(); fr = peak_frontier(cg, usage, max_enumerate=1, iterations=20); tf += time.perf_counter() - t0
        same_fr += int(np.array_equal(fr.peak, bf.peak) and np.array_equal(fr.time, bf.time)); exact_fr += int(fr.exact)
        for lim in limits_of(bf.peak):
            solves += 1
            t0 = time.perf_counter()
            try:
                r = min_time_under_peak(cg, usage, lim, max_enumerate=1, iterations=20)
            except InfeasibleError:
                continue
            finally:
                tm += time.perf_counter() - t0
            same_min += int(r.optimal and r.time == bf.time[bf.peak <= lim].min())
    return dict(graphs=n, frontier_same=same_fr, frontier_exact=exact_fr, limits=solves, min_time_same=same_min,
                brute_s=tb, frontier_s=tf, min_time_s=tm)
def small_problems():
    for seed in range(60):
        cg = random_cyclic_graph(n_nodes=7, max_k=3, edge_prob=0.4, forbidden_prob=0.08, max_options=1 + seed % 2, seed=seed)
        if cg.n_strategies() <= 300_000:
            yield cg, random_interval_usage(cg, max_span=5, empty_prob=0.1, seed=seed)
def fractional_problems():  # usages that are not whole bytes: their sums round
    for seed in range(60):
        cg = random_cyclic_graph(n_nodes=6, max_k=3, edge_prob=0.4, forbidden_prob=0.05, max_options=1 + seed % 2,
                                 seed=seed, integer_costs=False)
        yield cg, random_interval_usage(cg, max_span=3, empty_prob=0.2, seed=seed)
# limits between consecutive peaks; with fractional usages, each of the frontier's own peaks
out(case="interval_peak_small", **versus_brute_force(small_problems(), lambda peaks: (peaks[:-1] + peaks[1:]) / 2))
out(case="interval_peak_fractional", **versus_brute_force(fractional_problems(), lambda peaks: peaks.tolist()))
for nodes in (200, 500, 1000):
    cg = random_sparse_cyclic_graph(nodes, 4, forbidden_prob=0.05, seed=nodes)
    usage = random_interval_usage(cg, max_span=20, seed=nodes)
    fast = min_sum(cg, 0.0)
    top = float(evaluate_peak(cg, usage, fast.choices)[0][0])
    least = [int(np.argmin(np.where(np.isfinite(c[:, 1]), u, np.inf))) for c, u in zip(cg.node_costs, usage.usage)]
    low = float(usage.loads(np.array([least])).max())
    for frac in (0.25, 0.5, 0.75):
        lim = low + frac * (top - low)
        t0 = time.perf_counter()
        try:
            r = min_time_under_peak(cg, usage, lim, max_nodes=1, iterations=100)
        except InfeasibleError as exc:
            out(case="interval_peak_large", nodes=nodes, frac=frac, error=str(exc)[:200], seconds=time.perf_counter() - t0)
            continue
        out(case="interval_peak_large", nodes=nodes, edges=cg.n_edges, kept_steps=usage.n_steps, frac=frac,
            fastest_time=fast.time, time=r.time, lower_bound=r.lower_bound, gap_pct=100 * r.gap,
            peak_over_limit=r.peak / lim, oracle_calls=r.n_oracle_calls, seconds=time.perf_counter() - t0)
""",
    "iopddl": r"""
import os, tempfile
from tensoropt_py.engine import evaluate_peak
from tensoropt_py.engine.iopddl import IopddlProblem, read_iopddl, solution_cost, solve_iopddl, write_iopddl
from tensoropt_py.engine.random_graphs import random_interval_usage, random_sparse_cyclic_graph
for nodes in (2000, 10000, 50000):
    cg = random_sparse_cyclic_graph(nodes, 6, forbidden_prob=0.05, seed=nodes, integer_costs=True)
    usage = random_interval_usage(cg, max_span=40, seed=nodes)
    fast = min_sum(cg, 0.0)
    top = float(evaluate_peak(cg, usage, fast.choices)[0][0])
    least = [int(np.argmin(np.where(np.isfinite(c[:, 1]), u, np.inf))) for c, u in zip(cg.node_costs, usage.usage)]
    low = float(usage.loads(np.array([least])).max())
    limit = float(round(low + 0.5 * (top - low)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "problem.json.gz")
        write_iopddl(IopddlProblem(f"sparse{{nodes}}", cg, usage, limit), path)
        size = os.path.getsize(path)
        t0 = time.perf_counter(); problem = read_iopddl(path); t_read = time.perf_counter() - t0
    t0 = time.perf_counter(); r = solve_iopddl(problem, max_nodes=1, iterations=100); t_solve = time.perf_counter() - t0
    out(case="iopddl", nodes=nodes, edges=cg.n_edges, strategies_per_node=6, file_mb=size / 1e6, read_s=t_read,
        solve_s=t_solve, cost=r.time, lower_bound=r.lower_bound, gap_pct=100 * r.gap,
        cost_rescored=solution_cost(problem, r.choices), unlimited_fastest=fast.time)
""",
    "candidates": r"""
for layers, devices in {candidate_graphs}:
    cg = build_cost_graph(zoo.transformer(layers=layers), to.Cluster.preset("v100-2x8"), devices).cost_graph
    t0 = time.perf_counter(); ref = track(cg, exact=True, threads=1); s_ref = time.perf_counter() - t0
    t0 = time.perf_counter(); dflt = track(cg, threads=1); s_dflt = time.perf_counter() - t0
    out(case="candidates", layers=layers, devices=devices, run="exact", seconds=s_ref, points=len(ref))
    out(case="candidates", layers=layers, devices=devices, run="default", seconds=s_dflt, points=len(dflt),
        heuristic=dflt.n_heuristic, **gaps(dflt, ref))
    for r in (1, 2, 4):
        t0 = time.perf_counter(); fr = track(cg, threads=1, candidates=r); s = time.perf_counter() - t0
        st = fr.stats
        out(case="candidates", layers=layers, devices=devices, run=f"candidates={{r}}", seconds=s, points=len(fr),
            configs=st["candidate_configs"], of=int(sum(cg.n_configs)), rounds=st["candidate_rounds"],
            unproven=st["unproven_configs"], **gaps(fr, ref))
""",
    "candidates_full": r"""
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
from types import SimpleNamespace
ref = SimpleNamespace(**t16_frontier())  # the default frontier (case transformer16_track)
for r in {candidate_counts}:
    t0 = time.perf_counter(); fr = track(cg, threads={threads}, candidates=r); s = time.perf_counter() - t0
    st = fr.stats
    out(case="candidates_full", run=f"candidates={{r}}", seconds=s, points=len(fr), epsilon=fr.epsilon,
        configs=int(st["candidate_configs"]), all_configs=int(sum(cg.n_configs)), rounds=st["candidate_rounds"],
        bounds_s=st["bounds_seconds"], optima_s=st["anchor_seconds"], fastest=[float(fr.memory[-1]), float(fr.time[-1])],
        smallest=[float(fr.memory[0]), float(fr.time[0])], **gaps(fr, ref))
""",
    "candidates_oracle": r"""
from types import SimpleNamespace
from tensoropt_py.elimination.table import digest_arrays
from tensoropt_py.engine.screen import restrict
cg = build_cost_graph(zoo.transformer(), to.Cluster.preset("v100-2x8"), 16).cost_graph
ref = SimpleNamespace(**t16_frontier())  # the default frontier (case transformer16_track) and its strategies
used = [np.unique(ref.choices[:, i]) for i in range(cg.n_nodes)]
same_costs = {{}}  # operators of equal node costs (the repeated layers' own): one candidate set
for i, c in enumerate(cg.node_costs):
    same_costs.setdefault(digest_arrays(c), []).append(i)
keep = list(used)
for group in same_costs.values():
    union = np.unique(np.concatenate([used[i] for i in group]))
    for i in group:
        keep[i] = union
small = restrict(cg, keep)
out(case="candidates_oracle", configs=int(sum(small.n_configs)), most_per_operator=int(max(small.n_configs)),
    frontier_configs=int(sum(u.size for u in used)), most_used=int(max(u.size for u in used)),
    all_configs=int(sum(cg.n_configs)))
for run, kw in [("default", {{}}), ("no heuristic step", {{"exact": True, "epsilon": 1e-3, "max_memory": {max_memory}}})]:
    t0 = time.perf_counter(); fr = track(small, threads={threads}, anchors=False, **kw); s = time.perf_counter() - t0
    out(case="candidates_oracle", run=run, seconds=s, points=len(fr), heuristic=fr.n_heuristic,
        peak_gib=fr.stats["peak_table_bytes"] / 2**30, fastest=[float(fr.memory[-1]), float(fr.time[-1])],
        **gaps(fr, ref))
""",
    "llama": r"""
import resource, warnings
from tensoropt_py.errors import SearchSpaceWarning
warnings.simplefilter("ignore", SearchSpaceWarning)  # auto restricts past 16 devices; the result says so
t0 = time.perf_counter()
g = import_llama({llama_layers})
out(case="llama_import", layers={llama_layers}, seconds=time.perf_counter() - t0, operators=len(g.operators))
for preset, devices in {llama_runs}:
    t0 = time.perf_counter(); mcg = build_cost_graph(g, to.Cluster.preset(preset), devices); tb = time.perf_counter() - t0
    cg = mcg.cost_graph
    out(case="llama_build", devices=devices, meshes=mcg.meshes, seconds=tb, graph=str(cg),
        max_configs=max(cg.n_configs), rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)
    t0 = time.perf_counter()
    try:
        fr = track(cg, max_memory={max_memory})
    except Exception as exc:
        out(case="llama", devices=devices, error=f"{{type(exc).__name__}}: {{exc}}"[:300], seconds=time.perf_counter() - t0)
        continue
    st = fr.stats
    out(case="llama", devices=devices, meshes=mcg.meshes, seconds=time.perf_counter() - t0, points=len(fr),
        epsilon=fr.epsilon, bound=fr.memory_bound_factor, heuristic=fr.n_heuristic,
        work_capped=st.get("work_capped", 0), work_restricted=st.get("work_restricted", 0), anchors=str(st.get("anchors"))[:80],
        anchor_ties=st.get("anchor_ties"),
        end_gaps=st.get("end_gaps"), descent_points=st.get("descent_points"), descent_gain=st.get("descent_gain"),
        anchor_s=st.get("anchor_seconds"), anchors_beside_in=st.get("anchors_beside_in"),
        retries=st.get("memory_limit_retries"), peak_gib=st["peak_table_bytes"] / 2**30,
        rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        fastest=[float(fr.memory[-1]), float(fr.time[-1])], smallest=[float(fr.memory[0]), float(fr.time[0])])
""",
    "llama_anchors_process": r"""
# the llama case's default track with its anchors beside the run on a thread and in a process of
# their own (the default), alternated, twice each: seconds, where the anchors ran, their seconds
# beside the run and after it, and whether the frontiers are the same
import importlib, warnings
from tensoropt_py.errors import SearchSpaceWarning
warnings.simplefilter("ignore", SearchSpaceWarning)
track_mod = importlib.import_module("tensoropt_py.engine.track")
g = import_llama({llama_layers})
for preset, devices in {llama_runs}:
    cg = build_cost_graph(g, to.Cluster.preset(preset), devices).cost_graph
    runs, fronts = {{}}, {{}}
    for mode in ("thread", "process") * 2:
        track_mod._ANCHORS_IN_PROCESS = mode == "process"
        t0 = time.perf_counter()
        fr = track(cg, max_memory={max_memory})
        seconds = time.perf_counter() - t0
        runs.setdefault(mode, []).append([round(seconds, 2), fr.stats.get("anchors_beside_in"),
                                          round(fr.stats.get("anchor_background_seconds", 0.0), 2),
                                          round(fr.stats["anchor_seconds"], 2)])
        fronts.setdefault(mode, set()).add((fr.memory.tobytes(), fr.time.tobytes()))
    track_mod._ANCHORS_IN_PROCESS = True
    out(case="llama_anchors_process", devices=devices, seconds_where_beside_after=runs, points=len(fr),
        same_frontier=fronts["thread"] == fronts["process"] and len(fronts["thread"]) == 1)
""",
    "paper16": r"""
paper_seconds = {{"wide_resnet": 1292.0, "rnn": 0.28, "transformer": 201.0}}  # TensorOpt Table 3, FT-LDP, 48 cores
for name in {paper_models}:
    t0 = time.perf_counter()
    cg = build_cost_graph(getattr(zoo, name)(), to.Cluster.preset("v100-2x8"), 16).cost_graph
    t1 = time.perf_counter()
    fr = track(cg, threads={threads})
    t2 = time.perf_counter()
    st = fr.stats
    out(case="paper16", model=name, build_s=t1 - t0, seconds=t2 - t1, paper_ft_ldp_s=paper_seconds.get(name),
        graph=str(cg), points=len(fr), heuristic=fr.n_heuristic, work_capped=st.get("work_capped", 0), work_restricted=st.get("work_restricted", 0),
        epsilon=fr.epsilon, bound=fr.memory_bound_factor,
        epsilon_from_combine=st.get("epsilon_from_combine"), auto_exact_attempt=st.get("auto_exact_attempt"),
        anchors=str(st.get("anchors"))[:80], anchor_ties=st.get("anchor_ties"), end_gaps=st.get("end_gaps"),
        anchor_s=st.get("anchor_seconds"),
        peak_gib=st["peak_table_bytes"] / 2**30,
        fastest=[float(fr.memory[-1]), float(fr.time[-1])], smallest=[float(fr.memory[0]), float(fr.time[0])])
    if {paper_uncapped} and st.get("work_capped"):
        # the same without the work cap: what restricting or fixing the costliest nodes' configs lost
        t3 = time.perf_counter()
        free = track(cg, threads={threads}, max_step_work=float("inf"))
        out(case="paper16_uncapped", model=name, seconds=time.perf_counter() - t3, points=len(free),
            heuristic=free.n_heuristic, capped_vs_uncapped=gaps(fr, free), uncapped_vs_capped=gaps(free, fr))
""",
    "build_threads": r"""
import warnings
from tensoropt_py.errors import SearchSpaceWarning
warnings.simplefilter("ignore", SearchSpaceWarning)  # auto restricts past 16 devices
def arrays(mcg):  # everything the engine reads, and the configs the arrays index
    return ([np.asarray(c) for c in mcg.node_costs] + [np.asarray(x) for t in mcg.edge_tables for x in t],
            mcg.configs, mcg.edges)
def identical(a, b):
    return bool(a[1] == b[1] and a[2] == b[2] and len(a[0]) == len(b[0])
                and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a[0], b[0])))
for name, make in (("llama", import_llama), ("mixtral", import_mixtral)):
    g = make({llama_layers})
    for preset, devices in {llama_runs}:
        seconds, built = {{}}, {{}}
        for rep in range(2):  # alternated, twice: the host's speed drifts
            for th in {threads_list}:
                t0 = time.perf_counter(); mcg = build_cost_graph(g, to.Cluster.preset(preset), devices, threads=th)
                seconds.setdefault(th, []).append(time.perf_counter() - t0)
                built[th] = arrays(mcg)
        first = built[{threads_list}[0]]
        out(case="build_threads", model=name, layers={llama_layers}, devices=devices, seconds=seconds,
            searches=mcg.rescheduler.cache_info()["searches"],
            identical=all(identical(first, b) for b in built.values()))
""",
    "mixtral": r"""
import resource, warnings
from tensoropt_py.errors import SearchSpaceWarning
warnings.simplefilter("ignore", SearchSpaceWarning)  # auto restricts past 16 devices; the result says so
t0 = time.perf_counter()
g = import_mixtral(32)
out(case="mixtral_import", seconds=time.perf_counter() - t0, operators=len(g.operators), parameters=g.num_parameters)
levers = dict(recompute=True, shard_optimizer=True, precision="bf16-mixed")
for preset, devices in {llama_runs}:
    for name, kw in (("plain", {{}}), ("levers", levers)):
        t0 = time.perf_counter()
        fr = to.frontier(g, preset, devices=devices, cache=False, **kw)
        s = time.perf_counter() - t0
        out(case="mixtral", devices=devices, space=name, seconds=s, build_s=fr.seconds["build"],
            track_s=fr.seconds["track"], peaks_s=fr.seconds["peaks"], points=len(fr), epsilon=fr.epsilon, bound=fr.memory_bound_factor,
            heuristic=fr.heuristic_eliminations, fastest_gap=fr.fastest_gap,
            rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            least_memory_gb=float(fr.memory[0]) / 1e9, its_time=float(fr.time[0]),
            fastest_s=float(fr.time[-1]), its_memory_gb=float(fr.memory[-1]) / 1e9)
    # the levers' cost graph tracked again under a smaller table budget (--max-memory): repeated
    # layers must still come from the memo of combine results, whose share of the budget shrinks
    t0 = time.perf_counter(); fr = track(fr.cost_graph, max_memory={max_memory}); s = time.perf_counter() - t0
    out(case="mixtral_track_budget", devices=devices, max_memory={max_memory}, seconds=s, points=len(fr),
        memo_hits=fr.stats["memo_hits"], peak_gib=fr.stats["peak_table_bytes"] / 2**30, bound=fr.memory_bound_factor)
""",
}


def run(code, timeout):
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        out, status = proc.stdout, ("ok" if proc.returncode == 0 else f"rc={proc.returncode}: {proc.stderr.strip()[-300:]}")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        status = f"timeout after {timeout:.0f} s"
    for line in out.splitlines():
        if line.startswith("{"):
            print(line, flush=True)
    print(json.dumps({"status": status, "wall_s": round(time.perf_counter() - t0, 2)}), flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["transformer16_track", "fastest", "threads", "cyclic", "interval_peak"],
                    choices=list(CASES))
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--track-threads", type=int, default=None, help="threads of the transformer16_track case")
    ap.add_argument("--thread-devices", type=int, default=8)
    ap.add_argument("--max-memory", type=float, default=4e9)
    ap.add_argument("--llama-devices", type=int, nargs="+", default=[32, 64], choices=(32, 64),
                    help="device counts of the llama case (32: h100-4x8, 64: h100-8x8)")
    ap.add_argument("--llama-layers", type=int, default=32, help="decoder layers of the llama case (Llama-3-8B: 32)")
    ap.add_argument("--llama-loss", action="store_true", help="add the two-layer Llama to the mesh_loss case")
    ap.add_argument("--paper-models", nargs="+", default=["wide_resnet", "rnn"], choices=("wide_resnet", "rnn", "transformer"),
                    help="zoo models of the paper16 case")
    ap.add_argument("--paper-uncapped", action="store_true",
                    help="paper16: also track without the work cap (max_step_work=inf) where it fixed configs, and compare")
    ap.add_argument("--candidate-graphs", default="1x16",
                    help="LAYERSxDEVICES of the Transformers of the candidates case, comma-separated")
    ap.add_argument("--candidate-counts", type=int, nargs="+", default=[4, 1],
                    help="configs per weight (candidates=r) of the candidates_full case")
    args = ap.parse_args(argv)
    presets = {32: "h100-4x8", 64: "h100-8x8"}
    for case in args.cases:
        code = _PRE.format(root=ROOT, t16_frontier=T16_FRONTIER) + CASES[case].format(
            threads=args.track_threads, threads_list=list(args.threads), devices=args.thread_devices,
            max_memory=int(args.max_memory), llama_loss=bool(args.llama_loss), llama_layers=int(args.llama_layers),
            llama_runs=tuple((presets[n], n) for n in args.llama_devices),
            candidate_graphs=[tuple(map(int, x.split("x"))) for x in args.candidate_graphs.split(",")],
            candidate_counts=list(args.candidate_counts), paper_models=list(args.paper_models),
            paper_uncapped=bool(args.paper_uncapped))
        print(f"# {case}", flush=True)
        run(code, args.timeout)


if __name__ == "__main__":
    main()
