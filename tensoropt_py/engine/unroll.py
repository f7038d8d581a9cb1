"""Unroll (TensorOpt §3.2): from final frontier points back to full strategies.

Every point of every :class:`~tensoropt_py.elimination.table.FTable` records the parent
point of each slot it was built from, so the derivation of a final point is a tree whose
leaves are the original nodes (point index = config) and edges (point -> option). This
unrolls LDP and every elimination at once, vectorised over all final points.
"""

import numpy as np

__all__ = ["unroll"]


def unroll(ctx, final, n_nodes, n_edges):
    """Walk provenance back from every point of table ``final`` (all cells) to the leaves.

    Returns ``choices`` (P, n_nodes) and ``edge_choices`` (P, n_edges), int64; entries never
    reached stay -1 for nodes (a bug: the caller checks) and 0 for edges.
    """
    P = final.n_points
    choices = np.full((P, n_nodes), -1, dtype=np.int64)
    edge_choices = np.zeros((P, n_edges), dtype=np.int64)
    requests: dict[int, list] = {final.id: [(np.arange(P, dtype=np.int64), np.arange(P, dtype=np.int64))]}
    for tab in reversed(ctx.tables[: final.id + 1]):
        req = requests.pop(tab.id, None)
        if req is None:
            continue
        if len(req) == 1:
            fid, pidx = req[0]
        else:
            fid = np.concatenate([r[0] for r in req])
            pidx = np.concatenate([r[1] for r in req])
        if tab.leaf is not None:
            kind, idx = tab.leaf
            if kind == "node":
                choices[fid, idx] = pidx
            else:
                edge_choices[fid, idx] = tab.options[pidx]
            continue
        if tab.pieces is not None:
            starts = np.cumsum([0] + [p.n_points for p in tab.pieces])
            which = np.searchsorted(starts, pidx, side="right") - 1
            for j, piece in enumerate(tab.pieces):
                sel = which == j
                if sel.any():
                    requests.setdefault(piece.id, []).append((fid[sel], pidx[sel] - starts[j]))
            continue
        for s, par in enumerate(tab.parents):
            pp = tab.prov[pidx, s].astype(np.int64)
            ok = pp >= 0
            if not ok.all():
                requests.setdefault(par.id, []).append((fid[ok], pp[ok]))
            else:
                requests.setdefault(par.id, []).append((fid, pp))
    return choices, edge_choices
