"""Configuration of the ``rl`` recipe (presets in ``fastweights/configs/rl/``): multi-task actor-critic
with fast-weight cores (SRWM paper §4.3), trained with V-trace (IMPALA)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastweights.checks import check_choice, check_device, check_int, check_ints, check_real
from fastweights.rl.cores import CORES
from fastweights.rl.encoders import ENCODERS
from fastweights.rl.envs import LevelSet
from fastweights.rl.procgen import DISTRIBUTION_MODES, PROCGEN_GAMES
from fastweights.rl.rollout import REWARD_CLIPS
from fastweights.rl.suites import SUITES
from fastweights.train.loop import LoopConfig

__all__ = [
    "SUITES",
    "RLLevelsConfig",
    "RLEnvConfig",
    "RLModelConfig",
    "RLTrainConfig",
    "RLEvalConfig",
    "RLConfig",
]  # SUITES: re-exported from fastweights.rl.suites (the choices of env.suite)


@dataclass
class RLLevelsConfig:
    """Levels ``start .. start + count - 1``."""

    start: int = 0
    count: int = 200

    def __post_init__(self) -> None:
        check_int("start", self.start, low=0)
        check_int("count", self.count)

    def level_set(self) -> LevelSet:
        return LevelSet(self.start, self.count)


@dataclass
class RLEnvConfig:
    """The games (played jointly, no task id), how many environments, and the level splits."""

    suite: str = "minigrid"  # or "procgen" (64x64 RGB, 15 actions; the SRWM paper's suite)
    games: list[str] = field(
        default_factory=lambda: ["MiniGrid-Empty-Random-6x6-v0", "MiniGrid-DoorKey-5x5-v0"]
    )
    num_envs: int = 16  # environments stepped together (assigned to the games in turn)
    train_levels: RLLevelsConfig = field(default_factory=RLLevelsConfig)
    # the greedy validation during training (it picks the best checkpoint): unseen levels kept apart
    # from the evaluation's eval.splits, so the reported test score is not the selection score
    val_levels: RLLevelsConfig = field(default_factory=lambda: RLLevelsConfig(2000, 200))
    distribution_mode: str = "easy"  # ProcGen only (the paper's: easy)

    def __post_init__(self) -> None:
        check_choice("suite", self.suite, SUITES)
        check_choice("distribution_mode", self.distribution_mode, DISTRIBUTION_MODES)
        if (
            not isinstance(self.games, list)
            or not self.games
            or not all(isinstance(g, str) for g in self.games)
        ):
            raise ValueError(f"games: expected a non-empty list of game names, got {self.games!r}")
        if len(set(self.games)) != len(self.games):
            raise ValueError(f"games: expected distinct names, got {self.games}")
        unknown = [g for g in self.games if g not in PROCGEN_GAMES] if self.suite == "procgen" else []
        if unknown:
            raise ValueError(f"games: expected ProcGen games of {list(PROCGEN_GAMES)}, got unknown {unknown}")
        check_int("num_envs", self.num_envs, low=len(self.games))
        if self.train_levels.level_set().overlaps(self.val_levels.level_set()):
            raise ValueError(
                f"val_levels: expected levels disjoint from train_levels {self.train_levels}, got "
                f"{self.val_levels}"
            )


@dataclass
class RLModelConfig:
    """Encoder → core → policy / value heads (paper: IMPALA-CNN, SRWM 2 × 128 with 8 heads, FF 512)."""

    core: str = "srwm"
    encoder: str = "auto"  # auto: the suite's (minigrid for MiniGrid, impala for ProcGen)
    feature_dim: int = 256
    d_model: int = 128
    num_layers: int = 2
    num_heads: int = 8
    d_ff: int = 512
    lstm_size: int = 0  # the lstm core's width (paper: 256); 0: d_model
    reset_every: int = 50  # srwm_reset's period in steps

    def __post_init__(self) -> None:
        check_choice("core", self.core, CORES)
        check_choice("encoder", self.encoder, ("auto", *ENCODERS))
        check_ints(self, ("feature_dim", "d_model", "num_layers", "num_heads", "d_ff", "reset_every"))
        check_int("lstm_size", self.lstm_size, low=0)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model: expected a multiple of num_heads={self.num_heads}, got {self.d_model}"
            )


@dataclass
class RLTrainConfig(LoopConfig):
    """V-trace learner (IMPALA; the SRWM paper's ProcGen settings as defaults); the loop fields of
    :class:`~fastweights.train.loop.LoopConfig` with clipping at 40 and a checkpoint every 50 updates.
    ``max_steps`` counts learner updates: frames = ``max_steps * accumulation_steps * unroll * num_envs``."""

    grad_clip: float = 40.0
    checkpoint_every_steps: int = 50
    unroll: int = 50  # steps per environment per unroll (truncated BPTT length)
    lr: float = 6e-4  # RMSProp, linearly decayed to 0 over max_steps
    rmsprop_alpha: float = 0.99
    rmsprop_eps: float = 0.01
    discount: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    reward_clip: str = "sign"
    val_episodes: int = 1  # greedy episodes per evaluation environment at each validation

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ints(self, ("unroll", "val_episodes"))
        check_real("lr", self.lr, 0)
        check_real("rmsprop_alpha", self.rmsprop_alpha, 0, 1)
        check_real("rmsprop_eps", self.rmsprop_eps, 0, low_open=True)
        check_real("discount", self.discount, 0, 1)
        for name in ("baseline_cost", "entropy_cost"):
            check_real(name, getattr(self, name), 0)
        check_choice("reward_clip", self.reward_clip, REWARD_CLIPS)


@dataclass
class RLEvalConfig:
    """Greedy evaluation on unseen levels: ``splits`` level ranges, ``episodes`` per game and split."""

    splits: list[RLLevelsConfig] = field(
        default_factory=lambda: [
            RLLevelsConfig(1000, 200),
            RLLevelsConfig(1200, 200),
            RLLevelsConfig(1400, 200),
        ]
    )
    episodes: int = 200
    envs_per_game: int = 8
    train_episodes: int = 200  # also on the training levels (the train/test gap)
    random_policy: bool = True  # also uniformly random actions on the first split (the reference)

    def __post_init__(self) -> None:
        if not isinstance(self.splits, list) or not self.splits:
            raise ValueError(f"splits: expected a non-empty list of {{start, count}}, got {self.splits!r}")
        check_ints(self, ("episodes", "envs_per_game"))
        check_int("train_episodes", self.train_episodes, low=0)
        if not isinstance(self.random_policy, bool):
            raise ValueError(f"random_policy: expected true or false, got {self.random_policy!r}")
        for name in ("episodes", "train_episodes"):
            value = getattr(self, name)
            if value % self.envs_per_game:
                raise ValueError(
                    f"{name}: expected a multiple of envs_per_game={self.envs_per_game}, got {value}"
                )


@dataclass
class RLConfig:
    name: str = "rl"
    device: str = "auto"
    env: RLEnvConfig = field(default_factory=RLEnvConfig)
    model: RLModelConfig = field(default_factory=RLModelConfig)
    train: RLTrainConfig = field(default_factory=RLTrainConfig)
    eval: RLEvalConfig = field(default_factory=RLEvalConfig)

    def __post_init__(self) -> None:
        check_device("device", self.device)
        if self.model.encoder == "minigrid" and self.env.suite != "minigrid":
            raise ValueError(
                f"model.encoder: expected 'auto' or 'impala' for env.suite={self.env.suite!r} (the "
                "'minigrid' encoder reads MiniGrid's symbolic view), got 'minigrid'"
            )
        for split in self.eval.splits:
            for name, used in (("train_levels", self.env.train_levels), ("val_levels", self.env.val_levels)):
                if split.level_set().overlaps(used.level_set()):
                    raise ValueError(
                        f"eval.splits: expected level ranges disjoint from env.{name} {used}, got {split}"
                    )
