"""FlexFlow: SOAP configurations, task graph, full + delta execution simulator, MCMC search.

>>> from tensoropt_py.cluster import Cluster
>>> from tensoropt_py.soap import search
>>> from tensoropt_py.soap.testing import mlp_graph
>>> g = mlp_graph(batch=32, width=64, layers=1)
>>> best, result = search(g, Cluster.preset("cpu-1x4"), devices=4, budget=40, seed=0)
>>> result.time > 0 and len(best) == len(g)
True
"""

from .plan_simulator import PlanSimulation, TimelineEvent, simulate_plan
from .config import (
    ConfigSpace,
    NotSoapError,
    SoapConfig,
    SoapStrategy,
    data_parallel,
    data_parallel_config,
    from_split_factors,
    parallel_dims,
    strategy_from_split_factors,
)
from .minimize import MinimizeResult, minimize
from .search import exhaustive, search
from .simulator import MIN_TASK_TIME, SimResult, SimState, Simulator
from .task_graph import Task, TaskGraph

__all__ = [
    "SoapConfig",
    "SoapStrategy",
    "NotSoapError",
    "ConfigSpace",
    "parallel_dims",
    "data_parallel",
    "data_parallel_config",
    "from_split_factors",
    "strategy_from_split_factors",
    "Task",
    "TaskGraph",
    "Simulator",
    "SimState",
    "SimResult",
    "MIN_TASK_TIME",
    "minimize",
    "MinimizeResult",
    "search",
    "exhaustive",
]
