"""``fastweights acl budget``: grouping of evaluated runs by setting and budget, the mean ± t-CI over
seeds, the outputs (and their claims), and bad input as one-line errors."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from fastweights.cli import main
from fastweights.recipes.acl.budget import SELECTION_KEY, budget_report, read_budget_run
from fastweights.train.run_folder import RunFolderError
from tests.test_docs_links import dead_links, links

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
    acl_loss: bool = True,
    init_steps: int | None = None,
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
        "acl_loss": acl_loss,
        **({"init_steps": init_steps} if init_steps is not None else {}),
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
    half = 4.302653 * 5.0 / math.sqrt(3)  # t(0.975, 2 dof); the sample std of 70, 80, 75 is 5
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
    assert doc["runs"][3] == {
        "run_dir": str(runs[3]),
        "setting": two,
        "seed": 0,
        "steps": 9000,
        "init_steps": 0,
        "init_steps_from": "no train.init_from",
    }


def test_the_pages_images_are_the_plots_written_beside_it_and_survive_a_copy(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7),
        _run(tmp_path, "b", sources=THREE, steps=3000, seed=0, acc=0.6),
    ]
    out = tmp_path / "runs" / "budget"
    files = budget_report(runs, out)["files"]
    page = out / "budget.md"
    images = links(page.read_text())
    assert images == ["plots/budget_split_digits.png"] and dead_links(page) == []
    assert set(images) <= {str(Path(f).relative_to(out)) for f in files}  # written by this command
    copy = tmp_path / "docs" / "evidence" / "budget"  # the whole folder copied elsewhere, e.g. into docs/
    shutil.copytree(out, copy)
    assert dead_links(copy / "budget.md") == []


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


def test_read_budget_run_seed_is_none_when_the_config_has_none(tmp_path: Path) -> None:
    d = _run(tmp_path, "a", sources=TWO, steps=100, seed=3, acc=0.5)
    assert read_budget_run(d)["seed"] == 3
    (d / "config.yaml").write_text("train:\n  lr: 0.001\n")
    assert read_budget_run(d)["seed"] is None


def test_a_chain_of_init_from_counts_every_run_once(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)
    b = _run(
        tmp_path, "b", sources=TWO, steps=1500, seed=0, acc=0.7, init_from=str(a / "checkpoints/best.pt")
    )
    c = _run(
        tmp_path, "c", sources=TWO, steps=2400, seed=0, acc=0.7, init_from=str(b / "checkpoints/best.pt")
    )
    got = read_budget_run(c)
    assert (got["steps"], got["init_steps"]) == (6900, 4500)
    # the budget is the steps trained (the last logged step), not the step of the checkpoint selected
    (a / "metrics.jsonl").write_text("".join(json.dumps({"step": k}) + "\n" for k in (100, 3000, 4000)))
    assert read_budget_run(c)["steps"] == 7900


def test_init_steps_recorded_at_training_are_used_not_the_upstream_log(tmp_path: Path) -> None:
    """A run that recorded its upstream budget when it started keeps it when the upstream run trains on
    (e.g. resumed to more steps afterwards); budget.json says where each run's came from."""
    a = _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)
    ckpt = str(a / "checkpoints/best.pt")
    new = _run(tmp_path, "new", sources=TWO, steps=1500, seed=0, acc=0.8, init_from=ckpt, init_steps=3000)
    old = _run(tmp_path, "old", sources=TWO, steps=1500, seed=1, acc=0.8, init_from=ckpt)
    (a / "metrics.jsonl").write_text("".join(json.dumps({"step": k}) + "\n" for k in (3000, 30000)))
    assert (read_budget_run(new)["steps"], read_budget_run(new)["init_steps_from"]) == (
        4500,
        "recorded at training",
    )
    assert (read_budget_run(old)["steps"], read_budget_run(old)["init_steps_from"]) == (
        31500,
        "upstream logs, read now",
    )
    budget_report([new], tmp_path / "out")
    (row,) = json.loads((tmp_path / "out" / "budget.json").read_text())["runs"]
    assert (row["steps"], row["init_steps"], row["init_steps_from"]) == (4500, 3000, "recorded at training")
    (a / "metrics.jsonl").unlink()  # the upstream folder is not needed once the budget is recorded
    assert read_budget_run(new)["steps"] == 4500


def test_an_upstream_runs_own_record_ends_the_count(tmp_path: Path) -> None:
    """a → b → c, only b evaluated with a record: c (no record) counts b's steps + b's record, so a's
    later steps do not enter; without b's record they would."""
    a = _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)
    b = _run(
        tmp_path,
        "b",
        sources=TWO,
        steps=1500,
        seed=0,
        acc=0.7,
        init_from=str(a / "checkpoints/best.pt"),
        init_steps=3000,
    )
    c = _run(
        tmp_path, "c", sources=TWO, steps=2400, seed=0, acc=0.7, init_from=str(b / "checkpoints/best.pt")
    )
    (a / "metrics.jsonl").write_text("".join(json.dumps({"step": k}) + "\n" for k in (3000, 30000)))
    assert read_budget_run(c)["steps"] == 6900
    doc = json.loads((b / "results.json").read_text())
    del doc["run"]["init_steps"]
    (b / "results.json").write_text(json.dumps(doc))
    assert read_budget_run(c)["steps"] == 33900


def test_an_init_from_in_the_source_checkout_is_found_there(tmp_path: Path, monkeypatch) -> None:
    import fastweights.recipes.acl as acl

    checkout = tmp_path / "checkout"
    _run(checkout / "pretrained", "acl-cross", sources=TWO, steps=3000, seed=0, acc=0.7)
    five = _run(
        tmp_path,
        "five",
        sources=TWO,
        steps=1500,
        seed=0,
        acc=0.8,
        init_from="pretrained/acl-cross/checkpoints/best.pt",
    )
    monkeypatch.setattr(acl, "SOURCE_ROOT", checkout)
    monkeypatch.chdir(tmp_path)  # no pretrained/ here: the checkout's, as training finds it
    assert read_budget_run(five)["steps"] == 4500


def test_the_acl_loss_is_named_when_runs_differ_in_it(tmp_path: Path) -> None:
    runs = [
        _run(tmp_path, "acl", sources=TWO, steps=3000, seed=0, acc=0.7),
        _run(tmp_path, "noacl", sources=TWO, steps=3000, seed=0, acc=0.6, acl_loss=False),
    ]
    table = budget_report(runs, tmp_path / "out")["table"]
    assert set(table["Split-Digits/domain"]) == {
        "FontGlyphs + EmojiImages",
        "FontGlyphs + EmojiImages · no ACL loss",
    }


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        ("missing", r"results\.json: not found; expected the results of an evaluated ACL run"),
        ("damaged", r"results\.json"),
        ("not_acl", r"results\.json: expected an ACL run's results"),
        ("twice", r"same setting, budget and seed"),
        ("same_folder", r"are the same folder; expected each run once"),
        ("no_config", r"config\.yaml: not found; expected the run's config\.yaml"),
        ("bad_config", r"config\.yaml: expected a run's config with a train section"),
        ("split_list", r"results\.json: expected an ACL run's results"),
        ("nan", r"results\.json: split\.Split-Digits/domain\.ACC\.mean: expected a fraction in \[0, 1\]"),
        ("float_steps", r"run\.trained_steps=2999\.9 is not a whole number of steps"),
        ("bad_init_steps", r"results\.json: .*run\.init_steps=-5 is not a whole number of steps"),
        ("chance", r"Split-Digits/domain has chance 0\.5 in .* but 0\.2 in"),
        ("cycle", r"config\.yaml: train\.init_from runs in a cycle: "),
        ("stepless", r"metrics\.jsonl: expected the logged steps of the run .* started from, found none"),
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
    elif setup == "twice":
        (b / "config.yaml").write_text("train:\n  seed: 0\n")
    elif setup == "same_folder":
        b = a
    elif setup == "no_config":
        (b / "config.yaml").unlink()
    elif setup == "bad_config":
        (b / "config.yaml").write_text("train: [1\n")
    elif setup in ("split_list", "nan", "float_steps", "bad_init_steps", "chance"):
        doc = json.loads((b / "results.json").read_text())
        if setup == "split_list":
            doc["split"] = [1, 2]
        elif setup == "nan":
            doc["split"]["Split-Digits/domain"]["ACC"]["mean"] = float("nan")
        elif setup == "float_steps":
            doc["run"]["trained_steps"] = 2999.9
        elif setup == "bad_init_steps":
            doc["run"]["init_steps"] = -5
        else:
            doc["split"]["Split-Digits/domain"]["chance"] = 0.2
        (b / "results.json").write_text(json.dumps(doc))
    elif setup == "cycle":
        (b / "config.yaml").write_text(f"train:\n  seed: 1\n  init_from: {b / 'checkpoints' / 'best.pt'}\n")
    else:
        (a / "metrics.jsonl").write_text('{"loss": 1.0}\n')
        (b / "config.yaml").write_text(f"train:\n  seed: 1\n  init_from: {a / 'checkpoints' / 'best.pt'}\n")
    assert main(["acl", "budget", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastweights: error:"), err
    assert re.search(match, err[0]), err[0]
    assert not (tmp_path / "out").exists()  # nothing written


def test_cli_writes_the_report_and_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run(tmp_path, "a", sources=TWO, steps=3000, seed=0, acc=0.7)
    assert main(["acl", "budget", str(a), "--out", str(tmp_path / "out")]) == 0
    assert f"budget curves of 1 runs: {tmp_path / 'out' / 'budget.md'}" in capsys.readouterr().out


def _as_export(run: Path, *, init_steps: int | None) -> Path:
    """``run`` turned into an export folder: config.json (its train section and records) beside its
    metrics.jsonl, no config.yaml (the weights file only has to exist for the layout)."""
    train = {"seed": 0, "init_from": "runs/upstream/checkpoints/best.pt"}
    records = {} if init_steps is None else {"init_steps": init_steps}
    info = {
        "format": "fastweights-export",
        "format_version": 1,
        "config": {"train": train},
        "records": records,
    }
    (run / "config.json").write_text(json.dumps(info))
    (run / "model.safetensors").write_bytes(b"")
    (run / "config.yaml").unlink()
    (run / "results.json").unlink()
    return run


def test_a_run_started_from_an_export_folder_counts_its_recorded_steps(tmp_path: Path) -> None:
    shipped = _as_export(
        _run(tmp_path / "pretrained", "acl-cross", sources=TWO, steps=2300, seed=0, acc=0.7), init_steps=30000
    )
    five = _run(tmp_path, "five", sources=TWO, steps=1500, seed=0, acc=0.8, init_from=str(shipped))
    assert read_budget_run(five)["steps"] == 1500 + 2300 + 30000
    old_path = _run(
        tmp_path, "old", sources=TWO, steps=1500, seed=0, acc=0.8, init_from=f"{shipped}/checkpoints/best.pt"
    )
    assert read_budget_run(old_path)["steps"] == 1500 + 2300 + 30000  # the path before it was exported
