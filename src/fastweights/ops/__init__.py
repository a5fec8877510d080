"""Pure tensor functions (no modules, no parameters, no I/O). Layout ``[B, T, H, D]``."""

from fastweights.ops.delta_rule import delta_rule, delta_rule_read, delta_rule_reference
from fastweights.ops.linear_attention import linear_attention, linear_attention_reference
from fastweights.ops.srwm import srwm, srwm_read, srwm_reference
from fastweights.ops.ttt import ttt_linear, ttt_linear_reference, ttt_mlp, ttt_mlp_reference

__all__ = [
    "delta_rule",
    "delta_rule_read",
    "delta_rule_reference",
    "linear_attention",
    "linear_attention_reference",
    "srwm",
    "srwm_read",
    "srwm_reference",
    "ttt_linear",
    "ttt_linear_reference",
    "ttt_mlp",
    "ttt_mlp_reference",
]
