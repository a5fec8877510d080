"""flash-linear-attention's chunk kernels for :func:`fastweights.ops.delta_rule` and
:func:`fastweights.ops.linear_attention` on CUDA (Yang et al. 2024; the ``fla`` package, the optional
extra ``[gpu]``).

Conventions mapped (both libraries take ``[B, T, H, K]`` inputs and ``[B, H, K, V]`` states):
- **scale:** fla scales ``q`` by ``1/sqrt(K)`` unless told otherwise; fastweights' ops do not scale, so
  ``scale=1.0`` is passed;
- **keys:** fastweights normalises keys in the layers, not in the ops (``use_qk_l2norm_in_kernel=False``);
- **beta:** ``[B, T, H]`` in both; the delta rule reads after its write in both;
- **linear attention:** un-normalised (``normalize=False``), as fastweights' op;
- **dtypes:** fla's chunk kernels take bfloat16/float16 only; the state comes back as float32, which
  is what fastweights' ops return for half inputs.

Used only when ``FASTWEIGHTS_FLA=1``, ``fla`` imports and the inputs are CUDA bfloat16/float16 (packed
``cu_seqlens`` calls reach it one sequence at a time, as every op): the mapping is tested on CPU
against fla's own pure-PyTorch references (tests/ops/test_fla.py), but the dispatch has not been run on
a GPU yet (no GPU was available), so it is not the default.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import Tensor

__all__ = ["available", "enabled", "fla_delta_rule", "fla_linear_attention"]

_state: dict[str, Any] = {}
_HALF = (torch.bfloat16, torch.float16)


def available() -> bool:
    """Whether ``fla``'s delta-rule and linear-attention chunk kernels import."""
    if "ok" not in _state:
        try:
            from fla.ops.delta_rule import chunk_delta_rule  # noqa: F401
            from fla.ops.linear_attn import chunk_linear_attn  # noqa: F401

            _state["ok"] = True
        except Exception:  # ImportError, or fla refusing this platform at import
            _state["ok"] = False
    return _state["ok"]


def enabled(q: Tensor) -> bool:
    """Whether the ops send ``q``'s call to fla: CUDA, bfloat16/float16, ``FASTWEIGHTS_FLA=1``, and fla
    imports."""
    return q.is_cuda and q.dtype in _HALF and os.environ.get("FASTWEIGHTS_FLA", "") == "1" and available()


def _float_state(state: Tensor | None) -> Tensor | None:
    return state.float() if state is not None else None


def fla_delta_rule(
    q: Tensor, k: Tensor, v: Tensor, beta: Tensor, initial_state: Tensor | None, output_final_state: bool
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_delta_rule`` with fastweights' conventions: inputs ``[B, T, H, K|V]``, ``beta
    [B, T, H]`` (one half dtype), optional state ``[B, H, K, V]`` → ``(o [B, T, H, V] in q's dtype,
    float32 state or None)``."""
    from fla.ops.delta_rule import chunk_delta_rule

    o, state = chunk_delta_rule(
        q,
        k,
        v,
        beta,
        scale=1.0,
        initial_state=_float_state(initial_state),
        output_final_state=output_final_state,
        use_qk_l2norm_in_kernel=False,
    )
    return o.to(q.dtype), (_float_state(state) if output_final_state else None)


def fla_linear_attention(
    q: Tensor, k: Tensor, v: Tensor, initial_state: Tensor | None, output_final_state: bool
) -> tuple[Tensor, Tensor | None]:
    """fla's ``chunk_linear_attn`` (un-normalised, unscaled) with fastweights' conventions: inputs
    ``[B, T, H, K|V]`` (one half dtype), optional state ``[B, H, K, V]`` → ``(o [B, T, H, V] in q's
    dtype, float32 state or None)``."""
    from fla.ops.linear_attn import chunk_linear_attn

    o, state = chunk_linear_attn(
        q,
        k,
        v,
        scale=1.0,
        initial_state=_float_state(initial_state),
        output_final_state=output_final_state,
        normalize=False,
    )
    return o.to(q.dtype), (_float_state(state) if output_final_state else None)
