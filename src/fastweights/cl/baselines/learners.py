"""Learners of the continual-learning baselines: one shared (single) head, no task identity.

- :class:`MLP`: the multi-layer perceptron of Hsu et al. 2018 ("Re-evaluating continual learning
  scenarios", §4: 2 hidden layers of 400 ReLU units) on flattened images.
- :class:`ConvNet`: the Conv-4 backbone of the ACL model (:class:`fastweights.models.backbones.Conv4`)
  plus a linear head — the same feature extractor as the in-context learner, for every source.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from fastweights.checks import check_choice, check_int
from fastweights.models.backbones import Conv4

__all__ = ["LEARNERS", "MLP", "ConvNet", "build_learner"]

LEARNERS = ("mlp", "conv4")


class MLP(nn.Module):
    """``[N, C, S, S]`` float images → flatten → (Linear → ReLU) × ``len(hidden)`` → Linear → logits
    ``[N, n_out]`` (Hsu et al. 2018: ``hidden=(400, 400)``). PyTorch's default initialisation.

    Raises:
        ValueError: naming the argument unless ``in_features``, ``n_out`` and every hidden width are
            ints >= 1.
    """

    def __init__(self, in_features: int, n_out: int, hidden: Sequence[int] = (400, 400)) -> None:
        super().__init__()
        check_int("in_features", in_features)
        check_int("n_out", n_out)
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for i, h in enumerate(hidden):
            check_int(f"hidden[{i}]", h)
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_out))
        self.net = nn.Sequential(*layers)
        self.in_features, self.n_out = in_features, n_out

    def forward(self, x: Tensor) -> Tensor:
        """``x [N, C, S, S]`` (``C·S·S = in_features``) → logits ``[N, n_out]``."""
        return self.net(x)


class ConvNet(nn.Module):
    """Conv-4 (instance norm, 32 channels by default) → Linear → logits ``[N, n_out]``.

    Raises:
        ValueError: from :class:`~fastweights.models.backbones.Conv4` (bad channels / image size) or
            naming ``n_out``.
    """

    def __init__(self, in_channels: int, image_size: int, n_out: int, channels: int = 32) -> None:
        super().__init__()
        check_int("n_out", n_out)
        self.backbone = Conv4(in_channels, channels, image_size=image_size)
        self.head = nn.Linear(self.backbone.feature_dim, n_out)
        self.n_out = n_out

    def forward(self, x: Tensor) -> Tensor:
        """``x [N, in_channels, S, S]`` → logits ``[N, n_out]``."""
        return self.head(self.backbone(x))


def build_learner(kind: str, *, channels: int, image_size: int, n_out: int) -> nn.Module:
    """``"mlp"`` (:class:`MLP`, 2 × 400) or ``"conv4"`` (:class:`ConvNet`) for ``channels × image_size²``
    inputs and ``n_out`` outputs. Raises ``ValueError`` naming ``learner`` for another ``kind``."""
    check_choice("learner", kind, LEARNERS)
    if kind == "mlp":
        return MLP(channels * image_size * image_size, n_out)
    return ConvNet(channels, image_size, n_out)
