"""Our rescheduler vs PyTorch DTensor's redistribute planners, layout pair by layout pair.

For a 3-D tensor on a 2x4 mesh and on a 1-D mesh of 8, every pair of layouts (per mesh dim:
``Shard(d)`` for each tensor dim, ``Replicate`` or ``Partial``; targets without ``Partial``)
is planned three ways:

* ours: :meth:`Rescheduler.path <tensoropt_py.cost.reschedule.Rescheduler.path>` under the
  communication model of a preset (launch cost included) restricted to its first 8 devices
  (one machine: ``h100-4x8`` and ``v100-2x8`` by default);
* DTensor's default (greedy, mesh dim by mesh dim) planner;
* DTensor's min-cost (graph-based Dijkstra) planner,

both DTensor plans after ``_optimize_transform_infos`` with a flattened 2x4 -> 8 mesh available,
so consecutive same-kind collectives merge as they do for a user who flattened the mesh.
DTensor runs in this one process on CPU with the fake process group: only the plans are
needed, no data moves.

Each plan is measured by its collectives (local slices are free and not counted), the
bytes one device sends (ring algorithms: ``(g-1)/g`` of the buffer for all-gather,
reduce-scatter and all-to-all, twice that for all-reduce, over groups of ``g`` devices)
and its time under our model (a DTensor step is priced as the same collective over the
same device groups). Prints, per mesh and tensor size, how often ours moves fewer / equal /
more bytes than each planner, how often it issues more / fewer collectives for the same
bytes, the time ratio, and a few examples.

    python benchmarks/bench_redistribute.py
    python benchmarks/bench_redistribute.py --clusters dgx-a100-2x8 --shapes 64x64x64
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tensoropt_py.cluster import Cluster  # noqa: E402
from tensoropt_py.cost.comm import CommModel  # noqa: E402
from tensoropt_py.cost.reschedule import Rescheduler  # noqa: E402
from tensoropt_py.space.layout import PARTIAL, REPLICATE, Layout  # noqa: E402
from tensoropt_py.space.mesh import Mesh, fine_groups  # noqa: E402

ITEMSIZE = 4  # float32


def send_bytes(kind: str, buffer: float, g: int) -> float:
    """Bytes one device sends in a ring collective over ``g`` devices on ``buffer`` bytes."""
    share = (g - 1) / g * buffer
    return 2 * share if kind == "all_reduce" else share


def ours(rs, shape, mesh, src, dst):
    """``(collectives, bytes per device, seconds, description)`` of our path."""
    p = rs.path(shape, "float32", to_layout(mesh, src), to_layout(mesh, dst))
    colls = [s for s in p.steps if s.kind != "slice"]
    nbytes = sum(send_bytes(s.kind, s.nbytes, len(s.groups[0])) for s in colls)
    return len(colls), nbytes, p.time, str(p)


def to_layout(mesh: Mesh, placements) -> Layout:
    """Our layout of DTensor-style placements (one code per mesh dim) on ``mesh``'s fine axes."""
    place = [placements[m] for m, axes in enumerate(mesh.fine_of_axis) for _ in axes]
    return Layout(mesh.fine_sizes, tuple(place))


def code_str(c: int) -> str:
    return "R" if c == REPLICATE else "P" if c == PARTIAL else f"S{c}"


class DTensorPlanner:
    """DTensor's planners on a fake 8-rank process group (plans only)."""

    def __init__(self, mesh: Mesh):
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor import _redistribute as redistribute
        from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

        self.mesh = mesh
        self._spec_cls, self._meta_cls, self._rd = DTensorSpec, TensorMeta, redistribute
        self._placement = lambda c: Replicate() if c == REPLICATE else Partial() if c == PARTIAL else Shard(c)
        names = tuple(f"m{i}" for i in range(mesh.ndim))
        self.dmesh = DeviceMesh("cpu", torch.arange(mesh.num_devices).reshape(mesh.shape), mesh_dim_names=names)
        if mesh.ndim > 1:
            self.dmesh[names]._flatten()  # lets DTensor merge consecutive same-kind collectives

    def plan(self, shape, src, dst, graph: bool):
        """``[(kind, mesh dims, buffer bytes)]`` of DTensor's collectives (local ops dropped)."""
        stride = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        meta = self._meta_cls(torch.Size(shape), tuple(stride), torch.float32)
        a = self._spec_cls(self.dmesh, tuple(map(self._placement, src)), tensor_meta=meta)
        b = self._spec_cls(self.dmesh, tuple(map(self._placement, dst)), tensor_meta=meta)
        infos = self._rd._gen_transform_infos_non_cached(a, b, graph)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            infos = self._rd._optimize_transform_infos(infos, self.dmesh, a.placements, b.placements)
        cur = list(src)
        out = []
        numel = math.prod(shape)
        for info in infos:
            dims = tuple(getattr(info, "original_mesh_dims", None) or (info.mesh_dim,))
            after = info.src_dst_placements[1]
            code = REPLICATE if after.is_replicate() else PARTIAL if after.is_partial() else after.dim
            kind = info._comm_type_key()
            if kind is not None:
                local = numel // math.prod(self.mesh.shape[m] for m, c in enumerate(cur) if c >= 0) * ITEMSIZE
                g = math.prod(self.mesh.shape[m] for m in dims)
                out.append((kind, dims, local * g if kind == "all_gather" else local))
            for m in dims:
                cur[m] = code
        if tuple(cur) != tuple(dst):
            raise RuntimeError(f"DTensor plan {infos} does not end at {dst}")
        return out

    def measure(self, cm, shape, src, dst, graph):
        """``(collectives, bytes per device, seconds under our model, description)``."""
        steps = self.plan(shape, src, dst, graph)
        fine = self.mesh.fine_sizes
        nbytes = t = 0.0
        for kind, dims, buf in steps:
            axes = tuple(a for m in dims for a in self.mesh.fine_of_axis[m])
            groups = fine_groups(fine, axes)
            nbytes += send_bytes(kind, buf, len(groups[0]))
            t += cm.collective_time(kind, buf, groups)
        desc = " -> ".join(f"{k}{list(d)}" for k, d, _ in steps) or "identity"
        return len(steps), nbytes, t, desc


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def compare(rs, cm, mesh, shape, n_examples):
    ndim = len(shape)
    codes = list(range(ndim)) + [REPLICATE, PARTIAL]
    srcs = list(itertools.product(codes, repeat=mesh.ndim))
    dsts = [d for d in srcs if PARTIAL not in d]
    pairs = [(s, d) for s in srcs for d in dsts if s != d]
    dt = DTensorPlanner(mesh)
    mine = {p: ours(rs, shape, mesh, *p) for p in pairs}
    mb = math.prod(shape) * ITEMSIZE / 2**20
    print(f"\n== mesh {list(mesh.shape)}, tensor {list(shape)} float32 ({mb:g} MiB): {len(pairs)} layout pairs")
    print(f"   ours: {sum(m[0] for m in mine.values())} collectives in all, "
          f"max {max(m[0] for m in mine.values())} per pair")
    for name, graph in (("default", False), ("min-cost", True)):
        theirs = {p: dt.measure(cm, shape, *p, graph) for p in pairs}
        fewer_b = [p for p in pairs if mine[p][1] < theirs[p][1] and not close(mine[p][1], theirs[p][1])]
        more_b = [p for p in pairs if mine[p][1] > theirs[p][1] and not close(mine[p][1], theirs[p][1])]
        equal_b = [p for p in pairs if close(mine[p][1], theirs[p][1])]
        more_c = [p for p in equal_b if mine[p][0] > theirs[p][0]]
        fewer_c = [p for p in equal_b if mine[p][0] < theirs[p][0]]
        slower = [p for p in pairs if mine[p][2] > theirs[p][2] * (1 + 1e-9)]
        ratio = sum(theirs[p][2] for p in pairs) / sum(mine[p][2] for p in pairs)
        print(f"   vs DTensor {name:8s}: bytes/device ours fewer {len(fewer_b)}, equal {len(equal_b)}, "
              f"more {len(more_b)}; at equal bytes ours more collectives {len(more_c)}, fewer {len(fewer_c)}; "
              f"DTensor collectives in all {sum(t[0] for t in theirs.values())}; "
              f"predicted time sum DTensor/ours {ratio:.3f}, ours slower on {len(slower)}")
        for label, group in (("ours fewer bytes", fewer_b), ("ours more bytes", more_b),
                             ("ours more collectives", more_c), ("ours fewer collectives", fewer_c),
                             ("ours slower", slower)):
            for p in group[:n_examples]:
                m, t = mine[p], theirs[p]
                print(f"     {label}: ({','.join(map(code_str, p[0]))}) -> ({','.join(map(code_str, p[1]))}): "
                      f"ours {m[3]} [{m[0]} coll, {m[1] / 2**10:.0f} KiB, {m[2] * 1e6:.1f} us] | "
                      f"DTensor {t[3]} [{t[0]} coll, {t[1] / 2**10:.0f} KiB, {t[2] * 1e6:.1f} us]")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", default="h100-4x8,v100-2x8",
                   help="comma-separated presets; the first 8 devices of each are used")
    p.add_argument("--shapes", default="64x64x64,256x256x256", help="comma-separated tensor shapes")
    p.add_argument("--examples", type=int, default=2, help="examples printed per category")
    args = p.parse_args(argv)
    clusters = [Cluster.preset(name) for name in args.clusters.split(",")]
    for cl in clusters:
        if cl.num_devices < 8:
            p.error(f"cluster {cl.name!r} has {cl.num_devices} devices; 8 are needed")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    for s in shapes:
        if any(d % 8 for d in s):
            p.error(f"every dimension of shape {s} must divide by 8 (even shards on 8 devices)")
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    print(f"torch {torch.__version__}")
    try:
        for cl in clusters:
            cm = CommModel(cl)
            rs = Rescheduler(cm)
            print(f"\n#### cluster {cl.name} (devices 0-7): launch {cl.device.kernel_overhead * 1e6:g} us per "
                  f"collective, intra-machine latency {cl.intra_link.latency * 1e6:g} us per ring step")
            for mesh in (Mesh((2, 4)), Mesh((8,))):
                for shape in shapes:
                    compare(rs, cm, mesh, shape, args.examples)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
