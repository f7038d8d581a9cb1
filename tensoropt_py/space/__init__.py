"""Per-operator parallelization configurations: device meshes, tensor layouts, validity rules."""

from .configs import OpConfig, config_key, enumerate_configs, logical_dims, splittable_dims
from .layout import PARTIAL, REPLICATE, Layout
from .mesh import Mesh, fine_groups, meshes, ordered_factorisations, prime_factors

__all__ = ["Mesh", "OpConfig", "Layout", "REPLICATE", "PARTIAL", "enumerate_configs", "config_key",
           "splittable_dims", "logical_dims", "meshes", "ordered_factorisations", "prime_factors", "fine_groups"]
