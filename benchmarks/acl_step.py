"""Time one ACL meta-training step (2 tasks, B sequences, N-way K-shot) for several model variants.

Prints seconds per step (min over repeats), the ratio to the first (baseline) variant measured in the
same run, and the rise of peak resident memory during one more step (``VmHWM`` reset through
``/proc/self/clear_refs``). Random images: only speed is measured. The variants pick the SRWM
implementation the layers use: the PyTorch fast path (``FASTWEIGHTS_CPU_KERNEL=0``), the fused CPU
kernel (``=1``; ACL reads its queries through ``srwm_with_reads``, which the kernel covers) and the
per-step reference (``impl="reference"``, one step and one read at a time).

    python benchmarks/acl_step.py [--batch 16] [--repeats 5] [--reference]
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from _memory import peak_rss_bytes

from fastweights.cl.objective import acl_loss
from fastweights.cl.tasks import TaskTensors
from fastweights.layers.srwm import SRWMLayer
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier


def step_time(
    *, batch: int, repeats: int, d_model: int, heads: int, pool_before_norm: bool, impl: str, n=5, k=5, q=1
) -> tuple[float, float]:
    """(seconds per step, min over ``repeats`` after a warm-up; peak RSS rise of one more step, bytes)."""
    torch.manual_seed(0)
    model = InContextClassifier(
        Conv4(1, 32, image_size=32, pool_before_norm=pool_before_norm),
        n,
        d_model=d_model,
        num_heads=heads,
        d_ff=2 * d_model,
    )
    for m in model.modules():
        if isinstance(m, SRWMLayer):
            m.impl = impl
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def step() -> None:
        feats = model.embed(torch.randn(batch, 2 * n * (k + q), 1, 32, 32))
        s1, q1, s2, q2 = torch.split(feats, [n * k, n * q, n * k, n * q], dim=1)
        tasks = [
            TaskTensors(s, torch.randint(0, n, (batch, n * k)), qq, torch.randint(0, n, (batch, n * q)))
            for s, qq in ((s1, q1), (s2, q2))
        ]
        loss, _ = acl_loss(model, tasks)
        opt.zero_grad()
        loss.backward()
        opt.step()

    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return min(times[1:]), peak_rss_bytes(step)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--reference", action="store_true", help="also time the per-step reference (slow)")
    args = p.parse_args()
    d256 = dict(d_model=256, heads=16, pool_before_norm=False, impl="fast")
    pooled = dict(d256, pool_before_norm=True)
    variants = [
        ("SRWM fast path (PyTorch), D=256", "0", d256),
        ("fused CPU kernel, D=256", "1", d256),
        ("fast path + pool before norm, D=256", "0", pooled),
        ("kernel + pool before norm, D=256", "1", pooled),
        ("kernel + pool before norm, D=128", "1", dict(pooled, d_model=128, heads=8)),
    ]
    if args.reference:
        variants.append(("per-step reference, D=256", "0", dict(d256, impl="reference")))
    print(f"ACL step, batch {args.batch}, 5-way 5-shot, 2 tasks, {torch.get_num_threads()} threads")
    base = None
    for name, kernel, kw in variants:
        os.environ["FASTWEIGHTS_CPU_KERNEL"] = kernel  # read by the ops at every call
        t, rss = step_time(batch=args.batch, repeats=args.repeats, **kw)
        base = base or t
        print(
            f"{name:40s} {t:6.3f} s/step  ratio to first {t / base:5.2f}  peak RSS rise {rss / 2**20:7.0f} MB"
        )


if __name__ == "__main__":
    main()
