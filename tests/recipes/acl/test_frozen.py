"""The ACL recipe on a frozen encoder (model.backbone: frozen:<name>): features cached once, the SRWM
trained on them, the mini class-incremental sequences against nearest-class-mean."""

from __future__ import annotations

import json

import pytest
import torch

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.models.backbones import FeatureInput
from fastweights.models.vit import ViTConfig, ViTEncoderNet
from fastweights.recipes import acl
from fastweights.recipes.acl.config import ACLConfig


def _write_vit(path, seed: int = 0):
    """A tiny random ViT in torchvision's vit_b_16 layout (D = 64 → 1 head, patch 8, one layer)."""
    torch.manual_seed(seed)
    net = ViTEncoderNet(
        ViTConfig(hidden_dim=64, patch_size=8, num_layers=1, mlp_dim=128, image_size=32, num_heads=1)
    )
    state = {k: torch.randn(v.shape) * 0.1 for k, v in net.state_dict().items()}
    torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def vit_file(tmp_path_factory):
    return _write_vit(tmp_path_factory.mktemp("vit") / "vit.pt")


def _frozen(cache, vit_file) -> list[str]:
    """The frozen-encoder overrides; ``cache`` is ``data.cache_dir`` (the session's ``data_cache`` where a
    test renders data: the emoji render is most of a training test's time)."""
    return [
        f"data.cache_dir={cache}",
        "data.sources=[fontglyphs,emoji]",
        "data.channels=3",
        "data.rotations=false",
        "model.backbone=frozen:vit_b16",
        f"model.backbone_weights={vit_file}",
        "model.backbone_image_size=32",
        "model.num_classes=10",
        "eval.split_benchmarks=[]",
    ]


def _smoke_train(tmp_path, recipe: str = "acl") -> list[str]:
    """The CLI arguments of ``<recipe> train`` on the smoke preset into ``tmp_path / "r"``."""
    return [recipe, "train", "--preset", "smoke", "--run-dir", str(tmp_path / "r")]


def _cfg(cache, vit_file, *overrides):
    return load_config(ACLConfig, preset_path("acl", "smoke"), [*_frozen(cache, vit_file), *overrides])


@pytest.mark.slow
def test_frozen_train_and_mini_evaluation(tmp_path, vit_file, data_cache):
    run = tmp_path / "run"
    cfg = _cfg(
        data_cache,
        vit_file,
        "train.n_way=2",
        "train.num_tasks=5",
        "train.scenario=class",
        "train.max_steps=2",
        "train.val_every_steps=2",
        "train.val_episodes=4",
    )
    acl.train(cfg, run)
    model = acl.build_model(cfg)
    assert isinstance(model.backbone, FeatureInput) and model.backbone.feature_dim == 64
    saved = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["model"]
    # the encoder is never part of the model: its checkpoint holds only the encoder's weights hash
    assert [k for k in saved if k.startswith("backbone.")] == ["backbone.encoder_sha256"]
    encoder = model.backbone.trained_encoder()
    features = [f for f in (data_cache / "features").rglob("*.npz") if encoder[:12] in str(f)]
    assert {f.name.split("-")[0] for f in features} >= {"FontGlyphs_train", "EmojiImages_train"}
    stamps = {f: f.stat().st_mtime_ns for f in features}

    overrides = [
        "eval.mini_benchmarks=[five_datasets,emoji]",
        "eval.split_runs=2",
        "eval.mini_query_per_class=7",
        "eval.split_query_per_class=3",
    ]
    results = acl.evaluate(run, overrides=overrides)
    assert all(f.stat().st_mtime_ns == t for f, t in stamps.items())  # cached features reused, not rewritten
    assert results["run"]["backbone"].startswith("vit_b16 (frozen; weights sha256 ")
    five, emoji = results["mini"]["mini 5-datasets (offline analogue)"], results["mini"]["mini Split-Emoji"]
    names = five["acl"]["task_names"]
    assert [n.split(" ")[0] for n in names[:3] + names[4:]] == [
        "Digits",
        "Fashion-MNIST",
        "FontLetters",
        "ColourDigits",
    ]
    assert (
        five["queries"][0] == 14 and five["queries"][3] == 2 * 3
    )  # 7 test images; emoji: its last 3 examples
    for res in (five, emoji):
        assert res["num_tasks"] == 5 and res["n_way"] == 2 and res["runs"] == 2
        for learner in ("acl", "ncm"):
            r = res[learner]
            assert len(r["R"]) == 5 and 0.0 <= r["ACC"]["mean"] <= 1.0
            assert set(r["alone"]) == set(r["task_names"])
    # the checkpoint records the encoder: other weights at evaluation time are refused
    assert model.backbone.trained_encoder() is not None
    other = tmp_path / "other.pt"
    torch.save({k: v + 1 for k, v in torch.load(vit_file, weights_only=True).items()}, other)
    with pytest.raises(ValueError, match=r"model.backbone_weights: the vit_b16 weights now have sha256"):
        acl.evaluate(
            run, out_dir=tmp_path / "eval2", overrides=[*overrides, f"model.backbone_weights={other}"]
        )
    report = (run / "report.md").read_text()
    assert "mini Split-Emoji" in report and "nearest class mean" in report and "vit_b16 (frozen" in report


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.rotations=true", "data.rotations"),
        ("train.augment.grayscale=0.5", "train.augment.grayscale"),
        ("eval.split_benchmarks=[digits]", "eval.split_benchmarks"),
        ("model.num_classes=5", "eval.mini_benchmarks"),
        ("model.backbone=frozen:nope", "model.backbone"),
        ("model.backbone=conv5", "model.backbone"),
        ("model.backbone_image_size=8", "model.backbone_image_size"),
        ("eval.mini_datasets=[digits,digits,emoji,font_letters,colour_digits]", "eval.mini_datasets"),
        ("eval.mini_datasets=[digits,svhn]", "eval.mini_datasets"),
        ("eval.mini_benchmarks=[cifar]", "eval.mini_benchmarks"),
        ("eval.mini_demos_per_class=2", "eval.mini_demos_per_class"),
        ("model.backbone_image_size=36", "model.backbone_image_size"),  # not a multiple of the patch (8)
        ("model.backbone=conv4", "model.backbone_weights"),  # a weights file without a frozen encoder
    ],
)
def test_bad_frozen_settings_are_one_line_errors(tmp_path, vit_file, capsys, override, key):
    args = [*_smoke_train(tmp_path), *_frozen(tmp_path, vit_file), "eval.mini_benchmarks=[emoji]"]
    args += ["eval.split_k_shot=3", "eval.split_query_per_class=3", override]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "r").exists()


def test_mini_benchmarks_need_a_frozen_backbone(tmp_path, capsys):
    args = [*_smoke_train(tmp_path), "eval.mini_benchmarks=[emoji]"]
    assert main([*args, "eval.split_query_per_class=3"]) == 2
    assert "eval.mini_benchmarks" in capsys.readouterr().err


@pytest.mark.parametrize("weights", ["", "missing.pt"])
def test_vit_without_a_weights_file_is_refused_before_the_run_folder(tmp_path, vit_file, capsys, weights):
    args = [*_smoke_train(tmp_path), *_frozen(tmp_path, vit_file)]
    args.append(f"model.backbone_weights={tmp_path / weights if weights else ''}")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "model.backbone_weights" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("recipe", ["fewshot", "sequential"])
def test_other_classifier_recipes_refuse_a_frozen_backbone(tmp_path, capsys, recipe):
    args = [*_smoke_train(tmp_path, recipe), "model.backbone=frozen:vit_b16"]
    assert main(args) == 2
    assert "model.backbone" in capsys.readouterr().err


@pytest.mark.slow
def test_results_json_is_strict(tmp_path, data_cache):
    """A mini evaluation's results serialise as strict JSON (no NaN)."""
    run = tmp_path / "run"
    # other encoder weights than vit_file's, so its features (cached per weights hash in the shared
    # cache) are never written while test_frozen_train_and_mini_evaluation checks that its own are kept
    vit = _write_vit(tmp_path / "vit.pt", seed=1)
    cfg = _cfg(data_cache, vit, "train.max_steps=1", "train.val_every_steps=1", "train.val_episodes=2")
    acl.train(cfg, run)
    overrides = ["eval.mini_benchmarks=[emoji]", "eval.split_runs=1", "eval.split_k_shot=2"]
    acl.evaluate(run, overrides=[*overrides, "eval.split_query_per_class=3"])
    json.loads(
        (run / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}")
    )
