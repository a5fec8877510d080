"""Learning-rate schedules (multipliers for ``torch.optim.lr_scheduler.LambdaLR``)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["lr_multiplier"]


def lr_multiplier(
    schedule: str, *, warmup_steps: int, base_lr: float, d_model: int
) -> Callable[[int], float]:
    """Return ``f(step) -> multiplier of base_lr``.

    - ``"constant"``: linear warm-up over ``warmup_steps`` then constant.
    - ``"noam"``: the reference's schedule (Vaswani et al. 2017; spec ``srwm_acl.md`` §3.2)
      ``lr(s) = d_model^-0.5 · min(s^-0.5, s · w^-1.5)`` (``base_lr`` is ignored; peak at ``s = w``).

    Raises:
        ValueError: for an unknown schedule or negative warm-up.
    """
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps: expected >= 0, got {warmup_steps}")
    if schedule == "constant":
        return lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    if schedule == "noam":
        w = max(1, warmup_steps)
        return lambda step: d_model**-0.5 * min((step + 1) ** -0.5, (step + 1) * w**-1.5) / base_lr
    raise ValueError(f"schedule: expected 'constant' or 'noam', got {schedule!r}")
