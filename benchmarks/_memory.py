"""Peak tensor memory of a call, shared by the benchmark scripts."""

from __future__ import annotations

from collections.abc import Callable

import torch


def peak_bytes(fn: Callable[[], None], device: str) -> float:
    """Largest amount of tensor memory allocated at once while ``fn`` runs, above what was live before.

    CUDA: ``torch.cuda.max_memory_allocated``. CPU: the running sum of the allocation/free events that
    ``torch.profiler`` records with ``profile_memory=True`` (run ``fn`` untimed: profiling slows it).
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
