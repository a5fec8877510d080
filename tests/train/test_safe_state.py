"""Checkpoint contents that load with ``torch.load(weights_only=True)``: numpy values stored as tensors,
earlier versions' numpy RNG states still read, and any other pickled object refused unread."""

from __future__ import annotations

import logging
import os
import random
from collections import OrderedDict
from typing import NamedTuple

import numpy as np
import pytest
import torch

from fastweights.train.safe_state import (
    UnsafeFileError,
    from_safe,
    load_safe,
    pickles_trusted,
    to_safe,
    trusting_pickles,
)


class _Payload:
    """Unpickling it would create the file named by ``marker`` (a stand-in for any code)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Point(NamedTuple):
    x: int


def _state() -> dict:
    gen = np.random.default_rng(5)
    return {
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        "gen": gen.bit_generator.state,  # 128-bit Python ints
        "arrays": [np.arange(6, dtype=np.int64).reshape(2, 3), np.zeros(0, np.float32), np.array([True])],
        "scalars": (np.float32(1.5), np.int64(-3), np.uint8(7)),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "plain": OrderedDict(a=1, b=[2.5, None, "s", b"raw", {3, 4}], c=torch.Size([2])),
    }


def _same(a, b) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray | np.generic):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert a == b


def test_round_trip_through_weights_only_load(tmp_path):
    state = _state()
    torch.save(to_safe(state), tmp_path / "c.pt")
    loaded = torch.load(tmp_path / "c.pt", weights_only=True)  # the restricted loader, nothing allowlisted
    _same(from_safe(loaded), state)
    _same(load_safe(tmp_path / "c.pt"), state)


def test_restored_numpy_rng_continues_the_same_stream(tmp_path):
    np.random.seed(3)
    torch.save(to_safe({"numpy": np.random.get_state()}), tmp_path / "c.pt")
    expected = np.random.rand(5)
    np.random.seed(99)
    np.random.set_state(load_safe(tmp_path / "c.pt")["numpy"])
    assert np.array_equal(np.random.rand(5), expected)


@pytest.mark.parametrize(
    "bad",
    [_Point(1), np.array([object()], dtype=object), lambda: 1, {"k": [_Payload("x")]}],
    ids=["namedtuple", "object array", "function", "nested object"],
)
def test_values_that_would_need_code_are_refused_when_written(bad):
    with pytest.raises(TypeError, match="state"):
        to_safe({"k": bad})


def test_an_earlier_versions_numpy_state_is_read_without_trust(tmp_path):
    legacy = {"rng": {"numpy": np.random.get_state()}, "x": np.float64(2.0), "w": torch.ones(2)}
    torch.save(legacy, tmp_path / "old.pt")  # pickled numpy objects, as versions before safe_state wrote
    with pytest.raises(Exception):  # noqa: B017 - the plain restricted load refuses numpy globals
        torch.load(tmp_path / "old.pt", weights_only=True)
    _same(load_safe(tmp_path / "old.pt"), legacy)


def test_a_planted_payload_is_refused_unread(tmp_path):
    marker = tmp_path / "ran"
    torch.save({"model": {"w": torch.ones(1)}, "extra": _Payload(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(UnsafeFileError) as err:
        load_safe(tmp_path / "evil.pt")
    msg = str(err.value)
    assert (
        str(tmp_path / "evil.pt") in msg and "system" in msg and "--trust-pickle" in msg and "\n" not in msg
    )
    assert not marker.exists()


def test_trusting_pickles_reads_an_old_object_with_a_warning(tmp_path, caplog):
    torch.save({"p": _Point(4)}, tmp_path / "old.pt")
    with pytest.raises(UnsafeFileError, match="_Point"):
        load_safe(tmp_path / "old.pt")
    assert not pickles_trusted()
    with trusting_pickles(), caplog.at_level(logging.WARNING):
        assert pickles_trusted()
        assert load_safe(tmp_path / "old.pt") == {"p": _Point(4)}
    assert not pickles_trusted() and "--trust-pickle" in caplog.text


def test_a_malformed_tag_is_a_value_error():
    with pytest.raises(ValueError, match="malformed"):
        from_safe({"__numpy__": {"dtype": "O", "shape": [1], "data": torch.zeros(8, dtype=torch.uint8)}})
    with pytest.raises(ValueError, match="malformed"):
        from_safe({"__numpy__": {"dtype": "<i8", "shape": [2], "data": torch.zeros(8, dtype=torch.uint8)}})
