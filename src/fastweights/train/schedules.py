"""Learning-rate schedules (multipliers for ``torch.optim.lr_scheduler.LambdaLR``)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["SCHEDULES", "lr_multiplier", "warmup_cosine"]

SCHEDULES = ("constant", "noam")  # the names lr_multiplier accepts


def lr_multiplier(
    schedule: str, *, warmup_steps: int, base_lr: float, d_model: int
) -> Callable[[int], float]:
    """Return ``f(step) -> multiplier of base_lr``.

    - ``"constant"``: linear warm-up over ``warmup_steps`` then constant.
    - ``"noam"``: the reference's schedule (Vaswani et al. 2017, §5.3, Eq. 3)
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


def warmup_cosine(*, warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to ``min_ratio`` at ``total_steps``
    (then constant): the TTT paper's schedule (Sun et al. 2024, §3; ``min_ratio = min_lr / lr``).
    The multiplier for optimiser step ``s`` (0-based) is evaluated at ``s + 1``.

    Raises:
        ValueError: unless ``0 <= warmup_steps <= total_steps``, ``total_steps >= 1`` and
            ``min_ratio`` is in ``[0, 1]``.
    """
    if warmup_steps < 0 or total_steps < 1 or warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps/total_steps: expected 0 <= warmup_steps <= total_steps >= 1, "
            f"got {warmup_steps}/{total_steps}"
        )
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio: expected a value in [0, 1], got {min_ratio}")

    def mult(step: int) -> float:
        s = step + 1
        if s <= warmup_steps:
            return s / warmup_steps
        progress = min(1.0, (s - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return mult
