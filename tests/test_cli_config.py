"""``fastweights <recipe> config``: the resolved config of a preset + overrides as YAML, checked as a run
checks it; the presets in ``--help``; ``fastweights --version``."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import tomllib
import yaml

import fastweights
from fastweights import cli
from fastweights.cli import main
from fastweights.config import available_presets, config_to_yaml, load_config, preset_path
from fastweights.recipes.contract import PRESET_FOLDERS, config_class

ROOT = Path(__file__).resolve().parents[1]
# recipe -> the verb that trains from a preset (the one whose validation `config` shares)
TRAIN_VERB = {name: "run" if name == "cl-baselines" else "train" for name in PRESET_FOLDERS}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", sorted(PRESET_FOLDERS))
def test_config_prints_the_preset_as_a_run_would_save_it(name, capsys, tmp_path):
    code, out, err = _run(capsys, name, "config", "--preset", "smoke")
    assert code == 0 and err == ""
    cls, folder = config_class(name), PRESET_FOLDERS[name]
    assert out == config_to_yaml(load_config(cls, preset_path(folder, "smoke")))
    assert yaml.safe_load(out)["name"] == "smoke"
    saved = tmp_path / "mine.yaml"  # the output is itself a preset file that gives the same config
    saved.write_text(out)
    assert load_config(cls, saved) == load_config(cls, preset_path(folder, "smoke"))


def test_config_applies_overrides_and_defaults_to_the_train_preset(capsys):
    code, out, _ = _run(capsys, "acl", "config", "train.seed=7", "model.d_model=64")
    assert code == 0
    cfg = yaml.safe_load(out)
    assert (cfg["name"], cfg["train"]["seed"], cfg["model"]["d_model"]) == ("quick", 7, 64)
    code, out, _ = _run(capsys, "rl", "config", "--preset", "smoke", "model.core=lstm")
    assert code == 0 and yaml.safe_load(out)["model"]["core"] == "lstm"
    code, out, _ = _run(capsys, "cl-baselines", "config", "--preset", "smoke", "runs=3")
    assert code == 0 and yaml.safe_load(out)["runs"] == 3


def test_config_renames_deprecated_keys_with_one_warning(capsys):
    code, out, err = _run(capsys, "lm", "config", "--preset", "smoke", "model.mixer=srwm")
    assert code == 0 and yaml.safe_load(out)["model"]["sequence_layer"] == "srwm"
    assert err.strip().splitlines() == [
        "fastweights: warning: model.mixer is deprecated; use model.sequence_layer (overrides)"
    ]


@pytest.mark.parametrize(
    ("name", "argv", "match"),
    [
        ("acl", ["--preset", "nope"], "preset: unknown preset 'nope' for 'acl'; available presets: ["),
        ("cl-baselines", ["--preset", "nope"], "preset: unknown preset 'nope' for 'cl_baselines'"),
        ("fewshot", ["--preset", "missing.yaml"], "preset: YAML file missing.yaml not found"),
        (
            "acl",
            ["--preset", "smoke", "train.nokey=1"],
            "config: train.nokey: Key 'nokey' not in 'ACLTrainConfig'; expected one of ['max_steps', ",
        ),
        (
            "rl",
            ["--preset", "smoke", "model.sequence_layer=lstm"],
            "config: model.sequence_layer: Key 'sequence_layer' not in 'RLModelConfig'; expected one of "
            "['core', ",
        ),
        ("lm", ["--preset", "smoke", "train.max_steps=-1"], "train.max_steps: expected an int >= 0, got -1"),
        (
            "sequential",
            ["--preset", "smoke", "model.d_model=abc"],
            "config: model.d_model: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        ("rl", ["--preset", "smoke", "model.core=gru"], "model.core: expected one of "),
        ("cl-baselines", ["--preset", "smoke", "runs="], "runs: expected a value after '=', got nothing"),
        (
            "fewshot",
            ["--preset", "smoke", "train.lr"],
            "overrides: expected key=value items, got ['train.lr']",
        ),
    ],
)
def test_bad_config_input_is_the_one_line_error_a_run_gives(name, argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, name, "config", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"fastweights: error: {match}"), err
    trained = _run(capsys, name, TRAIN_VERB[name], "--run-dir", str(tmp_path / "run"), *argv)
    assert trained == (2, "", err)  # the very same line, and nothing written
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(PRESET_FOLDERS))
def test_help_lists_every_preset_with_one_line(name, capsys):
    folder = PRESET_FOLDERS[name]
    for verbs in ([], [TRAIN_VERB[name]], ["config"]):
        with pytest.raises(SystemExit) as stop:
            main([name, *verbs, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        listed = out[out.index("\npresets (--preset NAME") :].splitlines()[2:]
        assert [line.split()[0] for line in listed] == available_presets(folder)
        assert all(len(line.split()) > 2 for line in listed)  # a description after each name


def test_help_describes_a_preset_by_its_first_sentence(capsys):
    with pytest.raises(SystemExit):
        main(["acl", "--help"])
    out = capsys.readouterr().out
    assert (
        "  smoke                       End-to-end smoke test: tiny glyph set, tiny model, a few steps\n"
        in out
    )


def test_version_is_the_installed_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"fastweights {metadata.version('fastweights')}\n"


def test_version_falls_back_to_the_package_attribute(monkeypatch):
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert cli._version() == fastweights.__version__


def test_package_version_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert fastweights.__version__ == project["version"]
