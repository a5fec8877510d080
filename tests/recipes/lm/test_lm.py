"""End-to-end tests of the language-modelling recipe on its smoke preset (a generated text corpus)."""

from __future__ import annotations

import json

import pytest
import torch

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.io import read_jsonl
from fastweights.models.lm import CausalLM
from fastweights.recipes import lm
from fastweights.recipes.lm.config import LMRecipeConfig

WORDS = "and the of that in he shall unto for i his a lord they be is him not them it with all thou".split()


@pytest.fixture
def corpus(tmp_path):
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(WORDS), (6000,), generator=g).tolist()
    path = tmp_path / "corpus.txt"
    path.write_text(" ".join(WORDS[i] for i in idx))
    return path


def _cfg(corpus, *overrides):
    return load_config(LMRecipeConfig, preset_path("lm", "smoke"), [f"data.path={corpus}", *overrides])


def test_cli_train_eval_generate_export(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(["lm", "train", "--preset", "smoke", "--run-dir", str(run), f"data.path={corpus}", "--eval"])
        == 0
    )
    for name in (
        "config.yaml",
        "command.txt",
        "metrics.jsonl",
        "checkpoints/best.pt",
        "report.md",
        "report.html",
    ):
        assert (run / name).exists(), name
    assert any((run / "tensorboard").iterdir())
    for split in ("valid", "test"):
        assert (run / "plots" / f"loss_by_position_{split}.png").stat().st_size > 0
    assert "the lowest `val_bpb` in the log" in (run / "report.md").read_text()  # the selection curve
    res = json.loads((run / "results.json").read_text())
    assert res["lm"]["seq_len"] == 32 and sorted(res["lm"]["splits"]) == ["test", "valid"]
    for cut in res["lm"]["splits"].values():
        assert cut["windows"] == 4 and len(cut["bpb_by_position"]) == 32
        assert cut["bpb"] == pytest.approx(sum(cut["bpb_by_position"]) / 32)
        assert cut["perplexity"] == pytest.approx(2 ** cut["bpb"])
    # the best checkpoint is the one with the lowest validation bits per byte
    records = read_jsonl(run / "metrics.jsonl")
    best = torch.load(run / "checkpoints/best.pt", weights_only=False)["step"]
    assert best == min(records, key=lambda r: r["val_bpb"])["step"]
    assert res["run"]["trained_tokens"] == 6 * 4 * 32
    # `train --eval` records the equivalent eval command, not the train command
    assert res["run"]["eval_command"] == f"fastweights lm eval {run} --checkpoint best"
    assert [r["step"] for r in records] == [3, 6] and all("val_bpb" in r for r in records)
    capsys.readouterr()
    assert main(["lm", "generate", str(run), "--prompt", "and the", "--max-new-tokens", "12"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("and the")
    assert main(["lm", "export", str(run), str(tmp_path / "exp")]) == 0
    model = CausalLM.from_pretrained(tmp_path / "exp")
    assert model.config.sequence_layer == "ttt_linear"
    greedy = lm.generate_text(tmp_path / "exp", "and the", 12, temperature=0)
    assert greedy == lm.generate_text(run, "and the", 12, temperature=0)
    assert len(greedy.encode()) <= len("and the") + 12


def test_resume_after_interruption_continues_exactly(corpus, tmp_path, monkeypatch):
    lm.train(_cfg(corpus), tmp_path / "one")
    calls = {"n": 0}
    real = lm.sample_windows

    def interrupt_at_step_4(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(lm, "sample_windows", interrupt_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        lm.train(_cfg(corpus), tmp_path / "two")
    monkeypatch.setattr(lm, "sample_windows", real)
    assert torch.load(tmp_path / "two/checkpoints/latest.pt", weights_only=False)["step"] == 4
    lm.train(_cfg(corpus), tmp_path / "two", resume=True)
    a = torch.load(tmp_path / "one/checkpoints/latest.pt", weights_only=False)
    b = torch.load(tmp_path / "two/checkpoints/latest.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    for k, v in a["model"].items():
        torch.testing.assert_close(v, b["model"][k], rtol=0, atol=0, msg=k)


def test_resume_keeps_every_tensorboard_scalar(corpus, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lm.train(_cfg(corpus, "train.max_steps=3"), tmp_path / "run")
    cfg_path = tmp_path / "run" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("max_steps: 3", "max_steps: 6"))
    lm.train(_cfg(corpus), tmp_path / "run", resume=True)
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert [e.step for e in events.Scalars("val/val_bpb")] == [3, 6]


def test_gradient_accumulation_counts_tokens(corpus, tmp_path):
    lm.train(_cfg(corpus, "train.accumulation_steps=2", "train.max_steps=2"), tmp_path / "run")
    res = lm.evaluate(tmp_path / "run")
    assert res["run"]["trained_tokens"] == 2 * 2 * 4 * 32
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    best = min(r["val_bpb"] for r in logged if "val_bpb" in r)  # the lowest bits per byte is selected
    assert res["run"]["selected_on"] == {
        "metric": "val_bpb",
        "mode": "min",
        "value": best,
        "data": lm.SELECTION.data,
    }
    latest = lm.evaluate(tmp_path / "run", which="latest", out_dir=tmp_path / "latest")
    assert latest["run"]["selected_on"] == {
        "metric": "val_bpb",
        "mode": "latest",
        "value": None,
        "data": lm.SELECTION.data,
    }


def test_compare_sequence_layers_at_equal_token_budget(corpus, tmp_path, capsys):
    root = tmp_path / "cmp"
    args = ["lm", "compare", "--models", "ttt_mlp,softmax_attention", "--preset", "smoke"]
    assert main([*args, "--run-root", str(root), f"data.path={corpus}", "train.max_steps=3"]) == 0
    table = (root / "comparison.md").read_text()
    assert "ttt_mlp" in table and "softmax_attention" in table and "bits per byte" in table
    data = json.loads((root / "comparison.json").read_text())
    tokens = {r["run"]["trained_tokens"] for r in data["results"].values()}
    assert tokens == {3 * 4 * 32}
    assert (root / "comparison_valid.png").stat().st_size > 0 and (root / "comparison_test.png").exists()
    assert "valid bits per byte" in table
    assert data["results"]["ttt_mlp"]["run"]["sequence_layer"] == "ttt_mlp"


def test_bad_settings_name_the_key(corpus, tmp_path, capsys):
    with pytest.raises(ValueError, match="model.vocab_size"):
        lm.train(_cfg(corpus, "model.vocab_size=300"), tmp_path / "a")
    with pytest.raises(ValueError, match="train.seq_len"):
        lm.train(_cfg(corpus, "train.seq_len=100000"), tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="data.path"):
        lm.train(_cfg(tmp_path / "missing.txt"), tmp_path / "c")
    with pytest.raises(ValueError, match="backbone"):
        lm.train(_cfg(corpus, "model.sequence_layer=deltanet", "model.backbone=mamba"), tmp_path / "d")
    with pytest.raises(ValueError, match="eval.splits"):
        lm.train(_cfg(corpus, "train.max_steps=1"), tmp_path / "e")
        lm.evaluate(tmp_path / "e", overrides=["eval.splits=[train,dev]"])
    with pytest.raises(ValueError, match="model.d_model / num_heads"):
        lm.train(_cfg(corpus, "model.d_model=30"), tmp_path / "f")
    with pytest.raises(ValueError, match="train.checkpoint_every_steps"):
        lm.train(_cfg(corpus, "train.checkpoint_every_steps=0"), tmp_path / "g")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: 'cuda' requested but CUDA is not available"):
            lm.train(_cfg(corpus, "device=cuda"), tmp_path / "h")
    assert main(["lm", "generate", str(tmp_path / "nothing"), "--prompt", "x"]) == 2
    assert "config.yaml" in capsys.readouterr().err
    for n in ("-1", "100001"):
        assert main(["lm", "generate", str(tmp_path / "e"), "--prompt", "x", "--max-new-tokens", n]) == 2
        err = capsys.readouterr().err.strip()
        assert (
            err.startswith("fastweights: error: --max-new-tokens: expected 0..100,000 bytes")
            and "\n" not in err
        )


def test_config_errors_leave_no_run_folder(corpus, tmp_path):
    for i, override in enumerate(
        ["model.sequence_layer=nope", "train.lr=0", "train.checkpoint_every_steps=0"]
    ):
        with pytest.raises(ValueError):
            lm.train(_cfg(corpus, override), tmp_path / f"r{i}")
        assert not (tmp_path / f"r{i}").exists()
