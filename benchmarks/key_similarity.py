"""How alike the delta rule's keys are at initialisation: the mean cosine between the keys of two
different steps of an ACL support sequence, in the first sequence layer of the ACL model of
``benchmarks/plateau_diagnostic.py`` (the same construction, the same variant syntax) on its synthetic
feature-space tasks (2 tasks of 5-way 5-shot, batch 16). Close to 1: every demonstration writes nearly
the same key, so a query cannot recall its own class (the delta rule of Schlag et al. 2021, "Linear
Transformers Are Secretly Fast Weight Programmers"; the SR-Delta layer of Irie et al. 2022, App. C).

    python benchmarks/key_similarity.py layer=deltanet layer=sr_deltanet layer=sr_deltanet,qkscale=30

Layers: ``deltanet`` and ``sr_deltanet`` (both expose ``projections(x) -> (q, k, v, beta)``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plateau_diagnostic import DEFAULTS, _build  # noqa: E402

from fastweights.cl.tasks import synthetic_feature_tasks  # noqa: E402


def mean_key_cosine(settings: dict, seed: int) -> float:
    """Mean over batch, heads and step pairs ``t != s`` of ``cos(k_t, k_s)`` in the first layer."""
    s = {**DEFAULTS, **settings}
    torch.manual_seed(seed)
    model = _build(s)
    layer = model.seq_layers[0]
    if not hasattr(layer, "projections"):
        raise ValueError(f"layer: expected deltanet or sr_deltanet, got {s['layer']}")
    task = synthetic_feature_tasks(
        torch.Generator().manual_seed(seed),
        batch_size=16,
        num_tasks=2,
        n_way=int(s["n_way"]),
        k_shot=int(s["k_shot"]),
        n_query=1,
        feature_dim=128,
        label_space=int(s["n_way"]),
    )[0]
    captured: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    with torch.no_grad():
        model.forward_features(task.support_features, task.support_labels)
        hook.remove()
        k = torch.nn.functional.normalize(layer.projections(captured[0])[1], dim=-1)  # [B, T, H, E]
    cos = torch.einsum("bthe,bshe->bhts", k, k)
    off_diagonal = ~torch.eye(k.shape[1], dtype=torch.bool)
    return float(cos[..., off_diagonal].mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="key=value[,key=value...] as in plateau_diagnostic.py")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    for v in args.variants:
        settings = dict(kv.split("=", 1) for kv in v.split(","))
        values = [mean_key_cosine(settings, seed) for seed in seeds]
        print(f"{v}: mean key cosine " + ", ".join(f"{x:.4f}" for x in values) + f" (seeds {args.seeds})")


if __name__ == "__main__":
    main()
