"""Bytes of training state per parameter: weights, gradients and optimizer state.

TensorOpt Eq. 1's parameter memory ``m_p`` is the parameter shard times a factor that
depends on the optimizer and the precision:

============ ====================== ==========================================
optimizer    state per parameter    bytes per parameter (fp32 / mixed fp16)
============ ====================== ==========================================
``sgd``      none                   4 + 4 = 8      /  2 + 2 + 4 = 8
``momentum`` 1 buffer               8 + 4 = 12     /  8 + 4 = 12
``adam``     2 moments (m, v)       8 + 8 = 16     /  8 + 8 = 16
============ ====================== ==========================================

In full precision the weight, its gradient and every state buffer have the parameter's
dtype. With ``mixed_precision=True`` weights and gradients are half precision and the
optimizer keeps an fp32 master copy plus fp32 state (the usual AMP / ZeRO accounting).

Examples
--------
>>> state_bytes_per_param("adam", "float32")
16
>>> state_factor("adam")          # in units of the parameter's own bytes: 1 + 1 + 2
4.0
>>> state_bytes_per_param("sgd", "float16", mixed_precision=True)
8
"""

from __future__ import annotations

from ..errors import InvalidInputError
from ..graph.ir import DTYPE_BYTES

__all__ = ["OPTIMIZERS", "state_bytes_per_param", "state_factor", "check_optimizer"]

#: Optimizer name -> number of state buffers per parameter.
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}


def check_optimizer(optimizer: str) -> str:
    """Normalise and validate an optimizer name."""
    name = str(optimizer).lower() if isinstance(optimizer, str) else optimizer
    if name not in OPTIMIZERS:
        raise InvalidInputError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    return name


def state_bytes_per_param(optimizer: str = "adam", dtype: str = "float32", *, mixed_precision: bool = False) -> int:
    """Bytes of weight + gradient + optimizer state per parameter element."""
    name = check_optimizer(optimizer)
    if dtype not in DTYPE_BYTES:
        raise InvalidInputError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
    nstate = OPTIMIZERS[name]
    if mixed_precision:
        half = 2
        return 2 * half + 4 + 4 * nstate if nstate else 2 * half + 4
    b = DTYPE_BYTES[dtype]
    return b * (2 + nstate)


def state_factor(optimizer: str = "adam", dtype: str = "float32", *, mixed_precision: bool = False) -> float:
    """:func:`state_bytes_per_param` divided by the bytes of one weight element of ``dtype``."""
    return state_bytes_per_param(optimizer, dtype, mixed_precision=mixed_precision) / DTYPE_BYTES[dtype]
