"""What a run may ask of this machine: its memory, and the one-line refusal of a size that cannot fit.

Sizes are refused before anything is allocated (a model's parameters are counted on PyTorch's ``meta``
device by :func:`model_memory`, for a run by :func:`fastweights.recipes.run.check_model_memory`;
image pools are estimated from their config by :func:`fastweights.data.registry.load_pools_for`), so
a size such as ``model.d_ff=1000000000000`` is one clear error naming the key, the estimate and the
limit instead of an allocator's traceback after the run folder was written.

Bottom floor, like :mod:`fastweights.checks`: importing it does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["memory_limit", "format_bytes", "check_fits", "model_memory"]

# cgroup memory limits (a container's share of the machine): v2, then v1
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def _physical_memory() -> int | None:
    """Bytes of physical memory (``os.sysconf``); ``None`` where the platform does not say."""
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * size if pages > 0 and size > 0 else None


def _cgroup_limit() -> int | None:
    """The memory limit of this process's container (cgroup v2 or v1), ``None`` when unlimited/absent."""
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or a huge number: no limit
            return int(text)
    return None


def memory_limit(device: Any = "cpu") -> tuple[int, str] | None:
    """``(bytes, what)``: the memory a run on ``device`` can use at most — the physical memory of this
    machine (or its container's cgroup limit, when smaller) for the CPU, the GPU's memory for CUDA;
    ``None`` where it cannot be found out (then nothing is refused).

    Args:
        device: a ``torch.device`` or its name (``"cpu"``, ``"cuda:0"``).
    """
    name = str(device)
    if name.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return None
        index = torch.device(name).index
        props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
        return int(props.total_memory), f"the memory of GPU {props.name}"
    limits = [(n, w) for n, w in ((_physical_memory(), "physical memory"), (_cgroup_limit(), "cgroup")) if n]
    if not limits:
        return None
    n, what = min(limits)
    return n, (
        "the physical memory of this machine"
        if what == "physical memory"
        else "this container's memory limit (cgroup)"
    )


def format_bytes(n: float) -> str:
    """``n`` bytes for a message, in powers of 1000: ``"812 B"``, ``"25.3 GB"``, ``"9.2 EB"``; beyond
    1000 EB in scientific notation (``"1.2e+22 B"``)."""
    if n < 1000:
        return f"{n:.0f} B"
    if n >= 1000**7:
        return f"{n:.1e} B"
    scaled = float(n)
    for unit in ("kB", "MB", "GB", "TB", "PB", "EB"):
        scaled /= 1000
        if scaled < 1000:
            return f"{scaled:.1f} {unit}"
    return f"{scaled:.1f} EB"  # pragma: no cover - n < 1000**7 ends the loop above


def check_fits(key: str, estimate: int, what: str, device: Any = "cpu", *, hint: str = "") -> None:
    """Refuse ``estimate`` bytes that cannot fit into the memory of ``device`` (:func:`memory_limit`).

    Args:
        key: the config key (and value) to name, e.g. ``"model.d_ff=1000000000000"``.
        what: what the bytes hold, e.g. ``"the model's 6.6e13 parameters and their gradients (fp32)"``.
        hint: appended to the message (what to reduce).

    Raises:
        ValueError: ``"<key>: <what> need at least <estimate>, more than the <limit> of <where>…"``.
    """
    limit = memory_limit(device)
    if limit is None or estimate <= limit[0]:
        return
    raise ValueError(
        f"{key}: {what} need at least {format_bytes(estimate)}, more than the {format_bytes(limit[0])} of "
        f"{limit[1]}{'; ' + hint if hint else ''}"
    )


def model_memory(build: Callable[[Any], Any], cfg: Any) -> tuple[int, int] | None:
    """``(parameters, bytes)`` of ``build(cfg)``'s parameters and buffers (a ``torch.nn.Module``), counted
    on PyTorch's ``meta`` device (shapes only: nothing is allocated, whatever the sizes). ``(-1, -1)``:
    too large to even count (a tensor of more than 2^63 bytes); ``None`` when the model cannot be built
    on ``meta`` for another reason (the real build then reports it)."""
    import torch

    try:
        with torch.device("meta"):
            model = build(cfg)
    except MemoryError:  # a tensor the build makes on a fixed device, too large for it
        return (-1, -1)
    except (RuntimeError, OverflowError) as err:
        text = str(err).lower()
        return (-1, -1) if "overflow" in text or "allocate" in text else None
    except Exception:  # e.g. an optional package missing: not a size problem, the real build says it
        return None
    tensors = [*model.parameters(), *model.buffers()]
    return sum(p.numel() for p in model.parameters()), sum(t.numel() * t.element_size() for t in tensors)
