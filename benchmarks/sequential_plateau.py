"""Why does the SRWM leave the delayed-label plateau later than DeltaNet? (docs/results.md, "SRWM fidelity")

The smallest setting that shows the gap of the sequential preset (docs/results.md: DeltaNet leaves the
plateau within 1,000 synthetic steps, the SRWM only after ~9,000): the sequence part of the
sequential model alone (``InContextClassifier`` with the backbone replaced by ideal features), trained on
the preset's synthetic feature-space stage — two 5-way 10-shot tasks per stream, each trimmed by 0..5
demonstrations, delayed labels, batch 8, Adam 1e-3 with 100 warm-up steps, D = 256, 16 heads, 2 layers
— and evaluated every ``--every`` steps on 256 held-out synthetic streams (accuracy at the 2nd and later
occurrences of a class within its task; chance 20%).

Each variant is ``key=value[,key=value...]`` over these settings:

    layer        srwm | deltanet | lstm (default srwm)
    init         acl | modern (SRWM: W_q std 0.01/sqrt(E) or 1/sqrt(E))
    beta_init    mean of the SRWM's learning-rate block (0)
    q_scale, k_scale, y_scale   factors on the SRWM's W_q / W_k / W_y blocks after init (1)
    in_scale     factor on the input projection's weights and bias (model.input_init_scale) (1)
    label_scale  factor on the input projection's label columns (model.label_init_scale) (1)
    pre_ln       1: the SRWM reads LayerNorm(x) (a learned LayerNorm per layer), as DeltaNet does (0)
    input_softmax 1: softmax over each head's slice of the SRWM input (modern-srwm RL option) (0)
    lr, warmup, batch, dropout, d_model, heads, layers, noise

Before training it prints, per sequence layer on one training batch: the RMS of the layer's input, the
mean largest softmax probability of its keys and queries (1/E = 0.0625 is uniform; DeltaNet: its
sum-normalised elu+1 maps), and the gradient norm reaching each block of the slow weights.

    python benchmarks/sequential_plateau.py layer=deltanet layer=srwm layer=lstm --steps 2000
    python benchmarks/sequential_plateau.py pre_ln=1 init=modern in_scale=4 --steps 2000 --json out.jsonl
    python benchmarks/sequential_plateau.py --plot out.jsonl --out curves.png   # curves of saved runs

Timing: one thread per process (``torch.set_num_threads(1)``); 1.6–2.5 min per 1,000 SRWM steps
measured on one core shared by 3–4 such processes (docs/results.md).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import torch
from torch import Tensor, nn

from fastweights.cl.sequential import delayed_label_stream, sequential_loss
from fastweights.cl.tasks import synthetic_feature_tasks
from fastweights.layers.deltanet import DeltaNetLayer
from fastweights.layers.srwm import SRWMLayer
from fastweights.models.backbones import FeatureInput
from fastweights.models.in_context import InContextClassifier

FEATURES = 128  # Conv-4 with 32 channels at 32 px: the sequential preset's feature size
DEFAULTS: dict[str, Any] = dict(
    layer="srwm",
    init="acl",
    beta_init=0.0,
    q_scale=1.0,
    k_scale=1.0,
    y_scale=1.0,
    in_scale=1.0,
    label_scale=1.0,
    pre_ln=0,
    input_softmax=0,
    lr=1e-3,
    warmup=100,
    batch=8,
    dropout=0.0,
    d_model=256,
    heads=16,
    layers=2,
    noise=0.5,
    n_way=5,
    k_shot=10,
    max_trim=5,
)


def _typed(key: str, value: str) -> Any:
    if key not in DEFAULTS:
        raise SystemExit(f"unknown setting {key!r}; expected one of {sorted(DEFAULTS)}")
    kind = type(DEFAULTS[key])
    return value if kind is str else kind(float(value)) if kind is int else kind(value)


def build(s: dict[str, Any]) -> InContextClassifier:
    """The sequential preset's sequence model with the variant's changes applied at initialisation."""
    model = InContextClassifier(
        FeatureInput(FEATURES),
        s["n_way"],
        d_model=s["d_model"],
        num_heads=s["heads"],
        d_ff=2 * s["d_model"],
        num_layers=s["layers"],
        dropout=s["dropout"],
        sequence_layer=s["layer"],
        label_init_scale=s["label_scale"],
        input_init_scale=s["in_scale"],
    )
    # the SRWM blocks are re-drawn after construction (not via layer_options), so every variant shares
    # the construction's random stream: the input projection, FF and head weights are the same in all
    with torch.no_grad():
        for layer in model.seq_layers:
            if not isinstance(layer, SRWMLayer):
                continue
            layer.init, layer.beta_init = s["init"], s["beta_init"]
            layer.reset_srwm_parameters()
            layer.use_input_softmax = bool(s["input_softmax"])
            e = layer.head_dim
            layer.weight[..., :e].mul_(s["y_scale"])
            layer.weight[..., e : 2 * e].mul_(s["q_scale"])
            layer.weight[..., 2 * e : 3 * e].mul_(s["k_scale"])
    if s["pre_ln"]:
        for layer in model.seq_layers:
            if isinstance(layer, SRWMLayer):
                _read_normalised(layer)
    return model


def _read_normalised(layer: SRWMLayer) -> None:
    """Make the SRWM read ``LayerNorm(x)`` (its own learned LayerNorm) in every entry point."""
    layer.input_norm = nn.LayerNorm(layer.d_model)
    heads = layer._heads
    layer._heads = lambda x: heads(layer.input_norm(x))  # type: ignore[method-assign]


def tasks_to_stream(gen: torch.Generator, s: dict[str, Any], batch: int, trim: bool):
    tasks = synthetic_feature_tasks(
        gen,
        batch_size=batch,
        num_tasks=2,
        n_way=s["n_way"],
        k_shot=s["k_shot"],
        n_query=0,
        feature_dim=FEATURES,
        label_space=s["n_way"],
        noise=s["noise"],
    )
    full = s["n_way"] * s["k_shot"]
    cut = [int(torch.randint(0, s["max_trim"] + 1, (1,), generator=gen)) if trim else 0 for _ in tasks]
    return delayed_label_stream(tasks, lengths=[full - c for c in cut], unknown_label=s["n_way"])


@torch.no_grad()
def _softmax_peaks(layer: nn.Module, x: Tensor) -> tuple[float, float]:
    """Mean largest probability of the layer's key and query maps on input ``x [B, T, D]``."""
    if isinstance(layer, SRWMLayer):
        e = layer.head_dim
        h = layer._heads(x)  # [B, T, H, E]
        proj = torch.einsum("bthe,hef->bthf", h, layer.weight)
        q = torch.softmax(proj[..., e : 2 * e], -1)
        k = torch.softmax(proj[..., 2 * e : 3 * e], -1)
        return float(k.amax(-1).mean()), float(q.amax(-1).mean())
    if isinstance(layer, DeltaNetLayer):
        q, k, _, _ = layer.projections(x)
        return float(k.amax(-1).mean()), float(q.amax(-1).mean())
    return math.nan, math.nan


def init_report(model: InContextClassifier, s: dict[str, Any], seed: int) -> list[dict[str, float]]:
    """Per sequence layer: input RMS, key/query peaks and slow-weight gradient norms on one batch."""
    stream = tasks_to_stream(torch.Generator().manual_seed(seed + 7), s, 32, trim=False)
    inputs: list[Tensor] = []
    hooks = [layer.register_forward_pre_hook(lambda _m, a: inputs.append(a[0])) for layer in model.seq_layers]
    model.zero_grad()
    loss, _ = sequential_loss(model, stream)
    loss.backward()
    for hook in hooks:
        hook.remove()
    rows = []
    for i, layer in enumerate(model.seq_layers):
        x = inputs[i].detach()
        kpeak, qpeak = _softmax_peaks(layer, x)
        row = {"layer": i, "input_rms": float(x.pow(2).mean().sqrt()), "key_peak": kpeak, "query_peak": qpeak}
        if isinstance(layer, SRWMLayer):
            e, g = layer.head_dim, layer.weight.grad
            for name, sl in (
                ("y", slice(0, e)),
                ("q", slice(e, 2 * e)),
                ("k", slice(2 * e, 3 * e)),
                ("b", slice(3 * e, None)),
            ):
                row[f"grad_W{name}"] = float(g[..., sl].norm())
        elif isinstance(layer, DeltaNetLayer):
            e, g = (
                layer.head_dim,
                layer.slow_net.weight.grad.reshape(layer.num_heads, 3 * layer.head_dim + 1, -1),
            )
            for name, sl in (
                ("q", slice(0, e)),
                ("k", slice(e, 2 * e)),
                ("v", slice(2 * e, 3 * e)),
                ("b", slice(3 * e, None)),
            ):
                row[f"grad_{name}"] = float(g[:, sl].norm())
        else:
            row["grad_slow"] = float(
                sum(p.grad.norm() ** 2 for p in layer.parameters() if p.grad is not None) ** 0.5
            )
        rows.append(row)
    model.zero_grad()
    return rows


@torch.no_grad()
def held_out_accuracy(model: InContextClassifier, val) -> float:
    """Accuracy at the 2nd and later occurrences of a class within its task."""
    model.eval()
    logits, _ = model.forward_features(val.features, val.input_labels)
    model.train()
    keep = val.occurrence >= 2
    return float((logits.argmax(-1) == val.targets)[keep].float().mean())


def run(settings: dict[str, Any], steps: int, every: int, seed: int) -> dict[str, Any]:
    s = {**DEFAULTS, **settings}
    torch.manual_seed(seed)
    model = build(s)
    report = init_report(model, s, seed)
    gen = torch.Generator().manual_seed(seed)
    val = tasks_to_stream(torch.Generator().manual_seed(10_000 + seed), s, 256, trim=False)
    opt = torch.optim.Adam(model.parameters(), s["lr"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / max(1, s["warmup"])))
    curve, t0 = [(0, held_out_accuracy(model, val))], time.perf_counter()
    for step in range(1, steps + 1):
        loss, _ = sequential_loss(model, tasks_to_stream(gen, s, s["batch"], trim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % every == 0:
            curve.append((step, held_out_accuracy(model, val)))
    return {"settings": settings, "init": report, "curve": curve, "seconds": time.perf_counter() - t0}


def plot(jsonl: str, out: str) -> None:
    """Held-out accuracy vs step of every run saved in ``jsonl`` (one line per variant)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.subplots()
    with open(jsonl) as f:
        for i, line in enumerate(f):
            res = json.loads(line)
            steps, accs = zip(*res["curve"], strict=True)
            style = ("-", "--", ":")[i // 10 % 3]  # matplotlib's 10 colours, then another line style
            ax.plot(steps, [100 * a for a in accs], ls=style, color=f"C{i % 10}", label=res["variant"])
    ax.axhline(20, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("training step (synthetic delayed-label streams)")
    ax.set_ylabel("held-out accuracy, 2nd+ occurrence (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(out, dpi=120, bbox_inches="tight")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="*", help="'base' or key=value[,key=value...]")
    p.add_argument("--plot", help="plot the runs saved in this JSON-lines file instead of training")
    p.add_argument("--out", default="sequential_plateau.png", help="the --plot image")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="append one JSON line per variant to this file")
    args = p.parse_args()
    if args.plot:
        plot(args.plot, args.out)
        return
    if not args.variants:
        p.error("give at least one variant (or --plot FILE)")
    torch.set_num_threads(1)
    for v in args.variants:
        settings = (
            {} if v == "base" else {k: _typed(k, val) for k, val in (kv.split("=", 1) for kv in v.split(","))}
        )
        res = run(settings, args.steps, args.every, args.seed)
        res["variant"], res["seed"] = v, args.seed
        for row in res["init"]:
            print(f"{v:32s} init " + "  ".join(f"{k}={val:.4g}" for k, val in row.items()), flush=True)
        first = next((st for st, a in res["curve"] if a >= 0.5), None)
        points = " ".join(f"{st}:{a:.2f}" for st, a in res["curve"])
        print(f"{v:32s} ({res['seconds']:.0f} s) first step >= 50%: {first}  curve {points}", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
