"""Configuration of the language-modelling recipe (presets in ``fastweights/configs/lm/``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fastweights.checks import (
    check_betas,
    check_choices,
    check_device,
    check_int,
    check_ints,
    check_real,
)
from fastweights.data.sources.text import VOCAB_SIZE
from fastweights.models.lm import LMConfig
from fastweights.train.loop import LoopConfig

__all__ = ["LMRecipeConfig", "LMDataConfig", "LMTrainConfig", "LMEvalConfig"]


@dataclass
class LMDataConfig:
    """Byte-level corpus: ``path`` = a UTF-8 text file or a folder of text files; ``None`` = the embedded
    corpus (King James Bible from Debian ``bible-kjv``, else the Python docs, else the stdlib source).
    Fixed cuts by byte offset: the last ``test_fraction`` is test, the ``valid_fraction`` before it
    validation."""

    path: str | None = None
    valid_fraction: float = 0.05
    test_fraction: float = 0.05
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.path is not None and not str(self.path).strip():
            raise ValueError("path: expected a UTF-8 text file, a folder of text files or null, got ''")
        check_real("valid_fraction", self.valid_fraction, 0, 1, low_open=True, high_open=True)
        check_real("test_fraction", self.test_fraction, 0, 1, low_open=True, high_open=True)
        if self.valid_fraction + self.test_fraction >= 1:
            raise ValueError(
                f"valid_fraction: expected valid_fraction + test_fraction < 1, got "
                f"{self.valid_fraction} + {self.test_fraction}"
            )


@dataclass
class LMTrainConfig(LoopConfig):
    """AdamW + linear warm-up + cosine decay, gradient clipping (the TTT paper's recipe, §3, as in
    the ttt-lm-jax scripts: betas (0.9, 0.95), weight decay 0.1 on all parameters, clip 1.0, warm-up 10%
    of the steps, cosine to ``min_lr``); the loop fields of :class:`~fastweights.train.loop.LoopConfig`
    with clipping at 1.0 and TensorBoard on. ``max_steps`` counts optimiser steps: tokens =
    ``max_steps * batch_size * accumulation_steps * seq_len``."""

    grad_clip: float = 1.0
    tensorboard: bool = True
    batch_size: int = 16  # windows per forward pass (micro-batch)
    seq_len: int = 256
    lr: float = 3e-3
    min_lr: float = 1e-5
    warmup_fraction: float = 0.1
    weight_decay: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.95)
    val_windows: int = 32  # validation windows of seq_len + 1 bytes

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ints(self, ("batch_size", "seq_len", "val_windows"))
        check_real("lr", self.lr, 0, low_open=True)
        check_real("min_lr", self.min_lr, 0, self.lr)
        check_real("warmup_fraction", self.warmup_fraction, 0, 1, high_open=True)
        check_real("weight_decay", self.weight_decay, 0)
        check_betas("adam_betas", self.adam_betas)


SPLITS = ("train", "valid", "test")  # the corpus cuts (data.sources.text.split_corpus)


@dataclass
class LMEvalConfig:
    """Evaluation on each cut of ``splits``: up to ``windows`` consecutive windows of ``seq_len`` (0 = the
    training length) + 1 bytes from the cut's start; per-position losses are averaged over windows."""

    splits: list[str] = field(default_factory=lambda: ["valid", "test"])
    seq_len: int = 0
    windows: int = 256
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_choices("splits", self.splits, SPLITS)
        check_int("seq_len", self.seq_len, low=0)
        check_int("windows", self.windows)
        check_int("batch_size", self.batch_size)


@dataclass
class LMRecipeConfig:
    #: deprecated dotted key → new key (presets, run folders' ``config.yaml``, overrides; one release)
    DEPRECATED_KEYS: ClassVar[dict[str, str]] = {
        f"model.{old}": f"model.{new}" for old, new in LMConfig.DEPRECATED_FIELDS.items()
    }

    name: str = "lm"
    device: str = "auto"
    model: LMConfig = field(default_factory=LMConfig)
    data: LMDataConfig = field(default_factory=LMDataConfig)
    train: LMTrainConfig = field(default_factory=LMTrainConfig)
    eval: LMEvalConfig = field(default_factory=LMEvalConfig)

    def __post_init__(self) -> None:
        """Checks across sections (each section checks its own fields; ``model`` is validated by
        :class:`LMConfig` itself, without building a model)."""
        check_device("device", self.device)
        if self.model.vocab_size != VOCAB_SIZE:
            raise ValueError(
                f"model.vocab_size: expected {VOCAB_SIZE} (byte-level tokens), got {self.model.vocab_size}"
            )
