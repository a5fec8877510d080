"""``fastweights acl stream``: an ACL model learns a stream of tasks made of your own images, task after
task, in context (ACL paper, Irie, Csordás & Schmidhuber, TMLR 2025, §4.3: the split-benchmark protocol
on a folder instead of Split-MNIST).

The folder holds ``<task>/<class>/*.png|*.jpg|*.jpeg``; tasks are learned in the sorted order of their
folder names, the classes of a task in sorted order. For each task in turn the model
(:class:`~fastweights.recipes.acl.learner.ContinualLearner`) learns ``shots`` demonstrations per class
(shot-major: one of each class, then the next of each, as the split benchmarks feed them), drawn with the
seed (or the first ``shots`` files in name order, ``draw="first"``); then the remaining images of every
task learned so far are its test images: ``R[i][j]`` = accuracy on task ``j`` after learning tasks
``0..i`` (``j <= i``; the cells of tasks not learned yet are not measured). ACC, BWT and forgetting come
from :func:`fastweights.cl.metrics.summarize_runs`.

Labels as the evaluation gives them: a class-incremental model gives the classes of all tasks
consecutive labels in task order (task 1's classes 0, 1, …, task 2's next, …); a domain-incremental one
labels each task's classes ``0..n-1``. A prediction is the argmax over the logits of every label of the
stream (class-incremental: all the stream's classes; domain-incremental: ``0..n-1`` for the largest
task), as :func:`fastweights.cl.split_protocol.evaluate_split_tasks` compares its first ``n_out`` logits.
Pixel statistics: ``mean`` / ``std`` given, else those of all the demonstrations drawn (the evaluation
normalises a split benchmark with the statistics of its demonstration pool). So a split benchmark written
into this layout gives the evaluation's matrix (``tests/recipes/acl/test_stream.py``).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fastweights.checks import check_choice, check_int, check_seed
from fastweights.cl.metrics import summarize_runs
from fastweights.data.images import dataset_images, is_grayscale
from fastweights.data.sources._decode import read_image
from fastweights.data.sources.base import image_stats
from fastweights.io import PathLike, atomic_write_json
from fastweights.recipes.acl.learner import ContinualLearner
from fastweights.recipes.plots import plot_accuracy_matrix
from fastweights.recipes.reporting import (
    below_chance_cells,
    command_markdown,
    matrix_cells,
    md_table,
    pct,
    readable_name,
    short_task_labels,
    write_report_files,
)
from fastweights.train.run_folder import output_folder

__all__ = ["IMAGE_SUFFIXES", "DRAWS", "StreamClass", "StreamTask", "scan_stream_folder", "run_stream"]

#: the image files of a class folder (case-insensitive); other files are ignored
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
#: how the demonstrations of a class are chosen: seeded at random, or the first files in name order
DRAWS = ("random", "first")


@dataclass
class StreamClass:
    """One class of a task: its folder, label, demonstration files (in the order they are learned) and
    test files (in name order)."""

    name: str
    folder: Path
    label: int
    demonstrations: list[Path]
    test: list[Path]


@dataclass
class StreamTask:
    """One task of the stream: its folder and classes (sorted by name)."""

    name: str
    folder: Path
    classes: list[StreamClass]


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _draw(files: list[Path], shots: int, draw: str, seed: int, key: str) -> tuple[list[Path], list[Path]]:
    """``shots`` demonstrations of a class (``draw="first"``: the first files; ``"random"``: drawn by a
    generator seeded with ``seed`` and the class's ``task/class`` name, so adding a task or class does
    not change the other classes' draws) and the other files, in name order, as test images."""
    if draw == "first":
        return files[:shots], files[shots:]
    rng = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])
    chosen = [int(i) for i in rng.choice(len(files), size=shots, replace=False)]
    taken = set(chosen)
    return [files[i] for i in chosen], [f for i, f in enumerate(files) if i not in taken]


def scan_stream_folder(
    folder: PathLike,
    *,
    shots: int,
    scenario: str,
    label_space: int,
    draw: str = "random",
    seed: int = 0,
) -> list[StreamTask]:
    """The tasks of ``folder`` (``<task>/<class>/*.png|jpg|jpeg``, hidden entries and other files
    ignored) with their labels and demonstration draw; no image is read.

    Args:
        shots: demonstrations per class (every class needs ``shots + 1`` images).
        scenario: ``"class"`` (consecutive labels over all tasks) or ``"domain"`` (``0..n-1`` per task).
        label_space: the labels the model takes (``ContinualLearner.label_space``).
        draw, seed: see :func:`run_stream`.

    Raises:
        FileNotFoundError: naming the folder when it does not exist.
        ValueError: naming the path: not a folder, fewer than 2 task folders, a task with fewer than 2 class
            folders, a class without images or with fewer than ``shots + 1``, more classes than
            ``label_space`` (all tasks' for ``"class"``, one task's for ``"domain"``).
    """
    check_int("shots", shots)
    check_choice("draw", draw, DRAWS)
    check_choice("scenario", scenario, ("class", "domain"))
    root = Path(folder)
    layout = f"{root}/<task>/<class>/*.png|*.jpg|*.jpeg"
    if not root.exists():
        raise FileNotFoundError(f"--data: {root}: no such folder; expected {layout}")
    if not root.is_dir():
        raise ValueError(f"--data: {root}: not a folder; expected {layout}")
    task_dirs = [p for p in _entries(root) if p.is_dir()]
    if len(task_dirs) < 2:
        found = f"one ({task_dirs[0].name})" if task_dirs else "none"
        raise ValueError(
            f"--data: {root}: expected at least 2 task folders (a stream of tasks: {layout}), found {found}"
        )
    tasks, label = [], 0
    for task_dir in task_dirs:
        class_dirs = [p for p in _entries(task_dir) if p.is_dir()]
        if len(class_dirs) < 2:
            found = f"one ({class_dirs[0].name})" if class_dirs else "none"
            raise ValueError(
                f"--data: {task_dir}: expected at least 2 class folders (a task tells classes apart), "
                f"found {found}"
            )
        if scenario == "domain":
            label = 0
            if len(class_dirs) > label_space:
                raise ValueError(
                    f"--data: {task_dir}: {len(class_dirs)} classes, more than the {label_space} labels a "
                    f"task of this domain-incremental model can have (labels 0..{label_space - 1})"
                )
        elif label + len(class_dirs) > label_space:
            raise ValueError(
                f"--data: {task_dir}: its classes would take labels {label}..{label + len(class_dirs) - 1}, "
                f"beyond the {label_space} outputs of this class-incremental model (one label per class of "
                f"all tasks of {root}: labels 0..{label_space - 1})"
            )
        classes = []
        for class_dir in class_dirs:
            files = [p for p in _entries(class_dir) if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
            if not files:
                raise ValueError(f"--data: {class_dir}: no images (*.png, *.jpg, *.jpeg)")
            if len(files) < shots + 1:
                raise ValueError(
                    f"--data: {class_dir}: expected at least shots + 1 = {shots + 1} images ({shots} "
                    f"demonstrations and one or more to test), found {len(files)}"
                )
            demos, test = _draw(files, shots, draw, seed, f"{task_dir.name}/{class_dir.name}")
            classes.append(StreamClass(class_dir.name, class_dir, label, demos, test))
            label += 1
        tasks.append(StreamTask(task_dir.name, task_dir, classes))
    return tasks


def _read(files: Sequence[Path]) -> list[np.ndarray]:
    """Decoded images (grayscale files as ``[H, W]``, others ``[H, W, 3]``); errors name the file."""
    return [read_image(f, rgb=None) for f in files]


def run_stream(
    model: PathLike,
    data: PathLike,
    *,
    shots: int | None = None,
    out: PathLike | None = None,
    seed: int = 0,
    draw: str = "random",
    force: bool = False,
    checkpoint: str = "best",
    device: str = "auto",
    mean: float | Sequence[float] | None = None,
    std: float | Sequence[float] | None = None,
    command: str | None = None,
) -> dict[str, Any]:
    """Learn the tasks of the folder ``data`` one after another with the ACL model ``model`` (a run or
    export folder) and write ``results.json``, ``report.md`` (+ ``report.html``) and
    ``plots/accuracy_matrix.png`` into ``out`` (see the module docstring for the protocol).

    Everything is read and checked (the model, the folder layout, every image) before anything is
    written; ``out`` is then locked and must be new, empty or an earlier ``acl stream`` output of the same
    model (``force``: whatever it holds; never the model folder without ``force``), as ``acl eval --out``
    guards its folder.

    Args:
        model: the model folder, e.g. ``pretrained/acl-5task-class``.
        data: the folder of tasks.
        shots: demonstrations per class (default: the model's ``eval.split_k_shot``, the shots of its split
            benchmarks).
        out: the output folder (default ``runs/acl-stream-<name of data>``).
        seed: the demonstration draw (``draw="random"``).
        draw: ``"random"`` (seeded, per class) or ``"first"`` (the first ``shots`` files in name order).
        checkpoint, device: as for :meth:`ContinualLearner.from_pretrained`.
        mean, std: pixel statistics of images / 255 (default: those of all demonstrations drawn).
        command: the command line recorded in the results.

    Returns:
        The ``results.json`` dict: ``stream`` (what was learned: model, data, tasks, classes, labels,
        demonstration files, normalisation) and ``accuracy`` (:func:`~fastweights.cl.metrics.summarize_runs`
        of the one matrix — ``R`` with None above the diagonal, ``ACC``, ``BWT``, ``forgetting``,
        ``learning_accuracy`` — plus ``task_names``, ``n_out``, ``chance``, ``k_shot``, ``scenario``).

    Raises:
        FileNotFoundError: no such model or data folder.
        ValueError: bad arguments, a bad folder (:func:`scan_stream_folder`), an unreadable image (naming
            the file), bad statistics; :class:`~fastweights.train.run_folder.RunFolderError` for an ``out``
            that may not be written.
    """
    check_choice("draw", draw, DRAWS)
    check_seed("seed", seed)
    if shots is not None:
        check_int("shots", shots)
    t0 = time.monotonic()
    loaded = ContinualLearner.from_pretrained(model, device=device, checkpoint=checkpoint)
    k = int(shots if shots is not None else loaded.config.eval.split_k_shot)
    tasks = scan_stream_folder(
        data, shots=k, scenario=loaded.scenario, label_space=loaded.label_space, draw=draw, seed=seed
    )
    # shot-major demonstrations (one of each class, then the next of each), test images class by class
    demo_files = [[c.demonstrations[shot] for shot in range(k) for c in t.classes] for t in tasks]
    demo_labels = [[c.label for _ in range(k) for c in t.classes] for t in tasks]
    test_files = [[f for c in t.classes for f in c.test] for t in tasks]
    test_labels = [np.array([c.label for c in t.classes for _ in c.test], dtype=np.int64) for t in tasks]
    demo_raw, test_raw = [], []
    for d, q in tqdm(list(zip(demo_files, test_files, strict=True)), desc="reading images", unit="task"):
        demo_raw.append(_read(d))
        test_raw.append(_read(q))
    gray = all(is_grayscale(a) for raw in (*demo_raw, *test_raw) for a in raw)
    channels = 1 if loaded.model_channels == 1 or gray else 3
    size = loaded.image_size
    demos = [dataset_images(raw, size=size, channels=channels) for raw in demo_raw]
    tests = [dataset_images(raw, size=size, channels=channels) for raw in test_raw]
    given = mean is not None or std is not None
    stats: tuple[Any, Any] = (mean, std) if given else image_stats(np.concatenate(demos), channels)
    learner = ContinualLearner(  # checks given statistics
        loaded.model, loaded.config, device=loaded.device, mean=stats[0], std=stats[1], channels=channels
    )
    n_out = (
        sum(len(t.classes) for t in tasks)
        if loaded.scenario == "class"
        else max(len(t.classes) for t in tasks)
    )
    out_dir = Path(out) if out is not None else Path("runs") / f"acl-stream-{Path(data).resolve().name}"

    def batch(x: np.ndarray) -> np.ndarray:  # [N, S, S] → [N, 1, S, S]: unambiguously a stack of images
        return x[:, None] if x.ndim == 3 else x

    with output_folder(out_dir, source=Path(model), force=force, purpose="stream"):
        T = len(tasks)
        R = np.full((T, T), np.nan)
        with tqdm(total=T, desc="stream: tasks learned", unit="task", dynamic_ncols=True) as bar:
            for i in range(T):
                learner.learn(batch(demos[i]), demo_labels[i])
                for j in range(i + 1):
                    labels = learner.predict(batch(tests[j]), candidates=n_out).labels.numpy()
                    R[i, j] = int((labels == test_labels[j]).sum()) / len(test_labels[j])
                bar.update()
        summary = summarize_runs([R])
        summary.update(
            task_names=[t.name for t in tasks],
            n_out=n_out,
            chance=1.0 / n_out,
            k_shot=k,
            scenario=loaded.scenario,
            num_tasks=T,
        )
        results = {
            "stream": {
                "model": str(model),
                "checkpoint": checkpoint,
                "step": loaded.step,
                "scenario": loaded.scenario,
                "label_space": loaded.label_space,
                "label_meaning": loaded.label_meaning,
                "data": str(data),
                "shots": k,
                "draw": draw,
                "seed": seed,
                "image_size": size,
                "normalisation": {
                    "channels": channels,
                    "mean": learner.mean,
                    "std": learner.std,
                    "from": "given" if given else "the demonstrations drawn",
                },
                "tasks": [
                    {
                        "name": t.name,
                        "classes": [
                            {
                                "name": c.name,
                                "label": c.label,
                                "demonstrations": [f.name for f in c.demonstrations],
                                "test_images": len(c.test),
                            }
                            for c in t.classes
                        ],
                    }
                    for t in tasks
                ],
                "command": command or "",
                "minutes": (time.monotonic() - t0) / 60,
            },
            "accuracy": summary,
        }
        atomic_write_json(out_dir / "results.json", results)
        write_stream_report(results, out_dir)
    return results


def write_stream_report(results: dict[str, Any], out: PathLike) -> Path:
    """``out/report.md`` (+ ``report.html``) and ``out/plots/accuracy_matrix.png`` of a :func:`run_stream`
    results dict: what was learned, ACC / BWT / forgetting / learning accuracy, the accuracy matrix (table
    and heatmap; cells below chance marked) and the tasks' classes, labels and demonstrations."""
    out = Path(out)
    s, acc = results["stream"], results["accuracy"]
    names = acc["task_names"]
    labels = short_task_labels(names)
    T = len(names)
    chance = acc["chance"]
    norm = s["normalisation"]
    n_test = sum(c["test_images"] for t in s["tasks"] for c in t["classes"])
    lines = [
        f"# ACL stream: {Path(s['data']).name}",
        "",
        f"- model: `{s['model']}` ({s['checkpoint']} checkpoint, step {s['step']}), {s['label_meaning']}",
        f"- data: `{s['data']}`: {T} tasks learned in name order, {s['shots']} demonstrations per class "
        + ("(the first files by name)" if s["draw"] == "first" else f"(drawn at random, seed {s['seed']})")
        + f", {n_test} test images (the others)",
        f"- images: {s['image_size']} × {s['image_size']} px, "
        + ("grayscale" if norm["channels"] == 1 else "RGB")
        + f", normalised with mean {norm['mean']} and std {norm['std']} of pixels / 255 ({norm['from']})",
        f"- predictions: the argmax over labels 0..{acc['n_out'] - 1} (every label of the stream, as "
        "`acl eval` scores its split benchmarks); chance " + f"{pct(chance, 1)} %",
    ]
    if s.get("command"):
        lines.append(f"- command: {command_markdown(s['command'])}")
    lines += ["", "## Accuracy", ""]
    rows = [
        (label, pct(acc[key]["mean"]))
        for key, label in (
            ("ACC", "ACC (average accuracy after the last task)"),
            ("BWT", "BWT (backward transfer)"),
            ("forgetting", "forgetting (Chaudhry et al. 2018)"),
            ("learning_accuracy", "learning accuracy (R[j, j])"),
        )
    ]
    lines += md_table(("metric", "value (%)"), rows) + [""]
    R = np.array(acc["R"], dtype=np.float64)
    flagged = below_chance_cells(R, chance, include_unseen=False)
    lines += [
        "Accuracy matrix (%): row i = after learning task i, column j = the test images of task j "
        "(tasks not learned yet are not tested: —):",
        "",
    ]
    lines += md_table(["after \\ task", *labels], matrix_cells(R, labels, flagged)) + [""]
    png = plot_accuracy_matrix(
        R, names, out / "plots" / "accuracy_matrix.png", title=f"{Path(s['data']).name}", chance=chance
    )
    lines += [f"![accuracy matrix](plots/{png.name})", ""]
    if flagged:
        listed = ", ".join(f"task {labels[j]} after {labels[i]}: {pct(R[i, j])} %" for i, j in flagged)
        lines += [f"**Below chance** ({pct(chance, 1)} %), marked ↓: {listed}.", ""]
    else:
        lines += [f"No cell is below chance ({pct(chance, 1)} %).", ""]
    lines += ["## Tasks", ""]
    task_rows = []
    for label, t in zip(labels, s["tasks"], strict=True):
        task = label if label == t["name"] else f"{label} ({readable_name(t['name'])})"
        for c in t["classes"]:
            demos = ", ".join(c["demonstrations"])
            task_rows.append((task, c["name"], c["label"], demos, c["test_images"]))
    lines += md_table(
        ("task", "class", "label", "demonstrations (in learning order)", "test images"), task_rows
    )
    lines.append("")
    return write_report_files(out / "report.md", "\n".join(lines))
