"""Mixture-of-experts layers through ``torch.export``: one traced operator per experts module.

Hugging Face MoE models (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3, ... in
transformers 5) compute their experts in an ``Experts`` module (class decorated with
``transformers.integrations.moe.use_experts_implementation``) called as
``experts(hidden [T, H], top_k_index [T, k], top_k_weights [T, k])`` with the weights of all
experts stacked in 3-D parameters (``gate_up_proj [E, 2I, H]`` or ``up_proj [E, I, H]``, and
``down_proj [E, H, I]``). Traced, their grouped-GEMM implementation is a data-dependent sort,
histogram and gather that the IR cannot split. While :func:`~tensoropt_py.graph.torch_import.from_torch`
exports, :func:`experts_as_one_operator` makes each such module call the custom operator
``tensoropt::moe_experts`` instead, which the importer maps to MOE_DISPATCH -> MOE_EXPERTS ->
MOE_COMBINE (experts are a loop dimension the planner can split: expert parallelism).

Supported: concatenated ``[gate; up]`` or ungated weights, plain or transposed, no biases, no
post-expert norm, the default gate (``act(gate) * up``), activations ``silu``, ``gelu``,
``gelu_tanh``, ``relu``. Other experts modules are left alone (traced as they are, with a
warning).
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import torch
import torch.nn.functional as F

__all__ = ["experts_as_one_operator", "moe_experts_reference"]

#: config.hidden_act -> the IR's activation name
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
_ACT_FN = {"silu": F.silu, "relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


def moe_experts_reference(hidden, top_k_index, top_k_weights, up, down, activation: str, gated: bool,
                          transposed: bool):
    """Exact dropless experts output ``[T, H]`` (each token's ``k`` experts, weighted and summed)."""
    act = _ACT_FN[activation]
    w_up = up[top_k_index]  # [T, k, 2I, H] (or [T, k, H, 2I] transposed)
    w_down = down[top_k_index]
    proj = torch.einsum("th,tkho->tko", hidden, w_up) if transposed else torch.einsum("th,tkoh->tko", hidden, w_up)
    if gated:
        gate, u = proj.chunk(2, dim=-1)
        h = act(gate) * u
    else:
        h = act(proj)
    y = torch.einsum("tki,tkih->tkh", h, w_down) if transposed else torch.einsum("tki,tkhi->tkh", h, w_down)
    return (y * top_k_weights.unsqueeze(-1).to(y.dtype)).sum(1).to(hidden.dtype)


@torch.library.custom_op("tensoropt::moe_experts", mutates_args=())
def _moe_experts_op(hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                    up: torch.Tensor, down: torch.Tensor, activation: str, gated: bool,
                    transposed: bool) -> torch.Tensor:
    return moe_experts_reference(hidden, top_k_index, top_k_weights, up, down, activation, gated, transposed)


@_moe_experts_op.register_fake
def _(hidden, top_k_index, top_k_weights, up, down, activation, gated, transposed):
    return hidden.new_empty(hidden.shape)


def _hf_experts_spec(mod):
    """``(up weight name, activation, gated, transposed)`` of a supported HF experts module, a reason
    string for an unsupported one, or None for a module that is no HF experts module."""
    moe = sys.modules.get("transformers.integrations.moe")
    # the attributes that ``use_experts_implementation`` sets on every instance, in every
    # transformers 5 release (``_is_expert_parallel`` came later: 5.17 has none)
    if moe is None or not hasattr(mod, "has_gate") or not hasattr(mod, "is_concatenated"):
        return None
    name = type(mod).__name__
    if getattr(mod, "_is_expert_parallel", False):
        return f"{name}: already expert-parallel (it holds only its local experts)"
    gated = bool(mod.has_gate)
    up = getattr(mod, "gate_up_proj" if gated else "up_proj", None)
    down = getattr(mod, "down_proj", None)
    if not isinstance(up, torch.Tensor) or not isinstance(down, torch.Tensor) or up.dim() != 3:
        return f"{name}: no 3-D expert weights"
    if getattr(mod, "has_bias", False) or getattr(mod, "has_post_expert_norm", False):
        return f"{name}: expert biases or a post-expert norm"
    if gated and not mod.is_concatenated:
        return f"{name}: interleaved gate/up weights"
    if gated and getattr(type(mod), "_apply_gate", None) is not getattr(moe, "_default_apply_gate", None):
        return f"{name}: a custom gate"
    act = _ACTIVATIONS.get(str(getattr(getattr(mod, "config", None), "hidden_act", "")))
    if act is None:
        return f"{name}: activation {getattr(getattr(mod, 'config', None), 'hidden_act', None)!r}"
    return ("gate_up_proj" if gated else "up_proj"), act, gated, bool(getattr(mod, "is_transposed", False))


@contextlib.contextmanager
def experts_as_one_operator(module: torch.nn.Module):
    """While active, every supported HF experts module of ``module`` calls ``tensoropt::moe_experts``.

    Yields the qualified names of the modules switched. An experts module that is not supported
    is left alone with a warning saying why (it then imports as the traced grouped GEMM).
    """
    switched = []
    for qual, mod in module.named_modules():
        spec = _hf_experts_spec(mod)
        if spec is None:
            continue
        if isinstance(spec, str):
            warnings.warn(f"experts module {qual!r} is imported as traced (replicated operators): unsupported "
                          f"{spec}", stacklevel=4)
            continue
        up, act, gated, transposed = spec

        def forward(hidden_states, top_k_index, top_k_weights, _m=mod, _up=up, _a=(act, gated, transposed)):
            # the weights are read at call time: torch.export swaps in its own parameter tensors
            return _moe_experts_op(hidden_states, top_k_index, top_k_weights, getattr(_m, _up), _m.down_proj, *_a)

        mod.forward = forward
        switched.append((qual, mod))
    try:
        yield [q for q, _ in switched]
    finally:
        for _, mod in switched:
            del mod.forward
