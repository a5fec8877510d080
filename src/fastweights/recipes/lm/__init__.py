"""Recipe ``lm``: byte-level causal language modelling with TTT / attention / DeltaNet / SRWM layers
(Sun et al., arXiv 2407.04620, §2.7 and §3).

``train`` → ``run_dir/{config.yaml, command.txt, metrics.jsonl, tensorboard/, checkpoints/}``;
``evaluate`` → ``results.json``, ``report.md``, ``plots/loss_by_position_{valid,test}.png`` (bits per
byte by token position: does the loss keep falling later in the context?); ``generate`` samples text;
``export`` writes a ``save_pretrained`` folder or a Hugging Face one (``--format hf``), ``convert`` turns
one into the other.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from fastweights.checks import check_seed
from fastweights.data.sources.text import (
    decode,
    encode,
    eval_windows,
    load_corpus,
    sample_windows,
    split_corpus,
)
from fastweights.io import atomic_save_figure, atomic_write_text
from fastweights.models.lm import HF_MODEL_TYPE, CausalLM, generate
from fastweights.recipes.compare import Score
from fastweights.recipes.contract import RECIPE_MEMBERS, Selection
from fastweights.recipes.lm.config import LMRecipeConfig
from fastweights.recipes.plots import learning_curve_section
from fastweights.recipes.reporting import md_table, run_header, write_report_files
from fastweights.recipes.run import RecipeRun, evaluate_verb, fit_run, load_trained, train_verb
from fastweights.train.model_files import CARD_FILE, model_card
from fastweights.train.run_folder import output_folder
from fastweights.train.schedules import warmup_cosine

__all__ = [
    *RECIPE_MEMBERS,
    "convert",
    "generate_text",
    "load_splits",
    "position_losses",
    "plot_position_curves",
]  # the recipe contract + extras

NAME = "lm"  # the registry / CLI name (recipes.contract.RECIPES)
CONFIG = LMRecipeConfig
SELECTION = Selection(  # the best checkpoint: validation bits per byte
    "val_bpb", minimize=True, data="the corpus's validation cut (disjoint from the test cut)"
)
MODEL_KEY = "model.sequence_layer"  # what `compare` varies
EXPORT_FORMATS = ("fastweights", "hf")  # `lm export --format`: CausalLM folder, Hugging Face folder
MAX_NEW_TOKENS = 100_000  # `lm generate` cap: decoding is one step per byte (minutes per 100k on a CPU)
LN2 = math.log(2.0)


def build_model(cfg: LMRecipeConfig) -> CausalLM:
    """The :class:`CausalLM` of ``cfg.model`` (byte-level: the config checks ``model.vocab_size`` = 256)."""
    return CausalLM(cfg.model)


def load_splits(cfg: LMRecipeConfig) -> tuple[str, dict[str, torch.Tensor]]:
    """``(corpus name, {"train", "valid", "test"} uint8 tensors)`` of ``cfg.data``."""
    d = cfg.data
    name, data = load_corpus(d.path, cache_dir=d.cache_dir)
    return name, split_corpus(data, valid_fraction=d.valid_fraction, test_fraction=d.test_fraction)


def _train_data(cfg: LMRecipeConfig, continuing: bool = False) -> dict[str, torch.Tensor]:
    """The corpus cuts, checked to be long enough for ``train.seq_len`` (run before the run folder is
    written)."""
    _, splits = load_splits(cfg)
    t = cfg.train
    for split in ("train", "valid"):
        if len(splits[split]) < t.seq_len + 1:
            raise ValueError(
                f"train.seq_len: the {split} cut has {len(splits[split])} bytes, fewer than seq_len + 1 = "
                f"{t.seq_len + 1}; use a shorter seq_len or a larger corpus (data.path)"
            )
    return splits


def _tokens_per_step(cfg: LMRecipeConfig) -> int:
    t = cfg.train
    return t.batch_size * t.accumulation_steps * t.seq_len


def position_losses(
    model: CausalLM, windows: torch.Tensor, batch_size: int, progress: Any = None
) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats) at each position over ``windows [N, L + 1]`` → float64 ``[L]``."""
    device = next(model.parameters()).device
    total = torch.zeros(windows.shape[1] - 1, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(windows), batch_size):
            w = windows[start : start + batch_size].to(device)
            logits, _ = model(w[:, :-1])
            ce = F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none")  # [b, L]
            total += ce.double().sum(0).cpu()
            if progress is not None:
                progress(len(w))
    return total / len(windows)


def _fit(run: RecipeRun) -> dict[str, Any]:
    """Train ``cfg`` into ``run_dir``: AdamW, warm-up + cosine, clipping, validation bits per byte on
    fixed windows of the validation cut (the best checkpoint minimises it), checkpoints + exact resume
    (:func:`fastweights.train.loop.fit`), JSONL and TensorBoard logs.
    """
    cfg, device, splits = run.cfg, run.device, run.data
    t = cfg.train
    model = build_model(cfg).to(device)
    val = eval_windows(splits["valid"], t.seq_len, t.val_windows)
    gen = torch.Generator().manual_seed(t.seed)
    run.state["batch_rng"] = (gen.get_state, gen.set_state)

    def step_fn(step: int) -> tuple[torch.Tensor, dict[str, Any]]:
        w = sample_windows(splits["train"], t.seq_len, t.batch_size, gen).to(device)
        logits, _ = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
        tokens = (step + 1) * _tokens_per_step(run.saved_cfg)  # all ranks' tokens
        return loss, {"tokens": tokens, "train_bpb": loss.item() / LN2}

    def validate() -> dict[str, float]:
        loss = float(position_losses(model, val, t.batch_size).mean())
        return {"val_loss": loss, "val_bpb": loss / LN2}

    opt = torch.optim.AdamW(
        model.parameters(), lr=t.lr, betas=tuple(t.adam_betas), weight_decay=t.weight_decay
    )
    mult = warmup_cosine(
        warmup_steps=round(t.warmup_fraction * t.max_steps),
        total_steps=t.max_steps,
        min_ratio=t.min_lr / t.lr,
    )
    return fit_run(
        run,
        model,
        step_fn,
        validate,
        optimizer=opt,
        scheduler=torch.optim.lr_scheduler.LambdaLR(opt, mult),
        selection=SELECTION,
        description=f"lm {cfg.model.sequence_layer}",
        postfix=("train_bpb",),
    )


def _measure(cfg: LMRecipeConfig, state: dict[str, Any], model: CausalLM, device: Any) -> dict[str, Any]:
    """Loss, bits per byte, perplexity and bits per byte by position on each cut of ``eval.splits``.

    Raises:
        ValueError: for a cut shorter than one window.
    """
    e = cfg.eval
    seq_len = e.seq_len or cfg.train.seq_len
    corpus, cuts = load_splits(cfg)
    for split in e.splits:
        if len(cuts[split]) < seq_len + 1:
            raise ValueError(
                f"eval.seq_len: the {split} cut has {len(cuts[split])} bytes, fewer than one window of "
                f"{seq_len} + 1"
            )
    splits = {}
    for split in e.splits:
        windows = eval_windows(cuts[split], seq_len, e.windows)
        desc = f"lm eval {split} ({cfg.model.sequence_layer})"
        with tqdm(total=len(windows), desc=desc, unit="win", dynamic_ncols=True) as bar:
            per_pos = position_losses(model, windows, e.batch_size, progress=bar.update)
        loss = float(per_pos.mean())
        splits[split] = {
            "windows": len(windows),
            "tokens": len(windows) * seq_len,
            "loss": loss,
            "bpb": loss / LN2,
            "perplexity": math.exp(loss),
            "bpb_by_position": (per_pos / LN2).tolist(),
        }
    return {
        "run": {
            "parameters": model.num_parameters(),
            "trained_tokens": state["step"] * _tokens_per_step(cfg),
        },
        "lm": {"corpus": corpus, "seq_len": seq_len, "splits": splits},
    }


def write_report(results: dict[str, Any], out_dir: Path) -> Path:
    """``report.md`` (+ ``report.html``), ``plots/loss_by_position_<split>.png`` and, from
    ``out_dir/metrics.jsonl``, ``plots/learning_curve.png`` (the selection metric ``val_bpb`` with the
    evaluated checkpoint starred, and training bits per byte) of one evaluation; returns the report's
    path."""
    for split in results["lm"]["splits"]:
        plot_position_curves(
            {results["run"]["sequence_layer"]: results},
            out_dir / "plots" / f"loss_by_position_{split}.png",
            split,
        )
    curve = learning_curve_section(
        out_dir,
        results["run"],
        default_metric="val_bpb",
        others=("train_bpb",),
        labels={"val_bpb": "validation bits per byte (val_bpb)", "train_bpb": "training bits per byte"},
        ylabel="bits per byte (lower is better)",
        unit=" bits/byte",
        title=f"{results['run']['sequence_layer']}: bits per byte during training",
    )
    text = _report(results) + ("\n" + "\n".join(curve) if curve else "")
    return write_report_files(out_dir / "report.md", text)


def _bins(seq_len: int) -> list[tuple[int, int]]:
    """Position ranges ``[lo, hi)`` doubling in width (1, 2, 3–4, 5–8, …) for the tables."""
    out, lo = [], 0
    while lo < seq_len:
        hi = min(seq_len, max(1, 2 * lo))
        out.append((lo, hi))
        lo = hi
    return out


def _binned(curve: list[float]) -> list[tuple[str, float]]:
    return [
        (f"{lo + 1}–{hi}" if hi - lo > 1 else f"{lo + 1}", sum(curve[lo:hi]) / (hi - lo))
        for lo, hi in _bins(len(curve))
    ]


def _report(res: dict[str, Any]) -> str:
    r, lm = res["run"], res["lm"]
    splits = lm["splits"]
    binned = {name: _binned(s["bpb_by_position"]) for name, s in splits.items()}
    positions = [p for p, _ in next(iter(binned.values()))]
    lines = [
        f"# Language model: {r['sequence_layer']} ({r['preset']})",
        "",
        *run_header(r, f"; {r['trained_tokens']:,} tokens, {r['parameters']:,} parameters"),
        "",
        f"Corpus {lm['corpus']}; windows of {lm['seq_len']} bytes from the start of each cut.",
        "",
        *md_table(
            ["cut", "bytes scored", "loss (nats/byte)", "bits per byte", "perplexity (per byte)"],
            [
                [name, f"{s['tokens']:,}", f"{s['loss']:.4f}", f"{s['bpb']:.4f}", f"{s['perplexity']:.3f}"]
                for name, s in splits.items()
            ],
        ),
        "",
        "Bits per byte by position in the window (mean over the positions of each range):",
        "",
        *md_table(
            ["positions", *splits],
            [[p, *(f"{dict(binned[name])[p]:.3f}" for name in splits)] for p in positions],
        ),
        "",
        *(f"![loss by position, {name}](plots/loss_by_position_{name}.png)" for name in splits),
        "",
    ]
    return "\n".join(lines)


def plot_position_curves(results: dict[str, dict[str, Any]], path: Path, split: str) -> None:
    """Bits per byte vs position (log x) on cut ``split``, one curve per model, into the PNG ``path``
    (written atomically)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.subplots()
    for name, res in results.items():
        curve = torch.tensor(res["lm"]["splits"][split]["bpb_by_position"])
        # smooth with a window growing with the position so late positions are not noise-dominated
        pos = torch.arange(1, len(curve) + 1)
        smooth = [float(curve[max(0, i - i // 8) : i + 1].mean()) for i in range(len(curve))]
        ax.plot(pos.tolist(), smooth, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("position in the context (bytes)")
    ax.set_ylabel("bits per byte")
    first = next(iter(results.values()))["lm"]
    windows = first["splits"][split]["windows"]
    ax.set_title(f"{first['corpus']} / {split}: mean over {windows} windows")
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_figure(fig, path)


def comparison_table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of ``compare``: one row per sequence layer at the same token budget; bits per byte
    on each evaluated cut, and on the first cut at position 1 and over the last position range of the
    report's doubling ranges (e.g. 129–256 for 256-byte windows)."""
    first = next(iter(results.values()))["lm"]
    splits = list(first["splits"])
    late = _binned(first["splits"][splits[0]]["bpb_by_position"])[-1][0]
    header = ["sequence layer", "parameters", "tokens", "train min"]
    header += [f"{s} bits per byte" for s in splits]
    header += [f"{splits[0]} bpb at position 1", f"{splits[0]} bpb at positions {late}"]
    rows = []
    for name, res in results.items():
        r, cuts = res["run"], res["lm"]["splits"]
        binned = dict(_binned(cuts[splits[0]]["bpb_by_position"]))
        row = [name, f"{r['parameters']:,}", f"{r['trained_tokens']:,}", f"{r['train_minutes']:.1f}"]
        row += [f"{cuts[s]['bpb']:.4f}" for s in splits]
        row += [f"{binned['1']:.3f}", f"{binned[late]:.3f}"]
        rows.append(row)
    return header, rows


def headline(results: dict[str, Any]) -> dict[str, Score]:
    """The numbers ``compare --seeds`` aggregates over training seeds: bits per byte on each evaluated
    cut (lower is better; one fixed text, so no spread inside a run)."""
    return {
        f"{split} bits per byte": Score(cut["bpb"], None, higher_is_better=False)
        for split, cut in results["lm"]["splits"].items()
    }


def plot_comparison(results: dict[str, dict[str, Any]], run_root: Path) -> None:
    """``run_root/comparison_<split>.png``: the loss-by-position curves of all sequence layers, one axis
    per cut."""
    for split in next(iter(results.values()))["lm"]["splits"]:
        plot_position_curves(results, Path(run_root) / f"comparison_{split}.png", split)


def _load_any(path: Path, which: str) -> tuple[CausalLM, torch.device]:
    """A model from a run folder (``config.yaml``), a ``save_pretrained`` folder (``config.json``) or a
    Hugging Face folder of ``fastweights.hf`` (``config.json`` with ``"model_type": "fastweights"``; needs
    the ``[hf]`` extra)."""
    if (path / "config.json").exists() and not (path / "config.yaml").exists():
        if _is_hf_folder(path):
            from fastweights.hf.convert import load_causal_lm

            return load_causal_lm(path), torch.device("cpu")
        model = CausalLM.from_pretrained(path)
        return model, torch.device("cpu")
    if not (path / "config.yaml").exists():
        raise FileNotFoundError(
            f"run_dir: expected a run folder ({path}/config.yaml + checkpoints/, written by `lm train`) or "
            f"an `lm export` folder ({path}/config.json + model.safetensors)"
        )
    _, _, model, device = load_trained(path, LMRecipeConfig, build_model, which)
    return model, device


def _is_hf_folder(path: Path) -> bool:
    """Whether ``path/config.json`` is a Hugging Face config of ``fastweights.hf`` (read as JSON; a file
    that is not is left to ``CausalLM.from_pretrained``'s error)."""
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(raw, dict) and raw.get("model_type") == HF_MODEL_TYPE


def generate_text(
    path: Path,
    prompt: str,
    max_new_tokens: int,
    *,
    which: str = "best",
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
) -> str:
    """Continue ``prompt`` with the model of a run folder or a ``save_pretrained`` folder; returns the
    prompt plus ``max_new_tokens`` generated bytes, decoded as UTF-8 (invalid bytes replaced).

    Raises:
        FileNotFoundError: if ``path`` holds neither a run nor a saved model.
        ValueError: for an empty prompt, ``max_new_tokens`` outside ``0..MAX_NEW_TOKENS``, a ``seed`` outside
            ``[0, MAX_SEED]`` (:mod:`fastweights.checks`), bad sampling arguments, or a damaged model file
            (naming it).
    """
    if not prompt:
        raise ValueError("prompt: expected a non-empty text")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"--max-new-tokens: expected an int, got {max_new_tokens!r}")
    if not 0 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"--max-new-tokens: expected 0..{MAX_NEW_TOKENS:,} bytes, got {max_new_tokens:,}")
    check_seed("--seed", seed)
    model, device = _load_any(Path(path), which)
    ids = encode(prompt)[None].to(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with tqdm(total=max_new_tokens, desc="generating", unit="B", dynamic_ncols=True, leave=False) as bar:
        out = generate(
            model,
            ids,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            generator=gen,
            progress=bar.update,
        )
    return decode(out[0].cpu())


def export(
    run_dir: Path, out_dir: Path, *, which: str = "best", force: bool = False, format: str = "fastweights"
) -> Path:
    """Write the ``which`` checkpoint's model into ``out_dir`` with a ``README.md`` model card
    (:func:`~fastweights.train.model_files.model_card`): ``format="fastweights"`` writes ``config.json`` +
    ``model.safetensors`` (loadable with :meth:`CausalLM.from_pretrained`), ``format="hf"`` a Hugging Face
    folder (``config.json``, ``generation_config.json``, ``model.safetensors``: ``AutoModelForCausalLM``
    after ``import fastweights.hf``; needs the ``[hf]`` extra). ``out_dir`` must be new or empty
    (``force``: write into it anyway); it is locked while written.

    Raises:
        FileNotFoundError: if ``run_dir`` has no ``config.yaml`` or no such checkpoint.
        ValueError: for another ``format``.
        ImportError: for ``format="hf"`` without ``transformers``.
        RunFolderError: if ``out_dir`` holds a run or other files (without ``force``), another process
            holds it, or the checkpoint is damaged.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"--format: expected one of {EXPORT_FORMATS}, got {format!r}")
    if format == "hf":
        from fastweights.hf import FastweightsForCausalLM  # before any file is written
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    with output_folder(out_dir, source=run_dir, force=force, purpose="export"):
        cfg, state, model, _ = load_trained(run_dir, LMRecipeConfig, build_model, which)
        if format == "hf":
            FastweightsForCausalLM.from_causal_lm(model.cpu()).save_pretrained(out_dir)
            files = (
                "`model.safetensors` (weights), `config.json` and `generation_config.json` (the Hugging Face "
                "config: `AutoModelForCausalLM.from_pretrained(FOLDER)` after `import fastweights.hf`)"
            )
        else:
            model.cpu().save_pretrained(out_dir)
            files = (
                "`model.safetensors` (weights), `config.json` (the model config: "
                "`CausalLM.from_pretrained(FOLDER)`)"
            )
        card = model_card(
            recipe=NAME,
            cfg=cfg,
            state=state,
            which=which,
            selected_on=SELECTION.record(state, which, cfg),
            source_dir=run_dir,
            headline=headline,
            sections=[],
            files=files,
            own=False,
        )
        atomic_write_text(out_dir / CARD_FILE, card)
    return out_dir


def convert(src: Path, out_dir: Path, *, force: bool = False) -> tuple[Path, str]:
    """``lm convert``: an ``lm export`` (``CausalLM``) folder into a Hugging Face folder, or a Hugging Face
    folder into a ``CausalLM`` folder (:func:`fastweights.hf.convert.convert_folder`; needs the ``[hf]``
    extra); returns ``(out_dir, "fastweights" | "fastweights_lm")``, the model type written.

    Raises:
        ImportError: without ``transformers``.
        FileNotFoundError, ValueError, RunFolderError: a missing, damaged or foreign ``src``; an
            ``out_dir`` that is ``src`` or holds other files (without ``force``).
    """
    from fastweights.hf.convert import convert_folder

    return convert_folder(src, out_dir, force=force)


def summary(results: dict[str, Any]) -> str:
    """One line for the terminal: bits per byte on each evaluated cut."""
    cuts = results["lm"]["splits"]
    return ", ".join(f"{name} {c['bpb']:.4f} bits per byte" for name, c in cuts.items())


train = train_verb(_fit, load_data=_train_data, build=build_model)

evaluate = evaluate_verb(
    _measure,
    config_cls=LMRecipeConfig,
    build=build_model,
    write_report=write_report,
    selection=SELECTION,
    doc="""Evaluate the ``which`` checkpoint on each cut of ``eval.splits`` (validation and test): loss
    (nats/byte), bits per byte, perplexity (per byte) and bits per byte at every position of
    ``eval.seq_len``-byte windows (plots ``loss_by_position_<split>.png``).""",
)
