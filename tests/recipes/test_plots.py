"""Every report plot is a PNG, sized by its content, and rejects input it cannot draw."""

import pytest
from PIL import Image

from fastweights.recipes.acl.paper_tables import forgetting_rows
from fastweights.recipes.acl.plots import plot_forgetting, plot_forgetting_rows, plot_long_span
from fastweights.recipes.plots import plot_accuracy_matrix, plot_bars, plot_learning_curves
from tests.recipes.acl_results import assert_png, paper_results


def test_plot_accuracy_matrix(tmp_path):
    p = plot_accuracy_matrix([[0.5, float("nan")], [0.4, 0.9]], ["a", "b"], tmp_path / "m.png", "t")
    assert p == tmp_path / "m.png"
    assert_png(p)
    with pytest.raises(ValueError, match="task_names: expected 2"):
        plot_accuracy_matrix([[0.5, 0.1], [0.4, 0.9]], ["a"], tmp_path / "x.png", "t")
    with pytest.raises(ValueError, match="square"):
        plot_accuracy_matrix([[0.5, 0.1]], None, tmp_path / "x.png", "t")
    assert not (tmp_path / "x.png").exists()


def test_plot_forgetting(tmp_path):
    assert_png(plot_forgetting({"A|A": {"mean": 0.6, "ci95": 0.01}}, tmp_path / "f.png", "f", chance=0.2))
    with pytest.raises(ValueError, match="table: expected some of the keys"):
        plot_forgetting({"X": {"mean": 0.1}}, tmp_path / "x.png", "f")
    with pytest.raises(ValueError, match=r"table\['A\|A'\]: expected a dict with key 'mean'"):
        plot_forgetting({"A|A": {"ci95": 0.1}}, tmp_path / "x.png", "f")
    assert not (tmp_path / "x.png").exists()


def test_plot_forgetting_rows(tmp_path):
    rows = forgetting_rows(paper_results())
    assert_png(plot_forgetting_rows(rows, tmp_path / "f.png", chance=0.2))
    with Image.open(tmp_path / "f.png") as four:
        assert_png(plot_forgetting_rows(rows[:1], tmp_path / "g.png"))
        with Image.open(tmp_path / "g.png") as one:
            assert four.size[0] > one.size[0]  # one group of bars per ordered pair
    with pytest.raises(ValueError, match="rows: expected at least one"):
        plot_forgetting_rows([], tmp_path / "x.png")


def test_plot_long_span(tmp_path):
    without_r = {**paper_results()["long_span"], "tasks": {"7": {"ACC": {"mean": 0.5, "std": 0.1}}}}
    assert_png(plot_long_span(without_r, tmp_path / "a.png"))
    assert_png(plot_long_span(paper_results()["long_span"], tmp_path / "b.png"))  # with the per-task panel
    with Image.open(tmp_path / "a.png") as a, Image.open(tmp_path / "b.png") as b:
        assert b.size[0] > a.size[0]  # two panels
    with pytest.raises(ValueError, match=r"results\['long_span'\]\['tasks'\]: expected a non-empty dict"):
        plot_long_span({"tasks": {}}, tmp_path / "x.png")


def test_plot_learning_curves(tmp_path):
    curves = {"srwm": [(0.0, 0.2), (1.0, 0.5)], "deltanet": [(0.0, 0.2), (2.0, 0.4)]}
    assert_png(plot_learning_curves(curves, tmp_path / "c.png", chance=0.2))
    with pytest.raises(ValueError, match="at least one variant"):
        plot_learning_curves({"a": []}, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"curves\['a'\]: expected a list of \(x, y\) pairs"):
        plot_learning_curves({"a": [(0.0, "high")]}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_plot_bars(tmp_path):
    values = {"srwm": {"acc": (0.6, 0.02), "acc A|A→B": (0.4, 0.03)}, "deltanet": {"acc": (0.5, 0.01)}}
    assert_png(plot_bars(values, tmp_path / "two.png", ylabel="accuracy", title="t"))
    five = {f"model {i}": {"acc": (0.1 * i, 0.0)} for i in range(5)}
    assert_png(plot_bars(five, tmp_path / "five.png", ylabel="accuracy", title="t"))
    with Image.open(tmp_path / "two.png") as two, Image.open(tmp_path / "five.png") as many:
        assert many.size[0] > two.size[0]  # wider with more groups


def test_plot_accuracy_matrices_small_multiples(tmp_path):
    from fastweights.recipes.plots import plot_accuracy_matrices

    R = [[0.9, None], [0.5, 0.8]]
    path = plot_accuracy_matrices({f"m{i}": R for i in range(5)}, tmp_path / "m.png", title="t")
    assert path.stat().st_size > 0
    with pytest.raises(ValueError, match="one size"):
        plot_accuracy_matrices({"a": R, "b": [[1.0]]}, tmp_path / "x.png", title="t")
    with pytest.raises(ValueError, match=r"matrices\['a'\]"):
        plot_accuracy_matrices({"a": [[1.0, 2.0]]}, tmp_path / "y.png", title="t")
