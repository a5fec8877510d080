"""Export folders: a trained model in the field's shareable format, read without running code.

Layout (written by every recipe's ``export``, read by its ``eval``, ``train.init_from`` and the ACL
learner; format version :data:`FORMAT_VERSION`)::

    OUT/model.safetensors   the model's state dict (safetensors: tensors only)
    OUT/config.json         {"format": "fastweights-export", "format_version", "recipe", "config": the
                            run's full config, "checkpoint": {"which", "step", "elapsed_seconds",
                            "best"}, "records", "selected_on", "source_run"}
    OUT/README.md           the model card (:func:`model_card`)
    OUT/metrics.jsonl, OUT/command.txt   the run's training log and commands, when it had them

The causal LM's ``lm export`` keeps its own ``config.json`` (the model config of
:meth:`~fastweights.models.lm.CausalLM.save_pretrained`) and writes the same model card.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastweights.io import atomic_write_bytes, atomic_write_json, atomic_write_text, read_json

__all__ = [
    "CARD_FILE",
    "CONFIG_FILE",
    "FORMAT",
    "FORMAT_VERSION",
    "WEIGHTS_FILE",
    "CardSections",
    "is_export",
    "model_card",
    "read_export",
    "read_export_info",
    "write_export",
]

FORMAT, FORMAT_VERSION = "fastweights-export", 1
CONFIG_FILE, WEIGHTS_FILE, CARD_FILE = "config.json", "model.safetensors", "README.md"
COPIED = ("metrics.jsonl", "command.txt")  # the run's own files an export keeps

#: a recipe's part of the model card: ``cfg -> [(section title, Markdown), ...]``
CardSections = Callable[[Any], list[tuple[str, str]]]


def is_export(folder: Path) -> bool:
    """Whether ``folder`` holds an export of this format (its ``config.json`` says so)."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file() or not (Path(folder) / WEIGHTS_FILE).is_file():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return True  # it claims the layout: read_export reports the damage


def write_export(
    out_dir: Path,
    *,
    recipe: str,
    config: dict[str, Any],
    state: dict[str, Any],
    which: str,
    selected_on: dict[str, Any],
    source_dir: Path,
    card: str,
) -> Path:
    """Write ``state["model"]`` and its description into ``out_dir`` (which the caller has locked and
    checked); returns the path of ``model.safetensors``.

    Raises:
        OSError: when a file cannot be written (each file is written atomically).
    """
    from safetensors.torch import save

    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in state["model"].items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (source_dir / name).exists():
            atomic_write_text(out_dir / name, (source_dir / name).read_text(encoding="utf-8"))
    info = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "recipe": recipe,
        "config": config,
        "checkpoint": {
            "which": which,
            "step": state["step"],
            "elapsed_seconds": state["elapsed_seconds"],
            "best": _finite(state.get("best")),
        },
        "records": state.get("records") or {},
        "selected_on": selected_on,
        "source_run": str(source_dir),
    }
    atomic_write_json(out_dir / CONFIG_FILE, info)
    atomic_write_bytes(out_dir / WEIGHTS_FILE, save(tensors, metadata={"format": "pt"}))
    atomic_write_text(out_dir / CARD_FILE, card)
    return out_dir / WEIGHTS_FILE


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def read_export_info(folder: Path) -> dict[str, Any]:
    """The ``config.json`` of an export (without reading the weights).

    Raises:
        FileNotFoundError: when it is missing.
        ValueError: naming the file, when it is damaged, of another format or another format version.
    """
    path = Path(folder) / CONFIG_FILE
    info = read_json(path, f"the {FORMAT} description written by `export`")
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ValueError(f"{path}: expected a {FORMAT} description, got another JSON file")
    if info.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {info.get('format_version')!r}; this version of fastweights reads "
            f"{FORMAT_VERSION}"
        )
    if not isinstance(info.get("config"), dict):
        raise ValueError(f"{path}: config: expected the run's config as a mapping")
    return info


def read_export(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config.json's content, checkpoint-like state)`` of an export: the state has ``model`` (an
    ordered dict of CPU tensors), ``step``, ``elapsed_seconds``, ``best`` and ``records``.

    Raises:
        FileNotFoundError: naming the missing file.
        ValueError: naming the file, for a damaged ``config.json`` / ``model.safetensors`` or another
            format version.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    folder = Path(folder)
    info = read_export_info(folder)
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        raise FileNotFoundError(
            f"{weights}: not found; an export folder holds {WEIGHTS_FILE} + {CONFIG_FILE}"
        )
    try:
        tensors = load(weights.read_bytes())
    except (SafetensorError, ValueError, OSError) as err:
        raise ValueError(
            f"{weights}: damaged, expected the safetensors file written by `export` ({err})"
        ) from None
    ckpt = info.get("checkpoint") or {}
    best = ckpt.get("best")
    state = {
        "model": OrderedDict(sorted(tensors.items())),  # load_state_dict matches by name
        "step": ckpt.get("step", 0),
        "elapsed_seconds": ckpt.get("elapsed_seconds", 0.0),
        "best": -math.inf if best is None else best,
        "records": info.get("records") or {},
        "exported_from": ckpt.get("which", "best"),
    }
    return info, state


def _scores_table(scores: dict[str, Any]) -> str:
    """A recipe's headline :class:`~fastweights.recipes.compare.Score` values as a Markdown table."""
    lines = ["| metric | value (± 95% CI within the run) |", "|---|---|"]
    for name, s in scores.items():
        spread = "" if s.spread is None else f" ± {s.spread:.2f}"
        lines.append(f"| {name} | {s.value:.2f}{spread} |")
    return "\n".join(lines)


def model_card(
    *,
    recipe: str,
    cfg: Any,
    state: dict[str, Any],
    which: str,
    selected_on: dict[str, Any],
    source_dir: Path,
    headline: Callable[[dict[str, Any]], dict[str, Any]] | None,
    sections: list[tuple[str, str]],
    files: str = f"`{WEIGHTS_FILE}` (weights), `{CONFIG_FILE}` (the full config and this card's facts)",
    own: bool = True,
) -> str:
    """The ``README.md`` of an export: source run, recipe and preset, steps (with the steps behind
    ``train.init_from``), seed, the selection metric and its value (``own``: the folder is of this
    module's format; the LM's export keeps its own ``config.json``), the recipe's ``sections`` (training
    data, intended use and limits), the evaluation table of the source run's ``results.json`` (when it
    evaluated this checkpoint) and how to use the folder.

    Raises:
        ValueError: naming ``source_dir/results.json`` when it is damaged.
    """
    results_path = Path(source_dir) / "results.json"
    results = read_json(results_path, "results.json") if results_path.is_file() else None
    t = cfg.train
    records = state.get("records") or {}
    init_steps = records.get("init_steps")
    steps = state["step"]
    total = f"{steps + init_steps:,}" if type(init_steps) is int else "unknown"
    value = selected_on.get("value")
    chosen = (
        f"`{selected_on.get('metric')}` = {value:.4f} ({selected_on.get('mode')}), "
        f"on {selected_on.get('data')}"
        if isinstance(value, int | float)
        else f"not selected (the `{which}` checkpoint)"
    )
    layer = getattr(getattr(cfg, "model", None), "sequence_layer", None) or getattr(cfg.model, "core", "")
    rows = [
        ("recipe", f"`{recipe}`"),
        ("preset", f"`{cfg.name}`"),
        ("sequence layer", f"`{layer}`" if layer else "—"),
        ("source run", f"`{source_dir}` (checkpoint `{which}`)"),
        ("training steps of this run", f"{steps:,}"),
        ("training seed", str(t.seed)),
        ("training time", f"{state['elapsed_seconds'] / 60:.1f} min"),
        ("checkpoint chosen on", chosen),
    ]
    if hasattr(t, "init_from"):  # recipes that can start from another run's weights
        behind = "0 (trained from scratch)" if init_steps == 0 else "not recorded"
        if type(init_steps) is int and init_steps > 0:
            behind = f"{init_steps:,} (the run `{t.init_from}` and what it started from)"
        rows[5:5] = [("steps behind `train.init_from`", behind), ("training steps in all", total)]
    out = [
        f"# fastweights `{recipe}` model: preset `{cfg.name}`",
        "",
        f"Exported by `fastweights {recipe} export`"
        + (f" (format `{FORMAT}` {FORMAT_VERSION})." if own else "."),
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in rows),
    ]
    sections = sections or [
        (
            "Intended use and limits",
            f"Research use: the `{recipe}` recipe's model, trained and measured only in the setting of its "
            "preset (the config in `config.json`); nothing is claimed outside it.",
        )
    ]
    for title, text in sections:
        out += ["", f"## {title}", "", text.strip()]
    out += ["", "## Evaluation", ""]
    evaluated = results is not None and results.get("run", {}).get("steps") == steps
    if evaluated and headline is not None:
        assert results is not None
        cmd = results.get("run", {}).get("eval_command") or f"fastweights {recipe} eval"
        out += [f"Measured by `{cmd}` on the source run (test data; not used to choose anything):", ""]
        out.append(_scores_table(headline(results)))
    else:
        out.append(f"Not evaluated at export time: `fastweights {recipe} eval FOLDER --out DIR` measures it.")
    out += [
        "",
        "## Files and use",
        "",
        f"{files}; `metrics.jsonl` / `command.txt`: the run's training log and commands. Nothing here "
        "needs code to load (safetensors + JSON).",
        "",
        "```bash",
        f"fastweights {recipe} eval FOLDER --out OUT_DIR   # its evaluation, results.json + report.md",
        "```",
        "",
    ]
    return "\n".join(out)
