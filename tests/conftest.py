"""Shared fixtures: the golden vectors vendored in ``tests/golden/`` (``FASTWEIGHTS_GOLDEN`` overrides)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Triton's kernels run in its interpreter on CPU-only machines (tests/ops/test_srwm_triton.py). Triton reads
# this when it is imported (its own tl.sum & co. are made then), so it is set before any test imports it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

GOLDEN = Path(os.environ.get("FASTWEIGHTS_GOLDEN", Path(__file__).resolve().parent / "golden"))


def load_golden(relpath: str) -> dict:
    """Load ``GOLDEN/relpath`` (a nested dict of tensors, ``tests/golden/README.md``).

    A missing file fails the test (it is part of the repository), it is never skipped.
    """
    path = GOLDEN / relpath
    if not path.is_file():
        override = os.environ.get("FASTWEIGHTS_GOLDEN")
        where = f"FASTWEIGHTS_GOLDEN={override}" if override else "tests/golden/ ships with the repository"
        pytest.fail(f"golden file {path} not found ({where})", pytrace=False)
    return torch.load(path, weights_only=True)


def state_tensors(state: object) -> list[torch.Tensor]:
    """The tensors of a layer's or op's state (a tensor, tuple, list or dict, nested), in a fixed order
    (dict keys sorted); other entries (``None``, the TTT offset) are left out."""
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for k in sorted(state) for t in state_tensors(state[k])]
    if isinstance(state, (tuple, list)):
        return [t for s in state for t in state_tensors(s)]
    return []


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# Under pytest-xdist (`-n 2`, the default addopts) each worker process gets one torch thread: two workers
# on two cores use the machine better than one process with two threads (most tests are small ops).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory) -> Path:
    """One data cache (rendered glyphs and emoji, decoded benchmarks) for the whole test session: its
    entries are keyed by what they hold and written atomically, so the recipe tests that read the same
    smoke data share one build. Under pytest-xdist the folder is beside the workers' base folders, so
    the workers share it too. Tests of the cache itself use their own folders."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "data-cache"
    path.mkdir(exist_ok=True)
    return path


def pytest_collection_modifyitems(config, items):
    """Run the modules that hold a test marked ``slow`` first (in their collected order, each module's
    tests kept together for its module-scoped fixtures), so that the xdist workers share out the long
    tests at the start instead of one worker ending the session alone on one of them."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)
