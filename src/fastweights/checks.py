"""The library's value checks: config fields, and the arguments of ops, layers, models and data.

The one validator family of the package (bottom floor: every unit may import it). Each check raises
``ValueError("<name>: expected …, got …")`` where ``name`` is the field or argument name; the config
loader (:func:`fastweights.config.load_config`) prefixes the section, so a user reads
``train.lr: expected a finite number > 0, got inf``. The data modules' counts (:func:`check_count`)
say ``given`` instead of ``got`` and also take numpy integers.

- numbers: :func:`is_int`, :func:`is_real` (predicates), :func:`check_int` / :func:`check_ints`,
  :func:`check_count`, :func:`check_real`, :func:`check_seed` (``[0, MAX_SEED]``), :func:`check_threads`
  (``[0, MAX_THREADS]``);
- choices: :func:`check_choice`, :func:`check_choices`, :func:`check_betas`, :func:`check_device`;
- tensors: :func:`describe` (for messages), :func:`check_finite`.

Importing this module does not import torch (the tensor checks import it when called).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "is_int",
    "is_real",
    "check_ints",
    "check_int",
    "check_count",
    "check_real",
    "check_seed",
    "check_threads",
    "MAX_SEED",
    "MAX_THREADS",
    "check_choice",
    "check_choices",
    "check_betas",
    "check_device",
    "describe",
    "check_finite",
]


def is_int(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` (``bool`` is not; numpy integers are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` or ``float`` (``bool`` is not; NaN and ±Inf are)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_int(name: str, value: Any, low: int | None = 1, high: int | None = None) -> int:
    """``value`` is an int in ``[low, high]`` (either bound ``None`` = unbounded); the default is a
    positive int.

    Returns:
        ``value`` itself.

    Raises:
        ValueError: naming ``name``, the expected range and the value given, e.g.
            ``"n: expected an int >= 1, got 0"``.
    """
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            want = "an int" if low is None else f"an int >= {low}"
        else:
            want = f"an int in [{'-inf' if low is None else low}, {high}]"
        raise ValueError(f"{name}: expected {want}, got {value!r}")
    return value


def check_count(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` is a Python or numpy integer in ``[low, high]`` (``high=None``: unbounded): the sizes
    and counts of the data modules (samplers, streams, sources).

    Returns:
        ``int(value)``.

    Raises:
        ValueError: naming ``name``, the range and the value, e.g. ``"k_shot: expected an int >= 1,
            given 0"`` or ``"size: expected an int in [4, 512], given 2"``.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < low
        or (high is not None and value > high)
    ):
        want = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected an int {want}, given {value!r}")
    return int(value)


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
    ok = is_real(value) and math.isfinite(value)
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


#: the largest random seed: seeds start numpy and torch generators and ProcGen's ``rand_seed`` (a signed
#: 32-bit int; ``seed + game`` must stay in range), so seeds are non-negative 32-bit signed ints
MAX_SEED = 2**31 - 1

#: the most torch threads a config may ask for (0 = torch's default): far above any machine's core count,
#: a fixed bound so that a run folder's ``config.yaml`` loads on every machine
MAX_THREADS = 1024


def check_seed(name: str, value: Any) -> int:
    """``value`` is a random seed: an int in ``[0, MAX_SEED]``.

    Returns:
        ``value`` itself.

    Raises:
        ValueError: naming ``name``, the range and the value, e.g.
            ``"seed: expected an int in [0, 2147483647], got 10**30"``.
    """
    return check_int(name, value, 0, MAX_SEED)


def check_threads(name: str, value: Any) -> int:
    """``value`` is a torch thread count: an int in ``[0, MAX_THREADS]`` (0 = torch's default).

    Returns:
        ``value`` itself.

    Raises:
        ValueError: naming ``name``, the range and the value given.
    """
    return check_int(name, value, 0, MAX_THREADS)


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
    if pair is None or len(pair) != 2 or not all(is_real(b) and 0 <= b < 1 for b in pair):
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


def describe(t: object) -> str:
    """``t`` for an error message: ``"tensor of shape [2, 3] and dtype torch.float32"`` for a tensor,
    else its type's name (``"list"``, ``"NoneType"``)."""
    from torch import Tensor

    if isinstance(t, Tensor):
        return f"tensor of shape {list(t.shape)} and dtype {t.dtype}"
    return type(t).__name__


def check_finite(name: str, t: Tensor | None) -> None:
    """Raise ``ValueError`` naming ``name`` if the float tensor ``t`` (any shape) holds NaN or Inf;
    ``None`` and integer or bool tensors are skipped.

    Exact and cheap: a finite sum implies finite entries (every partial sum that contains a NaN or
    an infinite entry is NaN or infinite), so one reduction (accumulated in float32 for half inputs)
    decides the usual case; only a sum that overflows or is non-finite pays for the elementwise
    ``torch.isfinite`` (about 20× slower on CPU). The ops call this once per input and call, never
    per step.

    Raises:
        ValueError: ``"<name>: expected finite values, got NaN or Inf"``.
    """
    if t is None or not t.is_floating_point():
        return
    import torch

    t = t.detach()
    acc = torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype
    if bool(torch.isfinite(t.sum(dtype=acc))):
        return
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: expected finite values, got NaN or Inf")
