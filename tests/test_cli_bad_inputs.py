"""Bad input in bulk: every case must end in exit code 2 with one line ``fastweights: error: …`` naming
the key, argument or file — never a traceback — and must leave every file that existed before unchanged.

Each case runs in its own folder holding copies of a finished ACL smoke run (``run``), a second ACL
run (``other``), a finished LM smoke run (``lmrun``) and a small text corpus.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from fastweights.cli import main

WORDS = "and the of that in he shall unto for his a lord they be is him not them it with all".split()


@dataclass
class Case:
    id: str
    argv: list[str]
    match: str  # regex the error line must contain (after "fastweights: error: ")
    setup: Callable[[Path], None] | None = None
    patch: dict[str, object] = field(default_factory=dict)  # "module.ATTR" -> value, set for the call


def _write(rel: str, data: bytes) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    return setup


def _truncate(rel: str, keep: float) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * keep)])

    return setup


def _zero_fill(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.write_bytes(b"\0" * p.stat().st_size)

    return setup


def _remove(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()

    return setup


def _mkdir(rel: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / rel).mkdir(parents=True)

    return setup


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        text = p.read_text()
        assert old in text, f"{rel} has no {old!r}"
        p.write_text(text.replace(old, new))

    return setup


def _append(rel: str, text: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.write_text(p.read_text() + text)

    return setup


ACL_NEW = ["acl", "train", "--preset", "smoke", "--run-dir", "{root}/new", "data.cache_dir={cache}"]
FS_NEW = ["fewshot", "train", "--preset", "smoke", "--run-dir", "{root}/new", "data.cache_dir={cache}"]
SEQ_NEW = [
    "sequential",
    "train",
    "--preset",
    "smoke",
    "--run-dir",
    "{root}/new",
    "domain_a.cache_dir={cache}",
]
LM_NEW = ["lm", "train", "--preset", "smoke", "--run-dir", "{root}/new", "data.path={root}/corpus.txt"]

CASES = [
    # --- ACL config overrides, checked before anything is written
    Case("acl-n_query-0", [*ACL_NEW, "train.n_query=0"], r"train\.n_query"),
    Case("acl-num_heads-0", [*ACL_NEW, "model.num_heads=0"], r"model\.num_heads"),
    Case("acl-channels-0", [*ACL_NEW, "model.channels=0"], r"model\.channels"),
    Case("acl-device-mps", [*ACL_NEW, "device=mps"], r"device"),
    Case("acl-threads-neg", [*ACL_NEW, "train.threads=-1"], r"train\.threads"),
    Case("acl-lr-inf", [*ACL_NEW, "train.lr=inf"], r"train\.lr"),
    Case("acl-lr-negative", [*ACL_NEW, "train.lr=-0.1"], r"train\.lr"),
    Case("acl-lr-text", [*ACL_NEW, "train.lr=fast"], r"train\.lr"),
    Case("acl-adam_eps-inf", [*ACL_NEW, "train.adam_eps=.inf"], r"train\.adam_eps"),
    Case("acl-max_minutes-nan", [*ACL_NEW, "train.max_minutes=.nan"], r"train\.max_minutes"),
    Case("acl-unknown-key", [*ACL_NEW, "train.learning_rate=1"], r"train\.learning_rate"),
    Case("acl-unknown-section", [*ACL_NEW, "optim.lr=1"], r"optim"),
    Case("acl-layer-unknown", [*ACL_NEW, "model.sequence_layer=transformerxl"], r"model\.sequence_layer"),
    Case("acl-batch-0", [*ACL_NEW, "train.batch_size=0"], r"train\.batch_size"),
    Case("acl-n_way-0", [*ACL_NEW, "train.n_way=0"], r"train\.n_way"),
    Case("acl-k_shot-0", [*ACL_NEW, "train.k_shot=0"], r"train\.k_shot"),
    Case("acl-num_tasks-0", [*ACL_NEW, "train.num_tasks=0"], r"train\.num_tasks"),
    Case("acl-n_way-above-classes", [*ACL_NEW, "train.n_way=9"], r"train\.n_way"),
    Case("acl-d_model-0", [*ACL_NEW, "model.d_model=0"], r"model\.d_model"),
    Case("acl-d_model-indivisible", [*ACL_NEW, "model.d_model=30"], r"model\.(d_model|num_heads)"),
    Case("acl-num_layers-0", [*ACL_NEW, "model.num_layers=0"], r"model\.num_layers"),
    Case("acl-dropout-1.5", [*ACL_NEW, "model.dropout=1.5"], r"model\.dropout"),
    Case("acl-norm-unknown", [*ACL_NEW, "model.norm=group"], r"model\.norm"),
    Case("acl-warmup-neg", [*ACL_NEW, "train.warmup_steps=-1"], r"train\.warmup_steps"),
    Case("acl-schedule-unknown", [*ACL_NEW, "train.schedule=cosine_restarts"], r"train\.schedule"),
    Case("acl-max_steps-neg", [*ACL_NEW, "train.max_steps=-1"], r"train\.max_steps"),
    Case("acl-val_every-0", [*ACL_NEW, "train.val_every_steps=0"], r"train\.val_every_steps"),
    Case("acl-ckpt_every-0", [*ACL_NEW, "train.checkpoint_every_steps=0"], r"train\.checkpoint_every_steps"),
    Case("acl-grad_clip-neg", [*ACL_NEW, "train.grad_clip=-1"], r"train\.grad_clip"),
    Case("acl-betas-short", [*ACL_NEW, "train.adam_betas=[0.9]"], r"train\.adam_betas"),
    Case("acl-betas-range", [*ACL_NEW, "train.adam_betas=[0.9,1.5]"], r"train\.adam_betas"),
    Case("acl-image_size-0", [*ACL_NEW, "data.image_size=0"], r"data\.image_size"),
    Case("acl-examples-0", [*ACL_NEW, "data.examples_per_class=0"], r"data\.examples_per_class"),
    Case("acl-noise-neg", [*ACL_NEW, "train.synthetic_noise=-1"], r"train\.synthetic_noise"),
    Case("acl-backbone_precision", [*ACL_NEW, "train.backbone_precision=fp16"], r"train\.backbone_precision"),
    Case("acl-val_episodes-0", [*ACL_NEW, "train.val_episodes=0"], r"train\.val_episodes"),
    Case("acl-split_runs-0", [*ACL_NEW, "eval.split_runs=0"], r"eval\.split_runs"),
    Case("acl-scenario-unknown", [*ACL_NEW, "eval.scenarios=[task]"], r"eval\.scenarios"),
    Case("acl-benchmark-unknown", [*ACL_NEW, "eval.split_benchmarks=[cifar100]"], r"eval\.split_benchmarks"),
    Case(
        "acl-init_from-missing", [*ACL_NEW, "train.init_from={root}/none.pt"], r"train\.init_from.*none\.pt"
    ),
    Case(
        "acl-init_from-damaged",
        [*ACL_NEW, "train.init_from={root}/bad.pt"],
        r"train\.init_from.*bad\.pt",
        _write("bad.pt", b"not a checkpoint"),
    ),
    Case("acl-override-no-equals", [*ACL_NEW, "train.lr"], r"train\.lr|key=value"),
    # --- ACL cross-domain / split / meta-finetuning keys, checked before any data is built
    Case("acl-sources-unknown", [*ACL_NEW, "data.sources=[fontglyphs,nope]"], r"data\.sources.*nope"),
    Case("acl-sources-duplicate", [*ACL_NEW, "data.sources=[fontglyphs,fontglyphs]"], r"data\.sources"),
    Case(
        "acl-sources-string",
        [*ACL_NEW, "data.sources=fontglyphs"],
        r"data\.sources: expected a list, got 'fontglyphs'",
    ),
    Case(
        "acl-sources-mapping",
        [*ACL_NEW, "data.sources={{a: fontglyphs}}"],
        r"data\.sources: expected a list, got a mapping",
    ),
    Case("acl-sources-number", [*ACL_NEW, "data.sources=3"], r"data\.sources: expected a list, got 3"),
    Case("acl-sources-nested", [*ACL_NEW, "data.sources=[[fontglyphs]]"], r"data\.sources"),
    Case(
        "acl-channels-1-rgb-domain",
        [*ACL_NEW, "data.sources=[fontglyphs,emoji]"],
        r"data\.channels: expected 3.*emoji.*got 1",
    ),
    Case("acl-channels-1-rgb-source", [*ACL_NEW, "data.source=emoji"], r"data\.channels"),
    Case("fewshot-channels-1-rgb-source", [*FS_NEW, "data.source=emoji"], r"data\.channels"),
    Case("acl-train-scenario-unknown", [*ACL_NEW, "train.scenario=task"], r"train\.scenario"),
    Case(
        "acl-train-sequence-domains-unknown",
        [*ACL_NEW, "train.sequence_domains=mixed"],
        r"train\.sequence_domains",
    ),
    Case("acl-augment-gray-high", [*ACL_NEW, "train.augment.grayscale=1.5"], r"train\.augment\.grayscale"),
    Case("acl-augment-low-res-text", [*ACL_NEW, "train.augment.low_res=often"], r"train\.augment\.low_res"),
    Case("acl-augment-size-1", [*ACL_NEW, "train.augment.low_res_size=1"], r"train\.augment\.low_res_size"),
    Case("acl-label-init-scale-0", [*ACL_NEW, "model.label_init_scale=0"], r"model\.label_init_scale"),
    Case("acl-input-init-scale-text", [*ACL_NEW, "model.input_init_scale=big"], r"model\.input_init_scale"),
    Case(
        "acl-layer-options-unknown",
        [*ACL_NEW, "model.layer_options={{inits: modern}}"],
        r"model\.layer_options",
    ),
    Case("acl-layer-options-list", [*ACL_NEW, "model.layer_options=[1]"], r"model\.layer_options"),
    Case(
        "acl-layer-options-per-layer-unknown",
        [*ACL_NEW, "model.layer_options={{srwm: {{inits: modern}}}}"],
        r"model\.layer_options\.srwm",
    ),
    Case(
        "acl-layer-options-block-unknown",
        [*ACL_NEW, "model.layer_options.block=post_ln"],
        r"error: model\.layer_options\.block: expected one of \['native', 'pre_ln'\], got 'post_ln'$",
    ),
    Case(
        "acl-layer-options-per-layer-block-unknown",
        [*ACL_NEW, "model.layer_options={{deltanet: {{block: 3}}}}"],
        r"error: model\.layer_options\.deltanet\.block: expected one of \['native', 'pre_ln'\], got 3$",
    ),
    Case("acl-augment-unknown", [*ACL_NEW, "train.augment.blur=0.5"], r"train\.augment\.blur"),
    Case(
        "acl-class-scenario-too-few-outputs",
        [*ACL_NEW, "train.scenario=class", "train.num_tasks=5", "train.n_way=2"],
        r"model\.num_classes.*train\.n_way \* train\.num_tasks|train\.n_way \* train\.num_tasks.*num_classes",
    ),
    Case("acl-long_span-0", [*ACL_NEW, "eval.long_span_tasks=[0]"], r"eval\.long_span_tasks"),
    Case("acl-long_span-1", [*ACL_NEW, "eval.long_span_tasks=[5,1]"], r"eval\.long_span_tasks"),
    Case("acl-long_span-text", [*ACL_NEW, "eval.long_span_tasks=[many]"], r"eval\.long_span_tasks"),
    Case(
        "acl-long_span-scalar",
        [*ACL_NEW, "eval.long_span_tasks=5"],
        r"eval\.long_span_tasks: expected a list",
    ),
    Case("acl-split_query-0", [*ACL_NEW, "eval.split_query_per_class=0"], r"eval\.split_query_per_class"),
    Case(
        "acl-split_query-long-span-too-many",
        [*ACL_NEW, "eval.long_span_tasks=[5]", "eval.split_query_per_class=7"],
        r"eval\.split_query_per_class.*data\.examples_per_class",
    ),
    Case(
        "acl-split_query-emoji-too-many",
        [*ACL_NEW, "data.channels=3", "eval.split_benchmarks=[emoji]", "eval.split_query_per_class=20"],
        r"eval\.split_query_per_class.*data\.examples_per_class",
    ),
    Case("acl-mnist-without-dir", [*ACL_NEW, "eval.split_benchmarks=[mnist]"], r"data\.mnist_dir"),
    Case(
        "acl-emoji-benchmark-gray-model",
        [*ACL_NEW, "eval.split_benchmarks=[digits,emoji]"],
        r"eval\.split_benchmarks.*data\.channels",
    ),
    Case(
        "acl-init_from-other-channels",
        [*ACL_NEW, "train.init_from={root}/run/checkpoints/best.pt", "data.channels=3"],
        r"train\.init_from.*best\.pt.*backbone.*\[8, 3, 3, 3\].*\[8, 1, 3, 3\]",
    ),
    Case(
        "acl-init_from-other-d_model",
        [*ACL_NEW, "train.init_from={root}/run/checkpoints/best.pt", "model.d_model=64"],
        r"train\.init_from.*best\.pt.*input_proj\.weight.*\[64, 38\].*\[32, 38\]",
    ),
    Case(
        "acl-init_from-folder-without-a-model",
        [*ACL_NEW, "train.init_from={root}/run/checkpoints"],
        r"train\.init_from.*checkpoints.*expected a run or export folder",
    ),
    Case(
        "acl-init_from-lm-checkpoint",
        [*ACL_NEW, "train.init_from={root}/lmrun/checkpoints/best.pt"],
        r"train\.init_from.*lmrun/checkpoints/best\.pt.*unexpected \['model\.embed_tokens\.weight'",
    ),
    Case(
        "acl-init_from-other-layer",
        [*ACL_NEW, "train.init_from={root}/run/checkpoints/best.pt", "model.sequence_layer=deltanet"],
        r"train\.init_from.*best\.pt.*missing \['seq_layers\.0\.slow_net\.weight'",
    ),
    Case(
        "acl-init_from-other-num_layers",
        [*ACL_NEW, "train.init_from={root}/run/checkpoints/best.pt", "model.num_layers=3"],
        r"train\.init_from.*best\.pt.*missing \['seq_layers\.2\.weight'",
    ),
    Case("acl-sources-needs-root", [*ACL_NEW, "data.sources=[fontglyphs,omniglot]"], r"data\.root.*omniglot"),
    Case(
        "acl-sources-split-dataset-needs-root",
        [*ACL_NEW, "data.sources=[fontglyphs,mnist]"],
        r"data\.root.*'mnist'",
    ),
    Case(
        "eval-long_span-too-many-tasks",
        [
            "acl",
            "eval",
            "{root}/run",
            "eval.long_span_tasks=[500]",
            "eval.split_query_per_class=2",
            "eval.split_benchmarks=[]",
        ],
        r"eval\.long_span_tasks: 500 tasks: .*24 classes of pool .FontGlyphs/test",
    ),
    Case(
        "acl-init_from-not-a-checkpoint-dict",
        [*ACL_NEW, "train.init_from={root}/t.pt"],
        r"train\.init_from.*t\.pt",
        lambda root: torch.save([1, 2, 3], root / "t.pt"),
    ),
    Case(
        "acl-emoji-font-missing",
        [*ACL_NEW, "data.sources=[fontglyphs,emoji]", "data.channels=3"],
        r"NotoColorEmoji\.ttf.*Debian package fonts-noto-color-emoji",
        patch={"fastweights.data.sources.emoji.EMOJI_FONT": Path("/nonexistent/NotoColorEmoji.ttf")},
    ),
    Case(
        "acl-emoji-test-missing",
        [*ACL_NEW, "data.source=emoji", "data.channels=3"],
        r"emoji-test\.txt.*Debian package unicode-data",
        patch={"fastweights.data.sources.emoji.EMOJI_TEST": Path("/nonexistent/emoji-test.txt")},
    ),
    Case(
        "eval-mnist-dir-empty",
        ["acl", "eval", "{root}/run", "eval.split_benchmarks=[mnist]", "data.mnist_dir={root}/mnist"],
        r"data\.mnist_dir: MNIST: expected the IDX files train-images-idx3-ubyte.*mnist/raw.*found none",
        _mkdir("mnist"),
    ),
    Case(
        "eval-mnist-dir-missing",
        ["acl", "eval", "{root}/run", "eval.split_benchmarks=[mnist]", "data.mnist_dir={root}/none"],
        r"data\.mnist_dir.*none/raw",
    ),
    Case(
        "eval-fashion-mnist-dir-empty",
        [
            "acl",
            "eval",
            "{root}/run",
            "eval.split_benchmarks=[fashion_mnist]",
            "data.fashion_mnist_dir={root}/fm",
        ],
        r"data\.fashion_mnist_dir: Fashion-MNIST: .*fm/raw.*found none.*apt-get install dataset-fashion",
        _mkdir("fm"),
    ),
    Case(
        "eval-config-sources-unknown",
        ["acl", "eval", "{root}/run"],
        r"config\.yaml.*data\.sources.*nope",
        _replace("run/config.yaml", "sources: []", "sources:\n  - nope"),
    ),
    Case(
        "eval-override-sources-unknown",
        ["acl", "eval", "{root}/run", "data.sources=[nope]"],
        r"data\.sources.*nope",
    ),
    # --- presets
    Case("preset-unknown", ["acl", "train", "--preset", "nope", "--run-dir", "{root}/new"], r"preset.*nope"),
    Case(
        "preset-yaml-missing",
        ["acl", "train", "--preset", "{root}/x.yaml", "--run-dir", "{root}/new"],
        r"x\.yaml(?!\.yaml)",
    ),
    Case(
        "preset-yaml-syntax",
        ["acl", "train", "--preset", "{root}/bad.yaml", "--run-dir", "{root}/new"],
        r"bad\.yaml",
        _write("bad.yaml", b"train:\n  lr: [1, 2\n  batch_size: 3\n"),
    ),
    Case(
        "preset-yaml-not-mapping",
        ["acl", "train", "--preset", "{root}/list.yaml", "--run-dir", "{root}/new"],
        r"list\.yaml",
        _write("list.yaml", b"- 1\n- 2\n"),
    ),
    Case(
        "preset-yaml-unknown-key",
        ["acl", "train", "--preset", "{root}/u.yaml", "--run-dir", "{root}/new"],
        r"u\.yaml|train\.lrate",
        _write("u.yaml", b"train:\n  lrate: 1\n"),
    ),
    # --- other recipes' configs
    Case("fewshot-source-unknown", [*FS_NEW, "data.source=imagenet"], r"data\.source"),
    Case("fewshot-omniglot-no-root", [*FS_NEW, "data.source=omniglot"], r"data\.root"),
    Case("fewshot-channels-2", [*FS_NEW, "data.channels=2"], r"data\.channels"),
    Case("fewshot-n_query-0", [*FS_NEW, "train.n_query=0"], r"train\.n_query"),
    Case("fewshot-eval-runs-0", [*FS_NEW, "eval.runs=0"], r"eval\.runs"),
    Case("sequential-max_trim-neg", [*SEQ_NEW, "train.max_trim=-1"], r"train\.max_trim"),
    Case("sequential-domain-unknown", [*SEQ_NEW, "domain_b.source=svhn"], r"domain_b\.source"),
    Case("lm-mixer-unknown", [*LM_NEW, "model.sequence_layer=gru"], r"model\.sequence_layer"),
    Case(
        "lm-layer-options-block-unknown",
        [*LM_NEW, "model.layer_options.block=post_ln"],
        r"error: model\.layer_options\.block: expected one of \['native', 'pre_ln'\], got 'post_ln'$",
    ),
    Case("lm-seq_len-0", [*LM_NEW, "train.seq_len=0"], r"train\.seq_len"),
    Case("lm-min_lr-above-lr", [*LM_NEW, "train.min_lr=1"], r"train\.min_lr"),
    Case("lm-warmup-fraction", [*LM_NEW, "train.warmup_fraction=1.5"], r"train\.warmup_fraction"),
    Case("lm-heads-0", [*LM_NEW, "model.num_heads=0"], r"model\.num_heads"),
    Case("lm-path-missing", [*LM_NEW[:-1], "data.path={root}/none.txt"], r"data\.path"),
    Case("lm-path-empty-string", [*LM_NEW[:-1], "data.path="], r"data\.path"),
    Case(
        "lm-path-binary",
        [*LM_NEW[:-1], "data.path={root}/run/checkpoints/best.pt"],
        r"data\.path.*best\.pt",
    ),
    Case(
        "lm-path-latin1",
        [*LM_NEW[:-1], "data.path={root}/latin1.txt"],
        r"data\.path.*latin1\.txt",
        _write("latin1.txt", "café crème brûlée ".encode("latin-1") * 100),
    ),
    # --- run folders: never destroy, never a traceback
    Case("train-existing-run", [*ACL_NEW[:-2], "{root}/run", "data.cache_dir={cache}"], r"run.*--resume"),
    Case("export-into-other-run", ["acl", "export", "{root}/run", "{root}/other"], r"other"),
    Case("export-into-itself", ["acl", "export", "{root}/run", "{root}/run"], r"run"),
    Case("lm-export-into-other-run", ["lm", "export", "{root}/lmrun", "{root}/other"], r"other"),
    Case("eval-out-into-other-run", ["acl", "eval", "{root}/run", "--out", "{root}/other"], r"other"),
    Case("eval-missing-folder", ["acl", "eval", "{root}/nothing"], r"nothing"),
    Case("eval-no-config", ["acl", "eval", "{root}/run"], r"config\.yaml", _remove("run/config.yaml")),
    Case(
        "eval-best-truncated",
        ["acl", "eval", "{root}/run"],
        r"best\.pt",
        _truncate("run/checkpoints/best.pt", 0.5),
    ),
    Case(
        "eval-best-empty", ["acl", "eval", "{root}/run"], r"best\.pt", _write("run/checkpoints/best.pt", b"")
    ),
    Case(
        "eval-best-zero-filled",
        ["acl", "eval", "{root}/run"],
        r"best\.pt",
        _zero_fill("run/checkpoints/best.pt"),
    ),
    Case(
        "eval-latest-truncated",
        ["acl", "eval", "{root}/run", "--checkpoint", "latest"],
        r"latest\.pt",
        _truncate("run/checkpoints/latest.pt", 0.9),
    ),
    Case(
        "eval-best-garbage",
        ["acl", "eval", "{root}/run"],
        r"best\.pt",
        _write("run/checkpoints/best.pt", b"PK\3\4x"),
    ),
    Case("eval-no-best", ["acl", "eval", "{root}/run"], r"best", _remove("run/checkpoints/best.pt")),
    Case(
        "resume-latest-truncated",
        [*ACL_NEW[:-2], "{root}/run", "--resume", "data.cache_dir={cache}"],
        r"latest\.pt",
        _truncate("run/checkpoints/latest.pt", 0.5),
    ),
    Case(
        "resume-without-checkpoints",
        [*ACL_NEW[:-2], "{root}/run", "--resume", "data.cache_dir={cache}"],
        r"checkpoint",
        _remove("run/checkpoints"),
    ),
    Case(
        "resume-forbidden-override",
        [*ACL_NEW[:-2], "{root}/run", "--resume", "data.cache_dir={cache}", "model.d_model=64"],
        r"model\.d_model",
    ),
    Case(
        "config-unknown-key",
        ["acl", "eval", "{root}/run"],
        r"config\.yaml.*(bogus|unknown)|(bogus|unknown).*config\.yaml",
        _append("run/config.yaml", "bogus: 1\n"),
    ),
    Case(
        "config-yaml-syntax",
        ["acl", "eval", "{root}/run"],
        r"config\.yaml",
        _append("run/config.yaml", "train: [1, 2\n"),
    ),
    Case("config-empty", ["acl", "eval", "{root}/run"], r"config\.yaml", _write("run/config.yaml", b"")),
    Case("lm-eval-acl-run", ["lm", "eval", "{root}/run"], r"config\.yaml"),
    Case("acl-eval-lm-run", ["acl", "eval", "{root}/lmrun"], r"config\.yaml"),
    Case("eval-bad-override", ["acl", "eval", "{root}/run", "eval.split_runs=0"], r"eval\.split_runs"),
    Case("lm-eval-bad-split", ["lm", "eval", "{root}/lmrun", "eval.splits=[train,dev]"], r"eval\.splits"),
    Case(
        "lm-generate-too-many",
        ["lm", "generate", "{root}/lmrun", "--prompt", "x", "--max-new-tokens", "10000000"],
        r"--max-new-tokens",
    ),
    Case("lm-generate-empty-prompt", ["lm", "generate", "{root}/lmrun", "--prompt", ""], r"prompt"),
    Case("curves-missing", ["acl", "curves", "{root}/nothing", "--out", "{root}/c.png"], r"nothing"),
    Case(
        "compare-unknown-model",
        ["fewshot", "compare", "--models", "srwm,gru", "--run-root", "{root}/cmp"],
        r"models|gru",
    ),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory, data_cache) -> Path:
    """Finished smoke runs (ACL twice, LM once) and a corpus, built once for the module; ``cache``
    links to the session's data cache (decoded data shared with the other tests)."""
    root = tmp_path_factory.mktemp("base")
    cache = root / "cache"
    cache.symlink_to(data_cache)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(WORDS), (6000,), generator=g).tolist()
    (root / "corpus.txt").write_text(" ".join(WORDS[i] for i in idx))
    for name in ("run", "other"):
        argv = ["acl", "train", "--preset", "smoke", "--run-dir", str(root / name), f"data.cache_dir={cache}"]
        assert main([*argv, "train.max_steps=2", "train.val_every_steps=2"]) == 0
    lm_argv = [
        "lm",
        "train",
        "--preset",
        "smoke",
        "--run-dir",
        str(root / "lmrun"),
        f"data.path={root}/corpus.txt",
    ]
    assert main([*lm_argv, "train.max_steps=2", "train.val_every_steps=2"]) == 0
    return root


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "cache" not in p.relative_to(root).parts
    }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_line_and_changes_nothing(
    case: Case, base: Path, tmp_path: Path, capsys, monkeypatch
):
    root = tmp_path / "w"
    shutil.copytree(base, root, ignore=shutil.ignore_patterns("cache"))
    (root / "cache").symlink_to(base / "cache")
    if case.setup is not None:
        case.setup(root)
    monkeypatch.delenv("FASTWEIGHTS_DATA", raising=False)  # the "no root folder" cases
    for target, value in case.patch.items():
        monkeypatch.setattr(target, value)
    before = _snapshot(root)
    argv = [a.format(root=root, cache=root / "cache") for a in case.argv]
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        rc = exit_.code
    err = capsys.readouterr().err
    assert rc == 2, f"exit code {rc}; stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    import re

    assert re.search(case.match, lines[0]), lines[0]
    after = _snapshot(root)
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f"pre-existing files changed or removed: {changed}"
    if case.argv[:2] in (["acl", "train"], ["fewshot", "train"], ["sequential", "train"], ["lm", "train"]):
        assert not (root / "new").exists(), "a config error must leave no run folder behind"


def test_at_least_sixty_cases():
    assert len(CASES) >= 60
