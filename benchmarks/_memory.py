"""Peak memory of a call, shared by the benchmark scripts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch


def peak_bytes(fn: Callable[[], None], device: str) -> float:
    """Largest amount of tensor memory allocated at once while ``fn`` runs, above what was live before.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the running sum of the allocation/free events that
    ``torch.profiler`` records with ``profile_memory=True`` (run ``fn`` untimed: profiling slows it).
    Counts torch's allocations only (not a C++ kernel's own scratch buffers; see :func:`peak_rss_bytes`).
    """
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        torch.cuda.synchronize()
        return float(torch.cuda.max_memory_allocated() - base)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return float(peak)


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def peak_rss_bytes(fn: Callable[[], None]) -> float:
    """Rise of this process's peak resident memory (``VmHWM``) while ``fn`` runs, above the resident
    memory before it; the peak is reset first by writing ``5`` to ``/proc/self/clear_refs`` (Linux).
    Counts every allocation, torch's and a kernel's own. Call it first in a fresh process: memory that
    the allocator kept from earlier calls is reused without raising the peak.

    Raises:
        OSError: without ``/proc`` (not Linux).
    """
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kb("VmRSS")
    fn()
    return float(_status_kb("VmHWM") - before) * 1024
