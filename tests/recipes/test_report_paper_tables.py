"""The ACL report's paper layouts: the forgetting table per ordered domain pair, the split benchmarks in
Table 3's layout, the long-span table (ACL paper §4.1, Table 3 and the Split-Omniglot numbers of its text)."""

import copy
import json

import pytest
from PIL import Image

from fastweights.recipes.report import (
    forgetting_rows,
    forgetting_table,
    long_span_table,
    plot_forgetting_rows,
    plot_long_span,
    split_table,
    write_report,
)


def _table(a_a, b_ab, a_ab, b_b, a_ba, b_ba):
    vals = zip(
        ("A|A", "B|A->B", "A|A->B", "B|B", "A|B->A", "B|B->A"),
        (a_a, b_ab, a_ab, b_b, a_ba, b_ba),
        strict=True,
    )
    return {k: {"mean": v, "ci95": 0.01} for k, v in vals}


def _summary(T, acc, std=0.02, runs=3, k_shot=5):
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


def _results():
    pairs = [
        {"task_a": "FontGlyphs", "task_b": "FontGlyphs", "table": _table(0.9, 0.88, 0.85, 0.9, 0.9, 0.85)},
        {"task_a": "EmojiImages", "task_b": "EmojiImages", "table": _table(0.7, 0.72, 0.6, 0.7, 0.7, 0.6)},
        {"task_a": "FontGlyphs", "task_b": "EmojiImages", "table": _table(0.91, 0.71, 0.8, 0.69, 0.9, 0.5)},
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
            "Split-Digits/domain": _summary(5, 0.8),
            "Split-Digits/class-2task": {**_summary(2, 0.9), "scenario": "class"},
            "Split-MNIST/domain": _summary(5, 0.845, 0.011),
            "Split-MNIST/class": {**_summary(5, 0.843), "scenario": "class"},
        },
        "long_span": {
            "dataset": "FontGlyphs/test",
            "n_way": 2,
            "k_shot": 5,
            "runs": 10,
            "scenario": "domain",
            "tasks": {"10": _summary(10, 0.8), "5": _summary(5, 0.9), "20": _summary(20, 0.7, 0.015)},
        },
    }


def _is_png(path):
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 50 and im.size[1] > 50


def test_forgetting_rows_one_row_per_ordered_domain_pair():
    rows = forgetting_rows(_results())
    assert [r.order for r in rows] == [
        "FontGlyphs → FontGlyphs",  # a same-domain pair: only its A→B order
        "EmojiImages → EmojiImages",
        "FontGlyphs → EmojiImages",
        "EmojiImages → FontGlyphs",
    ]
    ab, ba = rows[2], rows[3]
    assert (ab.first["mean"], ab.second["mean"], ab.first_after["mean"]) == (0.91, 0.71, 0.8)
    assert (ba.first["mean"], ba.second["mean"], ba.first_after["mean"]) == (
        0.69,
        0.9,
        0.5,
    )  # B|B, A|B->A, B|B->A
    assert ba.drop == pytest.approx(0.19)
    header, body = forgetting_table(rows)
    assert header == [
        "tasks A → B",
        "acc(A|A) (%)",
        "acc(B|A→B) (%)",
        "acc(A|A→B) (%)",
        "drop A|A − A|A→B (points)",
    ]
    assert body[3] == ["EmojiImages → FontGlyphs", "69.00 ± 1.00", "90.00 ± 1.00", "50.00 ± 1.00", "19.00"]


def test_forgetting_rows_of_old_single_pair_results():
    res = _results()
    del res["forgetting"]["pairs"]
    rows = forgetting_rows(res)
    assert [r.order for r in rows] == ["FontGlyphs → FontGlyphs"]
    res["forgetting"]["task_b"] = "Other"
    assert [r.order for r in forgetting_rows(res)] == ["FontGlyphs → Other", "Other → FontGlyphs"]


def test_split_table_paper_layout():
    header, rows = split_table(_results())
    assert header == [
        "benchmark",
        "5-task domain-incremental",
        "2-task class-incremental",
        "5-task class-incremental",
    ]
    assert rows == [  # Split-MNIST first whatever the order in results
        ["Split-MNIST", "84.50 ± 1.10", "—", "84.30 ± 2.00"],
        ["Split-Digits", "80.00 ± 2.00", "90.00 ± 2.00", "—"],
    ]
    # an old 5-way model's 'class' entry (2 tasks) lands in the 2-task column; other task counts get a column
    header, rows = split_table(
        {"split": {"Split-X/class": _summary(2, 0.6), "Split-FashionMNIST/domain": _summary(3, 0.7)}}
    )
    assert header[-1] == "3-task domain-incremental"
    assert rows == [
        ["Split-FashionMNIST", "—", "—", "—", "70.00 ± 2.00"],
        ["Split-X", "—", "60.00 ± 2.00", "—", "—"],
    ]


def test_long_span_table_and_plot(tmp_path):
    header, rows = long_span_table(_results())
    assert header[1] == "ACC (%), FontGlyphs/test" and "a different data set" in header[3]
    assert rows == [
        ["5", "90.00 ± 2.00", "-5.00 ± 1.00", "92.3 ± 0.4"],
        ["10", "80.00 ± 2.00", "-5.00 ± 1.00", "82.0 ± 0.4"],
        ["20", "70.00 ± 1.50", "-5.00 ± 1.00", "67.6 ± 1.1"],
    ]
    res = _results()
    res["long_span"]["tasks"] = {"7": {"ACC": {"mean": 0.5, "std": 0.1}}}  # no paper number, no BWT, no R
    assert long_span_table(res)[1] == [["7", "50.00 ± 10.00", "—", "—"]]
    _is_png(plot_long_span(res["long_span"], tmp_path / "a.png"))
    _is_png(plot_long_span(_results()["long_span"], tmp_path / "b.png"))  # with the per-task panel
    with Image.open(tmp_path / "a.png") as a, Image.open(tmp_path / "b.png") as b:
        assert b.size[0] > a.size[0]  # two panels


def test_full_report_paper_layouts(tmp_path):
    out = write_report(json.loads(json.dumps(_results())), tmp_path)
    md = out.read_text(encoding="utf-8")
    assert "| training stage | 5-task meta-finetuning (domain) |" in md
    assert "| meta-training domains | FontGlyphs, EmojiImages |" in md
    assert "| FontGlyphs → EmojiImages | 91.00 ± 1.00 | 71.00 ± 1.00 | 80.00 ± 1.00 | 11.00 |" in md
    assert md.count("| FontGlyphs → FontGlyphs |") == 1
    assert "FontGlyphs → FontGlyphs | 90.00" in md and "EmojiImages → FontGlyphs | 69.00" in md
    assert "| order | evaluated on |" not in md  # the single-pair layout is not shown beside the pairs
    assert (
        "| benchmark | 5-task domain-incremental | 2-task class-incremental | 5-task class-incremental |"
        in md
    )
    assert "| Split-MNIST | 84.50 ± 1.10 | — | 84.30 ± 2.00 |" in md
    assert md.index("| Split-MNIST | 84.50") < md.index("### Split-Digits/domain")  # the paper table first
    assert "### Split-MNIST/class" in md and "### Split-Digits/class-2task" in md
    assert "## Long task sequences" in md and "| 20 | 70.00 ± 1.50 | -5.00 ± 1.00 | 67.6 ± 1.1 |" in md
    assert "**a different data set**" in md
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == [
        "accuracy_matrix_split-digits_class-2task.png",
        "accuracy_matrix_split-digits_domain.png",
        "accuracy_matrix_split-mnist_class.png",
        "accuracy_matrix_split-mnist_domain.png",
        "forgetting.png",
        "long_span.png",
    ]
    for name in plots:
        _is_png(tmp_path / "plots" / name)
        assert f"(plots/{name})" in md
    assert not list(tmp_path.rglob("*.tmp"))


def test_plot_forgetting_rows(tmp_path):
    rows = forgetting_rows(_results())
    _is_png(plot_forgetting_rows(rows, tmp_path / "f.png", chance=0.2))
    with Image.open(tmp_path / "f.png") as four:
        _is_png(plot_forgetting_rows(rows[:1], tmp_path / "g.png"))
        with Image.open(tmp_path / "g.png") as one:
            assert four.size[0] > one.size[0]  # one group of bars per ordered pair
    with pytest.raises(ValueError, match="rows: expected at least one"):
        plot_forgetting_rows([], tmp_path / "x.png")


def _broken(path, value):
    """_results() with the item at ``path`` (keys/indices) replaced by ``value`` (``...`` = deleted)."""
    res = copy.deepcopy(_results())
    node = res
    for k in path[:-1]:
        node = node[k]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return res


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("forgetting", "pairs"), [], r"results\['forgetting'\]\['pairs'\]: expected a non-empty list"),
        (
            ("forgetting", "pairs", 1, "task_a"),
            ...,
            r"\['pairs'\]\[1\]: expected a dict with string keys 'task_a'",
        ),
        (
            ("forgetting", "pairs", 2, "table", "B|B"),
            ...,
            r"\['pairs'\]\[2\]\['table'\]: expected keys \['B\|B'",
        ),
        (
            ("forgetting", "pairs", 0, "table", "A|A"),
            {"ci95": 0.1},
            r"\['table'\]\['A\|A'\]: expected a dict with key 'mean'",
        ),
        (("forgetting", "pairs", 0, "table"), None, r"\['pairs'\]\[0\]\['table'\]: expected a dict"),
        (("forgetting",), [1], r"results\['forgetting'\]: expected a dict"),
        (
            ("split", "Split-MNIST/online"),
            _summary(5, 0.5),
            r"\['Split-MNIST/online'\]: expected the scenario",
        ),
        (("split", "Split-MNIST/domain", "ACC"), ..., r"\['Split-MNIST/domain'\]\['ACC'\]: expected a dict"),
        (
            ("split", "Split-MNIST/domain", "num_tasks"),
            4,
            r"\['num_tasks'\]: expected 5 \(the size of R\), given 4",
        ),
        (
            ("split", "Split-Digits/class-2task"),
            _summary(5, 0.5),
            r"2 tasks for the scenario 'class-2task', given 5",
        ),
        (
            ("split", "Split-Digits/class"),
            _summary(2, 0.5),
            r"\['Split-Digits/class'\]: the same cell as 'Split-Digits/class-2task'",
        ),
        (("long_span", "tasks"), {}, r"results\['long_span'\]\['tasks'\]: expected a non-empty dict"),
        (
            ("long_span", "tasks", "many"),
            _summary(5, 0.5),
            r"expected positive task counts as keys, given 'many'",
        ),
        (
            ("long_span", "tasks", "5", "ACC"),
            ...,
            r"\['tasks'\]\['5'\]\['ACC'\]: expected a dict with key 'mean'",
        ),
        (
            ("long_span", "tasks", "10"),
            _summary(5, 0.5),
            r"\['tasks'\]\['10'\]\['R'\]: expected a 10×10 matrix",
        ),
        (("run", "sources"), "FontGlyphs", r"results\['run'\]\['sources'\]: expected a list"),
    ],
)
def test_bad_pieces_give_one_line_errors_naming_the_key(tmp_path, path, value, message):
    with pytest.raises(ValueError, match=message) as err:
        write_report(_broken(path, value), tmp_path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "report.md").exists()
