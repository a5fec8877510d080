"""Plateau diagnostic: train only the sequence part of the ACL model on synthetic feature-space tasks
(ideal image features: a random prototype per class plus noise; see
``fastweights.cl.tasks.synthetic_feature_tasks``) and print held-out accuracy every 50 steps.

It answers "which lever shortens the in-context-learning plateau?" without the vision cost
(~0.1 s/step on 2 cores). Each variant is a comma-separated list of key=value settings:

    python benchmarks/plateau_diagnostic.py base lr=3e-3 batch=8 n_query=5 online=1 \
        two_way_steps=150 kscale=4 layers=1 --steps 400
"""

from __future__ import annotations

import argparse
import time

import torch

from fastweights.cl.objective import acl_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.models.backbones import FeatureInput
from fastweights.models.in_context import InContextClassifier

DEFAULTS = dict(
    lr=1e-3, batch=16, d_model=256, heads=16, layers=2, n_query=1, online=0.0, two_way_steps=0, kscale=1.0
)


def run(name: str, settings: dict, steps: int, seed: int) -> list[tuple[int, float, float, float]]:
    s = {**DEFAULTS, **settings}
    torch.manual_seed(seed)
    gen, val_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(10_000 + seed)
    model = InContextClassifier(
        FeatureInput(128),
        5,
        d_model=int(s["d_model"]),
        num_heads=int(s["heads"]),
        d_ff=2 * int(s["d_model"]),
        num_layers=int(s["layers"]),
    )
    e = int(s["d_model"]) // int(s["heads"])
    with torch.no_grad():
        for layer in model.seq_layers:
            layer.weight[..., 2 * e : 3 * e].mul_(float(s["kscale"]))
    opt = torch.optim.Adam(model.parameters(), float(s["lr"]), betas=(0.9, 0.995), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 100))
    val = synthetic_feature_tasks(
        val_gen, batch_size=200, num_tasks=2, n_way=5, k_shot=5, n_query=1, feature_dim=128, label_space=5
    )
    history, t0 = [], time.perf_counter()
    for step in range(steps):
        n_way, k_shot = (2, 1) if step < int(s["two_way_steps"]) else (5, 5)
        tasks = synthetic_feature_tasks(
            gen,
            batch_size=int(s["batch"]),
            num_tasks=2,
            n_way=n_way,
            k_shot=k_shot,
            n_query=int(s["n_query"]),
            feature_dim=128,
            label_space=5,
        )
        loss, _ = acl_loss(model, tasks, online_weight=float(s["online"]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if (step + 1) % 50 == 0:
            model.eval()
            with torch.no_grad():
                _, accs = acl_loss(model, val)
            model.train()
            history.append((step + 1, time.perf_counter() - t0, accs[(0, 0)], accs[(1, 0)]))
    return history


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="'base' or key=value[,key=value...]")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    for v in args.variants:
        settings = {} if v == "base" else dict(kv.split("=", 1) for kv in v.split(","))
        hist = run(v, settings, args.steps, args.seed)
        points = "  ".join(f"{st}:{a:.2f}" for st, _, a, _ in hist)
        print(f"{v:28s} ({hist[-1][1]:.0f} s)  held-out A|A by step  {points}", flush=True)


if __name__ == "__main__":
    main()
