"""Speed and peak memory of the fast paths against their per-step references, measured in one run.

Each measurement runs in a fresh subprocess (forward + backward, fp32, CPU or CUDA), so the peak
resident memory of one variant is not hidden by another's. Prints seconds (min over repeats), the
time ratio reference / fast and the peak-memory ratio reference / fast.

    python benchmarks/layers.py                 # the issue's shapes (minutes on 2 CPU cores)
    python benchmarks/layers.py --small         # small shapes, seconds
    python benchmarks/layers.py --only srwm
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

CASES = {
    # name: (fast op, reference op, full shape, small shape)
    "srwm": ("srwm", "srwm_reference", dict(B=8, H=8, E=32, T=1024), dict(B=2, H=2, E=8, T=64)),
    "deltanet": (
        "delta_rule",
        "delta_rule_reference",
        dict(B=8, H=8, E=64, T=2048),
        dict(B=2, H=2, E=16, T=128),
    ),
}


def _inputs(name: str, B: int, H: int, E: int, T: int, device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if name == "srwm":
        x = torch.randn(B, T, H, E, generator=g)
        w = torch.randn(H, E, 3 * E + 4, generator=g) / E**0.5
        return [t.to(device).requires_grad_(True) for t in (x, w)]
    q = torch.softmax(torch.randn(B, T, H, E, generator=g), -1)
    k = torch.softmax(torch.randn(B, T, H, E, generator=g), -1)
    v = torch.randn(B, T, H, E, generator=g)
    beta = torch.sigmoid(torch.randn(B, T, H, generator=g))
    return [t.to(device).requires_grad_(True) for t in (q, k, v, beta)]


def _measure(name: str, op_name: str, shape: dict, repeats: int, device: str) -> dict:
    import fastweights.ops as ops

    op = getattr(ops, op_name)
    inputs = _inputs(name, **shape, device=device)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out, _ = op(*inputs)
        out.square().sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    return {"seconds": min(times), "peak_mb": peak}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true")
    p.add_argument("--only", choices=sorted(CASES), default=None)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--child", nargs=3, metavar=("CASE", "OP", "SHAPE_JSON"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        case, op_name, shape = args.child
        print(json.dumps(_measure(case, op_name, json.loads(shape), args.repeats, args.device)))
        return
    print(f"device {args.device}, {torch.get_num_threads()} threads, fp32, forward + backward")
    for name, (fast, ref, full, small) in CASES.items():
        if args.only and name != args.only:
            continue
        shape = small if args.small else full
        res = {}
        for op_name in (ref, fast):
            cmd = [sys.executable, __file__, "--child", name, op_name, json.dumps(shape)]
            cmd += ["--repeats", str(args.repeats), "--device", args.device]
            res[op_name] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        r, f = res[ref], res[fast]
        print(
            f"{name:9s} {shape}  {ref}: {r['seconds']:.3f} s, {r['peak_mb']:.0f} MB | {fast}: "
            f"{f['seconds']:.3f} s, {f['peak_mb']:.0f} MB | speed-up {r['seconds'] / f['seconds']:.1f}x, "
            f"memory {r['peak_mb'] / max(f['peak_mb'], 1e-3):.1f}x less"
        )


if __name__ == "__main__":
    main()
