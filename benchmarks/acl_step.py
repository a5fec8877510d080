"""Time one ACL meta-training step (2 tasks, B sequences, N-way K-shot) for several model variants.

Prints seconds per step (min over repeats), the ratio to the first (baseline) variant measured in the
same run, and peak resident memory. Random images: only speed is measured.

    python benchmarks/acl_step.py [--batch 16] [--repeats 5]
"""

from __future__ import annotations

import argparse
import resource
import time
from contextlib import contextmanager

import torch

import fastweights.layers.srwm as srwm_layer
from fastweights.cl.objective import TaskTensors, acl_loss
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from fastweights.ops.srwm import srwm, srwm_reference


@contextmanager
def srwm_op(op):
    old = srwm_layer.srwm
    srwm_layer.srwm = op
    try:
        yield
    finally:
        srwm_layer.srwm = old


def step_time(
    *, batch: int, repeats: int, d_model: int, heads: int, pool_before_norm: bool, n=5, k=5, q=1
) -> float:
    torch.manual_seed(0)
    model = InContextClassifier(
        Conv4(1, 32, image_size=32, pool_before_norm=pool_before_norm),
        n,
        d_model=d_model,
        num_heads=heads,
        d_ff=2 * d_model,
    )
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    times = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
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
        times.append(time.perf_counter() - t0)
    return min(times[1:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    variants = [
        (
            "per-block reference loop, D=256",
            srwm_reference,
            dict(d_model=256, heads=16, pool_before_norm=False),
        ),
        ("SRWM fast path, D=256", srwm, dict(d_model=256, heads=16, pool_before_norm=False)),
        ("fast path + pool before norm, D=256", srwm, dict(d_model=256, heads=16, pool_before_norm=True)),
        ("fast path + pool before norm, D=128", srwm, dict(d_model=128, heads=8, pool_before_norm=True)),
    ]
    print(f"ACL step, batch {args.batch}, 5-way 5-shot, 2 tasks, {torch.get_num_threads()} threads")
    base = None
    for name, op, kw in variants:
        with srwm_op(op):
            t = step_time(batch=args.batch, repeats=args.repeats, **kw)
        base = base or t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:40s} {t:6.3f} s/step  ratio to first {t / base:5.2f}  peak RSS so far {rss:7.0f} MB")


if __name__ == "__main__":
    main()
