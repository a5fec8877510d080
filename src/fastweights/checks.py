"""Value checks for config dataclasses (called from their ``__post_init__``).

Each check raises ``ValueError("<name>: expected …, got …")`` where ``name`` is the field name; the
config loader (:func:`fastweights.config.load_config`) prefixes the section, so a user reads
``train.lr: expected a finite number > 0, got inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "check_ints",
    "check_int",
    "check_real",
    "check_choice",
    "check_choices",
    "check_betas",
    "check_device",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_int(name: str, value: Any, low: int | None = 1, high: int | None = None) -> None:
    """``value`` is an int in ``[low, high]`` (either bound ``None`` = unbounded).

    Raises:
        ValueError: naming ``name``, the expected range and the value given.
    """
    if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            want = "an int" if low is None else f"an int >= {low}"
        else:
            want = f"an int in [{'-inf' if low is None else low}, {high}]"
        raise ValueError(f"{name}: expected {want}, got {value!r}")


def check_ints(obj: Any, names: Iterable[str], low: int | None = 1, high: int | None = None) -> None:
    """:func:`check_int` for each attribute ``names`` of ``obj`` (a config dataclass's fields).

    Raises:
        ValueError: naming the first bad field.
    """
    for name in names:
        check_int(name, getattr(obj, name), low, high)


def check_real(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """``value`` is a finite number in the interval given by ``low``/``high`` (open ends with
    ``low_open``/``high_open``; ``None`` = unbounded). NaN and ±Inf are always refused.

    Raises:
        ValueError: naming ``name``, the expected interval and the value given.
    """
    ok = _is_real(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        if low is not None and high is not None:
            want = f"a finite number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            want = f"a finite number {'>' if low_open else '>='} {low}"
        elif high is not None:
            want = f"a finite number {'<' if high_open else '<='} {high}"
        else:
            want = "a finite number"
        raise ValueError(f"{name}: expected {want}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """``value`` is one of ``choices``.

    Raises:
        ValueError: naming ``name``, the allowed values and the value given.
    """
    allowed = list(choices)
    if value not in allowed:
        raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")


def check_choices(name: str, values: Sequence[Any], choices: Iterable[Any], *, nonempty: bool = True) -> None:
    """Every item of the list ``values`` is one of ``choices`` (and the list is not empty).

    Raises:
        ValueError: naming ``name``, the allowed values and the list given.
    """
    allowed = list(choices)
    if (nonempty and not values) or any(v not in allowed for v in values):
        what = "a non-empty list" if nonempty else "a list"
        raise ValueError(f"{name}: expected {what} of values from {allowed}, got {list(values)!r}")


def check_betas(name: str, value: Any) -> None:
    """Adam's ``(beta1, beta2)``: two finite numbers in ``[0, 1)``.

    Raises:
        ValueError: naming ``name`` and the value given.
    """
    pair = list(value) if isinstance(value, list | tuple) else None
    if pair is None or len(pair) != 2 or not all(_is_real(b) and 0 <= b < 1 for b in pair):
        raise ValueError(f"{name}: expected two numbers in [0, 1), got {value!r}")


def check_device(name: str, value: Any) -> None:
    """``value`` names a device the recipes can run on: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``
    (syntax only; whether CUDA is present is checked when a run starts).

    Raises:
        ValueError: naming ``name`` and the value given.
    """
    ok = isinstance(value, str) and (
        value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit())
    )
    if not ok:
        raise ValueError(f"{name}: expected auto, cpu, cuda or cuda:N, got {value!r}")
