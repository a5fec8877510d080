"""Folders of the library's ``CausalLM`` and Hugging Face folders, one into the other.

A ``CausalLM.save_pretrained`` folder (what ``fastweights lm export`` writes: ``config.json`` with
``"model_type": "fastweights_lm"``, ``model.safetensors``) and a Hugging Face folder of
:class:`~fastweights.hf.FastweightsForCausalLM` (``config.json`` with ``"model_type": "fastweights"``,
``model.safetensors``, ``generation_config.json``) hold the same tensors under the same names; converting
rewrites the config and checks the weights by loading them. Both read safetensors only. The output folder
must be new or empty unless ``force`` (the rule of every ``export``), and is locked while written.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastweights.hf.configuration import MODEL_TYPE
from fastweights.hf.modeling import FastweightsForCausalLM
from fastweights.models.lm import CONFIG_FILE, CausalLM
from fastweights.models.lm import MODEL_TYPE as LM_MODEL_TYPE
from fastweights.train.run_folder import output_folder

__all__ = ["causal_lm_to_hf", "hf_to_causal_lm", "convert_folder", "folder_model_type", "load_causal_lm"]


def folder_model_type(folder: str | Path) -> str:
    """``model_type`` of ``folder/config.json``: ``"fastweights_lm"`` (a ``CausalLM`` folder) or
    ``"fastweights"`` (a Hugging Face folder).

    Raises:
        FileNotFoundError: if ``folder`` has no ``config.json``.
        ValueError: for a ``config.json`` that is not JSON or names another model type.
    """
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"folder: expected {path} (a CausalLM folder, e.g. from `fastweights lm export`, or a Hugging "
            "Face folder of FastweightsForCausalLM)"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: damaged, expected a JSON config ({type(err).__name__}: {err})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type not in (LM_MODEL_TYPE, MODEL_TYPE):
        raise ValueError(
            f"{path}: model_type: expected {LM_MODEL_TYPE!r} (a CausalLM folder) or {MODEL_TYPE!r} (a "
            f"Hugging Face folder), got {model_type!r}"
        )
    return model_type


def load_causal_lm(folder: str | Path) -> CausalLM:
    """The :class:`CausalLM` of a ``CausalLM`` folder or of a Hugging Face folder (on the CPU, in its saved
    dtype).

    Raises:
        FileNotFoundError: if ``folder`` lacks ``config.json`` or ``model.safetensors``.
        ValueError: for another model type, a bad config field or weights that do not match the config.
    """
    if folder_model_type(folder) == LM_MODEL_TYPE:
        return CausalLM.from_pretrained(folder)
    return _load_hf(folder).to_causal_lm()


def _load_hf(folder: str | Path) -> FastweightsForCausalLM:
    if not (Path(folder) / "model.safetensors").is_file():
        raise FileNotFoundError(f"folder: expected {Path(folder) / 'model.safetensors'} (the weights)")
    return FastweightsForCausalLM.from_pretrained(folder)


def causal_lm_to_hf(src: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write the ``CausalLM`` folder ``src`` as a Hugging Face folder ``out``; returns ``out``.

    Raises:
        FileNotFoundError: if ``src`` lacks ``config.json`` or ``model.safetensors``.
        ValueError: if ``src`` is not a ``CausalLM`` folder, or is damaged (naming the file).
        RunFolderError: if ``out`` is ``src`` or holds other files (without ``force``), or another process
            holds it.
    """
    src, out = Path(src), Path(out)
    if folder_model_type(src) != LM_MODEL_TYPE:
        raise ValueError(f"src: {src} is a Hugging Face folder already; expected a CausalLM folder")
    with output_folder(out, source=src, force=force, purpose="export"):
        FastweightsForCausalLM.from_causal_lm(CausalLM.from_pretrained(src)).save_pretrained(out)
    return out


def hf_to_causal_lm(src: str | Path, out: str | Path, *, force: bool = False) -> Path:
    """Write the Hugging Face folder ``src`` as a ``CausalLM`` folder ``out`` (``CausalLM.from_pretrained``,
    ``fastweights lm generate``); returns ``out``.

    Raises:
        FileNotFoundError: if ``src`` lacks ``config.json`` or ``model.safetensors``.
        ValueError: if ``src`` is not a Hugging Face fastweights folder, or is damaged.
        RunFolderError: if ``out`` is ``src`` or holds other files (without ``force``), or another process
            holds it.
    """
    src, out = Path(src), Path(out)
    if folder_model_type(src) != MODEL_TYPE:
        raise ValueError(f"src: {src} is a CausalLM folder already; expected a Hugging Face folder")
    with output_folder(out, source=src, force=force, purpose="export"):
        _load_hf(src).to_causal_lm().save_pretrained(out)
    return out


def convert_folder(src: str | Path, out: str | Path, *, force: bool = False) -> tuple[Path, str]:
    """Convert ``src`` into the other format (``CausalLM`` → Hugging Face, Hugging Face → ``CausalLM``);
    returns ``(out, model_type written)``.

    Raises:
        FileNotFoundError, ValueError, RunFolderError: as :func:`causal_lm_to_hf` / :func:`hf_to_causal_lm`.
    """
    if folder_model_type(src) == LM_MODEL_TYPE:
        return causal_lm_to_hf(src, out, force=force), MODEL_TYPE
    return hf_to_causal_lm(src, out, force=force), LM_MODEL_TYPE
