"""Cost model: operator costs (Eq. 1), rescheduling edge costs (Eq. 2), communication and compute models.

* :class:`~.comm.CommModel`: collective time for a device partitioning and message size;
* :class:`~.compute.ComputeModel`: roofline or measured compute time;
* :class:`~.reschedule.Rescheduler`: cheapest collective sequence between two layouts;
* :func:`~.builder.build_cost_graph`: a model on a cluster -> :class:`ModelCostGraph`.

Calibration (measured tables, run under ``mpiexec``) lives in :mod:`.calibrate`.
"""

from .builder import ModelCostGraph, build_cost_graph
from .comm import CommModel
from .compute import ComputeModel
from .reschedule import Rescheduler

__all__ = ["CommModel", "ComputeModel", "Rescheduler", "ModelCostGraph", "build_cost_graph"]
