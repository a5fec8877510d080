"""``fastweights acl stream``: a folder of tasks learned task by task; the same numbers as the split-benchmark
evaluation on the same draws; bad folders as one line naming the path, with nothing written."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastweights.cl.split_protocol import evaluate_split_benchmark
from fastweights.cli import main
from fastweights.data.registry import load_split_dataset
from fastweights.data.sources.base import LabeledImages, SplitDataset, channel_stats, image_stats
from fastweights.data.streams import split_benchmark
from fastweights.recipes import acl
from fastweights.recipes.acl import ContinualLearner

LOWER = np.tril_indices(5)


def _png(path: Path, img: np.ndarray) -> None:
    """uint8 ``[S, S]`` or channels-first ``[3, S, S]`` as a (lossless) PNG file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.moveaxis(img, 0, -1) if img.ndim == 3 else img).save(path)


def _write_split(root: Path, tasks, scenario: str) -> None:
    """The tasks of one demonstration draw of a split benchmark as ``root/task<i>/class<c>/*.png``: each
    class's demonstrations ``a000.png, …`` (in the draw's order) before its queries ``b0000.png, …`` (in
    the data set's order), so ``--draw first`` takes the draw's demonstrations."""
    for i, task in enumerate(tasks):
        for pos, cls in enumerate(task.name.split("/")):
            label = pos if scenario == "domain" else int(cls)
            folder = root / f"task{i}" / f"class{cls}"
            for k, img in enumerate(task.support_images[task.support_labels == label]):
                _png(folder / f"a{k:03d}.png", img)
            for k, img in enumerate(task.query_images[task.query_labels == label]):
                _png(folder / f"b{k:04d}.png", img)


def _stream(model: Path, data: Path, out: Path, *extra: str) -> int:
    return main(["acl", "stream", "--model", str(model), "--data", str(data), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def digits():
    return load_split_dataset("digits", image_size=32)


def _rgb_split() -> SplitDataset:
    """A random RGB data set of 10 classes (4 train, 3 test images each, 32 px): colour blobs on noise."""
    rng = np.random.default_rng(5)

    def part(n: int) -> LabeledImages:
        labels = np.repeat(np.arange(10), n)
        images = rng.integers(0, 80, size=(len(labels), 3, 32, 32), dtype=np.uint8)
        for i, c in enumerate(labels):
            images[i, c % 3, 4 + c : 20 + c, 8:24] = 255 - 10 * c
        return LabeledImages(images, labels.astype(np.int64))

    train, test = part(4), part(3)
    mean, std = channel_stats(train.images)
    return SplitDataset("RGB blobs", train, test, 10, mean, std)


@pytest.mark.parametrize("which", ["domain", "class", "rgb"])
def test_a_split_benchmark_as_a_folder_gives_the_evaluation_protocols_numbers(
    which, smoke_domain, smoke_class, smoke_rgb, digits, tmp_path
):
    """Split-Digits (5 tasks, 2 demonstrations per class, the evaluation's run-0 draw) written as PNG
    files: ``acl stream --draw first`` with the data set's pixel statistics gives the accuracy matrix of
    ``evaluate_split_benchmark`` (what ``acl eval`` runs) exactly on and below the diagonal, and the same
    ACC / BWT / forgetting; domain-incremental, class-incremental, and grayscale images for an RGB model."""
    model = {"domain": smoke_domain, "class": smoke_class, "rgb": smoke_rgb}[which]
    scenario = "class" if which == "class" else "domain"
    learner = ContinualLearner.from_pretrained(model, device="cpu")
    expected = evaluate_split_benchmark(
        learner.model, digits, k_shot=2, runs=1, scenario=scenario, num_tasks=5
    )
    _write_split(tmp_path / "digits", split_benchmark(digits, k_shot=2, run=0, scenario=scenario), scenario)
    stats = ["--mean", repr(digits.mean), "--std", repr(digits.std)]
    assert (
        _stream(model, tmp_path / "digits", tmp_path / "out", "--shots", "2", "--draw", "first", *stats) == 0
    )
    got = json.loads((tmp_path / "out" / "results.json").read_text())["accuracy"]
    R, E = np.array(got["R"], dtype=np.float64), np.array(expected["R"])
    assert np.array_equal(R[LOWER], E[LOWER]), (R, E)
    assert np.isnan(R[np.triu_indices(5, 1)]).all()  # tasks not learned yet are not tested
    for key in ("ACC", "BWT", "forgetting", "learning_accuracy"):
        assert got[key]["mean"] == expected[key]["mean"], key
    assert got["n_out"] == expected["n_out"] and got["chance"] == expected["chance"]


def test_an_rgb_benchmark_as_a_folder_gives_the_evaluation_protocols_numbers(smoke_rgb, tmp_path):
    """The same with RGB images and per-channel statistics (``--mean R,G,B``)."""
    ds = _rgb_split()
    learner = ContinualLearner.from_pretrained(smoke_rgb, device="cpu")
    expected = evaluate_split_benchmark(learner.model, ds, k_shot=2, runs=1, scenario="domain")
    _write_split(tmp_path / "rgb", split_benchmark(ds, k_shot=2, run=0, scenario="domain"), "domain")
    stats = ["--mean", ",".join(map(repr, ds.mean)), "--std", ",".join(map(repr, ds.std))]
    assert (
        _stream(smoke_rgb, tmp_path / "rgb", tmp_path / "out", "--shots", "2", "--draw", "first", *stats) == 0
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    R = np.array(results["accuracy"]["R"], dtype=np.float64)
    assert np.array_equal(R[LOWER], np.array(expected["R"])[LOWER])
    assert results["stream"]["normalisation"] == {
        "channels": 3,
        "mean": list(ds.mean),
        "std": list(ds.std),
        "from": "given",
    }


def test_the_numbers_of_acl_eval_itself(smoke_domain, digits, data_cache, tmp_path):
    """``acl eval``'s own Split-Digits entry (one draw of 2 demonstrations per class) and ``acl stream`` on
    that draw written out agree cell for cell."""
    overrides = [
        f"data.cache_dir={data_cache}",
        "eval.split_benchmarks=[digits]",
        "eval.scenarios=[domain]",
        "eval.split_runs=1",
        "eval.split_k_shot=2",
        "eval.episodes=1",
        "eval.long_span_tasks=[]",
        "device=cpu",
    ]
    evaluated = acl.evaluate(smoke_domain, overrides=overrides, out_dir=tmp_path / "eval")
    entry = evaluated["split"]["Split-Digits/domain"]
    _write_split(tmp_path / "digits", split_benchmark(digits, k_shot=2, run=0), "domain")
    stats = ["--mean", repr(digits.mean), "--std", repr(digits.std)]
    assert (
        _stream(
            smoke_domain, tmp_path / "digits", tmp_path / "out", "--shots", "2", "--draw", "first", *stats
        )
        == 0
    )
    got = json.loads((tmp_path / "out" / "results.json").read_text())["accuracy"]
    assert np.array_equal(np.array(got["R"], dtype=np.float64)[LOWER], np.array(entry["R"])[LOWER])
    assert got["ACC"]["mean"] == entry["ACC"]["mean"] and got["BWT"]["mean"] == entry["BWT"]["mean"]


def _small_folder(root: Path, *, per_class: int = 4) -> Path:
    """2 tasks x 2 classes of ``per_class`` images: PNG and JPEG, 40 and 24 px, one class in colour."""
    rng = np.random.default_rng(0)
    for t, task in enumerate(["1-shapes", "2-more"]):
        for c, cls in enumerate(["left", "right"]):
            folder = root / task / cls
            folder.mkdir(parents=True)
            for k in range(per_class):
                size = 40 if k % 2 else 24
                img = rng.integers(0, 50, size=(size, size), dtype=np.uint8)
                img[:, : size // 2] += np.uint8(100 * c + 40 * t)
                if t == 1 and c == 1:
                    Image.fromarray(np.stack([img, img // 2, 255 - img], axis=-1)).save(folder / f"{k}.png")
                elif k == 3:
                    Image.fromarray(img).save(folder / f"{k}.JPG", quality=95)
                else:
                    Image.fromarray(img).save(folder / f"{k}.png")
            (folder / "notes.txt").write_text("not an image: ignored")
    return root


def test_stream_learns_a_folder_and_writes_its_results_and_report(
    smoke_class, smoke_domain, tmp_path, capsys
):
    data = _small_folder(tmp_path / "data")
    out = tmp_path / "out"
    assert _stream(smoke_class, data, out, "--shots", "2", "--seed", "3") == 0
    assert "2 tasks learned (class-incremental): ACC" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    s, acc = results["stream"], results["accuracy"]
    assert [t["name"] for t in s["tasks"]] == ["1-shapes", "2-more"] == acc["task_names"]
    classes = [c for t in s["tasks"] for c in t["classes"]]
    assert [c["label"] for c in classes] == [0, 1, 2, 3]  # class-incremental: consecutive in task order
    assert all(len(c["demonstrations"]) == 2 and c["test_images"] == 2 for c in classes)
    assert s["normalisation"]["channels"] == 1  # a grayscale model: the colour class is read as grayscale
    R = acc["R"]
    assert R[0][1] is None and all(0.0 <= v <= 1.0 for v in (R[0][0], R[1][0], R[1][1]))
    assert acc["ACC"]["mean"] == pytest.approx((R[1][0] + R[1][1]) / 2, abs=1e-12)
    assert acc["BWT"]["mean"] == pytest.approx(R[1][0] - R[0][0], abs=1e-12)
    assert acc["n_out"] == 4 and acc["chance"] == 0.25
    for name in ("report.md", "report.html", "plots/accuracy_matrix.png"):
        assert (out / name).is_file(), name
    report = (out / "report.md").read_text()
    assert "## Accuracy" in report and "plots/accuracy_matrix.png" in report and "1-shapes" in report
    # the seeded draw is reproducible and recorded; an earlier stream of the same model may be replaced
    assert _stream(smoke_class, data, out, "--shots", "2", "--seed", "3") == 0
    again = json.loads((out / "results.json").read_text())
    assert again["stream"]["tasks"] == s["tasks"] and again["accuracy"]["R"] == R
    assert _stream(smoke_class, data, out, "--shots", "2", "--draw", "first") == 0
    first = json.loads((out / "results.json").read_text())["stream"]["tasks"][0]["classes"][0]
    assert first["demonstrations"] == ["0.png", "1.png"]
    # a domain-incremental model: labels 0..n-1 within each task; another model's output needs --force
    capsys.readouterr()
    assert _stream(smoke_domain, data, out, "--shots", "2") == 2
    err = capsys.readouterr().err
    assert f"fastweights: error: out_dir: {out} already holds" in err and "--force" in err
    assert _stream(smoke_domain, data, out, "--shots", "2", "--force") == 0
    results = json.loads((out / "results.json").read_text())
    assert [c["label"] for t in results["stream"]["tasks"] for c in t["classes"]] == [0, 1, 0, 1]
    assert results["accuracy"]["n_out"] == 2
    assert _stream(smoke_domain, data, smoke_domain, "--shots", "2") == 2  # never into the model folder
    assert "is the model folder itself" in capsys.readouterr().err
    assert not (smoke_domain / "results.json").exists()


def test_default_statistics_are_those_of_the_demonstrations(smoke_domain, tmp_path):
    data = _small_folder(tmp_path / "data")
    for cls in ("left", "right"):  # a grayscale folder
        for f in (data / "2-more" / cls).glob("*"):
            if f.suffix == ".png":
                Image.open(f).convert("L").save(f)
    assert _stream(smoke_domain, data, tmp_path / "out", "--shots", "2", "--draw", "first") == 0
    norm = json.loads((tmp_path / "out" / "results.json").read_text())["stream"]["normalisation"]
    from fastweights.data.images import dataset_images
    from fastweights.data.sources._decode import read_image

    demos = sorted(f for task in data.iterdir() for cls in task.iterdir() for f in sorted(cls.iterdir())[:2])
    images = dataset_images([read_image(f, rgb=None) for f in demos], size=32, channels=1)
    assert (norm["mean"], norm["std"]) == image_stats(images, 1)
    assert norm["channels"] == 1 and norm["from"] == "the demonstrations drawn"


@dataclass
class Bad:
    id: str
    setup: object  # (data folder) -> the path the error must name
    model: str = "class"
    extra: tuple[str, ...] = ()


def _base(root: Path) -> Path:
    return _small_folder(root, per_class=3)


def _missing(root: Path) -> Path:
    shutil.rmtree(root)
    return root


def _a_file(root: Path) -> Path:
    shutil.rmtree(root)
    root.write_text("not a folder")
    return root


def _no_tasks(root: Path) -> Path:
    for p in list(root.iterdir()):
        shutil.rmtree(p)
    (root / "readme.txt").write_text("no task folders here")
    return root


def _one_task(root: Path) -> Path:
    shutil.rmtree(root / "2-more")
    return root


def _one_class(root: Path) -> Path:
    shutil.rmtree(root / "2-more" / "right")
    return root / "2-more"


def _empty_class(root: Path) -> Path:
    for f in (root / "1-shapes" / "right").glob("*.*"):
        if f.suffix.lower() in (".png", ".jpg"):
            f.unlink()
    return root / "1-shapes" / "right"


def _too_few(root: Path) -> Path:
    next((root / "2-more" / "left").glob("*.png")).unlink()
    return root / "2-more" / "left"


def _unreadable(root: Path) -> Path:
    path = root / "2-more" / "right" / "broken.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n but not really a picture")
    return path


def _too_many_classes(root: Path) -> Path:  # 2 + 9 classes: beyond the class-incremental model's 10 labels
    for c in range(7):
        shutil.copytree(root / "2-more" / "left", root / "2-more" / f"extra{c}")
    return root / "2-more"


def _too_many_in_a_task(root: Path) -> Path:  # 6 classes in one task: beyond the domain model's 5 labels
    for c in range(4):
        shutil.copytree(root / "1-shapes" / "left", root / "1-shapes" / f"extra{c}")
    return root / "1-shapes"


BAD = [
    Bad("missing-folder", _missing),
    Bad("not-a-folder", _a_file),
    Bad("no-task-folders", _no_tasks),
    Bad("one-task", _one_task),
    Bad("task-with-one-class", _one_class),
    Bad("empty-class", _empty_class),
    Bad("fewer-than-shots-plus-one", _too_few),
    Bad("unreadable-image", _unreadable),
    Bad("more-classes-than-outputs", _too_many_classes),
    Bad("more-classes-than-a-task-takes", _too_many_in_a_task, model="domain"),
]


def _snapshot(folder: Path) -> dict[str, str]:
    if not folder.exists():
        return {}
    if folder.is_file():
        return {".": hashlib.sha256(folder.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_a_bad_folder_is_one_line_naming_the_path_and_nothing_is_written(
    case, smoke_class, smoke_domain, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default --out would be runs/… here
    data = _base(tmp_path / "data")
    named = case.setup(data)
    before = _snapshot(data)
    model = smoke_class if case.model == "class" else smoke_domain
    model_before = _snapshot(model)
    capsys.readouterr()
    rc = main(["acl", "stream", "--model", str(model), "--data", str(data), "--shots", "2", *case.extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("fastweights: error: "), err
    assert str(named) in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # no output folder
    assert _snapshot(data) == before and _snapshot(model) == model_before


def test_bad_arguments_are_one_line(smoke_class, tmp_path, capsys):
    data = _base(tmp_path / "data")
    for extra, words in (
        (["--shots", "0"], "shots: expected"),
        (["--mean", "x", "--std", "0.2"], "--mean: expected a number"),
        (["--mean", "0.5"], "mean, std: expected both"),
        (["--mean", "0.5,0.5", "--std", "0.2,0.2"], "mean: expected"),
        (["--device", "tpu"], "device: expected"),
    ):
        capsys.readouterr()
        assert _stream(smoke_class, data, tmp_path / "out", *extra) == 2, extra
        err = capsys.readouterr().err
        assert f"fastweights: error: {words}" in err and err.count("error:") == 1, err
        assert not (tmp_path / "out").exists()
