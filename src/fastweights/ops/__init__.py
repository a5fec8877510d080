"""Pure tensor functions (no modules, no parameters, no I/O). Layout ``[B, T, H, D]``."""

from fastweights.ops.srwm import srwm, srwm_read, srwm_reference

__all__ = ["srwm", "srwm_read", "srwm_reference"]
