import json

import pytest
from PIL import Image

from fastweights.io import JsonlLogger
from fastweights.recipes.report import (
    plot_accuracy_matrix,
    plot_forgetting,
    plot_learning_curves,
    write_report,
)


def _results():
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


def _is_png(path):
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size[0] > 50 and im.size[1] > 50


def test_full_report(tmp_path):
    with JsonlLogger(tmp_path / "metrics.jsonl") as log:
        log.log(step=0, loss=1.0)  # no val_acc: ignored
        for i in range(4):
            log.log(step=i, minutes=0.5 * i, val_acc=0.2 + 0.1 * i)
    # round-trip through JSON as the recipe does
    out = write_report(json.loads(json.dumps(_results())), tmp_path)
    assert out == tmp_path / "report.md"
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == ["accuracy_matrix_split-digits_domain.png", "forgetting.png", "learning_curve.png"]
    for name in plots:
        _is_png(tmp_path / "plots" / name)
    md = out.read_text(encoding="utf-8")
    assert "# ACL run report (quick)" in md
    assert "fastweights acl train --preset quick" in md
    assert "| training time at that checkpoint (min) | 12.3 |" in md
    assert "**61.00 ± 1.20 %**" in md
    assert "5-way 5-shot, 1000 episodes" in md
    assert "| A→B | A | A→B | 40.00 ± 1.50 |" in md
    assert "| B→A | B | B | 58.00 ± 1.00 |" in md
    assert "A: 20.00 points" in md and "B: 8.00 points" in md
    assert "| tasks A → B |" not in md  # results without 'pairs' keep the single-pair layout
    # the paper-layout table: this 3-task entry gets its own column, the paper's columns show —
    assert "| Split-Digits | — | — | — | 87.33 ± 2.10 |" in md
    assert "| ACC (average accuracy after the last task) | 87.33 ± 2.10 |" in md
    assert "| BWT (backward transfer) | -14.50 ± 3.00 |" in md
    assert "| after \\ task | 0/1 | 2/3 | 4/5 |" in md
    assert "| after 0/1 | 99.00 | — | — |" in md
    assert "| after 4/5 | 80.00 | 85.00 | 97.00 |" in md
    assert "(plots/accuracy_matrix_split-digits_domain.png)" in md
    assert "(plots/forgetting.png)" in md
    assert "(plots/learning_curve.png)" in md
    assert not list(tmp_path.rglob("*.tmp"))


def test_missing_sections_are_skipped(tmp_path):
    res = _results()
    del res["forgetting"], res["split"]
    out = write_report(res, tmp_path)
    md = out.read_text(encoding="utf-8")
    assert "61.00 ± 1.20" in md
    assert "forgetting" not in md.lower()
    assert not (tmp_path / "plots").exists()

    out = write_report({}, tmp_path / "empty")
    assert "No results." in out.read_text(encoding="utf-8")

    only_split = {"split": _results()["split"]}
    write_report(only_split, tmp_path / "split")
    assert [p.name for p in (tmp_path / "split" / "plots").iterdir()] == [
        "accuracy_matrix_split-digits_domain.png"
    ]


def test_report_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="results: expected a dict"):
        write_report([1], tmp_path)
    with pytest.raises(ValueError, match="expected key 'R'"):
        write_report({"split": {"x": {"ACC": {"mean": 1.0}}}}, tmp_path)


def test_plot_functions(tmp_path):
    p = plot_accuracy_matrix([[0.5, float("nan")], [0.4, 0.9]], ["a", "b"], tmp_path / "m.png", "t")
    _is_png(p)
    with pytest.raises(ValueError, match="task_names: expected 2"):
        plot_accuracy_matrix([[0.5, 0.1], [0.4, 0.9]], ["a"], tmp_path / "x.png", "t")
    with pytest.raises(ValueError, match="square"):
        plot_accuracy_matrix([[0.5, 0.1]], None, tmp_path / "x.png", "t")

    _is_png(plot_forgetting({"A|A": {"mean": 0.6, "ci95": 0.01}}, tmp_path / "f.png", "f", chance=0.2))
    with pytest.raises(ValueError, match="table: expected some of the keys"):
        plot_forgetting({"X": {"mean": 0.1}}, tmp_path / "x.png", "f")

    curves = {"srwm": [(0.0, 0.2), (1.0, 0.5)], "deltanet": [(0.0, 0.2), (2.0, 0.4)]}
    _is_png(plot_learning_curves(curves, tmp_path / "c.png", chance=0.2))
    with pytest.raises(ValueError, match="at least one variant"):
        plot_learning_curves({"a": []}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
