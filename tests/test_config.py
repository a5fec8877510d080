from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import fastweights
from fastweights.cl.tasks import CurriculumStage
from fastweights.config import (
    CONFIG_DIR,
    ConfigKey,
    apply_overrides,
    available_presets,
    config_from_yaml,
    config_sections,
    config_to_yaml,
    load_config,
    load_run_config,
    preset_description,
    preset_path,
)
from fastweights.recipes.acl.config import ACLConfig


@pytest.mark.parametrize("preset", available_presets("acl"))
def test_presets_load_and_round_trip(preset):
    cfg = load_config(ACLConfig, preset_path("acl", preset))
    assert cfg.name == preset
    assert config_from_yaml(ACLConfig, config_to_yaml(cfg)) == cfg


@pytest.mark.parametrize(
    ("recipe", "preset"),
    [(r, p) for r in ("fewshot", "sequential", "lm", "rl") for p in available_presets(r)],
)
def test_every_recipe_preset_loads_and_round_trips(recipe, preset):
    from fastweights.recipes.contract import get_recipe

    cls = get_recipe(recipe).CONFIG
    cfg = load_config(cls, preset_path(recipe, preset))
    assert cfg.name == preset
    assert config_from_yaml(cls, config_to_yaml(cfg)) == cfg


def test_sequential_presets_give_the_srwm_its_paper_init_and_every_layer_the_scales():
    from fastweights.recipes.sequential.config import SequentialConfig

    for preset in ("quick", "quick-emoji"):
        for layer, options in (("srwm", {"init": "modern"}), ("deltanet", {}), ("lstm", {})):
            cfg = load_config(
                SequentialConfig, preset_path("sequential", preset), [f"model.sequence_layer={layer}"]
            )
            assert cfg.model.sequence_layer_options() == options
            assert (cfg.model.label_init_scale, cfg.model.input_init_scale) == (4.0, 3.0)


def test_presets_ship_inside_the_package():
    assert CONFIG_DIR == Path(fastweights.__file__).resolve().parent / "configs"
    assert available_presets("acl") == [
        "frozen-5task-class",
        "paper",
        "paper-3task",
        "paper-5task-class",
        "paper-5task-domain",
        "paper-fc100",
        "quick",
        "quick-3domain",
        "quick-3domain-5task-class",
        "quick-3domain-5task-domain",
        "smoke",
        "standard",
        "standard-5task-class",
        "standard-5task-domain",
    ]
    assert {"smoke", "tiny", "paper-125m"} <= set(available_presets("lm"))
    assert available_presets("nope") == []
    assert preset_path("fewshot", "smoke") == CONFIG_DIR / "fewshot" / "smoke.yaml"


def test_overrides_are_typed_and_validated():
    cfg = load_config(ACLConfig, None, ["train.lr=0.01", "model.d_model=64", "train.acl_loss=false"])
    assert (cfg.train.lr, cfg.model.d_model, cfg.train.acl_loss) == (0.01, 64, False)
    cfg = apply_overrides(cfg, ["train.curriculum=[{until_step: 5, n_way: 2, k_shot: 1}]"])
    assert cfg.train.curriculum == [CurriculumStage(5, 2, 1)]
    unknown = (
        r"^config: train\.nope: Key 'nope' not in 'ACLTrainConfig'; expected one of \['max_steps', [^\n]*\]$"
    )
    with pytest.raises(ValueError, match=unknown):
        load_config(ACLConfig, None, ["train.nope=1"])
    with pytest.raises(
        ValueError, match=r"^config: train\.max_step: [^;\n]*Did you mean one of: 'max_steps'"
    ):
        load_config(ACLConfig, None, ["train.max_step=1"])  # OmegaConf's own hint: no key list after it
    with pytest.raises(ValueError, match=r"^config: model\.d_model: Value 'abc'[^\n]*Integer$"):
        load_config(ACLConfig, None, ["model.d_model=abc"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(cfg, ["train.lr"])


def test_a_list_key_refuses_a_scalar_or_a_mapping_on_one_line(tmp_path):
    """OmegaConf's messages for these ("AnyNode is not a ListConfig", a ``TypeError`` naming no key for
    a mapping merged into a list) become one line naming the key."""
    for value, given in (("fontglyphs", "'fontglyphs'"), ("3", "3"), ("{a: 1}", "a mapping")):
        with pytest.raises(ValueError, match=rf"^config: data\.sources: expected a list, got {given}$"):
            apply_overrides(ACLConfig(), [f"data.sources={value}"])
    with pytest.raises(ValueError, match=r"^config: train\.curriculum: expected a list, got a mapping$"):
        apply_overrides(ACLConfig(), ["train.lr=0.1", "train.curriculum={until_step: 5}"])
    text = "data:\n  sources: {a: fontglyphs}\n"
    with pytest.raises(ValueError, match=r"^config: data\.sources: expected a list, got a mapping$"):
        config_from_yaml(ACLConfig, text)
    path = tmp_path / "config.yaml"
    path.write_text(text)
    for load in (load_config, load_run_config):
        with pytest.raises(
            ValueError, match=rf"^config: {re.escape(str(path))}: data\.sources: expected a list"
        ):
            load(ACLConfig, path)


def test_preset_names_and_paths():
    with pytest.raises(
        FileNotFoundError,
        match=r"unknown preset 'nope' for 'acl'.*'quick', 'quick-3domain', .*'smoke'",
    ):
        preset_path("acl", "nope")
    # a value ending in .yaml/.yml is a path, reported as given (not "x.yaml.yaml")
    for name in ("missing.yaml", "dir/missing.yml"):
        with pytest.raises(FileNotFoundError, match=rf"^preset: YAML file {name} not found$"):
            preset_path("acl", name)
    with pytest.raises(
        FileNotFoundError, match=r"^preset: YAML file smoke.yaml not found .*--preset smoke\)$"
    ):
        preset_path("acl", "smoke.yaml")


def test_a_user_yaml_file_is_a_preset(tmp_path, monkeypatch):
    (tmp_path / "mine.yml").write_text("name: mine\ntrain:\n  lr: 1e-3\n")
    monkeypatch.chdir(tmp_path)
    path = preset_path("acl", "mine.yml")
    cfg = load_config(ACLConfig, path)
    assert (cfg.name, cfg.train.lr) == ("mine", 0.001)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: x\ntrain:\n  lr: [1, 2\n  warmup: 3\n",
            r"line 4, column 9: YAML syntax error: expected ',' or ']'",
        ),
        ("name: x\n  model: 2\n", r"line 2, column 8: YAML syntax error: mapping values are not allowed"),
        ("name: a\nname: b\n", r"line 2, column 1: YAML syntax error: found duplicate key name"),
        ("", r"expected a YAML mapping of config keys, got an empty file"),
        ("# only a comment\n", r"expected a YAML mapping of config keys, got an empty file"),
        ("\n- 1\n- 2\n", r"line 2: expected a YAML mapping of config keys, got a list"),
        ("smoke\n", r"line 1: expected a YAML mapping of config keys, got a scalar"),
        (
            "name: x\ntrain:\n  lr: 0.1\n  nope: 1\n",
            r"line 4: train\.nope: Key 'nope' not in 'ACLTrainConfig'",
        ),
        ("model:\n  d_model: abc\n", r"line 2: model\.d_model: Value 'abc'"),
    ],
)
def test_bad_preset_files_give_one_line_errors_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^config: {re.escape(str(path))}: .*{message}") as info:
        load_config(ACLConfig, path)
    assert "\n" not in str(info.value)


def test_missing_yaml_file_to_load_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_config(ACLConfig, tmp_path / "nope.yaml")


def test_cli_reports_preset_errors_on_one_line(tmp_path, capsys):
    from fastweights.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntrain: [1\n")
    for preset, message in [
        (str(bad), rf"config: {re.escape(str(bad))}: line 3, column 1: YAML syntax error: "),
        (str(tmp_path / "gone.yml"), r"preset: YAML file .*gone\.yml not found"),
        (
            "nope",
            r"preset: unknown preset 'nope' for 'fewshot'; available presets: \['paper', 'quick', 'smoke'\]",
        ),
    ]:
        recipe = "fewshot" if preset == "nope" else "acl"
        assert main([recipe, "train", "--preset", preset, "--run-dir", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert re.match(rf"^fastweights: error: {message}", err) and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


# --- what the keys mean: preset descriptions, config_sections and the generated reference ---------------


@dataclass
class _Inner:
    """An inner section.

    Raises:
        ValueError: never shown in the reference.
    """

    depth: int = 3  # how deep


@dataclass
class _Item:
    until: int = 0


@dataclass
class _Outer:
    #: the name, documented
    #: on two lines
    name: str = "outer"
    sizes: list[int] = field(
        default_factory=lambda: [1, 2]  # a comment inside the field's lines
    )
    optional: str | None = None
    # the inner section: a comment on a section field
    inner: _Inner = field(default_factory=lambda: _Inner(depth=5))
    items: list[_Item] = field(default_factory=list)
    pair: tuple[float, float] = (0.5, 1e-9)


def test_config_sections_list_every_key_with_type_default_and_comments():
    sections = config_sections(_Outer)
    assert [s.key for s in sections] == ["", "inner", "items[]"]
    top, inner, items = sections
    assert top.keys == (
        ConfigKey("name", "str", "outer", "the name, documented on two lines"),
        ConfigKey("sizes", "list[int]", "[1, 2]", "a comment inside the field's lines"),
        ConfigKey("optional", "str | None", "null", ""),
        ConfigKey("items", "list[_Item]", "[]", ""),
        ConfigKey("pair", "tuple[float, float]", "[0.5, 1.0e-09]", ""),
    )
    assert inner.doc == "The inner section: a comment on a section field\n\nAn inner section."
    assert inner.keys == (ConfigKey("inner.depth", "int", "5", "how deep"),)  # the section's own default
    assert items.keys == (ConfigKey("items[].until", "int", "0", ""),)
    with pytest.raises(TypeError, match="cls: expected a dataclass type"):
        config_sections(_Outer())  # type: ignore[arg-type]


def test_subclass_keeps_the_comments_of_the_fields_it_inherits():
    from fastweights.recipes.acl.config import ACLTrainConfig

    @dataclass
    class Train(ACLTrainConfig):
        max_steps: int = 5

    keys = {k.key: k for s in config_sections(Train) for k in s.keys}
    assert keys["max_steps"] == ConfigKey("max_steps", "int", "5", "optimiser steps")
    assert keys["acl_loss"].doc == "False: the no-ACL ablation (no backward-transfer terms)"


def test_preset_description_is_the_first_sentence_of_the_preset_comment(tmp_path, monkeypatch):
    assert (
        preset_description("acl", "smoke") == "End-to-end smoke test: tiny glyph set, tiny model, a few steps"
    )
    assert preset_description("acl", "paper") == "The reference 2-task meta-training, for a GPU"  # cut at ":"
    (tmp_path / "demo").mkdir()
    monkeypatch.setattr("fastweights.config.CONFIG_DIR", tmp_path)
    for text, expected in [
        ("# One line (Irie et al. 2022, e.g. §4). Second sentence.\nname: x\n", "One line"),
        ("# Runs fast; more detail\n# on two lines.\n", "Runs fast"),
        ("name: x\n# not a leading comment\n", ""),
        ("# " + "word " * 40 + "\n", ("word " * 19).strip() + " …"),
    ]:
        (tmp_path / "demo" / "p.yaml").write_text(text)
        assert preset_description("demo", "p") == expected
    with pytest.raises(FileNotFoundError, match="unknown preset 'q'"):
        preset_description("demo", "q")


def test_config_reference_docs_are_current():
    """docs/config/<recipe>.md is what scripts/config_reference.py writes for the current configs."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "config_reference", root / "scripts" / "config_reference.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    expected = script.references()
    folder = root / "docs" / "config"
    regenerate = f"regenerate with: {script.COMMAND}"
    assert sorted(p.name for p in folder.glob("*.md")) == sorted(expected), regenerate
    for name, text in expected.items():
        assert (folder / name).read_text(encoding="utf-8") == text, (
            f"docs/config/{name} is stale; {regenerate}"
        )
    assert "| `train.acl_loss` | `bool` | `true` | False: the no-ACL ablation" in expected["acl.md"]
    assert "| `model.core` | `str` | `srwm` |" in expected["rl.md"]
