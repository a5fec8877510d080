"""The fused CPU SRWM kernel (``ops.srwm_cpu``) against the PyTorch fast path (``ops.srwm_autograd``)
and the per-step reference (``ops.srwm_reference``), forward + backward, fp32, in one run: minimum over
``--repeats`` timings after a warm-up, the ratio to the fast path and each one's peak tensor memory
(``torch.profiler`` events, an untimed run).

    python benchmarks/srwm_cpu_kernel.py [--B 8 --H 8 --E 32 --T 1024] [--threads 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from _memory import peak_bytes

from fastweights.ops import srwm_cpu, srwm_reference
from fastweights.ops.srwm_autograd import srwm_fast_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("B", 8), ("H", 8), ("E", 32), ("T", 1024), ("threads", 2), ("repeats", 3)):
        p.add_argument(f"--{name}", type=int, default=default)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if not srwm_cpu.available():
        raise SystemExit("srwm_cpu_kernel: the fused CPU kernel did not build (see the log line above)")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.B, a.T, a.H, a.E, generator=g).requires_grad_()
    w0 = (torch.randn(a.B, a.H, a.E, 3 * a.E + 4, generator=g) / a.E**0.5).requires_grad_()
    variants: dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]] = {
        "PyTorch fast path": lambda: (lambda r: (r[0], r[2]))(srwm_fast_path(x, None, w0)),
        "fused CPU kernel": lambda: (lambda r: (r[0], r[2]))(srwm_cpu.srwm_fused_cpu(x, w0)),
        # the per-step, per-block reference (autograd through every step), from the same state
        "srwm_reference": lambda: srwm_reference(
            x, torch.zeros_like(w0[0]), initial_state=w0, output_final_state=True
        ),
    }
    print(f"SRWM fwd+bwd, fp32, B={a.B} H={a.H} E={a.E} T={a.T}, {torch.get_num_threads()} threads")
    base = None
    for name, fn in variants.items():

        def step(fn: Callable[[], tuple[torch.Tensor, torch.Tensor]] = fn) -> None:
            y, w = fn()
            (y.square().sum() + w.sum()).backward()
            x.grad = w0.grad = None

        step()
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        best = min(times)
        base = base or best
        peak = peak_bytes(step, "cpu") / 2**20
        print(f"{name:20s} {best:7.3f} s  ratio to the fast path {best / base:5.2f}  peak {peak:7.1f} MB")


if __name__ == "__main__":
    main()
