"""Reports read at a glance: Split-Emoji matrices with short labels that do not overlap, the learning
curve of the checkpoint selection metric, what odd cells mean (not learned yet, below chance, chance
lines) and the one-page HTML report."""

import json
import re
from itertools import combinations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

import fastweights.recipes.acl.plots as acl_plots
import fastweights.recipes.plots as plots
from fastweights.io import JsonlLogger
from fastweights.recipes.acl.report import write_report
from fastweights.recipes.plots import learning_curve_section
from fastweights.recipes.reporting import below_chance_cells, markdown_to_html, short_task_labels
from tests.recipes.acl_results import paper_results, single_pair_results, summary

# the class names of a real Split-Emoji run (runs/acl-5task-class-seeds/srwm/seed0/results.json)
EMOJI_TASKS = [
    "envelope with arrow (U+1F4E9)/film projector (U+1F4FD U+FE0F)",
    "face with monocle (U+1F9D0)/wind chime (U+1F390)",
    "flag: England (U+1F3F4 U+E0067 U+E0062 U+E0065 U+E006E U+E0067 U+E007F)"
    "/globe showing Americas (U+1F30E)",
    "troll (U+1F9CC)/post office (U+1F3E4)",
    "Statue of Liberty (U+1F5FD)/down-right arrow (U+2198 U+FE0F)",
]
EMOJI_R = [
    [0.875, 0.95, 0.98, 0.145, 0.615],
    [0.82, 1.0, 0.96, 0.15, 0.5],
    [0.955, 1.0, 1.0, 0.2, 0.5],
    [0.775, 1.0, 1.0, 0.55, 0.5],
    [0.87, 1.0, 0.995, 0.525, 0.51],
]


@pytest.fixture
def figures(monkeypatch):
    """Every figure the report plots save, by file name (saved as usual)."""
    saved = {}
    real = plots.atomic_save_figure

    def keep(fig, path, **kw):
        saved[str(path).rsplit("/", 1)[-1]] = fig
        return real(fig, path, **kw)

    monkeypatch.setattr(plots, "atomic_save_figure", keep)
    monkeypatch.setattr(acl_plots, "atomic_save_figure", keep)
    return saved


def _drawn(fig):
    """``fig`` drawn on an Agg canvas, and the canvas's renderer."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _emoji_results():
    res = single_pair_results()
    entry = {**summary(5, 0.78), "R": EMOJI_R, "task_names": EMOJI_TASKS, "chance": 0.5, "scenario": "domain"}
    res["split"] = {"Split-Emoji/domain": entry, "Split-Digits/domain": summary(5, 0.74)}
    return res


def test_split_emoji_matrix_labels_do_not_overlap_and_the_matrix_fills_the_figure(tmp_path, figures):
    md = write_report(_emoji_results(), tmp_path).read_text(encoding="utf-8")
    fig = figures["accuracy_matrix_split-emoji_domain.png"]
    renderer = _drawn(fig)
    ax = fig.axes[0]  # the matrix (the colour bar is the second axes)
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        texts = [t.get_text() for t in labels]
        assert texts and all(len(t) <= len("after T5") for t in texts), texts
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert not any(_overlap(a, b) for a, b in combinations(boxes, 2)), texts
    assert [t.get_text() for t in ax.get_xticklabels()] == ["T1", "T2", "T3", "T4", "T5"]
    matrix, whole = ax.get_window_extent(renderer), fig.bbox
    assert matrix.width / whole.width > 0.5 and matrix.height / whole.height > 0.45
    assert (matrix.width * matrix.height) / (whole.width * whole.height) > 0.3
    # the short labels' legend: in the figure (code points dropped) and as a table in the report
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "T3: flag: England / globe showing Americas" in legend
    assert "| T4 | troll (U+1F9CC)/post office (U+1F3E4) |" in md
    assert "| after \\ task | T1 | T2 | T3 | T4 | T5 |" in md
    assert "film projector" not in md.split("| after \\ task | T1")[1].split("\n")[0]


def test_short_task_labels():
    assert short_task_labels(["0/1", "2/3"]) == ["0/1", "2/3"]
    assert short_task_labels(EMOJI_TASKS[:2]) == ["T1", "T2"]


def test_matrix_marks_unseen_cells_below_chance_cells_and_chance(tmp_path, figures):
    plots.plot_accuracy_matrix(EMOJI_R, EMOJI_TASKS, tmp_path / "m.png", chance=0.5, flag_unseen=True)
    fig = figures["m.png"]
    ax, cbar = fig.axes
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert sorted((round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in hatched) == sorted(
        (j, i) for i in range(5) for j in range(i + 1, 5)
    )
    outlined = {(round(p.get_y() + 0.42), round(p.get_x() + 0.42)) for p in ax.patches if not p.get_hatch()}
    assert outlined == {(0, 3), (1, 3), (2, 3)}  # task 4 below 50 % after tasks 1-3 (not learned yet)
    assert any(list(line.get_ydata()) == [50.0, 50.0] for line in cbar.lines)
    # class-incremental: the unseen cells are not flagged (their classes were not shown yet)
    assert below_chance_cells(EMOJI_R, 0.5, include_unseen=False) == []
    assert below_chance_cells([[0.9, 0.0], [0.05, 0.8]], 0.25, include_unseen=False) == [(1, 0)]


def _horizontal_at(ax, y) -> bool:
    return any(
        len(set(line.get_ydata())) == 1 and line.get_ydata()[0] == pytest.approx(y) for line in ax.lines
    )


def test_chance_is_drawn_on_every_accuracy_plot(tmp_path, figures):
    write_report(json.loads(json.dumps(paper_results())), tmp_path)
    assert _horizontal_at(figures["forgetting.png"].axes[0], 20.0)  # 5-way forgetting tasks
    for ax in figures["long_span.png"].axes:
        assert _horizontal_at(ax, 50.0)  # 2-way tasks
    plots.plot_bars({"a": {"acc": (60.0, 1.0)}}, tmp_path / "b.png", ylabel="ACC (%)", title="t", chance=10.0)
    assert _horizontal_at(figures["b.png"].axes[0], 10.0)
    plots.plot_learning_curves({"a": [(0, 30.0), (1, 60.0)]}, tmp_path / "c.png", chance=20.0)
    assert _horizontal_at(figures["c.png"].axes[0], 20.0)


def test_report_says_what_odd_cells_mean(tmp_path):
    md = write_report(_emoji_results(), tmp_path).read_text(encoding="utf-8")
    emoji = md.split("### Split-Emoji/domain")[1].split("###")[0]
    assert "| after T1 | 87.50 | (95.00) | (98.00) | (14.50) ↓ | (61.50) |" in emoji
    assert "Cells above the diagonal (in parentheses; hatched in the plot) are tasks not learned yet" in emoji
    assert (
        "**Below chance** (50.0 %), marked ↓ here and outlined in red in the plot: task T4 after T1: 14.50 % "
        "(not learned yet), task T4 after T2: 15.00 % (not learned yet), task T4 after T3: 20.00 % "
        "(not learned yet)." in emoji
    )
    digits = md.split("### Split-Digits/domain")[1].split("###")[0]
    assert "No cell is below chance (50.0 %)." in digits
    assert "scikit-learn's 8×8 handwritten digits" in md and "not MNIST" in md
    # class-incremental: only learned tasks are flagged, and the text says why the upper cells are low
    res = single_pair_results()
    cls = {**summary(2, 0.5), "R": [[0.9, 0.0], [0.05, 0.8]], "chance": 0.25, "scenario": "class-2task"}
    res["split"] = {"Split-MNIST/class-2task": cls}
    md = write_report(res, tmp_path / "class").read_text(encoding="utf-8")
    assert "tasks whose classes have not been shown yet: values near 0 are expected there" in md
    assert "among the learned tasks (on or below the diagonal), marked ↓" in md
    assert "task 0/1 after 2/3: 5.00 %." in md
    assert "scikit-learn" not in md


def _log_5task(path, steps=(100, 200, 300, 400)):
    """A 5-task meta-finetuning log: val_objective rises 48 → 83 %, val_acc (task 1 alone) flat 98 %."""
    objective = [0.48, 0.70, 0.83, 0.80]
    with JsonlLogger(path) as log:
        log.log(step=0, train_loss=1.0)
        for step, obj in zip(steps, objective, strict=True):
            tasks = {f"val_task{j}|all": obj + 0.01 * (j - 3) for j in range(1, 6)}
            log.log(step=step, minutes=step / 50, train_loss=0.5, val_acc=0.98, val_objective=obj, **tasks)


def test_learning_curve_plots_the_selection_metric_with_the_selected_checkpoint(tmp_path, figures):
    _log_5task(tmp_path / "metrics.jsonl")
    res = single_pair_results()
    res["run"] |= {
        "steps": 300,
        "checkpoint": "best",
        "selected_on": {"metric": "val_objective", "mode": "max", "value": 0.83, "data": "meta-validation"},
    }
    (tmp_path / "config.yaml").write_text("train:\n  n_way: 2\n  num_tasks: 5\n  scenario: class\n")
    md = write_report(res, tmp_path).read_text(encoding="utf-8")
    ax = figures["learning_curve.png"].axes[0]
    by_label = {line.get_label(): line for line in ax.lines}
    main = by_label["val_objective (selection metric)"]
    assert list(main.get_ydata()) == pytest.approx([48.0, 70.0, 83.0, 80.0])
    assert main.get_linewidth() > max(
        line.get_linewidth() for name, line in by_label.items() if name.startswith("task ")
    )
    star = by_label["selected checkpoint (step 300)"]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == pytest.approx((300, 83.0))
    assert "first task right after learning it (val_acc)" in by_label  # the old flat curve, for context
    assert _horizontal_at(ax, 10.0)  # chance of the 10-class class-incremental validation
    assert "the highest `val_objective` in the log: the thick black line, 83.00 % at the star" in md
    assert "(plots/learning_curve.png)" in md


def test_learning_curve_of_other_recipes_min_metric_and_frames(tmp_path, figures):
    with JsonlLogger(tmp_path / "metrics.jsonl") as log:
        for step, bpb in ((10, 3.0), (20, 2.0), (30, 2.5)):
            log.log(step=step, frames=8 * step, val_bpb=bpb, train_bpb=bpb + 0.1)
    run = {"steps": 20, "checkpoint": "best", "selected_on": {"metric": "val_bpb", "mode": "min"}}
    lines = learning_curve_section(
        tmp_path, run, default_metric="val_bpb", others=("train_bpb",), x="frames", ylabel="bpb"
    )
    assert "the lowest `val_bpb`" in lines[2] and "2.00 at the star" in lines[2]
    ax = figures["learning_curve.png"].axes[0]
    star = next(line for line in ax.lines if line.get_label().startswith("selected checkpoint"))
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (160, 2.0)
    assert {line.get_label() for line in ax.lines} >= {"val_bpb (selection metric)", "train_bpb"}
    latest = learning_curve_section(
        tmp_path, {**run, "checkpoint": "latest", "selected_on": {"metric": "val_bpb", "mode": "latest"}},
        default_metric="val_bpb", ylabel="bpb",
    )  # fmt: skip
    assert "is the latest (step 20), not a selected one" in latest[2]
    assert learning_curve_section(tmp_path / "none", run, default_metric="val_bpb", ylabel="bpb") == []


def test_old_logs_without_the_selection_metric_plot_val_acc(tmp_path, figures):
    with JsonlLogger(tmp_path / "metrics.jsonl") as log:
        for i in range(3):
            log.log(step=i, minutes=0.5 * i, val_acc=0.2 + 0.1 * i)
    write_report(single_pair_results(), tmp_path)
    labels = [line.get_label() for line in figures["learning_curve.png"].axes[0].lines]
    assert "first task right after learning it (val_acc) (selection metric)" in labels


def test_html_report_is_one_file_with_tables_and_embedded_plots(tmp_path):
    md_path = write_report(_emoji_results(), tmp_path)
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    md = md_path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<title>ACL run report (quick)</title>" in html
    assert html.count("<table>") == md.count("\n|---|") and html.count("<table>") >= 5
    assert "<th>after \\ task</th><th>T1</th>" in html
    assert "<td>A→B</td><td>A</td><td>A→B</td><td>40.00 ± 1.50</td>" in html
    images = re.findall(r'<img alt="[^"]*" src="([^"]*)"', html)
    assert len(images) == md.count("![") == 3
    assert all(src.startswith("data:image/png;base64,iVBORw0KGgo") for src in images)
    refs = re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r"url\(", html)
    assert all(r.startswith("data:") for r in refs), [r[:40] for r in refs]
    assert "<strong>61.00 ± 1.20 %</strong>" in html
    assert "<pre><code>fastweights acl train --preset quick</code></pre>" in html
    assert not list(tmp_path.rglob("*.tmp"))


def test_markdown_to_html_pieces(tmp_path):
    text = (
        "# T <1>\n\n- a `x<y` item\n- **b**\n\ntext *it* [doc](https://x.org) ![gone](missing.png)\n\n"
        "```\nif a < b:\n```\n\n| a \\| b | c |\n|---|---|\n| 1 | <2> |\n"
    )
    html = markdown_to_html(text, tmp_path)
    assert "<h1>T &lt;1&gt;</h1>" in html and "<title>T &lt;1&gt;</title>" in html
    assert "<ul><li>a <code>x&lt;y</code> item</li><li><strong>b</strong></li></ul>" in html
    assert "<em>it</em>" in html and "doc (https://x.org)" in html and "href" not in html
    assert "<em>[gone: missing.png not embedded]</em>" in html and "<img" not in html
    assert "<pre><code>if a &lt; b:</code></pre>" in html
    assert "<th>a | b</th><th>c</th>" in html and "<td>&lt;2&gt;</td>" in html
