"""``tensoropt-py calibrate``: measure collective and operator tables (run under ``mpiexec``).

    mpiexec -n 4 python -m mpi4py -m tensoropt_py calibrate --out calib.json
    python -m tensoropt_py.calibrate --model gpt2:size=small,batch=8 --devices 1 --no-comm
"""

from __future__ import annotations

import argparse
import sys

from ..cost.optimizer import OPTIMIZERS
from ..cost.training import PRECISIONS
from ..errors import InvalidInputError
from ..exec.launcher import is_rank0, mpi_world
from ..inputs import load_cluster
from .collectives import DEFAULT_MAX_LOG2, _mpi, calibrate_comm
from .operators import calibrate_model_compute, model_operator_runners
from ..cluster import COLLECTIVES

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tensoropt-py calibrate",
        description="Measure collective-communication times for every device partitioning of the MPI ranks "
        "(run under mpiexec, one rank per device) and write a tensoropt_py calibration file.",
    )
    p.add_argument("--out", default="calibration.json", help="calibration file to write (default: calibration.json)")
    p.add_argument("--min-log2", type=int, default=0, help="smallest size 2^i bytes (default 0)")
    p.add_argument("--max-log2", type=int, default=DEFAULT_MAX_LOG2,
                   help=f"largest size 2^i bytes (default {DEFAULT_MAX_LOG2}; the paper's P)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per point, their mean taken (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs per point (default 2)")
    p.add_argument("--backend", choices=("auto", "mpi", "nccl"), default="auto",
                   help="mpi: CPU numpy buffers; nccl: torch.distributed on CUDA; auto: nccl if usable (default)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES),
                   help=f"comma-separated subset of {','.join(COLLECTIVES)} (default: all)")
    p.add_argument("--model", default=None,
                   help="also measure operator compute times of this model at its shard shapes (torch): a zoo name "
                        "(name:key=value,...) or package.module:factory, as for find and run")
    p.add_argument("--devices", type=int, default=None, help="device count the model is sharded over (with --model)")
    p.add_argument("--cluster", default=None,
                   help="cluster preset for the model's configurations (default: cpu-1x<devices>, else v100-2x8)")
    p.add_argument("--max-entries", type=int, default=None, help="measure at most this many compute keys")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adam",
                   help="optimizer whose parameter updates are timed with --model (default adam)")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default="32-true",
                   help="with --model: time the operators as a run in this precision does (default 32-true)")
    p.add_argument("--no-comm", action="store_true", help="skip the collective measurements (no MPI needed)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    return p


def _default_cluster(devices):
    from ..cluster import Cluster

    for name in (f"cpu-1x{devices}", "v100-2x8"):
        try:
            cl = Cluster.preset(name)
        except Exception:  # noqa: BLE001 - not a preset
            continue
        return cl
    raise InvalidInputError(f"no cluster preset for {devices} devices; pass --cluster")


def main(argv=None) -> int:
    """CLI entry: ``mpiexec -n 4 python -m mpi4py -m tensoropt_py calibrate --out table.json --max-log2 20``.

    Only rank 0 prints and writes. Returns the exit status (0).
    """
    args = _parser().parse_args(argv)
    if not 0 <= args.min_log2 <= args.max_log2 <= 40:
        raise InvalidInputError(f"need 0 <= --min-log2 <= --max-log2 <= 40, got {args.min_log2} and {args.max_log2}")
    if args.no_comm and args.model is None:
        raise InvalidInputError("--no-comm leaves nothing to measure without --model")
    if args.model is not None and args.devices is None:
        raise InvalidInputError("--model needs --devices N")
    if not args.no_comm:
        sync_work = None
        if args.model is not None:  # the model's operators are the work between collectives that ranks drift over
            cl = load_cluster(args.cluster) if args.cluster else _default_cluster(args.devices)
            _, runners, _ = model_operator_runners(args.model, cl, args.devices, device=_torch_device(args.backend),
                                                   precision=args.precision,
                                                   max_entries=args.max_entries)
            sync_work = [fn for _, fn in runners] or None
        _main_comm(args, sync_work)
    if args.model is not None:
        verbose = not args.quiet and is_rank0()
        comm = mpi_world()  # several ranks: all of them compute at once, as in training
        if comm is not None or is_rank0():
            cl = load_cluster(args.cluster) if args.cluster else _default_cluster(args.devices)
            table = calibrate_model_compute(args.model, cl, args.devices, repeats=args.repeats, warmup=args.warmup,
                                            out=args.out, max_entries=args.max_entries, verbose=verbose, comm=comm,
                                            optimizer=args.optimizer, precision=args.precision)
            if verbose:
                m = table.meta
                print(f"wrote {m['entries']} compute entries ({args.model} on {args.devices} devices of {cl.name}, "
                      f"{m['skipped']} skipped) to {args.out}", flush=True)
    return 0



def _torch_device(backend):
    """The device the collectives' backend uses, where the model's operators run too."""
    import torch

    cuda = backend == "nccl" or (backend == "auto" and torch.cuda.is_available())
    return "cuda" if cuda else "cpu"


def _main_comm(args, sync_work=None):
    collectives = tuple(c.strip() for c in args.collectives.split(",") if c.strip())
    MPI = _mpi()
    world = MPI.COMM_WORLD
    verbose = not args.quiet and world.rank == 0
    if verbose:
        print(f"calibrating {len(collectives)} collectives on {world.size} ranks, sizes 2^{args.min_log2}..2^{args.max_log2} B",
              flush=True)
    table = calibrate_comm(
        range(args.min_log2, args.max_log2 + 1),
        repeats=args.repeats,
        warmup=args.warmup,
        backend=args.backend,
        collectives=collectives,
        comm=world,
        out=args.out,
        verbose=verbose,
        sync_work=sync_work,
    )
    if verbose:
        m = table.meta
        print(f"wrote {len(table)} tables ({m['backend']}, {m['world_size']} ranks on {m['machines']} machine(s), "
              f"{m['seconds_taken']} s) to {args.out}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
