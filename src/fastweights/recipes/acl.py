"""ACL recipe: metalearn an in-context continual learner, then evaluate it.

``train``: sequences of ``num_tasks`` few-shot tasks from the FontGlyphs meta-training scripts, ACL loss
(ACL paper §3, Eq. 6 generalised to T tasks), Adam with warm-up, periodic
validation on the meta-validation scripts, atomic best/latest checkpoints, resumable.
``evaluate``: few-shot accuracy and the in-context forgetting table on the held-out scripts, and the
5-task split benchmarks (Split-Digits, Split-FashionMNIST), written to ``results.json``,
``report.md`` and ``plots/``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from fastweights.cl.objective import acl_loss, embed_tasks, synthetic_feature_tasks
from fastweights.cl.protocols import evaluate_split_benchmark, evaluate_task_pairs, summarize_task_pairs
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources.base import ClassPool, SplitDataset
from fastweights.data.sources.digits import load_digits_split
from fastweights.data.sources.glyphs import load_font_glyphs
from fastweights.data.sources.idx import load_idx_dataset
from fastweights.io import atomic_write_json, atomic_write_text, read_jsonl
from fastweights.models.in_context import InContextClassifier
from fastweights.recipes.acl_config import ACLConfig, DataConfig, TrainConfig
from fastweights.recipes.common import (
    build_classifier,
    curriculum_stage,
    load_trained,
    loop_settings,
    prepare_run,
    resolve_device,
    run_summary,
)
from fastweights.recipes.report import plot_learning_curves, write_report
from fastweights.train.checkpoint import CheckpointManager
from fastweights.train.loop import fit, numpy_rng_state
from fastweights.train.schedules import lr_multiplier

__all__ = [
    "train",
    "evaluate",
    "export",
    "compare_curves",
    "build_model",
    "load_glyph_pools",
    "resolve_device",
]

log = logging.getLogger(__name__)


def build_model(cfg: ACLConfig) -> InContextClassifier:
    """The in-context classifier of the ACL paper (Conv-4 → 2 × [SRWM, FF] → head), §3."""
    return build_classifier(cfg.model, image_size=cfg.data.image_size)


def load_glyph_pools(d: DataConfig) -> dict[str, ClassPool]:
    """FontGlyphs meta-train / meta-val / meta-test pools (rendered once, then cached)."""
    return load_font_glyphs(
        image_size=d.image_size,
        examples_per_class=d.examples_per_class,
        max_classes_per_script=d.max_classes_per_script,
        max_scripts=d.max_scripts,
        seed=d.seed,
        cache_dir=d.cache_dir,
    )


def _validate(model, sampler: EpisodeSampler, t: TrainConfig, episodes: int, device) -> dict[str, float]:
    accs = evaluate_task_pairs(
        model,
        sampler,
        episodes=episodes,
        n_way=t.n_way,
        k_shot=t.k_shot,
        n_query=t.n_query,
        batch_size=min(50, episodes),
        seed=12345,
        reverse=False,
        device=device,
    )
    out = {f"val_{k}": float(v.mean()) for k, v in accs.items()}
    terms = ["A|A", "B|A->B", "A|A->B"] if t.acl_loss else ["A|A", "B|A->B"]
    out["val_objective"] = float(np.mean([accs[k].mean() for k in terms]))
    out["val_acc"] = out["val_A|A"]
    return out


def _check(cfg: ACLConfig) -> None:
    t = cfg.train
    if t.num_tasks < 1:
        raise ValueError(f"train.num_tasks: expected >= 1, got {t.num_tasks}")
    if max([t.n_way, t.label_space] + [s.n_way for s in t.curriculum]) > cfg.model.num_classes:
        raise ValueError(
            f"train.n_way / train.label_space / curriculum n_way: expected <= model.num_classes="
            f"{cfg.model.num_classes}, got {t.n_way} / {t.label_space} / {[s.n_way for s in t.curriculum]}"
        )
    resolve_device(cfg.device)


def train(
    cfg: ACLConfig, run_dir: Path, *, resume: bool = False, command: str | None = None
) -> dict[str, Any]:
    """Meta-train ``cfg`` into ``run_dir`` (``config.yaml``, ``metrics.jsonl``, ``checkpoints/``).

    Stops at ``train.max_steps`` or after ``train.max_minutes`` of wall-clock time (validation
    included), whichever comes first. With ``resume`` the latest checkpoint continues exactly
    (model, optimiser, schedule, step, elapsed time and every random state); Ctrl-C saves it first.

    Returns:
        The last validation record.

    Raises:
        FileExistsError: if ``run_dir`` already holds a run and ``resume`` is False.
        ValueError: if ``num_tasks * n_way`` exceeds the meta-training classes (from the sampler).
    """
    run_dir = Path(run_dir)
    # a resumed run appends its command; config errors are raised before anything is written
    cfg = prepare_run(cfg, run_dir, resume=resume, command=command, check=_check)
    t = cfg.train
    if t.threads:
        torch.set_num_threads(t.threads)
    device = resolve_device(cfg.device)
    torch.manual_seed(t.seed)
    rng = np.random.default_rng(t.seed)
    synth_gen = torch.Generator().manual_seed(t.seed)

    pools = load_glyph_pools(cfg.data)
    train_sampler = EpisodeSampler(pools["train"], rotations=cfg.data.rotations)
    val_sampler = EpisodeSampler(pools["val"])
    model = build_model(cfg).to(device)
    if t.init_from and not resume:
        init = torch.load(t.init_from, map_location=device, weights_only=False)
        model.load_state_dict(init["model"])
        log.info("initialised the model from %s (step %s)", t.init_from, init.get("step"))
    opt = torch.optim.Adam(model.parameters(), lr=t.lr, betas=tuple(t.adam_betas), eps=t.adam_eps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_multiplier(t.schedule, warmup_steps=t.warmup_steps, base_lr=t.lr, d_model=cfg.model.d_model)
    )

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        n_way, k_shot = curriculum_stage(t, step)
        label_space = t.label_space or cfg.model.num_classes
        if step < t.synthetic_steps:
            tasks = synthetic_feature_tasks(
                synth_gen,
                batch_size=t.batch_size,
                num_tasks=t.num_tasks,
                n_way=n_way,
                k_shot=k_shot,
                n_query=t.n_query,
                feature_dim=model.backbone.feature_dim,
                label_space=label_space,
                noise=t.synthetic_noise,
                device=device,
            )
        else:
            batches = train_sampler.sample(
                rng,
                batch_size=t.batch_size,
                num_tasks=t.num_tasks,
                n_way=n_way,
                k_shot=k_shot,
                n_query=t.n_query,
                label_space=label_space,
                first_shot=t.first_shot_loss,
            )
            pool = train_sampler.pool
            tasks = embed_tasks(model, batches, pool.mean, pool.std, device, channels=pool.channels)
        loss, accs = acl_loss(
            model, tasks, backward=t.acl_loss, first_shot=t.first_shot_loss, online_weight=t.online_weight
        )
        return loss, {"n_way": n_way, "k_shot": k_shot, **{f"train_{i}|{j}": a for (i, j), a in accs.items()}}

    return fit(
        run_dir,
        model=model,
        optimizer=opt,
        scheduler=sched,
        step_fn=step_fn,
        validate_fn=lambda: _validate(model, val_sampler, t, t.val_episodes, device),
        settings=loop_settings(t),
        objective="val_objective",
        resume=resume,
        extra_state={
            "sampler_rng": numpy_rng_state(rng),
            "synthetic_rng": (synth_gen.get_state, synth_gen.set_state),
        },
        metadata={"config": asdict(cfg)},
        description="ACL meta-training",
        postfix=("n_way", "k_shot"),
        map_location=device,
    )


def _split_datasets(cfg: ACLConfig) -> dict[str, SplitDataset]:
    out = {}
    for name in cfg.eval.split_benchmarks:
        if name == "digits":
            out["Split-Digits"] = load_digits_split(image_size=cfg.data.image_size)
        elif name == "fashion_mnist":
            out["Split-FashionMNIST"] = load_idx_dataset(
                cfg.data.fashion_mnist_dir, name="Fashion-MNIST", image_size=cfg.data.image_size
            )
        else:
            raise ValueError(f"eval.split_benchmarks: expected 'digits' or 'fashion_mnist', got {name!r}")
    return out


def evaluate(
    run_dir: Path,
    *,
    which: str = "best",
    overrides: list[str] | None = None,
    command: str | None = None,
    out_dir: Path | None = None,
) -> dict[str, Any]:
    """Evaluate the ``which`` checkpoint of ``run_dir``; writes ``results.json``, ``report.md`` and
    ``plots/`` into ``out_dir`` (default: ``run_dir``; the training log is copied there for the curve).

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
    """
    run_dir = Path(run_dir)
    cfg, state, model, device = load_trained(run_dir, ACLConfig, build_model, which, overrides)
    model.eval()
    e = cfg.eval
    t0 = time.monotonic()
    pools = load_glyph_pools(cfg.data)
    test_sampler = EpisodeSampler(pools["test"])
    with tqdm(total=e.fewshot_episodes, desc="held-out task pairs", unit="ep", dynamic_ncols=True) as bar:
        accs = evaluate_task_pairs(
            model,
            test_sampler,
            episodes=e.fewshot_episodes,
            n_way=e.n_way,
            k_shot=e.k_shot,
            n_query=e.n_query,
            batch_size=e.batch_size,
            seed=e.seed,
            device=device,
            progress=bar.update,
        )
    table = summarize_task_pairs(accs)
    results: dict[str, Any] = {
        "run": {**run_summary(cfg, run_dir, state, which, command), "acl_loss": cfg.train.acl_loss},
        "fewshot": {
            "dataset": "FontGlyphs/test",
            "n_way": e.n_way,
            "k_shot": e.k_shot,
            "episodes": e.fewshot_episodes,
            "accuracy": table["A|A"]["mean"],
            "ci95": table["A|A"]["ci95"],
        },
        "forgetting": {
            "n_way": e.n_way,
            "k_shot": e.k_shot,
            "episodes": e.fewshot_episodes,
            "table": table,
            "task_a": "FontGlyphs/test",
            "task_b": "FontGlyphs/test",
        },
        "split": {},
    }
    for name, ds in _split_datasets(cfg).items():
        for scenario in e.scenarios:
            key = f"{name}/{scenario}"
            log.info("evaluating %s", key)
            results["split"][key] = evaluate_split_benchmark(
                model, ds, k_shot=e.split_k_shot, runs=e.split_runs, scenario=scenario, device=device
            )
    results["run"]["eval_minutes"] = (time.monotonic() - t0) / 60
    out_dir = Path(out_dir) if out_dir is not None else run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir != run_dir and (run_dir / "metrics.jsonl").exists():
        atomic_write_text(out_dir / "metrics.jsonl", (run_dir / "metrics.jsonl").read_text())
    atomic_write_json(out_dir / "results.json", results)
    write_report(results, out_dir)
    return results


def export(run_dir: Path, out_dir: Path, *, which: str = "best") -> Path:
    """Write a slim, shareable copy of a run: ``config.yaml``, ``command.txt``, ``metrics.jsonl`` and
    ``checkpoints/best.pt`` holding only the model weights and training step/time (no optimiser).

    Raises:
        FileNotFoundError: if ``run_dir`` has no such checkpoint.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    state = CheckpointManager(run_dir).load(which)  # type: ignore[arg-type]
    if state is None:
        raise FileNotFoundError(f"checkpoint: no {which} checkpoint in {run_dir}/checkpoints")
    for name in ("config.yaml", "command.txt", "metrics.jsonl"):
        if (run_dir / name).exists():
            atomic_write_text(out_dir / name, (run_dir / name).read_text())
    slim = {k: state[k] for k in ("model", "step", "elapsed_seconds", "best")}
    CheckpointManager(out_dir).save(slim, is_best=True)
    (out_dir / "checkpoints" / "latest.pt").unlink(missing_ok=True)
    return out_dir / "checkpoints" / "best.pt"


def compare_curves(
    run_dirs: list[Path],
    out: Path,
    *,
    labels: list[str] | None = None,
    key: str = "val_acc",
    x: str = "minutes",
) -> Path:
    """Plot ``key`` (default: meta-validation accuracy A|A) against ``x`` (``"minutes"`` of training
    wall-clock time, validation included, or ``"step"``) for several run folders in one PNG (``out``).

    Raises:
        FileNotFoundError: if a run folder has no ``metrics.jsonl``.
        ValueError: if ``labels`` does not match ``run_dirs``.
    """
    labels = labels or [Path(d).name for d in run_dirs]
    if x not in ("minutes", "step"):
        raise ValueError(f"x: expected 'minutes' or 'step', got {x!r}")
    if len(labels) != len(run_dirs):
        raise ValueError(f"labels: expected {len(run_dirs)} labels, got {len(labels)}")
    curves = {}
    for label, d in zip(labels, run_dirs, strict=True):
        log_path = Path(d) / "metrics.jsonl"
        if not log_path.exists():
            raise FileNotFoundError(f"run_dirs: no {log_path}")
        curves[label] = [(r[x], r[key]) for r in read_jsonl(log_path) if key in r]
    ylabel = "meta-validation accuracy A|A" if key == "val_acc" else key
    xlabel = "training wall-clock minutes" if x == "minutes" else "training step"
    return plot_learning_curves(curves, out, xlabel=xlabel, ylabel=ylabel, title=f"{ylabel} vs {xlabel}")
