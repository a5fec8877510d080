"""lm's command line with Hugging Face folders: `lm export --format hf`, `lm convert`, `lm generate`."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM  # noqa: E402

import fastweights.hf  # noqa: E402, F401  (registers the model type)
from fastweights.cli import main  # noqa: E402
from fastweights.models.lm import CausalLM, generate  # noqa: E402
from fastweights.recipes import lm  # noqa: E402
from tests.recipes.lm.test_lm import WORDS  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A two-step ``lm train --preset smoke`` run (TTT-Linear on the Mamba backbone) on a small corpus."""
    root = tmp_path_factory.mktemp("hf-cli")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(WORDS), (3000,), generator=g).tolist()
    corpus = root / "corpus.txt"
    corpus.write_text(" ".join(WORDS[i] for i in idx))
    args = ["lm", "train", "--preset", "smoke", "--run-dir", str(root / "run"), f"data.path={corpus}"]
    args += ["train.max_steps=2", "train.val_every_steps=2", "train.checkpoint_every_steps=2"]
    args += ["train.tensorboard=false"]
    assert main(args) == 0
    return root / "run"


def test_export_format_hf_loads_through_auto_model_and_generates(run, tmp_path, capsys):
    assert main(["lm", "export", str(run), str(tmp_path / "hf"), "--format", "hf"]) == 0
    assert "exported" in capsys.readouterr().out
    names = sorted(p.name for p in (tmp_path / "hf").iterdir())
    assert names == ["README.md", "config.json", "generation_config.json", "model.safetensors"]
    assert "AutoModelForCausalLM.from_pretrained(FOLDER)" in (tmp_path / "hf/README.md").read_text()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert (
        model.config.sequence_layer == "ttt_linear"
        and model.config.to_lm_config().resolved_backbone == "mamba"
    )
    prompt = torch.tensor([list(b"and the")])
    out = model.generate(prompt, max_new_tokens=8, do_sample=False)
    assert out.shape == (1, 15) and torch.equal(out[:, :7], prompt)
    # the same tokens as the library's greedy decoding of the same checkpoint
    assert main(["lm", "export", str(run), str(tmp_path / "lm")]) == 0
    assert torch.equal(out, generate(CausalLM.from_pretrained(tmp_path / "lm"), prompt, 8, temperature=0))
    # batched with left padding: each prompt gets the tokens it gets alone
    batch = torch.tensor([list(b"xand the"), [0, 0, 0] + list(b"the f")])
    mask = torch.tensor([[1] * 8, [0, 0, 0] + [1] * 5])
    both = model.generate(batch, attention_mask=mask, max_new_tokens=8, do_sample=False)
    assert torch.equal(both[0], model.generate(batch[:1], max_new_tokens=8, do_sample=False)[0])
    assert torch.equal(both[1, 3:], model.generate(batch[1:, 3:], max_new_tokens=8, do_sample=False)[0])
    greedy = lm.generate_text(run, "and the", 8, temperature=0)
    assert (
        lm.generate_text(tmp_path / "hf", "and the", 8, temperature=0) == greedy
    )  # lm generate reads it too


def test_convert_both_ways_and_refuse_a_busy_folder(run, tmp_path, capsys):
    assert main(["lm", "export", str(run), str(tmp_path / "lm")]) == 0
    assert main(["lm", "convert", str(tmp_path / "lm"), str(tmp_path / "hf")]) == 0
    assert "(model_type fastweights)" in capsys.readouterr().out
    assert json.loads((tmp_path / "hf/config.json").read_text())["model_type"] == "fastweights"
    assert main(["lm", "convert", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    back = CausalLM.from_pretrained(tmp_path / "back")
    ids = torch.tensor([list(b"in the beginning")])
    with torch.no_grad():
        torch.testing.assert_close(
            back(ids)[0], CausalLM.from_pretrained(tmp_path / "lm")(ids)[0], rtol=0, atol=0
        )
    capsys.readouterr()
    assert main(["lm", "convert", str(tmp_path / "lm"), str(tmp_path / "back")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastweights: error: out_dir:") and "--force" in err[0]
    assert main(["lm", "convert", str(tmp_path / "lm"), str(tmp_path / "back"), "--force"]) == 0


def test_export_refuses_an_unknown_format(run, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["lm", "export", str(run), str(tmp_path / "x"), "--format", "gguf"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--format: expected one of"):
        lm.export(run, tmp_path / "x", format="gguf")
    assert not (tmp_path / "x").exists()
