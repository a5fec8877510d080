"""Hugging Face folders: ``save_pretrained`` / ``AutoModelForCausalLM.from_pretrained``, safetensors only, and
conversion to and from ``CausalLM.save_pretrained`` folders (``fastweights.hf.convert``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from fastweights.hf import FastweightsForCausalLM  # noqa: E402
from fastweights.hf.convert import (  # noqa: E402
    causal_lm_to_hf,
    convert_folder,
    folder_model_type,
    hf_to_causal_lm,
    load_causal_lm,
)
from fastweights.models.lm import CausalLM, LMConfig  # noqa: E402
from fastweights.train.run_folder import RunFolderError  # noqa: E402
from tests.hf.test_modeling import IDS, LAYERS, _ids, _pair  # noqa: E402

PICKLE_MAGIC = b"\x80"  # every pickle protocol >= 2 starts with PROTO (torch.save's zip holds one too)


def _assert_no_pickle(folder: Path) -> None:
    """Only JSON files and ``model.safetensors``, none of them a pickle or a zip."""
    names = sorted(p.name for p in folder.iterdir())
    assert "config.json" in names and "model.safetensors" in names, names
    for p in folder.iterdir():
        assert p.suffix in (".json", ".safetensors"), p.name
        head = p.read_bytes()[:4]
        assert not head.startswith(PICKLE_MAGIC) and not head.startswith(b"PK"), p.name
        if p.suffix == ".json":
            json.loads(p.read_text())
    load_file(folder / "model.safetensors")  # a safetensors file


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_save_pretrained_then_auto_model_gives_the_same_logits(tmp_path, layer, backbone):
    _, hf = _pair(layer, backbone)
    hf.save_pretrained(tmp_path)
    _assert_no_pickle(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert type(loaded) is FastweightsForCausalLM and not loaded.training
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, hf(ids).logits, rtol=0, atol=0)
    assert torch.equal(
        loaded.generate(ids, max_new_tokens=3, do_sample=False),
        hf.generate(ids, max_new_tokens=3, do_sample=False),
    )


@pytest.mark.parametrize("tied", [True, False])
def test_a_hf_folder_holds_causal_lms_tensors(tmp_path, tied):
    lm = CausalLM(LMConfig.preset("micro", sequence_layer="srwm", tie_word_embeddings=tied))
    lm.save_pretrained(tmp_path / "lm")
    FastweightsForCausalLM.from_causal_lm(lm).save_pretrained(tmp_path / "hf")
    ours, theirs = load_file(tmp_path / "lm/model.safetensors"), load_file(tmp_path / "hf/model.safetensors")
    assert sorted(ours) == sorted(theirs) and ("lm_head.weight" in theirs) == (not tied)
    for key, value in ours.items():
        assert torch.equal(value, theirs[key]), key


@pytest.mark.parametrize(("layer", "backbone"), LAYERS, ids=IDS)
def test_causal_lm_folder_to_hf_and_back(tmp_path, layer, backbone):
    lm, _ = _pair(layer, backbone)
    lm.save_pretrained(tmp_path / "lm")
    assert causal_lm_to_hf(tmp_path / "lm", tmp_path / "hf") == tmp_path / "hf"
    assert folder_model_type(tmp_path / "hf") == "fastweights"
    _assert_no_pickle(tmp_path / "hf")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    hf_to_causal_lm(tmp_path / "hf", tmp_path / "back")
    back = CausalLM.from_pretrained(tmp_path / "back")
    assert back.config == lm.config
    ids = _ids()
    with torch.no_grad():
        ref, _ = lm(ids)
        torch.testing.assert_close(hf(ids).logits, ref, rtol=0, atol=1e-6)
        torch.testing.assert_close(back(ids)[0], ref, rtol=0, atol=1e-6)
        torch.testing.assert_close(load_causal_lm(tmp_path / "hf")(ids)[0], ref, rtol=0, atol=1e-6)


def test_convert_folder_picks_the_direction_and_keeps_the_dtype(tmp_path):
    lm = CausalLM(LMConfig.preset("micro", sequence_layer="deltanet")).double()
    lm.save_pretrained(tmp_path / "lm")
    assert convert_folder(tmp_path / "lm", tmp_path / "hf") == (tmp_path / "hf", "fastweights")
    assert json.loads((tmp_path / "hf/config.json").read_text())["dtype"] == "float64"
    assert convert_folder(tmp_path / "hf", tmp_path / "back") == (tmp_path / "back", "fastweights_lm")
    assert CausalLM.from_pretrained(tmp_path / "back").lm_head.weight.dtype == torch.float64


def test_convert_guards_its_output_and_its_input(tmp_path):
    lm = CausalLM(LMConfig.preset("micro", sequence_layer="lstm"))
    lm.save_pretrained(tmp_path / "lm")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy/notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="is not empty .*--force"):
        causal_lm_to_hf(tmp_path / "lm", tmp_path / "busy")
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]  # untouched
    causal_lm_to_hf(tmp_path / "lm", tmp_path / "busy", force=True)
    assert (tmp_path / "busy/model.safetensors").is_file()
    with pytest.raises(RunFolderError, match="itself"):
        causal_lm_to_hf(tmp_path / "lm", tmp_path / "lm")
    with pytest.raises(ValueError, match="is a CausalLM folder already"):
        hf_to_causal_lm(tmp_path / "lm", tmp_path / "x")
    with pytest.raises(ValueError, match="is a Hugging Face folder already"):
        causal_lm_to_hf(tmp_path / "busy", tmp_path / "y")
    with pytest.raises(FileNotFoundError, match="config.json"):
        convert_folder(tmp_path / "missing", tmp_path / "z")
    (tmp_path / "other").mkdir()
    (tmp_path / "other/config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="model_type: expected 'fastweights_lm' .* got 'llama'"):
        convert_folder(tmp_path / "other", tmp_path / "z")


def test_from_pretrained_reads_safetensors_only(tmp_path):
    _, hf = _pair("deltanet")
    hf.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="use_safetensors: .*never a pickle"):
        FastweightsForCausalLM.from_pretrained(tmp_path, use_safetensors=False)
    sd = {k: v.clone() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    torch.save(sd, tmp_path / "pytorch_model.bin")  # a pickle beside the config, and no safetensors
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(OSError, match="model.safetensors"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_weights_that_do_not_match_the_config_are_refused(tmp_path):
    _, hf = _pair("srwm")
    hf.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights.pop("model.norm.weight")
    weights["model.extra"] = torch.zeros(3)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="does not match config.json: .*model.norm.weight"):
        AutoModelForCausalLM.from_pretrained(tmp_path)
