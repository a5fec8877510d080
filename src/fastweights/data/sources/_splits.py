"""The standard few-shot class splits shipped as package data (``fastweights/data/splits/``)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["SPLIT_NAMES", "read_split"]

SPLIT_NAMES = ("train", "val", "test")


def read_split(benchmark: str, split: str) -> Any:
    """The parsed JSON class list ``fastweights/data/splits/<benchmark>/<split>.json``.

    ``benchmark`` is ``"omniglot"``, ``"cifar100/fc100"`` or ``"cifar100/cifar-fs"``; see the README
    in that folder for each file's structure and source. Raises ``ValueError`` for an unknown split.
    """
    if split not in SPLIT_NAMES:
        raise ValueError(f"split: expected one of {SPLIT_NAMES}, given {split!r}")
    path = resources.files("fastweights.data") / "splits"
    for part in [*benchmark.split("/"), f"{split}.json"]:
        path = path / part
    return json.loads(path.read_text(encoding="utf-8"))
