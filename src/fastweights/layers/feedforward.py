"""Pre-LN position-wise feed-forward sublayer (Vaswani et al. 2017, §3.3; as in modern-srwm)."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["FeedForward"]


class FeedForward(nn.Module):
    """``z + Drop(Lin2(Drop(ReLU(Lin1(LN(z))))))`` on ``[..., d_model]`` tensors.

    Args:
        d_model: model width.
        d_ff: hidden width (the reference uses ``ff_factor * d_model``).
        dropout: dropout rate in ``[0, 1)``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, z: Tensor) -> Tensor:
        return z + self.net(self.norm(z))
