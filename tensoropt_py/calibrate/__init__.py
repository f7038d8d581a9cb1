"""Calibration: measure real communication and compute tables (TensorOpt §3.2 "Improving cost estimation accuracy").

Communication
-------------
Run under MPI, one process per device::

    mpiexec -n 4 python -m mpi4py -m tensoropt_py.calibrate --out calib.json --max-log2 22

For every *device partitioning* of the ranks into equal groups (consecutive groups ``(0..g-1),
(g..2g-1), ...`` for every divisor ``g`` of the world size, plus strided groups when they give a
different :func:`~tensoropt_py.cluster.group_signature` because the ranks span several
machines), all groups run the collective **at the same time** (so contention is measured, as the
paper requires) at sizes 2^i bytes, i in ``sizes_log2``. Each point is the mean over
``repeats`` runs (after ``warmup`` runs) of the slowest rank's time; every run starts after a
world barrier. ``nbytes`` means what it means in :mod:`tensoropt_py.cost.comm` (the full logical
tensor of a group); sizes smaller than one element per rank are rounded up to one element. Then
:func:`calibrate_sync` measures, per partitioning, what a collective costs beyond its table
when it follows each rank's own work as in a training step (the wait for the slowest member, and
the stretch of transfers by members descheduled mid-way), with the model's operators as that work
when ``--model`` is given; the cost model applies it to every collective call.

Backends: every collective runs through the executor's own backend
(:func:`tensoropt_py.exec.backend.make_backend`), so the table holds the per-call work the
executor adds: ``"mpi"`` is mpi4py on CPU tensors, ``"nccl"`` is ``torch.distributed`` with NCCL
on CUDA tensors, ``"auto"`` picks NCCL when CUDA is available. Rank 0 writes the table to a calibration file (see
:func:`~tensoropt_py.cluster.load_calibration`) that
:meth:`~tensoropt_py.cluster.Cluster.with_calibration` loads. Run through ``python -m mpi4py``
so that an exception on any rank aborts all of them.

Compute
-------
:func:`calibrate_compute` times callables supplied by the cost layer (torch ops at shard
shapes) with :func:`measure` and writes the ``compute`` section of the same file format.
:func:`calibrate_model_compute` does it for a whole model: every distinct
:func:`~tensoropt_py.cost.operator_cost.compute_key` of the configurations
:func:`~tensoropt_py.cost.builder.build_cost_graph` keeps is run forward + backward, and
forward alone (what a recomputation re-runs), with torch on random tensors of its local shard
shapes (through :func:`tensoropt_py.exec.local_ops.prepare`, which adapts shape-carrying
attributes to the shards); the cost model then uses these times for the matching
configurations. No MPI is needed for it::

    tensoropt-py calibrate --model mlp --devices 4 --out calib.json --no-comm

Under ``mpiexec -n N`` every rank times every entry at the same moment and the slowest rank's
time is kept (``comm=``): a training step runs all devices at once, so where ranks share
cores or memory bandwidth (several processes on one CPU machine) only this reproduces it::

    mpiexec -n 4 python -m mpi4py -m tensoropt_py.calibrate --model mlp --devices 4 --no-comm

Layout: :mod:`.timing` (pure rank logic and the timing loop), :mod:`.collectives`
(:func:`calibrate_comm`), :mod:`.operators` (:func:`calibrate_compute`,
:func:`calibrate_model_compute`), ``__main__`` (the command line). This package sits above
the executor, whose backends and local operators it times; the cost model only reads the
files it writes (:func:`tensoropt_py.cluster.load_calibration`).
"""

from .collectives import DEFAULT_MAX_LOG2, calibrate_comm, calibrate_sync
from .operators import (calibrate_compute, calibrate_model_compute, model_compute_entries, model_operator_runners,
                        model_update_entries)
from .timing import buffer_elements, color_of, machine_ids, measure, partition_plans

__all__ = [
    "measure",
    "calibrate_comm",
    "calibrate_sync",
    "calibrate_compute",
    "calibrate_model_compute",
    "model_compute_entries",
    "model_operator_runners",
    "model_update_entries",
    "partition_plans",
    "color_of",
    "machine_ids",
    "buffer_elements",
    "DEFAULT_MAX_LOG2",
]
