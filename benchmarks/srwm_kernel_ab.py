"""A/B two versions of the fused CPU SRWM kernel's source (``ops/csrc/srwm_cpu.cpp``) in one process.

Both are built with the package's flags (each under its own name, so no cache is shared), checked to
agree, then timed alternately — forward and reversal backward separately, the minimum over
``--rounds`` rounds per part — so a slow spell of a shared machine hits both alike. The kernel alone is
timed (no autograd or Python wrapper); the work is the op's 10 E×C multiply-adds per (batch, head,
step), as in ``benchmarks/layers.py``.

    git show HEAD~1:src/fastweights/ops/csrc/srwm_cpu.cpp > /tmp/old.cpp
    python benchmarks/srwm_kernel_ab.py /tmp/old.cpp src/fastweights/ops/csrc/srwm_cpu.cpp [--rounds 15]
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load

from fastweights.ops.srwm_cpu import _FLAGS


def build(path: Path):
    if not path.is_file():
        raise SystemExit(f"source: expected a C++ file, got {path} (not a file)")
    digest = hashlib.sha1(path.read_bytes() + str(_FLAGS).encode()).hexdigest()[:12]
    name = f"srwm_ab_{digest}"
    return load(name=name, sources=[str(path)], extra_cflags=_FLAGS, extra_ldflags=["-fopenmp"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    for name, default in (("B", 8), ("H", 8), ("E", 32), ("T", 1024)):
        p.add_argument(f"--{name}", type=int, default=default)
    a = p.parse_args()
    mods = {"A": build(a.a), "B": build(a.b)}
    e, c = a.E, 3 * a.E + 4
    g = torch.Generator().manual_seed(0)
    x = torch.randn(a.B, a.T, a.H, e, generator=g)
    w0 = torch.randn(a.B, a.H, e, c, generator=g) / e**0.5
    none = torch.empty(0)
    fwd = {t: m.srwm_forward(x, none, False, w0, e) for t, m in mods.items()}
    for out_a, out_b in zip(fwd["A"], fwd["B"], strict=True):
        torch.testing.assert_close(out_a, out_b, rtol=1e-4, atol=1e-5)
    y, _, act, diff, w = fwd["A"]
    g_y, g_w = torch.randn(y.shape, generator=g), torch.randn(w.shape, generator=g)
    bwd = {t: m.srwm_backward(x, none, False, act, diff, w, g_y, none, g_w) for t, m in mods.items()}
    for out_a, out_b in zip(bwd["A"], bwd["B"], strict=True):
        torch.testing.assert_close(out_a, out_b, rtol=1e-4, atol=1e-4)
    flop = 2 * 10 * a.B * a.H * a.T * e * c
    print(f"B={a.B} H={a.H} E={e} T={a.T}: {flop / 1e9:.3f} GFLOP per forward + backward; A={a.a}, B={a.b}")
    for threads in (int(t) for t in a.threads.split(",")):
        torch.set_num_threads(threads)
        best = {(t, part): float("inf") for t in mods for part in ("forward", "backward")}
        for _ in range(a.rounds):
            for t, m in mods.items():
                t0 = time.perf_counter()
                m.srwm_forward(x, none, False, w0, e)
                t1 = time.perf_counter()
                m.srwm_backward(x, none, False, act, diff, w, g_y, none, g_w)
                t2 = time.perf_counter()
                best[t, "forward"] = min(best[t, "forward"], t1 - t0)
                best[t, "backward"] = min(best[t, "backward"], t2 - t1)
        for t in mods:
            f, b = best[t, "forward"], best[t, "backward"]
            print(
                f"{threads} thread(s) {t}: forward {1e3 * f:6.1f} ms  backward {1e3 * b:6.1f} ms  "
                f"{flop / (f + b) / 1e9:5.1f} GFLOP/s"
            )


if __name__ == "__main__":
    main()
