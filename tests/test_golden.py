"""The vendored golden set (tests/golden/) is complete; a missing golden file fails, never skips."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import GOLDEN, load_golden


def _flatten(d: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in d.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{path}/"))
        else:
            out[path] = value
    return out


def test_every_manifest_file_is_present_with_its_keys_shapes_and_dtypes():
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    assert len(manifest) == 12
    for relpath, entries in manifest.items():
        leaves = _flatten(load_golden(relpath))
        assert set(leaves) == set(entries), relpath
        for key, (shape, dtype, *_) in entries.items():
            assert list(leaves[key].shape) == shape and str(leaves[key].dtype) == f"torch.{dtype}", (
                relpath,
                key,
            )


def test_a_missing_golden_file_fails_the_test():
    with pytest.raises(pytest.fail.Exception, match=r"golden file .*nope\.pt not found"):
        load_golden("nope.pt")
