"""Speed and peak memory of the fast paths against their per-step references, measured in one run.

Every variant runs forward + backward (fp32) in a fresh subprocess. Time is the minimum over
``--repeats`` runs. Peak memory is the largest amount of tensor memory allocated at once during one
forward + backward, above what was live before it: on CUDA ``torch.cuda.max_memory_allocated``; on
CPU the running sum of the allocation/free events recorded by ``torch.profiler`` (profile_memory),
taken in a separate, untimed run. Prints both and the ratios reference / fast.

    python benchmarks/layers.py                 # the layer-library issue's shapes (minutes on 2 cores)
    python benchmarks/layers.py --small         # small shapes, seconds
    python benchmarks/layers.py --only srwm
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from _memory import peak_bytes

CASES = {
    # name: (fast op, reference op, full shape, small shape)
    "srwm": ("srwm", "srwm_reference", dict(B=8, H=8, E=32, T=1024), dict(B=2, H=2, E=8, T=64)),
    "ttt_linear": (
        "ttt_linear",
        "ttt_linear_reference",
        dict(B=1, H=12, E=64, T=2048),  # hidden 768 = 12 heads x 64
        dict(B=1, H=2, E=16, T=64),
    ),
    "deltanet": (
        "delta_rule",
        "delta_rule_reference",
        dict(B=8, H=8, E=64, T=2048),
        dict(B=2, H=2, E=16, T=128),
    ),
}


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


def _measure(name: str, op_name: str, shape: dict, repeats: int, device: str) -> dict:
    import fastweights.ops as ops

    op = getattr(ops, op_name)
    grads, extra = _inputs(name, **shape, device=device)

    def step() -> None:
        _call(name, op, grads, extra).square().sum().backward()
        for t in grads:
            t.grad = None

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "peak_mb": peak_bytes(step, device) / 2**20}


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
            f"{name:10s} {shape}  {ref}: {r['seconds']:.3f} s, {r['peak_mb']:.0f} MB | {fast}: "
            f"{f['seconds']:.3f} s, {f['peak_mb']:.0f} MB | speed-up {r['seconds'] / f['seconds']:.1f}x, "
            f"memory {r['peak_mb'] / max(f['peak_mb'], 1e-3):.1f}x less",
            flush=True,
        )


if __name__ == "__main__":
    main()
