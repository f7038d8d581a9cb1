"""tensoropt_py: cost-frontier planning of parallel deep-learning training.

Given a model and a cluster, compute every Pareto-optimal (memory per device,
per-iteration time) parallelization strategy (TensorOpt's *cost frontier*) and
pick from it::

    import tensoropt_py as to
    fr = to.frontier("transformer", "v100-2x8", devices=16)
    plan = to.find_strategy("transformer", "v100-2x8", option="mini_time", memory_cap="14.5GB")

``to.frontier`` is both the engine subpackage (``from tensoropt_py.frontier import
CostGraph, track``) and, when called, the model-level :func:`tensoropt_py.api.frontier`.
Heavy dependencies (torch, mpi4py, matplotlib) are imported only when used.
"""

import importlib
import types

from .errors import (
    CalibrationError,
    CostGraphError,
    InfeasibleError,
    InvalidInputError,
    TensorOptError,
    UnsupportedOperatorError,
)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself), resolved on first use.
_LAZY = {
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
    "__version__",
]


class _CallableFrontierModule(types.ModuleType):
    """``tensoropt_py.frontier`` is the engine subpackage; calling it runs :func:`tensoropt_py.api.frontier`."""

    def __call__(self, *args, **kwargs):
        from .api import frontier as model_frontier

        return model_frontier(*args, **kwargs)


# The engine needs only numpy and its compiled kernels, so importing it here is cheap; the
# model-level function (torch-free too, but heavier) loads on the first call.
from . import frontier  # noqa: E402

frontier.__class__ = _CallableFrontierModule


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
