"""Baseline planners, costed by the same model as the frontier so that they compare.

* :func:`data_parallel`: every operator splits the batch over all devices.
* :func:`optcnn`: OptCNN's objective, the minimum-time strategy (a time-only DP).
* :func:`tofu`: ToFu's objective, the minimum-memory strategy among configurations that
  partition every operator's work over all devices (no replicated computation).
* :func:`mesh_tensorflow`: the frontier of the Mesh-TensorFlow-restricted space (one
  mesh for all operators, a logical dimension split the same way everywhere).
* :func:`soybean`: SOYBEAN's k-cut recursive tiling in its own model (per-matrix tilings of
  forward and backward, Eq. 2-3 in elements: :mod:`tensoropt_py.baselines.soybean`), decoded
  into our configurations (one cut = one binary fine mesh axis) and costed by our model.

Each takes ``(model, cluster, devices)`` like :func:`tensoropt_py.find_strategy` (or a
prebuilt ``ModelCostGraph`` through ``cost_graph=``) and returns a :class:`~tensoropt_py.plan.Plan`
(:func:`mesh_tensorflow`: a :class:`~tensoropt_py.model_frontier.Frontier`). The searches reuse the
engine: a restricted or re-weighted copy of the model's CostGraph is tracked, so
"minimum time" here is exactly OptCNN's optimum under our cost model.
"""

from __future__ import annotations

import numpy as np

from ..errors import InfeasibleError, InvalidInputError
# SOYBEAN's own tiling model. Imported before ``def soybean`` below so that the package's
# ``soybean`` attribute is the planner function (import the model's names with
# ``from tensoropt_py.baselines.soybean import k_cuts``).
from . import soybean as soybean_model

__all__ = ["data_parallel", "optcnn", "tofu", "mesh_tensorflow", "soybean", "all_baselines", "restrict_cost_graph",
           "soybean_model"]


def _prepare(model, cluster, devices, cost_graph, optimizer="adam"):
    from ..inputs import check_devices, load_cluster, load_model
    from ..cost.builder import build_cost_graph

    cl = load_cluster(cluster)
    if cost_graph is not None:
        return cost_graph, cl
    graph = load_model(model)
    devices = cl.num_devices if devices is None else check_devices(devices, cl)
    return build_cost_graph(graph, cl, devices, optimizer=optimizer), cl


def _to_plan(mcg, cluster, choices, method, edge_choices=None, key=("time", "memory"), optimizer="adam"):
    from ..plan import plan_from_choices

    choices = np.asarray(choices, dtype=np.int64)
    if edge_choices is None:
        edge_choices = best_edge_options(mcg, choices, key=key)
    return plan_from_choices(mcg, choices, edge_choices, model=mcg.graph.name, cluster=cluster.name, method=method,
                             optimizer=optimizer)


def best_edge_options(mcg, choices, key=("time", "memory")) -> np.ndarray:
    """Given node configs, the edge option of every edge minimising ``key`` lexicographically.

    Edge options only interact through the sum, so each edge is chosen on its own.
    """
    cg = mcg.cost_graph
    out = np.zeros(len(cg.edges), dtype=np.int64)
    first, second = (1, 0) if key[0] == "time" else (0, 1)
    for j, (u, v, cost) in enumerate(cg.edges):
        if hasattr(cost, "table"):
            opts = cost.table[cost.src_layout[choices[u]], cost.dst_layout[choices[v]]]
        else:
            opts = np.asarray(cost)[choices[u], choices[v]]
        opts = opts.reshape(-1, 2)
        order = np.lexsort((opts[:, second], opts[:, first]))
        out[j] = int(order[0])
    return out


def restrict_cost_graph(cg, keep, *, memory_scale=1.0, time_of=None):
    """A copy of ``cg`` keeping configs ``keep[i]`` (index arrays) of every node.

    Parameters
    ----------
    cg : CostGraph
    keep : sequence of int arrays
        Config indices kept per node (non-empty).
    memory_scale : float
        Multiplies every memory cost (0 gives a time-only problem).
    time_of : sequence of (K_i,) arrays, optional
        Replacement node times (e.g. communication time only), before restriction.

    Returns
    -------
    CostGraph
        Config ``k`` of node ``i`` in the copy is config ``keep[i][k]`` of ``cg``.
    """
    from ..engine import CostGraph, LayoutEdge

    keep = [np.asarray(k, dtype=np.int64) for k in keep]
    for i, k in enumerate(keep):
        if k.size == 0:
            raise InvalidInputError(f"restriction keeps no config of node {i}")
    nodes = []
    for i, costs in enumerate(cg.node_costs):
        c = np.array(costs, dtype=float)[keep[i]]
        if time_of is not None:
            c[:, 1] = np.asarray(time_of[i], dtype=float)[keep[i]]
        c[:, 0] *= memory_scale
        nodes.append(c)
    def scaled(table):
        table = np.array(table, dtype=float)
        absent = ~np.isfinite(table).all(axis=-1)  # +inf marks an absent option (0 * inf would be NaN)
        memory = table[..., 0]
        memory[~absent] *= memory_scale
        memory[absent] = np.inf
        return table

    edges = []
    for u, v, cost in cg.edges:
        if hasattr(cost, "table"):
            edges.append((u, v, LayoutEdge(cost.src_layout[keep[u]], cost.dst_layout[keep[v]], scaled(cost.table))))
        else:
            edges.append((u, v, scaled(np.asarray(cost)[keep[u]][:, keep[v]])))
    return CostGraph(nodes, edges)


def _track_restricted(mcg, keep, *, memory_scale=1.0, time_of=None, pick="time", exact=False):
    """Track a restricted copy; return full-graph choices of its min-time (or min-memory) point."""
    from ..engine import track

    sub = restrict_cost_graph(mcg.cost_graph, keep, memory_scale=memory_scale, time_of=time_of)
    fr = track(sub, method="ldp", exact=exact)
    i = len(fr.memory) - 1 if pick == "time" else 0
    return np.array([keep[n][c] for n, c in enumerate(fr.choices[i])], dtype=np.int64)


def data_parallel(model=None, cluster=None, devices=None, *, cost_graph=None, optimizer="adam"):
    """Data parallelism: every operator splits its sample dimension over all devices.

    Operators without a sample dimension that divides by the device count take the
    config splitting it most (else they are replicated).
    """
    mcg, cl = _prepare(model, cluster, devices, cost_graph, optimizer)
    return _to_plan(mcg, cl, mcg.data_parallel_choice(), "data_parallel", optimizer=optimizer)


def optcnn(model=None, cluster=None, devices=None, *, cost_graph=None, optimizer="adam", exact=False):
    """OptCNN: the minimum-time strategy (memory ignored, as OptCNN's DP does).

    ``exact=True`` forbids heuristic elimination in the search, so the time is the
    minimum of the whole space (equal to the exact frontier's minimum time).
    """
    mcg, cl = _prepare(model, cluster, devices, cost_graph, optimizer)
    keep = [np.arange(len(c)) for c in mcg.configs]
    choices = _track_restricted(mcg, keep, memory_scale=0.0, pick="time", exact=exact)
    return _to_plan(mcg, cl, choices, "optcnn", optimizer=optimizer)


def _unreplicated(mcg):
    keep = []
    for cfgs in mcg.configs:
        replicated = np.array([sum(1 for f in c.fine if f < 0) for c in cfgs])
        keep.append(np.flatnonzero(replicated == replicated.min()))
    return keep


def tofu(model=None, cluster=None, devices=None, *, cost_graph=None, optimizer="adam", exact=False):
    """ToFu: minimum memory with every operator's work split over all devices (no replication).

    An operator that cannot use every device (too few splittable dimensions) keeps its
    least-replicated configs. Among minimum-memory strategies the fastest is returned
    (``exact=True``: searched without heuristic elimination).
    """
    mcg, cl = _prepare(model, cluster, devices, cost_graph, optimizer)
    choices = _track_restricted(mcg, _unreplicated(mcg), pick="memory", exact=exact)
    return _to_plan(mcg, cl, choices, "tofu", key=("memory", "time"), optimizer=optimizer)


def mesh_tensorflow(model=None, cluster=None, devices=None, *, optimizer="adam", method="ldp", exact=False):
    """The frontier of the Mesh-TensorFlow space (see ``build_cost_graph(mesh_tensorflow=True)``).

    Strategies that would need a rescheduling Mesh-TensorFlow cannot express are
    removed from the frontier.
    """
    from dataclasses import replace

    from ..cost.builder import FORBIDDEN_TIME
    from ..inputs import check_devices, load_cluster, load_model
    from ..model_frontier import compute_frontier

    cl = load_cluster(cluster)
    n = cl.num_devices if devices is None else check_devices(devices, cl)
    fr = compute_frontier(load_model(model), cl, n, optimizer=optimizer, mesh_tensorflow=True, method=method,
                          exact=exact)
    ok = fr.time < FORBIDDEN_TIME
    if not ok.any():
        raise InfeasibleError(f"no Mesh-TensorFlow strategy of {fr.model} on {fr.devices} devices")
    return replace(fr, memory=fr.memory[ok], time=fr.time[ok], compute_time=fr.compute_time[ok],
                   communication_time=fr.communication_time[ok], choices=fr.choices[ok],
                   edge_choices=fr.edge_choices[ok])


def soybean(model=None, cluster=None, devices=None, *, cost_graph=None, optimizer="adam", exact=False):
    """SOYBEAN (paper §4) with its own tiling model, decoded into a Plan costed by ours.

    The model's training dataflow graph (every matrix of forward and backward with its own
    tiling, three aligned layouts per matmul, communication in elements) is tiled for
    ``2**k`` devices by Algorithm 1 (:func:`~tensoropt_py.baselines.soybean.k_cuts`; with
    ``exact=True`` the joint optimum over ``T^k``,
    :func:`~tensoropt_py.baselines.soybean.exact_k_cuts`, exponential in ``k``). The tiling is
    mapped onto our configurations by the rule of :mod:`tensoropt_py.baselines.soybean`
    ("Mapping"); the Plan's ``notes`` give SOYBEAN's communication and every place where the
    rule overrode one of SOYBEAN's matmul layouts.

    Raises
    ------
    InvalidInputError
        A device count that is not a power of two, or a model with operators outside
        SOYBEAN's matmul model (see :func:`~tensoropt_py.baselines.soybean.graph_from_model`).
    """
    from dataclasses import replace

    sm = soybean_model
    mcg, cl = _prepare(model, cluster, devices, cost_graph, optimizer)
    n = mcg.num_devices
    if n & (n - 1):
        raise InvalidInputError(f"SOYBEAN needs a power-of-two device count, got {n}")
    k = n.bit_length() - 1
    tg, links = sm.graph_from_model(mcg.graph)
    result = (sm.exact_k_cuts if exact else sm.k_cuts)(tg, k)
    choices, notes = sm.decode_choices(mcg, links, result)
    plan = _to_plan(mcg, cl, choices, "soybean", optimizer=optimizer)
    head = (f"SOYBEAN communication {result.cost:.6g} elements over {k} cut(s)"
            + (f" (per cut {', '.join(f'{d:.6g}' for d in result.deltas)})" if result.deltas else ""))
    return replace(plan, notes=(head,) + tuple(notes))


def all_baselines(mcg, cluster, *, exact=False) -> dict:
    """Every applicable Plan baseline of a built ModelCostGraph (name -> Plan), for plots."""
    out = {"data parallel": data_parallel(cluster=cluster, cost_graph=mcg),
           "OptCNN": optcnn(cluster=cluster, cost_graph=mcg, exact=exact),
           "ToFu": tofu(cluster=cluster, cost_graph=mcg, exact=exact)}
    n = mcg.num_devices
    if n & (n - 1) == 0 and n > 1:
        try:
            out["SOYBEAN"] = soybean(cluster=cluster, cost_graph=mcg)
        except InvalidInputError:  # operators outside SOYBEAN's matmul model (attention, convolution...)
            pass
    return out
