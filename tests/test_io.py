import errno
import json
import os

import numpy as np
import pytest
import torch

from fastweights import io as fio
from fastweights.io import (
    JsonlLogger,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
)


def _no_temp_files(folder):
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []


def test_atomic_writes_create_parents(tmp_path):
    p = tmp_path / "a" / "b" / "x.bin"
    atomic_write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    atomic_write_text(tmp_path / "t" / "x.txt", "héllo\n")
    assert (tmp_path / "t" / "x.txt").read_text(encoding="utf-8") == "héllo\n"
    assert _no_temp_files(p.parent)


def test_atomic_write_json_format(tmp_path):
    p = tmp_path / "r.json"
    atomic_write_json(p, {"b": 1, "a": np.float32(0.5), "m": np.arange(3), "t": torch.tensor(2)})
    text = p.read_text()
    assert text.endswith("\n")
    assert text.index('"b"') < text.index('"a"')  # key order preserved
    assert '\n  "b": 1' in text  # indent 2
    assert json.loads(text) == {"b": 1, "a": 0.5, "m": [0, 1, 2], "t": 2}


def test_atomic_write_json_unserialisable_keeps_old(tmp_path):
    p = tmp_path / "r.json"
    atomic_write_json(p, {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(p, {"bad": object()})
    assert json.loads(p.read_text()) == {"ok": True}
    assert _no_temp_files(tmp_path)


def test_atomic_torch_save_roundtrip(tmp_path):
    p = tmp_path / "ck" / "x.pt"
    atomic_torch_save({"w": torch.arange(4.0)}, p)
    assert torch.equal(torch.load(p)["w"], torch.arange(4.0))


def test_failed_torch_save_leaves_previous_file(tmp_path, monkeypatch):
    p = tmp_path / "x.pt"
    atomic_torch_save({"v": 1}, p)
    before = p.read_bytes()
    real_save = torch.save

    def exploding_save(obj, f, *args, **kwargs):
        f.write(b"partial garbage")  # the temp file is open and partly written
        assert any(q.name.endswith(".tmp") for q in tmp_path.iterdir())
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(fio.torch, "save", exploding_save)
    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_torch_save({"v": 2}, p)
    monkeypatch.setattr(fio.torch, "save", real_save)
    assert p.read_bytes() == before
    assert torch.load(p) == {"v": 1}
    assert _no_temp_files(tmp_path)


def test_failed_replace_leaves_previous_file(tmp_path, monkeypatch):
    p = tmp_path / "x.txt"
    atomic_write_text(p, "old")

    def bad_replace(src, dst):
        raise OSError("no")

    monkeypatch.setattr(fio.os, "replace", bad_replace)
    with pytest.raises(OSError):
        atomic_write_text(p, "new")
    monkeypatch.undo()
    assert p.read_text() == "old"
    assert _no_temp_files(tmp_path)


def test_jsonl_logger_and_reader(tmp_path):
    p = tmp_path / "logs" / "metrics.jsonl"
    with JsonlLogger(p) as log:
        log.log(step=1, loss=0.5)
        log.log(step=2, loss=np.float64(0.25), val_acc=float("nan"))
        # flushed: readable while still open
        assert len(read_jsonl(p)) == 2
    recs = read_jsonl(p)
    assert recs[0] == {"step": 1, "loss": 0.5}
    assert recs[1]["loss"] == 0.25 and np.isnan(recs[1]["val_acc"])
    with pytest.raises(ValueError, match="closed"):
        log.log(step=3)


def test_read_jsonl_truncated_last_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')
    with pytest.warns(RuntimeWarning, match="truncated"):
        assert read_jsonl(p) == [{"step": 1}, {"step": 2}]


def test_read_jsonl_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{bad\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(p)
    p.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="JSON object"):
        read_jsonl(p)


def test_logger_resume_drops_partial_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2, "lo')
    with JsonlLogger(p) as log:
        log.log(step=2, loss=0.1)
    assert read_jsonl(p) == [{"step": 1}, {"step": 2, "loss": 0.1}]


@pytest.mark.parametrize(
    ("code", "cls"), [(errno.ENOSPC, OSError), (errno.EACCES, PermissionError), (errno.EROFS, OSError)]
)
def test_write_errors_name_the_destination_not_the_temporary(tmp_path, monkeypatch, code, cls):
    p = tmp_path / "config.yaml"
    atomic_write_text(p, "old")

    def failing_fsync(fd):
        raise OSError(code, os.strerror(code), "/somewhere/.config.yaml.x.tmp")

    monkeypatch.setattr(fio.os, "fsync", failing_fsync)
    with pytest.raises(cls) as info:
        atomic_write_text(p, "new")
    monkeypatch.undo()
    assert info.value.errno == code and info.value.filename == str(p)
    assert p.read_text() == "old" and _no_temp_files(tmp_path)


def test_logger_keep_bytes_drops_records_after_a_checkpoint(tmp_path):
    p = tmp_path / "m.jsonl"
    with JsonlLogger(p) as log:
        log.log(step=1)
        kept = log.size
        log.log(step=2)
        assert log.size == p.stat().st_size > kept
    with JsonlLogger(p, keep_bytes=kept) as log:
        log.log(step=3)
    assert [r["step"] for r in read_jsonl(p)] == [1, 3]
    with pytest.raises(ValueError, match="expected at least 1000 bytes"):
        JsonlLogger(p, keep_bytes=1000)
