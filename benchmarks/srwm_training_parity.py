"""Training parity of the SRWM fast path and the per-step reference (docs/results.md, "SRWM fidelity").

Trains the sequence part of the ACL model (SRWM layers) twice from the same seed and the same task
stream, in lockstep: once with the fast path (``SRWMLayer(impl="fast")``, ``ops.srwm``), once with the
per-step reference (``impl="reference"``, ``ops.srwm_reference``), on synthetic feature-space ACL tasks
(a random prototype per class plus noise; ``fastweights.cl.tasks.synthetic_feature_tasks``).
Prints per window of ``--every`` steps the largest |loss difference| and relative loss difference,
the relative weight difference ``|W_fast - W_ref| / |W_ref|`` at the window's end (all parameters as
one vector, and the largest over the parameter tensors, named), both losses, and the wall time of
each path. float32 by default (``--dtype float64``); one thread (``torch.set_num_threads(1)``).

In float32 the two paths round differently (gradients agree to ~1e-7 relative); Adam divides by the
running gradient scale, so entries whose gradient is near zero amplify that rounding, and training
is chaotic: the weight difference grows with steps although each step is exact to rounding.

    python benchmarks/srwm_training_parity.py                      # 300 steps, the ACL model's sizes
    python benchmarks/srwm_training_parity.py --steps 50 --online 0.5   # also the online reads
    python benchmarks/srwm_training_parity.py --dtype float64     # rounding-free: equal to ~1e-15
    python benchmarks/srwm_training_parity.py --exact    # + each float32 path against a float64 reference
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import time

import torch
from torch import nn

from fastweights.cl.objective import acl_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.models.backbones import FeatureInput
from fastweights.models.in_context import InContextClassifier


def weight_differences(a: nn.Module, b: nn.Module) -> tuple[float, str, float]:
    """``(largest |p_a - p_b| / |p_b| over the parameter tensors (Frobenius norms), its name, the same
    ratio over all parameters as one vector)``."""
    rel = {
        name: ((pa - pb).norm() / pb.norm().clamp_min(1e-30)).item()
        for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True)
    }
    worst = max(rel, key=rel.__getitem__)
    diff = torch.cat([(pa - pb).flatten() for pa, pb in zip(a.parameters(), b.parameters(), strict=True)])
    whole = torch.cat([pb.flatten() for pb in b.parameters()])
    return rel[worst], worst, (diff.norm() / whole.norm()).item()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50, help="steps per printed window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--n-way", type=int, default=5)
    p.add_argument("--k-shot", type=int, default=5)
    p.add_argument("--online", type=float, default=0.0, help="online-prediction loss weight (reads)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument(
        "--exact",
        action="store_true",
        help="also train the reference in float64 and print each float32 path's distance to it",
    )
    args = p.parse_args()
    if args.exact and args.dtype != "float32":
        p.error("--exact: compares float32 runs with a float64 one; needs --dtype float32")
    torch.set_num_threads(1)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    features = 128
    fast = InContextClassifier(
        FeatureInput(features),
        args.n_way,
        d_model=args.d_model,
        num_heads=args.heads,
        d_ff=2 * args.d_model,
        num_layers=args.layers,
    ).to(dtype)
    ref = copy.deepcopy(fast)
    for layer in ref.seq_layers:
        layer.impl = "reference"
    models = {"fast": fast, "reference": ref}
    if args.exact:
        models["exact"] = copy.deepcopy(ref).double()
    opts = {
        name: torch.optim.Adam(m.parameters(), args.lr, betas=(0.9, 0.995), eps=1e-9)
        for name, m in models.items()
    }
    gen = torch.Generator().manual_seed(args.seed)
    seconds = dict.fromkeys(models, 0.0)
    print(
        f"SRWM training parity, {args.dtype}, 1 thread: {args.steps} Adam steps (lr {args.lr}), "
        f"batch {args.batch}, "
        f"2-task {args.n_way}-way {args.k_shot}-shot synthetic ACL sequences, d_model {args.d_model}, "
        f"{args.heads} heads, {args.layers} layers, online weight {args.online}, seed {args.seed}"
    )
    print(
        "steps      | max |dloss| | max rel dloss | rel dW all (end) | max rel dW tensor (end)"
        "              | loss fast   | loss ref"
        + (" | max |dloss| fast/ref vs exact | rel dW all fast/ref vs exact (end)" if args.exact else "")
    )
    window: list[dict[str, float]] = []
    for step in range(1, args.steps + 1):
        tasks = synthetic_feature_tasks(
            gen,
            batch_size=args.batch,
            num_tasks=2,
            n_way=args.n_way,
            k_shot=args.k_shot,
            n_query=1,
            feature_dim=features,
            label_space=args.n_way,
        )
        losses = {}
        for name, model in models.items():
            dt = torch.float64 if name == "exact" else dtype
            cast = [
                dataclasses.replace(
                    t, support_features=t.support_features.to(dt), query_features=t.query_features.to(dt)
                )
                for t in tasks
            ]
            t0 = time.perf_counter()
            loss, _ = acl_loss(model, cast, online_weight=args.online)
            opts[name].zero_grad()
            loss.backward()
            opts[name].step()
            seconds[name] += time.perf_counter() - t0
            losses[name] = loss.item()
        window.append(losses)
        if step % args.every == 0 or step == args.steps:
            dl = max(abs(w["fast"] - w["reference"]) for w in window)
            rl = max(abs(w["fast"] - w["reference"]) / abs(w["reference"]) for w in window)
            dw, worst, dw_all = weight_differences(fast, ref)
            line = (
                f"{step - len(window) + 1:4d}-{step:<5d} | {dl:11.3e} | {rl:13.3e} | {dw_all:16.3e} "
                f"| {dw:9.3e} {worst:<27s} "
                f"| {losses['fast']:.8f}  | {losses['reference']:.8f}"
            )
            if args.exact:
                de = [max(abs(w[name] - w["exact"]) for w in window) for name in ("fast", "reference")]
                we = [weight_differences(models[name], models["exact"])[2] for name in ("fast", "reference")]
                line += f" | {de[0]:.3e} / {de[1]:.3e}         | {we[0]:.3e} / {we[1]:.3e}"
            print(line)
            window = []
    print(
        f"wall time: fast {seconds['fast']:.1f} s ({1e3 * seconds['fast'] / args.steps:.1f} ms/step), "
        f"reference {seconds['reference']:.1f} s ({1e3 * seconds['reference'] / args.steps:.1f} ms/step), "
        f"reference / fast {seconds['reference'] / seconds['fast']:.1f}x"
    )  # the float64 "exact" model's time is not reported


if __name__ == "__main__":
    main()
