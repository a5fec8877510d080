"""Bad luck in bulk, across the recipes (rl, lm, fewshot, sequential, cl-baselines, acl with a frozen
encoder): sizes that cannot fit, damaged inputs, folders a command did not create, resumes that cannot
write. Every case ends in exit code 2 with exactly one line ``fastweights: error: …`` naming the key,
argument or file — never a traceback — and leaves every file that existed before byte-identical.

Each case runs in its own copy of finished smoke runs of every recipe (``base``). Besides the
parametrised cases: a cl-baselines resume over a cell of the wrong shape recomputes that cell (it is a
cache); a resume that fails after it started training, before its first checkpoint, puts the folder
back; compare replaces the files it wrote itself and, with ``--force``, the user's.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from fastweights.cli import main
from fastweights.io import JsonlLogger
from fastweights.train import checkpoint
from fastweights.train.run_folder import CLAIMS_NAME, OutputClaims, RunFolderError, check_writable
from tests.test_cli_bad_inputs import _truncate, _write

WORDS = "and the of that in he shall unto for his a lord they be is him not them it with all".split()
HUGE = "1000000000000"  # 10**12
SEED_30 = str(10**30)
RANDOM_BYTES = b"a" * 128 + np.random.default_rng(0).bytes(2048)  # byte 128 is not UTF-8 text


@dataclass
class Case:
    id: str
    argv: list[str]
    match: str  # regex the `fastweights: error:` line must contain
    setup: Callable[[Path], None] | None = None
    unwritable: list[str] = field(default_factory=list)  # paths (relative to the copy) made unwritable


def _edit_json(rel: str, **values: object) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.write_text(json.dumps({**json.loads(p.read_text()), **values}))

    return setup


def _append(rel: str, text: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        p = root / rel
        p.write_text(p.read_text() + text)

    return setup


def _edited_comparison(root: Path) -> None:
    """An earlier ``cl-baselines compare`` of this copy's run into ``clbcmp``, whose comparison.md the
    user then edited."""
    assert main(["cl-baselines", "compare", str(root / "clb"), "--out", str(root / "clbcmp")]) == 0
    _append("clbcmp/comparison.md", "\nmy note\n")(root)


def _wrong_layout(root: Path) -> None:
    torch.save({"encoder.weight": torch.zeros(3)}, root / "wrong.pth")


def _train(recipe: str, *extra: str) -> list[str]:
    """``<recipe> train`` of the smoke preset into ``{root}/new``."""
    data = {
        "lm": ["data.path={root}/corpus.txt"],
        "rl": [],
        "sequential": ["domain_a.cache_dir={cache}"],
    }.get(recipe, ["data.cache_dir={cache}"])
    return [recipe, "train", "--preset", "smoke", "--run-dir", "{root}/new", *data, *extra]


def _resume(recipe: str) -> list[str]:
    """``<recipe> train --resume`` of the finished smoke run ``{root}/<recipe>``, two steps further."""
    return [
        recipe,
        "train",
        "--preset",
        "smoke",
        "--run-dir",
        "{root}/" + recipe,
        "--resume",
        "train.max_steps=4",
    ]


def _compare(recipe: str) -> list[str]:
    return [recipe, "compare", "--models", "deltanet", "--preset", "smoke", "--run-root", "{root}/cmp"]


VIT = [
    "model.backbone=frozen:vit_b16",
    "data.channels=3",
]  # with the smoke preset's rotations, split benchmarks
RECIPES = ("rl", "lm", "fewshot", "sequential")

CASES = [
    # --- 1. sizes that cannot fit: refused before anything is allocated or written
    Case(
        "rl-d_ff-huge",
        _train("rl", f"model.d_ff={HUGE}"),
        rf"model\.d_ff={HUGE}: .* parameters.* TB.* memory",
    ),
    Case(
        "lm-d_ff-huge",
        _train("lm", f"model.d_ff={HUGE}"),
        rf"model\.d_ff={HUGE}: .* parameters.* TB.* memory",
    ),
    Case(
        "fewshot-d_model-huge",
        _train("fewshot", f"model.d_model={HUGE}"),
        rf"model\.d_model={HUGE}: .*too many to count.* EB, more than .* memory",
    ),
    Case(
        "sequential-d_model-huge",
        _train("sequential", f"model.d_model={HUGE}"),
        rf"model\.d_model={HUGE}: .*too many to count.* EB, more than .* memory",
    ),
    Case(
        "fewshot-examples_per_class-huge",
        _train("fewshot", f"data.examples_per_class={HUGE}"),
        rf"data\.examples_per_class={HUGE}: .* PB.* memory",
    ),
    Case(
        "fewshot-batch_size-huge",
        _train("fewshot", f"train.batch_size={HUGE}"),
        rf"train\.batch_size={HUGE}: the batch's activations .* TB.* memory",
    ),
    Case(
        "lm-batch_size-huge",
        _train("lm", f"train.batch_size={HUGE}"),
        rf"train\.batch_size={HUGE}: the batch's activations \(train\.seq_len=.* PB.* memory",
    ),
    Case(
        "lm-eval-d_ff-huge",
        ["lm", "eval", "{root}/lm", f"model.d_ff={HUGE}"],
        rf"model\.d_ff={HUGE}: .* parameters.* memory",
    ),
    # --- 1. a damaged export folder
    Case(
        "lm-generate-export-safetensors-truncated",
        ["lm", "generate", "{root}/lmexport", "--prompt", "the"],
        r"lmexport/model\.safetensors: damaged",
        _truncate("lmexport/model.safetensors", 0.5),
    ),
    Case(
        "lm-generate-export-safetensors-random",
        ["lm", "generate", "{root}/lmexport", "--prompt", "the"],
        r"lmexport/model\.safetensors: damaged",
        _write("lmexport/model.safetensors", RANDOM_BYTES),
    ),
    Case(
        "lm-generate-export-config-json-truncated",
        ["lm", "generate", "{root}/lmexport", "--prompt", "the"],
        r"lmexport/config\.json: damaged",
        _truncate("lmexport/config.json", 0.5),
    ),
    Case(
        "lm-generate-export-config-json-huge",
        ["lm", "generate", "{root}/lmexport", "--prompt", "the"],
        r"lmexport/config\.json: d_ff=1000000000000: the saved model's parameters \(fp32\) need at least",
        _edit_json("lmexport/config.json", d_ff=10**12),
    ),
    # --- 2. compare never replaces a file it did not write (every recipe's compare is the same code)
    *[
        Case(
            f"{recipe}-compare-user-{name}",
            _compare(recipe),
            rf"cmp/{re.escape(name)}: not written by `{recipe} compare`.*--force",
            _write(f"cmp/{name}", b"my own notes\n"),
        )
        for recipe, name in [
            ("rl", "comparison.md"),
            ("rl", "comparison.json"),
            ("rl", "comparison.png"),
            ("lm", "comparison_valid.png"),
            ("fewshot", "comparison.md"),
            ("sequential", "comparison.md"),
            ("acl", "comparison.md"),
        ]
    ],
    Case(
        "cl-baselines-compare-user-edited-md",
        ["cl-baselines", "compare", "{root}/clb", "--out", "{root}/clbcmp"],
        r"clbcmp/comparison\.md: not written by `cl-baselines compare`.*--force",
        _edited_comparison,
    ),
    # --- 2. a resume that cannot write changes nothing (the probe runs before the log is cut back)
    *[
        Case(
            f"{recipe}-resume-checkpoints-unwritable",
            _resume(recipe),
            rf"cannot --resume .*{recipe}: cannot write into .*{recipe}/checkpoints \(",
            unwritable=[f"{recipe}/checkpoints"],
        )
        for recipe in RECIPES
    ],
    Case(
        "lm-resume-log-unwritable",
        _resume("lm"),
        r"cannot --resume .*lm: cannot write .*lm/metrics\.jsonl \(",
        unwritable=["lm/metrics.jsonl"],
    ),
    Case(
        "rl-resume-folder-unwritable",
        _resume("rl"),
        r"rl: cannot write",  # the lock file cannot be created: the first write of all
        unwritable=["rl"],
    ),
    # --- 3. errors that say what is wrong
    Case(
        "preset-random-bytes",
        ["fewshot", "train", "--preset", "{root}/random.yaml", "--run-dir", "{root}/new"],
        r"random\.yaml: not a YAML text file",
        _write("random.yaml", RANDOM_BYTES),
    ),
    Case(
        "preset-control-characters",
        ["rl", "train", "--preset", "{root}/ctl.yaml", "--run-dir", "{root}/new"],
        r"ctl\.yaml: not a YAML text file \(control character U\+0000",
        _write("ctl.yaml", b"train:\n  lr: 1\0\0\0\n"),
    ),
    Case(
        "config-yaml-random-bytes-eval",
        ["lm", "eval", "{root}/lm"],
        r"lm/config\.yaml: not a YAML text file",
        _write("lm/config.yaml", RANDOM_BYTES),
    ),
    Case(
        "config-yaml-random-bytes-resume",
        _resume("rl"),
        r"rl/config\.yaml: not a YAML text file",
        _write("rl/config.yaml", RANDOM_BYTES),
    ),
    *[
        Case(
            f"{recipe}-seed-huge",
            _train(recipe, f"train.seed={SEED_30}"),
            r"train\.seed: .*\[0, 2147483647\]",
        )
        for recipe in RECIPES
    ],
    *[
        Case(
            f"{recipe}-threads-huge",
            _train(recipe, f"train.threads={HUGE}"),
            r"train\.threads: .*\[0, 1024\]",
        )
        for recipe in RECIPES
    ],
    Case(
        "lm-generate-seed-huge",
        ["lm", "generate", "{root}/lm", "--prompt", "the", "--seed", SEED_30],
        r"--seed: .*\[0, 2147483647\]",
    ),
    Case(
        "cl-baselines-seed-huge",
        ["cl-baselines", "run", "--preset", "smoke", "--run-dir", "{root}/new", f"seed={SEED_30}"],
        r"seed: .*\[0, 2147483647\]",
    ),
    Case(
        "cl-baselines-compare-results-truncated",
        ["cl-baselines", "compare", "{root}/clb", "--out", "{root}/out"],
        r"clb/results\.json: damaged",
        _truncate("clb/results.json", 0.6),
    ),
    Case(
        "cl-baselines-compare-results-random",
        ["cl-baselines", "compare", "{root}/clb", "--out", "{root}/out"],
        r"clb/results\.json: damaged",
        _write("clb/results.json", RANDOM_BYTES),
    ),
    Case(
        "acl-vit_b16-weights-missing",
        _train("acl", *VIT, "model.backbone_weights={root}/none.pth"),
        r"model\.backbone_weights: .*none\.pth",
    ),
    Case(
        "acl-vit_b16-weights-random-bytes",
        _train("acl", *VIT, "model.backbone_weights={root}/random.pth"),
        r"model\.backbone_weights: .*random\.pth \(damaged or not a PyTorch weights file",
        _write("random.pth", RANDOM_BYTES),
    ),
    Case(
        "acl-vit_b16-weights-wrong-layout",
        _train("acl", *VIT, "model.backbone_weights={root}/wrong.pth"),
        r"model\.backbone_weights: expected key 'conv_proj\.weight'.*wrong\.pth",
        _wrong_layout,
    ),
    Case(
        "acl-vit_b16-weights-none",
        _train("acl", *VIT),
        r"model\.backbone_weights: frozen:vit_b16 needs a weights file",
    ),
]


def _lm_corpus(root: Path) -> None:
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(WORDS), (6000,), generator=g).tolist()
    (root / "corpus.txt").write_text(" ".join(WORDS[i] for i in idx))


@pytest.fixture(scope="module")
def base(tmp_path_factory, data_cache) -> Path:
    """Finished two-step smoke runs of rl, lm, fewshot and sequential, an ``lm export`` folder, a
    one-method cl-baselines run and a corpus; built once for the module. ``cache`` links to the
    session's data cache (decoded data shared with the other tests)."""
    root = tmp_path_factory.mktemp("base")
    cache = root / "cache"
    cache.symlink_to(data_cache)
    _lm_corpus(root)
    # validation and checkpoints every 2 steps: a resume to step 4 logs step 4 before it saves anything
    short = [
        "train.max_steps=2",
        "train.val_every_steps=2",
        "train.checkpoint_every_steps=2",
        "train.threads=1",
    ]
    for recipe in RECIPES:
        argv = [a.format(root=root, cache=cache) for a in _train(recipe, *short)]
        argv[argv.index(f"{root}/new")] = str(root / recipe)
        assert main(argv) == 0, recipe
    assert main(["lm", "export", str(root / "lm"), str(root / "lmexport")]) == 0
    clb = ["--preset", "smoke", "--run-dir", str(root / "clb"), "--methods", "sgd", "--budget", "fewshot"]
    assert main(["cl-baselines", "run", *clb, "scenarios=[domain]"]) == 0
    return root


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "cache" not in p.relative_to(root).parts
    }


def _workspace(base: Path, tmp_path: Path) -> Path:
    root = tmp_path / "w"
    shutil.copytree(base, root, ignore=shutil.ignore_patterns("cache"))
    (root / "cache").symlink_to(base / "cache")
    return root


def _chattr_works(probe: Path) -> bool:
    """Whether ``chattr +i`` makes a folder refuse new files here (root with CAP_LINUX_IMMUTABLE on a
    file system that has the flag, e.g. ext4)."""
    if shutil.which("chattr") is None:
        return False
    probe.mkdir()
    try:
        if subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode != 0:
            return False
        try:
            (probe / "x").touch()
        except OSError:
            return True
        (probe / "x").unlink()
        return False
    finally:
        subprocess.run(["chattr", "-i", str(probe)], capture_output=True)


@contextlib.contextmanager
def unwritable(paths: list[Path], monkeypatch: pytest.MonkeyPatch, scratch: Path) -> Iterator[str]:
    """Make ``paths`` (folders or files) refuse writes at the OS level for the block; yields how.

    Root ignores permission bits, so as root the immutable flag (``chattr +i``) is used where the
    machine has it; without it, ``os.open`` (which ``tempfile.mkstemp``, the write probe and the atomic
    writers call) fails with ``EACCES`` for any path at or below ``paths`` opened for writing.
    """
    if not paths:
        yield "none"
        return
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        try:
            yield "chmod a-w"
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    if _chattr_works(scratch):
        for p in paths:
            subprocess.run(["chattr", "+i", str(p)], check=True)
        try:
            yield "chattr +i"
        finally:
            for p in paths:
                subprocess.run(["chattr", "-i", str(p)], check=True)
        return
    real_open = os.open
    blocked = [os.path.realpath(p) for p in paths]
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def refusing_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        target = os.path.realpath(path)
        if flags & writes and any(target == b or target.startswith(b + os.sep) for b in blocked):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    yield "os.open refusing writes"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse usage errors
        rc = exit_.code  # type: ignore[assignment]
    return rc, capsys.readouterr().err  # type: ignore[return-value]


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("fastweights: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_line_and_changes_nothing(
    case: Case,
    base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = _workspace(base, tmp_path)
    if case.setup is not None:
        case.setup(root)
    before = _snapshot(root)
    argv = [a.format(root=root, cache=root / "cache") for a in case.argv]
    with unwritable([root / p for p in case.unwritable], monkeypatch, tmp_path / "probe"):
        rc, err = _run(argv, capsys)
    assert rc == 2, f"exit code {rc}; stderr:\n{err}"
    line = _one_error_line(err)
    assert re.search(case.match, line), line
    after = _snapshot(root)
    changed = sorted(k for k in {*before, *after} if before.get(k) != after.get(k))
    assert not changed, f"files changed, added or removed: {changed}"
    if "{root}/new" in case.argv:
        assert not (root / "new").exists(), "a refused run must leave no run folder behind"


def test_the_cases_cover_every_kind_of_issue_31() -> None:
    ids = {c.id for c in CASES}
    for recipe in RECIPES:
        assert {
            f"{recipe}-resume-checkpoints-unwritable",
            f"{recipe}-seed-huge",
            f"{recipe}-threads-huge",
        } <= ids
    assert len(CASES) >= 40


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_resume_that_fails_before_its_first_checkpoint_leaves_the_folder_byte_identical(
    recipe: str,
    base: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The disk fills up when the resumed run saves its first checkpoint: it trained two steps, cut the
    log back to the checkpoint, rewrote config.yaml and command.txt, started TensorBoard files — and all
    of that is undone."""
    root = _workspace(base, tmp_path)
    before = _snapshot(root)

    def full(obj: object, path: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "atomic_torch_save", full)
    rc, err = _run([a.format(root=root) for a in _resume(recipe)], capsys)
    assert rc == 2, err
    line = _one_error_line(err)
    assert re.search(
        r"checkpoints/(best|latest)\.pt \(No space left on device\); the previous \1\.pt is intact", line
    )
    assert _snapshot(root) == before


def test_a_resume_whose_log_cannot_be_appended_leaves_the_folder_byte_identical(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _workspace(base, tmp_path)
    before = _snapshot(root)

    def full(self: JsonlLogger, **record: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))

    monkeypatch.setattr(JsonlLogger, "log", full)
    rc, err = _run([a.format(root=root) for a in _resume("lm")], capsys)
    assert rc == 2, err
    assert re.search(r"lm/metrics\.jsonl: No space left on device", _one_error_line(err))
    assert _snapshot(root) == before


WRONG_CELLS = {
    "empty-object": (b"{}", "sgd.json"),
    "list": (b"[1, 2]", "sgd.json"),
    "other-method": (json.dumps({"method": "l2"}).encode(), "sgd.json"),
    "no-test": (
        json.dumps({"method": "sgd", "settings": {}, "hparams": {}, "search": []}).encode(),
        "sgd.json",
    ),
    "settings-empty-object": (b"{}", "_settings-sgd.json"),
    "settings-bad-best": (
        json.dumps({"optimizer": "sgd", "best": {"lr": -1}, "search": []}).encode(),
        "_settings-sgd.json",
    ),
    "truncated": (b'{"method": "sgd", "test": {"A', "sgd.json"),
}


@pytest.mark.parametrize("kind", list(WRONG_CELLS))
def test_cl_baselines_resume_recomputes_a_cell_of_the_wrong_shape(
    kind: str,
    base: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cells are a cache: valid JSON of the wrong shape is logged (naming the cell) and recomputed,
    atomically, to the same numbers; the other cells are left as they are."""
    root = _workspace(base, tmp_path)
    cells = root / "clb" / "cells" / "digits" / "domain" / "fewshot"
    data, name = WRONG_CELLS[kind]
    good = {p.name: json.loads(p.read_text()) for p in cells.glob("*.json")}
    (cells / name).write_bytes(data)
    damaged = f"clb/cells/digits/domain/fewshot/{name}"
    others = {k: v for k, v in _snapshot(root).items() if k != damaged}
    clb = ["--preset", "smoke", "--run-dir", str(root / "clb"), "--methods", "sgd", "--budget", "fewshot"]
    with caplog.at_level("WARNING"):
        rc, err = _run(["cl-baselines", "run", *clb, "--resume", "scenarios=[domain]"], capsys)
    assert rc == 0, err
    assert "Traceback" not in err
    assert any(
        str(cells / name) in r.getMessage() and "recomputing it" in r.getMessage() for r in caplog.records
    )
    fixed = json.loads((cells / name).read_text())
    strip = lambda cell: {k: v for k, v in cell.items() if k != "seconds"}  # noqa: E731
    assert strip(fixed) == strip(good[name])
    after = _snapshot(root)
    untouched = [k for k in others if k.startswith("clb/cells/")]
    assert untouched and all(after[k] == others[k] for k in untouched)
    assert not list(cells.glob(".*.tmp"))


def test_compare_replaces_its_own_outputs_and_the_users_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "cmp"
    args = [
        "rl",
        "compare",
        "--models",
        "ff",
        "--preset",
        "smoke",
        "--run-root",
        str(root),
        "train.threads=1",
    ]
    args += ["train.max_steps=2", "train.val_every_steps=2", "eval.splits=[{start: 1000, count: 4}]"]
    assert main(args) == 0
    claims = json.loads((root / CLAIMS_NAME).read_text())["files"]
    assert sorted(claims) == ["comparison.json", "comparison.md", "comparison.png"]
    assert main(args) == 0  # its own earlier outputs: replaced without a word
    (root / "comparison.md").write_text("edited by hand\n")
    rc, err = _run(args, capsys)
    assert rc == 2 and "comparison.md: not written by `rl compare`" in _one_error_line(err)
    assert (root / "comparison.md").read_text() == "edited by hand\n"
    assert main([*args, "--force"]) == 0
    assert (root / "comparison.md").read_text().startswith("| model |")
    assert main(args) == 0  # claimed again after the forced write
    assert not list(root.glob(".fastweights-staging-*"))


def test_output_claims_check_every_name_before_moving_any(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    claims = OutputClaims(folder, "compare")
    with claims.staging() as stage:
        (stage / "a.md").write_text("a1")
        (stage / "plots").mkdir()
        (stage / "plots" / "b.png").write_bytes(b"b1")
        claims.publish(stage, force=False)
    assert (folder / "plots" / "b.png").read_bytes() == b"b1"
    (folder / "c.md").write_text("mine")
    (folder / "plots" / "b.png").write_bytes(b"edited")
    with claims.staging() as stage:
        (stage / "a.md").write_text("a2")
        (stage / "c.md").write_text("c2")
        (stage / "plots").mkdir()
        (stage / "plots" / "b.png").write_bytes(b"b2")
        with pytest.raises(
            RunFolderError, match=r"c\.md: not written by `compare` .*and 1 more: plots/b\.png"
        ):
            claims.publish(stage, force=False)
    assert (folder / "a.md").read_text() == "a1" and (folder / "c.md").read_text() == "mine"
    assert claims.unclaimed(["a.md", "c.md", "plots/b.png", "none.md"]) == ["c.md", "plots/b.png"]
    (folder / CLAIMS_NAME).write_text("{")  # a damaged record claims nothing
    assert claims.unclaimed(["a.md"]) == ["a.md"]


def test_check_writable_names_the_folder_that_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text("{}\n")
    check_writable(run, doing="--resume")
    assert sorted(p.name for p in run.rglob("*")) == ["checkpoints", "metrics.jsonl"]  # no probe left
    with unwritable([run / "checkpoints"], monkeypatch, tmp_path / "probe") as how:
        with pytest.raises(
            RunFolderError, match=rf"cannot --resume {run}: cannot write into {run}/checkpoints"
        ):
            check_writable(run, doing="--resume")
    assert how != "none"


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: 8e12 bytes"
        ),
        MemoryError("Unable to allocate 29.1 PiB for an array with shape (32, 1000000000000, 32, 32)"),
    ],
    ids=["torch-cpu-allocator", "numpy"],
)
def test_an_allocation_no_check_foresaw_is_one_line_not_a_traceback(
    error: BaseException, base: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastweights.recipes import lm

    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(lm, "generate", fail)
    rc, err = _run(["lm", "generate", str(base / "lm"), "--prompt", "the"], capsys)
    assert rc == 2, err
    assert re.search(
        r"out of memory \((RuntimeError|MemoryError): .*\); reduce the sizes", _one_error_line(err)
    )


def test_a_runtime_error_that_is_not_about_memory_stays_a_traceback(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only failed allocations become one line: any other RuntimeError is a bug to see in full."""
    from fastweights.recipes import lm

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(lm, "generate", fail)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        main(["lm", "generate", str(base / "lm"), "--prompt", "the"])


def test_cl_baselines_compare_reruns_over_a_staging_folder_left_by_a_killed_compare(
    base: Path, tmp_path: Path
) -> None:
    root = _workspace(base, tmp_path)
    args = ["cl-baselines", "compare", str(root / "clb"), "--out", str(root / "out")]
    assert main(args) == 0
    killed = root / "out" / ".fastweights-staging-k1ll3d"
    (killed / "plots").mkdir(parents=True)
    (killed / "plots" / "compare_domain.png").write_bytes(b"partial")
    assert main(args) == 0
    assert not killed.exists()
    assert sorted(p.name for p in (root / "out").iterdir()) == [
        CLAIMS_NAME,
        "comparison.json",
        "comparison.md",
        "plots",
    ]
