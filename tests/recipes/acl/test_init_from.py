"""``train.init_from``: relative paths are read from the working directory, then from the source
checkout (the shipped ``pretrained/`` models), else one error naming both places."""

from __future__ import annotations

import pytest

from fastweights.recipes.acl import SOURCE_ROOT, init_checkpoint_path


def test_a_path_in_the_working_directory_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt.pt").write_bytes(b"x")
    assert init_checkpoint_path("ckpt.pt") == tmp_path.joinpath("ckpt.pt").relative_to(tmp_path)


def test_the_presets_shipped_model_is_found_from_any_folder(tmp_path, monkeypatch):
    shipped = "pretrained/acl-cross"
    if not (SOURCE_ROOT / shipped / "model.safetensors").is_file():
        pytest.skip("not a source checkout with the shipped models")
    monkeypatch.chdir(tmp_path)
    assert init_checkpoint_path(shipped) == SOURCE_ROOT / shipped
    # the path of the shipped model before it became an export folder still finds it
    assert init_checkpoint_path(f"{shipped}/checkpoints/best.pt") == SOURCE_ROOT / shipped


def test_a_missing_relative_path_names_both_places(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        init_checkpoint_path("runs/acl-paper/checkpoints/best.pt")
    msg = str(err.value)
    assert msg.startswith("train.init_from: expected a checkpoint file, run folder or export folder")
    assert str(tmp_path) in msg and str(SOURCE_ROOT) in msg and "\n" not in msg


def test_an_absolute_path_is_taken_as_given(tmp_path):
    assert init_checkpoint_path(str(tmp_path / "none.pt")) == tmp_path / "none.pt"
