"""Run folders and exports from someone else: a planted pickle never runs, and the command that meets
it stops with one line (exit 2) before it writes anything. Earlier versions' files that need pickles
load only with ``--trust-pickle``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.recipes import acl
from fastweights.recipes.acl.config import ACLConfig


class _Payload:
    """Unpickling it would create the file ``marker``: the side effect the tests look for."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Harmless:
    """A plain object pickled by an earlier version (loads only with --trust-pickle)."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, data_cache) -> Path:
    run = tmp_path_factory.mktemp("untrusted") / "run"
    cfg = load_config(
        ACLConfig, preset_path("acl", "smoke"), [f"data.cache_dir={data_cache}", "train.max_steps=2"]
    )
    acl.train(cfg, run)
    return run


def _planted(trained: Path, tmp_path: Path, which: str = "best", obj=None) -> tuple[Path, Path]:
    """A copy of the trained run whose ``which`` checkpoint also holds ``obj`` (default: the payload)."""
    run, marker = tmp_path / "received", tmp_path / "payload-ran"
    shutil.copytree(trained, run)
    path = run / "checkpoints" / f"{which}.pt"
    state = torch.load(path, weights_only=True)
    state["extra_object"] = _Payload(marker) if obj is None else obj
    torch.save(state, path)
    return run, marker


def _one_error_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    lines = [line for line in err if not line.startswith(("INFO", "WARNING"))]
    assert len(lines) == 1 and lines[0].startswith("fastweights: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_eval_of_a_planted_checkpoint_refuses_it_unread(trained, tmp_path, capsys):
    run, marker = _planted(trained, tmp_path)
    before = _snapshot(run)
    out = tmp_path / "out"
    assert main(["acl", "eval", str(run), "--out", str(out)]) == 2
    _one_error_line(capsys, str(run / "checkpoints" / "best.pt"), "system", "--trust-pickle")
    assert not marker.exists() and not out.exists() and _snapshot(run) == before
    assert main(["acl", "eval", str(run)]) == 2  # results into the run folder itself: nothing written
    assert not marker.exists() and _snapshot(run) == before


def test_resume_of_a_planted_latest_checkpoint_changes_nothing(trained, tmp_path, capsys):
    run, marker = _planted(trained, tmp_path, which="latest")
    before = _snapshot(run)
    assert main(["acl", "train", "--run-dir", str(run), "--resume", "train.max_steps=4"]) == 2
    _one_error_line(capsys, "latest.pt", "system")
    assert not marker.exists() and _snapshot(run) == before


def test_export_and_init_from_refuse_a_planted_checkpoint(trained, tmp_path, capsys, data_cache):
    run, marker = _planted(trained, tmp_path)
    assert main(["acl", "export", str(run), str(tmp_path / "export")]) == 2
    _one_error_line(capsys, "best.pt", "system")
    assert not (tmp_path / "export").exists()
    for init in (run, run / "checkpoints" / "best.pt"):  # a run folder or its checkpoint file
        new = tmp_path / "finetuned"
        args = ["acl", "train", "--preset", "smoke", "--run-dir", str(new), f"train.init_from={init}"]
        assert main([*args, f"data.cache_dir={data_cache}"]) == 2
        _one_error_line(capsys, "best.pt", "system")
        assert not new.exists()
    assert not marker.exists()


def test_cl_baselines_compare_refuses_a_planted_acl_run(trained, tmp_path, capsys):
    run, marker = _planted(trained, tmp_path)
    baselines = tmp_path / "baselines"  # the ACL folders are checked before the comparison is written
    baselines.mkdir()
    (baselines / "results.json").write_text(json.dumps({"config": {"scenarios": ["domain"]}, "cells": {}}))
    out = tmp_path / "cmp"
    rc = main(["cl-baselines", "compare", str(baselines), "--acl", str(run), "--out", str(out)])
    assert rc == 2
    _one_error_line(capsys, "best.pt", "system")
    assert not marker.exists() and not out.exists()


def test_a_pickle_posing_as_an_export_is_refused(trained, tmp_path, capsys):
    export = tmp_path / "export"
    assert main(["acl", "export", str(trained), str(export)]) == 0
    marker = tmp_path / "payload-ran"
    torch.save({"w": _Payload(marker)}, export / "model.safetensors")
    capsys.readouterr()
    assert main(["acl", "eval", str(export), "--out", str(tmp_path / "out")]) == 2
    _one_error_line(capsys, "model.safetensors", "damaged")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_trust_pickle_reads_an_earlier_versions_object_with_a_warning(trained, tmp_path, capsys, caplog):
    run, _ = _planted(trained, tmp_path, obj=Harmless())
    assert main(["acl", "export", str(run), str(tmp_path / "a")]) == 2
    _one_error_line(capsys, "Harmless", "--trust-pickle")
    assert main(["acl", "export", str(run), str(tmp_path / "b"), "--trust-pickle"]) == 0
    assert "--trust-pickle: unpickling" in caplog.text and "Harmless" in caplog.text
    assert (tmp_path / "b" / "model.safetensors").is_file()


def test_checkpoints_of_the_earlier_format_still_load(trained, tmp_path):
    """Before this version, checkpoints pickled numpy's RNG state as numpy objects: read without trust."""
    import numpy as np

    run = tmp_path / "old"
    shutil.copytree(trained, run)
    for which in ("best", "latest"):
        path = run / "checkpoints" / f"{which}.pt"
        state = torch.load(path, weights_only=True)
        state["rng"]["numpy"] = np.random.get_state()  # as torch.save pickled it then
        torch.save(state, path)
    assert main(["acl", "train", "--run-dir", str(run), "--resume", "train.max_steps=3"]) == 0
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3
