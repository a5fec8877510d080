"""Run-folder guard, lock and stale-temporary cleanup (``fastweights.train.run_folder``)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from fastweights.train import run_folder
from fastweights.train.run_folder import (
    RunFolderError,
    check_output_dir,
    holds_lock,
    output_folder,
    remove_stale_temporaries,
    run_lock,
)
from tests.train.lock_holder import hold_in_subprocess


def _run_folder(path: Path) -> Path:
    (path / "checkpoints").mkdir(parents=True)
    (path / "config.yaml").write_text("name: x\n")
    (path / "metrics.jsonl").write_text('{"step": 1}\n')
    return path


@pytest.mark.parametrize("purpose", ["eval", "export"])
def test_new_or_empty_folders_are_accepted(tmp_path, purpose):
    check_output_dir(tmp_path / "new", source=tmp_path / "run", force=False, purpose=purpose)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / ".lock").write_text("")  # the lock file is not content
    check_output_dir(tmp_path / "empty", source=tmp_path / "run", force=False, purpose=purpose)


@pytest.mark.parametrize("purpose", ["eval", "export"])
def test_folder_holding_another_run_is_refused_naming_its_files(tmp_path, purpose):
    other = _run_folder(tmp_path / "other")
    with pytest.raises(RunFolderError, match=r"other already holds a run \(checkpoints, config.yaml"):
        check_output_dir(other, source=tmp_path / "run", force=False, purpose=purpose)
    check_output_dir(other, source=tmp_path / "run", force=True, purpose=purpose)


def test_folder_with_other_files_is_refused_naming_them(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "thesis.tex").write_text("x")
    with pytest.raises(RunFolderError, match=r"docs is not empty \(thesis.tex\).*--force"):
        check_output_dir(tmp_path / "docs", source=tmp_path / "run", force=False, purpose="eval")


def test_eval_may_write_into_its_own_run_export_may_not(tmp_path):
    run = _run_folder(tmp_path / "run")
    check_output_dir(run, source=run, force=False, purpose="eval")
    with pytest.raises(RunFolderError, match="source run folder itself"):
        check_output_dir(run, source=run, force=False, purpose="export")


def test_eval_may_replace_an_earlier_evaluation_of_the_same_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    (out / "report.md").write_text("")
    (out / "results.json").write_text(json.dumps({"run": {"run_dir": str(tmp_path / "run")}}))
    check_output_dir(out, source=tmp_path / "run", force=False, purpose="eval")
    with pytest.raises(RunFolderError, match="already holds a run"):
        check_output_dir(out, source=tmp_path / "another", force=False, purpose="eval")


def test_a_second_process_is_refused_with_the_holders_pid(tmp_path):
    proc = hold_in_subprocess(tmp_path / "run")
    try:
        with pytest.raises(RunFolderError, match=rf"in use by another fastweights process \(PID {proc.pid}"):
            with run_lock(tmp_path / "run"):
                pass
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    with run_lock(tmp_path / "run"):  # released when the holder exits
        assert holds_lock(tmp_path / "run")
    assert not holds_lock(tmp_path / "run")


def test_lock_is_reentrant_and_released_on_exceptions(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(KeyError):
        with run_lock(tmp_path / "run"):
            with run_lock(tmp_path / "run"):
                assert (tmp_path / "run" / ".lock").read_text().strip() == str(os.getpid())
            assert holds_lock(tmp_path / "run")
            raise KeyError("boom")
    assert not holds_lock(tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []  # the lock file lives with its writer


def test_a_folder_the_lock_created_and_left_empty_is_removed(tmp_path):
    with run_lock(tmp_path / "new"):
        assert (tmp_path / "new" / ".lock").exists()
    assert not (tmp_path / "new").exists()
    with run_lock(tmp_path / "kept"):
        (tmp_path / "kept" / "results.json").write_text("{}")
    assert (tmp_path / "kept" / "results.json").exists()


def test_unwritable_folder_is_a_one_line_error(tmp_path, monkeypatch):
    def refuse(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(run_folder.os, "open", refuse)
    with pytest.raises(RunFolderError, match=r"run: cannot write in this folder \(Permission denied\)"):
        with run_lock(tmp_path / "run"):
            pass


def test_output_folder_checks_under_the_lock(tmp_path):
    other = _run_folder(tmp_path / "other")
    with pytest.raises(RunFolderError, match="already holds a run"):
        with output_folder(other, source=tmp_path / "run", force=False, purpose="export"):
            pass
    assert not holds_lock(other)


def test_stale_temporaries_are_removed(tmp_path):
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    stale = [ckpt / ".latest.pt.abc123.tmp", tmp_path / ".config.yaml.x1.tmp"]
    for p in stale:
        p.write_bytes(b"partial")
    (ckpt / "latest.pt").write_bytes(b"kept")
    assert sorted(remove_stale_temporaries(tmp_path)) == sorted(stale)
    assert [p.name for p in ckpt.iterdir()] == ["latest.pt"]
