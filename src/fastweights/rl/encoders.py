"""Observation encoders of the RL agents: ``obs [N, *obs_shape]`` uint8 → features ``[N, feature_dim]``.

- :class:`ImpalaCNN`: the IMPALA network (Espeholt et al. 2018, Fig. 3 "large"; the SRWM paper's ProcGen
  encoder, §4.3): per stage a 3×3 conv, 3×3 max-pool with stride 2 and two residual blocks; channels
  16/32/32 on 64×64 RGB, then ReLU → FC 256 → ReLU.
- :class:`MiniGridEncoder`: MiniGrid's symbolic 7×7 view (object / colour / state indices, one-hot) →
  three 3×3 convs → FC → ReLU (this library's choice for the CPU preset).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fastweights.rl.envs import MINIGRID_OBS_SHAPE

__all__ = ["ImpalaCNN", "MiniGridEncoder", "ENCODERS", "make_encoder"]


def _check_obs(obs: Tensor, shape: tuple[int, ...], name: str) -> None:
    if obs.dtype != torch.uint8 or tuple(obs.shape[1:]) != shape:
        raise ValueError(
            f"obs: expected uint8 [N, {', '.join(map(str, shape))}] for the {name} encoder, got "
            f"{obs.dtype} {list(obs.shape)}"
        )


class _Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """IMPALA-CNN on ``[N, C, S, S]`` uint8 images (scaled to [0, 1]) → ``[N, feature_dim]`` float.

    Args:
        in_channels: ``C`` (3 for RGB). image_size: ``S`` (64 in ProcGen).
        channels: output channels per stage. feature_dim: width of the final FC layer.

    Raises:
        ValueError (in forward): for observations of another dtype or shape.
    """

    def __init__(
        self,
        in_channels: int = 3,
        image_size: int = 64,
        channels: tuple[int, ...] = (16, 32, 32),
        feature_dim: int = 256,
    ) -> None:
        super().__init__()
        stages: list[nn.Module] = []
        c, s = in_channels, image_size
        for out in channels:
            stages += [
                nn.Conv2d(c, out, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                _Residual(out),
                _Residual(out),
            ]
            c, s = out, (s + 1) // 2
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c * s * s, feature_dim)
        self.obs_shape, self.feature_dim = (in_channels, image_size, image_size), feature_dim

    def forward(self, obs: Tensor) -> Tensor:
        _check_obs(obs, self.obs_shape, "impala")
        x = self.stages(obs.float() / 255.0)
        return torch.relu(self.fc(torch.relu(x).flatten(1)))


class MiniGridEncoder(nn.Module):
    """MiniGrid symbolic view ``[N, 3, 7, 7]`` uint8 → ``[N, feature_dim]`` float.

    The three channels (object 0–10, colour 0–5, state 0–2; minigrid's ``OBJECT_TO_IDX`` etc.) are
    one-hot encoded (20 planes), then three 3×3 convs (16/32/64, ReLU; the first two padded) and FC.

    Raises:
        ValueError (in forward): for observations of another dtype or shape, or indices out of range.
    """

    SIZES = (11, 6, 3)

    def __init__(self, feature_dim: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(sum(self.SIZES), 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
        )
        self.fc = nn.Linear(64 * 5 * 5, feature_dim)
        self.obs_shape, self.feature_dim = MINIGRID_OBS_SHAPE, feature_dim

    def forward(self, obs: Tensor) -> Tensor:
        _check_obs(obs, self.obs_shape, "minigrid")
        planes = []
        for i, size in enumerate(self.SIZES):
            idx = obs[:, i].long()
            if int(idx.max()) >= size:
                raise ValueError(f"obs: expected channel {i} indices < {size}, got {int(idx.max())}")
            planes.append(nn.functional.one_hot(idx, size))
        x = torch.cat(planes, dim=-1).permute(0, 3, 1, 2).float()
        return torch.relu(self.fc(self.net(x).flatten(1)))


ENCODERS = ("impala", "minigrid")


def make_encoder(name: str, obs_shape: tuple[int, ...], feature_dim: int = 256) -> nn.Module:
    """The encoder ``name`` for observations of ``obs_shape``.

    Raises:
        ValueError: for an unknown name, or an ``obs_shape`` the encoder cannot read.
    """
    if name == "impala":
        if len(obs_shape) != 3 or obs_shape[1] != obs_shape[2]:
            raise ValueError(
                f"encoder: 'impala' expects square [C, S, S] observations, got {list(obs_shape)}"
            )
        return ImpalaCNN(obs_shape[0], obs_shape[1], feature_dim=feature_dim)
    if name == "minigrid":
        if tuple(obs_shape) != MINIGRID_OBS_SHAPE:
            raise ValueError(f"encoder: 'minigrid' expects [3, 7, 7] observations, got {list(obs_shape)}")
        return MiniGridEncoder(feature_dim)
    raise ValueError(f"encoder: expected one of {ENCODERS}, got {name!r}")
