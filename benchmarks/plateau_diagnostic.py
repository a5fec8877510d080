"""Plateau diagnostic: train only the sequence part of the ACL model on synthetic feature-space tasks
(ideal image features: a random prototype per class plus noise; see
``fastweights.cl.tasks.synthetic_feature_tasks``) and print held-out accuracy every 50 steps.

It answers "which lever shortens the in-context-learning plateau?" without the vision cost
(~0.1 s/step on 2 cores). Each variant is a comma-separated list of key=value settings:

    python benchmarks/plateau_diagnostic.py base lr=3e-3 batch=8 n_query=5 online=1 \
        two_way_steps=150 kscale=4 layers=1 --steps 400
    python benchmarks/plateau_diagnostic.py layer=lstm layer=lstm,forget_bias=1 \
        layer=lstm,lr=3e-4 --steps 1000 --seeds 0,1,2 --jsonl probe.jsonl

Settings: ``layer`` (any ``fastweights.layers`` name), ``lr``, ``batch``, ``d_model``, ``heads``,
``layers``, ``n_query``, ``online`` (online-loss weight), ``two_way_steps`` (2-way 1-shot first),
``kscale`` (SRWM key-column factor), ``qkscale`` (SR-DeltaNet's ``qk_init_scale``: factor on the initial
columns of its SRWM that generate the DeltaNet's query and key logits),
``block`` (``native`` / ``pre_ln``, the layers' ``block`` option), ``label_scale`` (the model's
``label_init_scale``),
``forget_bias`` (LSTM: initial forget-gate bias, PyTorch's init otherwise), ``clip`` (max gradient
norm, 0 = off), ``n_way`` / ``k_shot`` / ``num_tasks`` (the sequence length: ``num_tasks`` tasks of
``n_way * k_shot`` demonstrations). Besides the held-out A|A accuracy, each report gives the
held-out A|A→B accuracy, the training loss and the gradient norm (before clipping), both averaged over
the last 50 steps. Validation tasks are 200 fresh synthetic episodes of a separate generator: no image
of any benchmark is involved.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from fastweights.cl.objective import acl_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.layers import LSTMLayer
from fastweights.models.backbones import FeatureInput
from fastweights.models.in_context import InContextClassifier

DEFAULTS = dict(
    layer="srwm",
    lr=1e-3,
    batch=16,
    d_model=256,
    heads=16,
    layers=2,
    n_query=1,
    online=0.0,
    two_way_steps=0,
    kscale=1.0,
    qkscale=1.0,
    block="native",
    label_scale=1.0,
    forget_bias=None,
    clip=0.0,
    n_way=5,
    k_shot=5,
    num_tasks=2,
)


def _layer_options(s: dict) -> dict:
    options: dict = {"block": str(s["block"])}
    if float(s["qkscale"]) != 1.0:
        if s["layer"] != "sr_deltanet":
            raise ValueError(f"qkscale: only for layer=sr_deltanet, got layer={s['layer']}")
        options["qk_init_scale"] = float(s["qkscale"])
    return options


def _build(s: dict) -> InContextClassifier:
    n_way = int(s["n_way"])
    model = InContextClassifier(
        FeatureInput(128),
        n_way,
        d_model=int(s["d_model"]),
        num_heads=int(s["heads"]),
        d_ff=2 * int(s["d_model"]),
        num_layers=int(s["layers"]),
        sequence_layer=str(s["layer"]),
        label_init_scale=float(s["label_scale"]),
        layer_options=_layer_options(s),
    )
    e = int(s["d_model"]) // int(s["heads"])
    with torch.no_grad():
        for layer in model.seq_layers:
            if float(s["kscale"]) != 1.0:  # the SRWM's key columns
                layer.weight[..., 2 * e : 3 * e].mul_(float(s["kscale"]))
            if s["forget_bias"] is not None:
                if not isinstance(layer, LSTMLayer):
                    raise ValueError(f"forget_bias: only for layer=lstm, got layer={s['layer']}")
                d = layer.d_model  # nn.LSTM's gate order: input, forget, cell, output
                for bias in (layer.lstm.bias_ih_l0, layer.lstm.bias_hh_l0):
                    bias[d : 2 * d] = float(s["forget_bias"]) / 2  # the two biases add up
    return model


def run(settings: dict, steps: int, seed: int) -> list[dict]:
    """Train one variant; returns a report (dict) every 50 steps."""
    s = {**DEFAULTS, **settings}
    torch.manual_seed(seed)
    gen, val_gen = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(10_000 + seed)
    model = _build(s)
    n_way, k_shot, num_tasks = int(s["n_way"]), int(s["k_shot"]), int(s["num_tasks"])
    opt = torch.optim.Adam(model.parameters(), float(s["lr"]), betas=(0.9, 0.995), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 100))
    val = synthetic_feature_tasks(
        val_gen,
        batch_size=200,
        num_tasks=max(2, num_tasks),
        n_way=n_way,
        k_shot=k_shot,
        n_query=1,
        feature_dim=128,
        label_space=n_way,
    )
    history, t0, losses, norms = [], time.perf_counter(), [], []
    for step in range(steps):
        nw, ks = (2, 1) if step < int(s["two_way_steps"]) else (n_way, k_shot)
        tasks = synthetic_feature_tasks(
            gen,
            batch_size=int(s["batch"]),
            num_tasks=num_tasks,
            n_way=nw,
            k_shot=ks,
            n_query=int(s["n_query"]),
            feature_dim=128,
            label_space=n_way,
        )
        loss, _ = acl_loss(model, tasks, online_weight=float(s["online"]))
        opt.zero_grad()
        loss.backward()
        clip = float(s["clip"])
        norm = nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(float(norm))
        if (step + 1) % 50 == 0:
            model.eval()
            with torch.no_grad():
                _, accs = acl_loss(model, val)
            model.train()
            history.append(
                dict(
                    step=step + 1,
                    seconds=round(time.perf_counter() - t0, 1),
                    val_A_A=accs[(0, 0)],
                    val_A_AB=accs[(1, 0)],
                    train_loss=sum(losses[-50:]) / 50,
                    grad_norm=sum(norms[-50:]) / 50,
                )
            )
    return history


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="'base' or key=value[,key=value...]")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--seed", type=int, default=0, help="one seed (ignored with --seeds)")
    p.add_argument("--seeds", default="", help="comma-separated seeds, e.g. 0,1,2")
    p.add_argument("--jsonl", default="", help="also append every report as a JSON line to this file")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    for v in args.variants:
        settings = {} if v == "base" else dict(kv.split("=", 1) for kv in v.split(","))
        for seed in seeds:
            hist = run(settings, args.steps, seed)
            points = "  ".join(f"{h['step']}:{h['val_A_A']:.2f}" for h in hist[1::2])
            last = hist[-1]
            print(
                f"{v} seed {seed} ({last['seconds']:.0f} s) loss {last['train_loss']:.3f} "
                f"|g| {last['grad_norm']:.3f} A|A->B {last['val_A_AB']:.2f}  held-out A|A by step  {points}",
                flush=True,
            )
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    for h in hist:
                        f.write(json.dumps({"variant": v, "seed": seed, **h}) + "\n")


if __name__ == "__main__":
    main()
