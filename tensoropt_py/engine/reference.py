"""Pure references of the compiled kernels (re-exported from :mod:`tensoropt_py.elimination.reference`)."""

from ..elimination.reference import (  # noqa: F401
    combine_reference,
    reduce_ragged_reference,
    reduce_reference,
    thin_reference,
)

__all__ = ["combine_reference", "reduce_ragged_reference", "reduce_reference", "thin_reference"]
