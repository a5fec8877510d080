"""ACL ``results`` dicts (as the evaluation writes ``results.json``) shared by the report, paper-table
and plot tests, and a PNG check."""

from __future__ import annotations

from typing import Any

from PIL import Image


def single_pair_results() -> dict[str, Any]:
    """Results of an older evaluation: one forgetting pair (no ``pairs``), one 3-task split entry."""
    table = {
        "A|A": {"mean": 0.6, "ci95": 0.01},
        "B|A->B": {"mean": 0.55, "ci95": 0.012},
        "A|A->B": {"mean": 0.4, "ci95": 0.015},
        "B|B": {"mean": 0.58, "ci95": 0.01},
        "A|B->A": {"mean": 0.61, "ci95": 0.011},
        "B|B->A": {"mean": 0.5, "ci95": 0.013},
    }
    split = {
        "R": [[0.99, None, None], [0.9, 0.95, None], [0.8, 0.85, 0.97]],
        "R_std": [[0.01, None, None], [0.02, 0.01, None], [0.03, 0.02, 0.01]],
        "ACC": {"mean": 0.8733, "std": 0.021},
        "BWT": {"mean": -0.145, "std": 0.03},
        "forgetting": {"mean": 0.145, "std": 0.03},
        "learning_accuracy": {"mean": 0.97, "std": 0.01},
        "runs": 5,
        "k_shot": 5,
        "task_names": ["0/1", "2/3", "4/5"],
        "chance": 0.5,
    }
    return {
        "run": {
            "preset": "quick",
            "run_dir": "runs/q",
            "steps": 1234,
            "train_minutes": 12.34,
            "command": "fastweights acl train --preset quick",
        },
        "fewshot": {
            "dataset": "FontGlyphs/test",
            "n_way": 5,
            "k_shot": 5,
            "episodes": 1000,
            "accuracy": 0.61,
            "ci95": 0.012,
        },
        "forgetting": {
            "n_way": 5,
            "k_shot": 5,
            "episodes": 1000,
            "table": table,
            "task_a": "FontGlyphs/test",
            "task_b": "FontGlyphs/test",
        },
        "split": {"Split-Digits/domain": split},
    }


def forgetting_entries(a_a, b_ab, a_ab, b_b, a_ba, b_ba) -> dict[str, dict[str, float]]:
    """A 2-task forgetting table with these means (fractions) and CI 0.01."""
    vals = zip(
        ("A|A", "B|A->B", "A|A->B", "B|B", "A|B->A", "B|B->A"),
        (a_a, b_ab, a_ab, b_b, a_ba, b_ba),
        strict=True,
    )
    return {k: {"mean": v, "ci95": 0.01} for k, v in vals}


def summary(T: int, acc: float, std: float = 0.02, runs: int = 3, k_shot: int = 5) -> dict[str, Any]:
    """A T-task domain-incremental summary with ACC = ``acc`` ± ``std`` and BWT = -5 ± 1 points."""
    R = [[0.9 - 0.01 * (i - j) if j <= i else None for j in range(T)] for i in range(T)]
    return {
        "R": R,
        "R_std": [[0.01 if j <= i else None for j in range(T)] for i in range(T)],
        "ACC": {"mean": acc, "std": std},
        "BWT": {"mean": -0.05, "std": 0.01},
        "forgetting": {"mean": 0.05, "std": 0.01},
        "learning_accuracy": {"mean": 0.9, "std": 0.01},
        "task_names": [f"{2 * j}/{2 * j + 1}" for j in range(T)],
        "k_shot": k_shot,
        "runs": runs,
        "chance": 0.5,
        "scenario": "domain",
        "num_tasks": T,
    }


def paper_results() -> dict[str, Any]:
    """Results of a full evaluation: forgetting ``pairs`` of two domains, split entries of two
    benchmarks and scenarios, long-span runs with 5/10/20 tasks."""
    pairs = [
        {
            "task_a": "FontGlyphs",
            "task_b": "FontGlyphs",
            "table": forgetting_entries(0.9, 0.88, 0.85, 0.9, 0.9, 0.85),
        },
        {
            "task_a": "EmojiImages",
            "task_b": "EmojiImages",
            "table": forgetting_entries(0.7, 0.72, 0.6, 0.7, 0.7, 0.6),
        },
        {
            "task_a": "FontGlyphs",
            "task_b": "EmojiImages",
            "table": forgetting_entries(0.91, 0.71, 0.8, 0.69, 0.9, 0.5),
        },
    ]
    return {
        "run": {
            "preset": "paper",
            "run_dir": "runs/p",
            "steps": 100,
            "train_minutes": 3.0,
            "command": "fastweights acl train --preset paper",
            "stage": "5-task meta-finetuning (domain)",
            "sources": ["FontGlyphs", "EmojiImages"],
        },
        "forgetting": {
            "n_way": 5,
            "k_shot": 5,
            "episodes": 200,
            "table": pairs[0]["table"],
            "task_a": "FontGlyphs",
            "task_b": "FontGlyphs",
            "pairs": pairs,
        },
        "split": {
            "Split-Digits/domain": summary(5, 0.8),
            "Split-Digits/class-2task": {**summary(2, 0.9), "scenario": "class"},
            "Split-MNIST/domain": summary(5, 0.845, 0.011),
            "Split-MNIST/class": {**summary(5, 0.843), "scenario": "class"},
        },
        "long_span": {
            "dataset": "FontGlyphs/test",
            "n_way": 2,
            "k_shot": 5,
            "runs": 10,
            "scenario": "domain",
            "tasks": {"10": summary(10, 0.8), "5": summary(5, 0.9), "20": summary(20, 0.7, 0.015)},
        },
    }


def assert_png(path) -> None:
    """``path`` is a PNG image larger than 50×50 pixels."""
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 50 and im.size[1] > 50
