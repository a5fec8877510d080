"""Shared fixtures: the golden vectors in ../shared/golden (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

GOLDEN = Path(os.environ.get("FASTWEIGHTS_GOLDEN", Path(__file__).resolve().parents[2] / "shared" / "golden"))


def load_golden(relpath: str) -> dict:
    path = GOLDEN / relpath
    if not path.exists():
        pytest.skip(f"golden file {path} not found (set FASTWEIGHTS_GOLDEN to the shared/golden folder)")
    return torch.load(path, weights_only=True)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
