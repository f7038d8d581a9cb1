"""Per-operator parallelization configurations: device meshes, tensor layouts, validity rules."""

from .configs import OpConfig, config_key, enumerate_configs, logical_dims, splittable_dims
from .layout import PARTIAL, REPLICATE, Layout
from .mesh import (MESH_SPACES, Mesh, MeshSpace, check_meshes, fine_groups, hierarchical_meshes, mesh_space, meshes,
                   ordered_factorisations, prime_factors, resolve_meshes)

__all__ = ["Mesh", "OpConfig", "Layout", "REPLICATE", "PARTIAL", "enumerate_configs", "config_key",
           "splittable_dims", "logical_dims", "meshes", "ordered_factorisations", "prime_factors", "fine_groups",
           "MeshSpace", "MESH_SPACES", "check_meshes", "resolve_meshes", "hierarchical_meshes", "mesh_space"]
