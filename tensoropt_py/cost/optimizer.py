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

The update itself (:func:`update_work`) is an elementwise pass over each local parameter
shard: it reads the weight, the gradient and the state and writes the weight and the state
back, so its roofline is memory-bound (Adam: 7 fp32 streams, about 12 flops per element).

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

__all__ = ["OPTIMIZERS", "state_bytes_per_param", "state_factor", "check_optimizer", "update_work", "update_key",
           "UPDATE_KEY_PREFIX"]

#: How every :func:`update_key` starts (measured tables hold operator and update entries side by side).
UPDATE_KEY_PREFIX = "optimizer_update|"

#: Optimizer name -> number of state buffers per parameter.
OPTIMIZERS = {"sgd": 0, "momentum": 1, "adam": 2}

#: Floating-point operations of one update per parameter element (torch's single-tensor kernels).
UPDATE_FLOPS = {"sgd": 2, "momentum": 4, "adam": 12}


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


def update_work(optimizer: str = "adam", dtype: str = "float32", *, mixed_precision: bool = False) -> tuple[int, int]:
    """``(flops, bytes moved)`` of one optimizer update per parameter element.

    Reads weight, gradient and state, writes weight and state (mixed precision: the fp32
    master weight and state, the half-precision gradient read and weight written back).

    Examples
    --------
    >>> update_work("adam")            # read w, g, m, v; write w, m, v
    (12, 28)
    >>> update_work("sgd")
    (2, 12)
    """
    name = check_optimizer(optimizer)
    if dtype not in DTYPE_BYTES:
        raise InvalidInputError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
    nstate = OPTIMIZERS[name]
    if mixed_precision:
        return UPDATE_FLOPS[name], 2 + 2 + 4 * 2 * (1 + nstate)
    return UPDATE_FLOPS[name], DTYPE_BYTES[dtype] * (3 + 2 * nstate)


def update_key(optimizer: str, local_shape, dtype: str) -> str:
    """Measured-table key of one optimizer update of a parameter shard.

    >>> update_key("adam", (64, 32), "float32")
    'optimizer_update|adam|[64,32]|float32'
    """
    return f"{UPDATE_KEY_PREFIX}{check_optimizer(optimizer)}|[{','.join(str(int(d)) for d in local_shape)}]|{dtype}"
