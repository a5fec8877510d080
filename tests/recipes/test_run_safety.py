"""Run-folder safety through the CLI (ACL smoke preset): nothing a user has is destroyed without
``--force``, resume overrides, resume refusals, and one-line errors for damaged or unwritable folders."""

from __future__ import annotations

import errno
import hashlib
import re

import pytest
import torch
import yaml

from fastweights.cli import main
from fastweights.recipes import fewshot, lm, rl
from fastweights.train import checkpoint
from tests.train.lock_holder import hold_in_subprocess


def _train(root, run, *extra, steps=2):
    """``acl train`` of the smoke preset, its glyph cache in ``root`` (the module's ``trained`` root: one
    cache build for the module)."""
    args = [
        "acl",
        "train",
        "--preset",
        "smoke",
        "--run-dir",
        str(run),
        f"data.cache_dir={root / 'cache'}",
    ]
    return main([*args, f"train.max_steps={steps}", "train.threads=1", *extra])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("safety")
    assert _train(root, root / "a") == 0
    return root


def _snapshot(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _copy_run(src, dst):
    dst.mkdir(parents=True)
    for p in src.rglob("*"):
        if p.is_file():
            (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dst / p.relative_to(src)).write_bytes(p.read_bytes())
    return dst


def test_export_never_overwrites_a_run_without_force(trained, tmp_path, capsys):
    a, b = trained / "a", _copy_run(trained / "a", tmp_path / "b")
    before_a, before_b = _snapshot(a), _snapshot(b)
    assert main(["acl", "export", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fastweights: error: out_dir:") and str(b) in err and "config.yaml" in err
    assert main(["acl", "export", str(a), str(a)]) == 2
    assert "source run folder itself" in capsys.readouterr().err
    assert _snapshot(a) == before_a and _snapshot(b) == before_b  # latest.pt etc. untouched
    assert main(["acl", "export", str(a), str(b), "--force"]) == 0
    assert not (b / "checkpoints" / "latest.pt").exists()


def test_eval_out_never_overwrites_another_run_without_force(trained, tmp_path, capsys):
    a, b = trained / "a", _copy_run(trained / "a", tmp_path / "b")
    (b / "metrics.jsonl").write_text('{"step": 99}\n')
    before = _snapshot(b)
    args = [
        "acl",
        "eval",
        str(a),
        "--out",
        str(b),
        "eval.split_benchmarks=[digits]",
        "eval.episodes=4",
    ]
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert _snapshot(b) == before
    out = tmp_path / "out"
    assert main([*args[:4], str(out), *args[5:]]) == 0
    assert main([*args[:4], str(out), *args[5:]]) == 0  # an earlier evaluation of the same run: replaced


@pytest.mark.parametrize("recipe", [fewshot, lm, rl])
def test_other_recipes_share_the_eval_and_export_guard(tmp_path, recipe):
    target = _copy_run_marker(tmp_path / "target")
    with pytest.raises(ValueError, match="already holds a run"):
        recipe.evaluate(tmp_path / "missing-run", out_dir=target)
    if hasattr(recipe, "export"):
        with pytest.raises(ValueError, match="already holds a run"):
            recipe.export(tmp_path / "missing-run", target)
    assert (target / "metrics.jsonl").read_text() == "keep\n"


def _copy_run_marker(folder):
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("keep\n")
    return folder


def test_train_into_a_folder_with_other_files_needs_force(trained, tmp_path, capsys):
    run = tmp_path / "docs"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert _train(trained, run) == 2
    assert "not empty (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]
    assert _train(trained, run, "--force") == 0
    assert (run / "notes.txt").read_text() == "mine"


def test_resume_applies_allowed_overrides_and_refuses_others(trained, tmp_path, capsys):
    run = _copy_run(trained / "a", tmp_path / "run")
    assert _train(trained, run, "--resume", "train.lr=0.5", steps=4) == 2
    err = capsys.readouterr().err
    assert "train.lr cannot change" in err and "train.max_steps, train.max_minutes" in err and "eval.*" in err
    assert _train(trained, run, "--resume", "eval.split_runs=3", steps=4) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["train"]["max_steps"] == 4 and saved["eval"]["split_runs"] == 3
    assert torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["step"] == 4
    assert len((run / "command.txt").read_text().splitlines()) == 2


def test_resume_without_checkpoints_is_an_error_not_a_restart(trained, tmp_path, capsys):
    run = _copy_run(trained / "a", tmp_path / "run")
    for p in (run / "checkpoints").iterdir():
        p.unlink()
    before = _snapshot(run)
    assert _train(trained, run, "--resume") == 2
    err = capsys.readouterr().err
    assert "cannot --resume" in err and "metrics.jsonl" in err and "latest.pt" in err
    assert _snapshot(run) == before


def test_resume_of_a_new_folder_starts_a_run(trained, tmp_path):
    assert _train(trained, tmp_path / "new", "--resume") == 0
    assert torch.load(tmp_path / "new" / "checkpoints" / "latest.pt", weights_only=False)["step"] == 2


def test_stale_temporaries_are_removed_on_resume(trained, tmp_path):
    run = _copy_run(trained / "a", tmp_path / "run")
    (run / "checkpoints" / ".latest.pt.k1ll3d.tmp").write_bytes(b"partial")
    assert _train(trained, run, "--resume") == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.pt", "latest.pt"]


def test_damaged_checkpoints_are_one_line_errors(trained, tmp_path, capsys):
    run = _copy_run(trained / "a", tmp_path / "run")
    latest = run / "checkpoints" / "latest.pt"
    latest.write_bytes(bytes(latest.stat().st_size))  # zero-filled
    assert main(["acl", "eval", str(run), "--checkpoint", "latest"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{latest} is damaged" in err and "--checkpoint best" in err
    assert _train(trained, run, "--resume", steps=4) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{latest} is damaged" in err and "copy it over" in err


def test_full_disk_during_training_is_an_error_and_keeps_the_checkpoint(
    trained, tmp_path, capsys, monkeypatch
):
    run = _copy_run(trained / "a", tmp_path / "run")
    before = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)

    def full(obj, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "atomic_torch_save", full)
    assert _train(trained, run, "--resume", steps=4) == 2
    err = capsys.readouterr().err
    # the first save that fails is latest.pt or, when step 3 sets a new best, best.pt
    assert "No space left on device" in err and re.search(r"previous (latest|best)\.pt is intact", err)
    after = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert after["step"] == before["step"] == 2


def test_unwritable_run_folder_is_a_one_line_error(trained, tmp_path, capsys, monkeypatch):
    run = _copy_run(trained / "a", tmp_path / "run")
    from fastweights.train import run_folder

    def read_only(path, *args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(run_folder.os, "open", read_only)
    assert _train(trained, run, "--resume", steps=4) == 2
    assert "cannot write in this folder (Read-only file system)" in capsys.readouterr().err


def test_a_live_writer_blocks_train_resume_and_eval(trained, tmp_path, capsys):
    run = _copy_run(trained / "a", tmp_path / "run")
    before = _snapshot(run)
    holder = hold_in_subprocess(run)  # e.g. a training process still alive
    try:
        assert _train(trained, run, "--resume", steps=4) == 2
        assert f"in use by another fastweights process (PID {holder.pid}" in capsys.readouterr().err
        assert _train(trained, run) == 2
        assert main(["acl", "eval", str(run)]) == 2
        assert f"PID {holder.pid}" in capsys.readouterr().err
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert _snapshot(run) == before
