"""Executor: run a :class:`~tensoropt_py.plan.Plan` over MPI ranks (mpi4py on CPU, NCCL on GPUs).

Public API (imported lazily: ``import tensoropt_py.exec`` does not import torch or mpi4py):

* :func:`run_plan` (:mod:`.runner`): train a graph with a plan on the job's ranks -> :class:`Report`;
  ``python -m tensoropt_py run PLAN.json --model NAME ...`` is its CLI (:func:`.runner.main`);
* :func:`reference_train`, :func:`synthetic_batch`: the single-process oracle and its data;
* :func:`make_backend`, :class:`MPIBackend`, :class:`NCCLBackend` (:mod:`.backend`): collectives
  over sub-groups with a record of every call;
* :func:`run_steps`, :func:`steps_from_path`, :func:`steps_from_collectives`, :func:`reschedule`
  (:mod:`.reschedule_exec`): execute a rescheduling path on a local shard (autograd-aware);
* :func:`shard`, :func:`gather_full`, :func:`region`, :func:`partial_pieces`, :func:`parse_layout`
  (:mod:`.shard`): local blocks of layouts;
* :func:`expected_collectives`, :func:`collective_counts` (:mod:`.measure`).
"""

_NAMES = {
    "run_plan": "runner", "Executor": "runner", "reference_train": "runner", "synthetic_batch": "runner",
    "Report": "measure", "expected_collectives": "measure", "collective_counts": "measure",
    "make_backend": "backend", "MPIBackend": "backend", "NCCLBackend": "backend", "Backend": "backend",
    "CollectiveRecord": "backend",
    "run_steps": "reschedule_exec", "run_step": "reschedule_exec", "steps_from_path": "reschedule_exec",
    "steps_from_collectives": "reschedule_exec", "reschedule": "reschedule_exec", "ExecStep": "reschedule_exec",
    "shard": "shard", "gather_full": "shard", "region": "shard", "partial_pieces": "shard",
    "parse_layout": "shard", "local_shape": "shard",
    "UnsupportedConfigError": "local_ops",
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    mod = _NAMES.get(name)
    if mod is None:
        raise AttributeError(f"module 'tensoropt_py.exec' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
