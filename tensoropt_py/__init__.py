"""tensoropt_py: cost-frontier planning of parallel deep-learning training.

Given a model and a cluster, compute every Pareto-optimal (memory per device,
per-iteration time) parallelization strategy (TensorOpt's *cost frontier*) and
pick from it::

    import tensoropt_py as to
    fr = to.frontier("transformer", "v100-2x8", devices=16)
    plan = to.find_strategy("transformer", "v100-2x8", option="mini_time", memory_cap="14.5GB")

``to.frontier`` is the model-level :func:`tensoropt_py.api.frontier`; the engine that tracks
frontiers of any cost graph is :mod:`tensoropt_py.engine` (``from tensoropt_py.engine import
CostGraph, track``). Heavy dependencies (torch, mpi4py, matplotlib) are imported only when used.
"""

import importlib

from .errors import (
    CalibrationError,
    CostGraphError,
    InfeasibleError,
    InvalidInputError,
    SearchSpaceWarning,
    TensorOptError,
    UnsupportedOperatorError,
)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself), resolved on first use.
_LAZY = {
    "frontier": ("api", "frontier"),
    "find_strategy": ("api", "find_strategy"),
    "Frontier": ("api", "Frontier"),
    "Profile": ("api", "Profile"),
    "Plan": ("plan", "Plan"),
    "Cluster": ("cluster", "Cluster"),
    "from_torch": ("graph.torch_import", "from_torch"),
    "models": ("models", None),
    "baselines": ("baselines", None),
    "api": ("api", None),
    "plot": ("plot", None),
}

__all__ = [
    "frontier",
    "find_strategy",
    "Frontier",
    "Profile",
    "Plan",
    "Cluster",
    "from_torch",
    "models",
    "baselines",
    "TensorOptError",
    "InvalidInputError",
    "CostGraphError",
    "InfeasibleError",
    "UnsupportedOperatorError",
    "CalibrationError",
    "SearchSpaceWarning",
    "__version__",
]


def __getattr__(name):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tensoropt_py' has no attribute {name!r}") from None
    module = importlib.import_module(f".{module_name}", __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
