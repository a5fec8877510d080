"""``fastweights acl budget``: grouping of evaluated runs by setting and budget, the mean ± t-CI over
seeds, the outputs (and their claims), and bad input as one-line errors."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from scipy.stats import t as student_t

from fastweights.cli import main
from fastweights.recipes.acl.budget import SELECTION_KEY, budget_report, read_budget_run
from fastweights.train.run_folder import RunFolderError

TWO = ["FontGlyphs", "EmojiImages"]
THREE = [*TWO, "Handwriting"]


def _run(
    root: Path,
    name: str,
    *,
    sources: list[str],
    steps: int,
    seed: int,
    acc: float,
    layer: str = "srwm",
    init_from: str = "",
) -> Path:
    """A fake evaluated ACL run folder: results.json (two split metrics + selection), config.yaml and a
    metrics.jsonl ending at ``steps``."""
    d = root / name
    d.mkdir(parents=True)
    split = {
        "Split-Digits/domain": {"ACC": {"mean": acc}, "chance": 0.5},
        "Split-Digits/class-2task": {"ACC": {"mean": acc / 2}, "chance": 0.25},
    }
    run = {
        "trained_steps": steps,
        "sources": sources,
        "sequence_layer": layer,
        "selected_on": {"metric": "val_objective", "value": acc},
    }
    stage = "5-task meta-finetuning (domain-incremental)" if init_from else "2-task meta-training"
    run["stage"] = stage
    (d / "results.json").write_text(json.dumps({"run": run, "split": split}))
    init = f"  init_from: {init_from}\n" if init_from else ""
    (d / "config.yaml").write_text(f"name: quick\ntrain:\n  seed: {seed}\n{init}")
    (d / "metrics.jsonl").write_text("".join(json.dumps({"step": k}) + "\n" for k in (steps // 2, steps)))
    return d


def test_groups_by_setting_and_budget_with_t_ci(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "a0", sources=TWO, steps=3000, seed=0, acc=0.70),
        _run(tmp_path, "a1", sources=TWO, steps=3000, seed=1, acc=0.80),
        _run(tmp_path, "a2", sources=TWO, steps=3000, seed=2, acc=0.75),
        _run(tmp_path, "b0", sources=TWO, steps=9000, seed=0, acc=0.85),
        _run(tmp_path, "c0", sources=THREE, steps=3000, seed=0, acc=0.60),
    ]
    res = budget_report(runs, tmp_path / "out")
    table = res["table"]
    assert list(table) == [SELECTION_KEY, "Split-Digits/domain", "Split-Digits/class-2task"]
    two = "FontGlyphs + EmojiImages"  # one layer in all runs: no "[srwm]" suffix
    three = "FontGlyphs + EmojiImages + Handwriting"
    cell = table["Split-Digits/domain"][two][3000]
    values = [70.0, 80.0, 75.0]
    half = student_t.ppf(0.975, 2) * 5.0 / math.sqrt(3)  # sample std of 70, 80, 75 is 5
    assert cell["values"] == pytest.approx(values) and cell["seeds"] == [0, 1, 2]
    assert cell["mean"] == pytest.approx(75.0) and cell["ci95"] == pytest.approx(half)
    assert table["Split-Digits/domain"][two][9000]["ci95"] is None  # one seed: no interval
    assert table["Split-Digits/class-2task"][three][3000]["mean"] == pytest.approx(30.0)
    md = (tmp_path / "out" / "budget.md").read_text()
    assert "| FontGlyphs + EmojiImages | 75.0 ± " in md and "85.0 (1 seed)" in md and "9,000 steps" in md
    assert "| FontGlyphs + EmojiImages + Handwriting | 60.0 (1 seed) | — |" in md
    assert (tmp_path / "out" / "plots" / "budget_split_digits.png").stat().st_size > 1000
    doc = json.loads((tmp_path / "out" / "budget.json").read_text())
    assert doc["table"]["Split-Digits/domain"][two]["9000"]["mean"] == pytest.approx(85.0)


def test_layer_named_when_runs_differ_in_it(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "s", sources=TWO, steps=3000, seed=0, acc=0.7),
        _run(tmp_path, "d", sources=TWO, steps=3000, seed=0, acc=0.6, layer="deltanet"),
    ]
    table = budget_report(runs, tmp_path / "out")["table"]
    assert set(table["Split-Digits/domain"]) == {
        "FontGlyphs + EmojiImages · srwm",
        "FontGlyphs + EmojiImages · deltanet",
    }


def test_a_finetuned_run_counts_the_steps_of_the_run_it_started_from(tmp_path: Path) -> None:
    first = _run(tmp_path, "two", sources=TWO, steps=3000, seed=0, acc=0.7)
    ckpt = first / "checkpoints" / "best.pt"
    five = _run(tmp_path, "five", sources=TWO, steps=1500, seed=0, acc=0.8, init_from=str(ckpt))
    assert read_budget_run(five)["steps"] == 4500
    table = budget_report([first, five], tmp_path / "out")["table"]
    assert set(table["Split-Digits/domain"]) == {  # the stages differ: named
        "FontGlyphs + EmojiImages · 2-task meta-training",
        "FontGlyphs + EmojiImages · 5-task meta-finetuning (domain-incremental)",
    }
    (first / "metrics.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"train\.init_from=.*best\.pt: no .*metrics\.jsonl"):
        read_budget_run(five)


def test_rerun_replaces_its_own_outputs_but_not_the_users(tmp_path: Path) -> None:
    runs = [_run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)]
    out = tmp_path / "out"
    budget_report(runs, out)
    budget_report(runs, out)  # its own files: replaced
    (out / "budget.md").write_text("my notes\n")
    with pytest.raises(RunFolderError, match="budget.md: not written by `acl budget`"):
        budget_report(runs, out)
    assert (out / "budget.md").read_text() == "my notes\n"
    budget_report(runs, out, force=True)
    assert (out / "budget.md").read_text().startswith("# ACL budget curves")


def test_read_budget_run_seed_is_none_without_config(tmp_path: Path) -> None:
    d = _run(tmp_path, "a", sources=TWO, steps=100, seed=3, acc=0.5)
    assert read_budget_run(d)["seed"] == 3
    (d / "config.yaml").unlink()
    assert read_budget_run(d)["seed"] is None


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        ("missing", r"results\.json: not found; expected the results of an evaluated ACL run"),
        ("damaged", r"results\.json"),
        ("not_acl", r"results\.json: expected an ACL run's results"),
        ("twice", r"same setting, budget and seed"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, match: str
) -> None:
    a = _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)
    b = _run(tmp_path, "b", sources=TWO, steps=3000, seed=1, acc=0.7)
    if setup == "missing":
        (b / "results.json").unlink()
    elif setup == "damaged":
        (b / "results.json").write_text('{"run": {"trained_')
    elif setup == "not_acl":
        (b / "results.json").write_text(json.dumps({"loss": 1.0}))
    else:
        (b / "config.yaml").write_text("train:\n  seed: 0\n")
    assert main(["acl", "budget", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastweights: error:"), err
    assert re.search(match, err[0]), err[0]
    assert not (tmp_path / "out").exists()  # nothing written
