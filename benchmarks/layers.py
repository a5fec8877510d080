"""Speed and peak memory of the fast paths against their per-step references, measured in one run.

Every variant runs forward + backward (fp32) in a fresh subprocess. Time is the minimum over
``--repeats`` runs; the forward alone (building the autograd graph) is timed within the same runs
(min over them), so the backward is roughly the difference. Peak memory, above what was live before
one forward + backward:

- CPU ``rss``: the rise of the process's ``VmHWM`` (reset through ``/proc/self/clear_refs``), measured
  first in the fresh process — every allocation, including a C++ kernel's own;
- ``tensors``: the largest amount of tensor memory allocated at once (CPU: the running sum of
  ``torch.profiler``'s allocation events, an untimed run; CUDA: ``torch.cuda.max_memory_allocated``).

For SRWM each variant's process also times the large-``mm`` fp32 rate (2048², same threads), once in
every round before the variant's step (min over the rounds; on a shared machine the rate itself moved
between 85 and 174 GFLOP/s from run to run), and prints the variant's GFLOP/s and its share of that
rate. The op's work is counted as 10 E×C multiply-adds per (batch, head, step) — 3 in the forward
(x W, (q - k) W, the rank-1 update) and 7 in the reversal backward (two matrix-vector products, two
outer products into dL/dW, the undo, and the two gradients of the update: G u and k G). The naive
loop is an independent per-step autograd implementation of Irie et al. 2022, Eq. 5-8 (checked against
``srwm_reference`` at the start).

    python benchmarks/layers.py                 # the full shapes (minutes on 2 cores)
    python benchmarks/layers.py --small         # small shapes, seconds
    python benchmarks/layers.py --only srwm
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from _memory import peak_bytes, peak_rss_bytes

# variant: (label, callable name: "ops.<name>" or a function of this file, extra environment)
Variant = tuple[str, str, dict[str, str]]
CASES: dict[str, tuple[list[Variant], dict, dict]] = {
    "srwm": (
        [
            ("naive loop", "naive_srwm", {}),  # the baseline of the ratios
            ("srwm_reference", "ops.srwm_reference", {}),
            ("srwm (PyTorch fast path)", "ops.srwm", {"FASTWEIGHTS_CPU_KERNEL": "0"}),
            ("srwm (fused CPU kernel)", "ops.srwm", {"FASTWEIGHTS_CPU_KERNEL": "1"}),
        ],
        dict(B=8, H=8, E=32, T=1024),
        dict(B=2, H=2, E=8, T=64),
    ),
    "ttt_linear": (
        [("ttt_linear_reference", "ops.ttt_linear_reference", {}), ("ttt_linear", "ops.ttt_linear", {})],
        dict(B=1, H=12, E=64, T=2048),  # hidden 768 = 12 heads x 64
        dict(B=1, H=2, E=16, T=64),
    ),
    "deltanet": (
        [("delta_rule_reference", "ops.delta_rule_reference", {}), ("delta_rule", "ops.delta_rule", {})],
        dict(B=8, H=8, E=64, T=2048),
        dict(B=2, H=2, E=16, T=128),
    ),
}


def naive_srwm(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-step SRWM with plain autograd: ``x [B, T, H, E]``, slow weights ``[H, E, C]`` (C = 3E + 4)
    → ``(y [B, T, H, E], final fast weights [B, H, E, C])``. Every step keeps its new matrix for
    autograd (memory O(T·E·C) per head)."""
    b, steps, h, e = x.shape
    c = weight.shape[-1]
    o = c - 2 * e - 4
    w = weight.unsqueeze(0).expand(b, h, e, c)
    ys = []
    for t in range(steps):
        p = torch.einsum("bhe,bhec->bhc", x[:, t], w)
        y, q, k, beta = p.split([o, e, e, 4], dim=-1)
        q, k, beta = q.softmax(-1), k.softmax(-1), beta.sigmoid()
        d = torch.einsum("bhe,bhec->bhc", q - k, w)
        rate = torch.cat([beta[..., r : r + 1].expand(b, h, n) for r, n in enumerate((o, e, e, 4))], -1)
        w = w + k.unsqueeze(-1) * (d * rate).unsqueeze(-2)
        ys.append(y)
    return torch.stack(ys, 1), w


def _check_naive() -> None:
    """The naive loop equals ``srwm_reference`` (fp64, tiny shape, outputs and final state)."""
    import fastweights.ops as ops

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 9, 2, 4, generator=g, dtype=torch.float64)
    w = torch.randn(2, 4, 16, generator=g, dtype=torch.float64) * 0.5
    y, s = naive_srwm(x, w)
    y_ref, s_ref = ops.srwm_reference(x, w, output_final_state=True)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, s_ref, rtol=1e-10, atol=1e-10)


def _inputs(name: str, B: int, H: int, E: int, T: int, device: str) -> tuple[list[torch.Tensor], list]:
    """Random inputs of case ``name``: (tensors that get gradients, constant extra arguments)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g)  # noqa: E731
    if name == "srwm":
        grads, extra = [r(B, T, H, E), r(H, E, 3 * E + 4) / E**0.5], []
    elif name == "ttt_linear":
        q, k, v = r(B, T, H, E), r(B, T, H, E), r(B, T, H, E)
        lr = torch.sigmoid(r(B, T, H)) / E
        token_scale = 1.0 / torch.arange(1, 17, dtype=torch.float32)  # mini-batch 16
        grads = [q, k, v, lr, r(H, E, E) * 0.02, torch.zeros(H, 1, E), torch.ones(H, E), torch.zeros(H, E)]
        extra = [token_scale]
    else:
        q = torch.softmax(r(B, T, H, E), -1)
        k = torch.softmax(r(B, T, H, E), -1)
        grads, extra = [q, k, r(B, T, H, E), torch.sigmoid(r(B, T, H))], []
    return [t.to(device).requires_grad_(True) for t in grads], [t.to(device) for t in extra]


def _call(name: str, op: Callable, grads: list, extra: list) -> torch.Tensor:
    if name == "ttt_linear":
        q, k, v, lr, w1, b1, lnw, lnb = grads
        return op(q, k, v, lr, extra[0], w1, b1, lnw, lnb)[0]
    return op(*grads, *extra)[0]


def _resolve(fn_name: str) -> Callable:
    import fastweights.ops as ops

    return getattr(ops, fn_name[4:]) if fn_name.startswith("ops.") else globals()[fn_name]


def _measure(name: str, fn_name: str, shape: dict, repeats: int, device: str) -> dict:
    op = _resolve(fn_name)
    # load the op's code (e.g. a compiled kernel) before the memory baseline, on a tiny input
    warm, warm_extra = _inputs(name, **CASES[name][2], device=device)
    _call(name, op, warm, warm_extra).square().sum().backward()
    grads, extra = _inputs(name, **shape, device=device)

    def step() -> None:
        _call(name, op, grads, extra).square().sum().backward()
        for t in grads:
            t.grad = None

    rss = peak_rss_bytes(step) if device == "cpu" and os.path.exists("/proc/self/clear_refs") else None
    times, forward, mm = [], [], []
    with_mm = name == "srwm"  # the large-mm rate, timed in the same rounds (a shared machine drifts)
    mm_inputs = [torch.randn(_MM_N, _MM_N, device=device) for _ in range(2)] if with_mm else []
    if with_mm:
        _mm_seconds(*mm_inputs, device)  # warm-up
    for _ in range(repeats):
        if with_mm:
            mm.append(_mm_seconds(*mm_inputs, device))
        t0 = time.perf_counter()
        loss = _call(name, op, grads, extra).square().sum()  # the forward, building the autograd graph
        if device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        loss.backward()
        for t in grads:
            t.grad = None
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        forward.append(t1 - t0)
    tensors = peak_bytes(step, device) / 2**20
    return {
        "seconds": min(times),
        "forward_seconds": min(forward),
        "tensors_mb": tensors,
        "rss_mb": None if rss is None else rss / 2**20,
        "mm_gflops": 2 * _MM_N**3 / min(mm) / 1e9 if mm else None,
    }


_MM_N = 2048  # the large-mm rate: fp32 [2048, 2048] @ [2048, 2048]


def _mm_seconds(a: torch.Tensor, b: torch.Tensor, device: str) -> float:
    t0 = time.perf_counter()
    a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true")
    p.add_argument("--only", choices=sorted(CASES), default=None)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--child", nargs=3, metavar=("CASE", "FN", "SHAPE_JSON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        case, fn_name, shape = args.child
        print(json.dumps(_measure(case, fn_name, json.loads(shape), args.repeats, args.device)))
        return
    print(f"device {args.device}, {torch.get_num_threads()} threads, fp32, forward + backward")
    for name, (variants, full, small) in CASES.items():
        if args.only and name != args.only:
            continue
        shape = small if args.small else full
        flop = None
        if name == "srwm":
            _check_naive()
            e = shape["E"]
            flop = 2 * 10 * shape["B"] * shape["H"] * shape["T"] * e * (3 * e + 4)
            print(
                f"srwm {shape}: {flop / 1e9:.3f} GFLOP per forward + backward; "
                f"% of the large-mm rate ({_MM_N}² fp32) timed in the same rounds as each variant"
            )
        base = None
        for label, fn_name, env in variants:
            cmd = [sys.executable, __file__, "--child", name, fn_name, json.dumps(shape)]
            cmd += ["--repeats", str(args.repeats), "--device", args.device]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **env})
            r = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or r
            line = f"{name:10s} {label:26s} {r['seconds']:8.3f} s  {base['seconds'] / r['seconds']:6.1f}x"
            line += f"  (forward {r['forward_seconds']:.3f} s)"
            if flop is not None:
                gflops = flop / r["seconds"] / 1e9
                rate = r["mm_gflops"]
                line += f"  {gflops:6.1f} GFLOP/s ({100 * gflops / rate:4.1f}% of mm at {rate:3.0f})"
            line += f"  peak tensors {r['tensors_mb']:7.1f} MB"
            if r["rss_mb"] is not None:
                line += f", rss {r['rss_mb']:7.1f} MB"
            print(line, flush=True)


if __name__ == "__main__":
    main()
