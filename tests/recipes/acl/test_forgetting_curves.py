"""Meta-validation curves of ACL and no-ACL runs on the same measures (``acl curves --forgetting``):
recomputed from the logged in-context terms, never from each run's own ``val_objective``, which differs
between the two (the no-ACL score leaves out the backward-transfer terms)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fastweights.recipes.acl.plots as acl_plots
from fastweights.cli import main
from fastweights.recipes.acl import compare_curves
from fastweights.recipes.acl.plots import FORGETTING_MEASURES, forgetting_measures, plot_forgetting_curves
from tests.recipes.acl_results import assert_png

OBJECTIVE, FIRST, SECOND, AFTER = (title for title, _ in FORGETTING_MEASURES)
BACKWARD = ("A|A->B", "B|B->A")


def _terms(first: float, second: float, after: float) -> dict[str, float]:
    """The six logged in-context terms, both task orders alike (acc(A|A) = acc(B|B) = ``first`` …)."""
    return {
        "val_A|A": first,
        "val_B|A->B": second,
        "val_A|A->B": after,
        "val_B|B": first,
        "val_A|B->A": second,
        "val_B|B->A": after,
    }


def _record(step: int, acl: bool, first: float, second: float, after: float) -> dict[str, float]:
    """A validation record as ACL training writes it: ``val_objective`` is the mean of all six terms
    with ``train.acl_loss`` true, of the four without the backward terms otherwise."""
    terms = _terms(first, second, after)
    kept = [v for k, v in terms.items() if acl or k.removeprefix("val_") not in BACKWARD]
    return {"step": step, "n_way": 5, **terms, "val_objective": sum(kept) / len(kept)}


def _log(acl: bool, curve: list[tuple[float, float, float]]) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl``: a training record (no in-context terms) every 100 steps
    between validation records at steps 100, 200, … (one per point of ``curve``)."""
    records: list[dict[str, float]] = []
    for i, point in enumerate(curve):
        records += [{"step": 100 * i + 50, "train_loss": 1.0}, _record(100 * (i + 1), acl, *point)]
    return records


def _run(root: Path, name: str, acl: bool, curve: list[tuple[float, float, float]]) -> Path:
    """A run folder: ``config.yaml`` with its ``train.acl_loss`` and the ``metrics.jsonl`` of ``curve``."""
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"name: quick\ntrain:\n  acl_loss: {str(acl).lower()}\n  seed: 0\n")
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _log(acl, curve)))
    return d


# ACL keeps task A (after = 0.85); no-ACL learns B a little better but forgets A (after = 0.40): their
# own val_objective curves end level (0.85 vs 0.8875), the same measure does not (0.8533 vs 0.6917)
ACL = [(0.3, 0.3, 0.3), (0.9, 0.8, 0.85)]
NO_ACL = [(0.3, 0.3, 0.3), (0.9, 0.875, 0.40)]


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot saves, by file name (saved as usual)."""
    saved = {}
    real = acl_plots.atomic_save_figure

    def keep(fig, path, **kw):
        saved[Path(path).name] = fig
        return real(fig, path, **kw)

    monkeypatch.setattr(acl_plots, "atomic_save_figure", keep)
    return saved


def _thick(fig) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Panel title → legend label → the points of the model's mean line (the thick one)."""
    return {
        ax.get_title(): {
            line.get_label().split(":")[0]: list(zip(line.get_xdata(), line.get_ydata(), strict=True))
            for line in ax.get_lines()
            if line.get_linewidth() > 2
        }
        for ax in fig.axes
    }


def test_the_measures_are_recomputed_from_the_terms_not_taken_from_val_objective() -> None:
    acl, no_acl = _record(3000, True, 0.9, 0.8, 0.85), _record(3000, False, 0.9, 0.875, 0.40)
    assert no_acl["val_objective"] > acl["val_objective"]  # what the old plot drew: no-ACL looks better
    a, b = forgetting_measures(acl), forgetting_measures(no_acl)
    assert a[OBJECTIVE] == pytest.approx(acl["val_objective"])  # ACL's own score is the ACL objective
    assert b[OBJECTIVE] == pytest.approx((0.9 + 0.875 + 0.40) / 3)  # no-ACL on the same objective
    assert (a[FIRST], a[SECOND], a[AFTER]) == pytest.approx((0.9, 0.8, 0.85))
    assert (b[FIRST], b[SECOND], b[AFTER]) == pytest.approx((0.9, 0.875, 0.40))
    one_order = {k: v for k, v in acl.items() if k not in ("val_B|B", "val_A|B->A", "val_B|B->A")}
    assert forgetting_measures(one_order)[AFTER] == pytest.approx(0.85)  # one order: that order's terms
    assert forgetting_measures({"step": 50, "train_loss": 1.0}) == {}


def test_plot_draws_each_model_on_the_same_measures_with_its_seeds(tmp_path: Path, figures) -> None:
    runs = {"ACL": [_log(True, ACL), _log(True, ACL[:1])], "no-ACL": [_log(False, NO_ACL)]}
    out = plot_forgetting_curves(runs, tmp_path / "c.png", chance=0.2)
    assert_png(out)
    panels = _thick(figures["c.png"])
    assert list(panels) == [OBJECTIVE, FIRST, SECOND, AFTER]
    # ACL's mean over its two runs only where both log the step (100); no-ACL's one run at every step
    assert [x for x, _ in panels[AFTER]["ACL"]] == [100.0]
    assert [x for x, _ in panels[AFTER]["no-ACL"]] == [100.0, 200.0]
    assert [y for _, y in panels[AFTER]["no-ACL"]] == pytest.approx([30.0, 40.0])
    assert [y for _, y in panels[AFTER]["ACL"]] == pytest.approx([30.0])
    assert panels[OBJECTIVE]["no-ACL"][-1][1] == pytest.approx(100 * (0.9 + 0.875 + 0.40) / 3)
    ax = figures["c.png"].axes[0]
    assert any(line.get_label() == "chance" and line.get_ydata()[0] == 20.0 for line in ax.get_lines())
    assert len({a.get_ylim() for a in figures["c.png"].axes}) == 1  # one scale for every panel


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    out = tmp_path / "x.png"
    with pytest.raises(ValueError, match="at least one model with at least one run"):
        plot_forgetting_curves({"ACL": []}, out)
    with pytest.raises(ValueError, match=r"models\['ACL'\]\[0\]: no record with 'step' and the in-context"):
        plot_forgetting_curves({"ACL": [[{"step": 100, "val_objective": 0.5}]]}, out)
    both = _record(100, True, 0.9, 0.8, 0.85)
    one = {k: v for k, v in both.items() if k not in ("val_B|B", "val_A|B->A", "val_B|B->A")}
    with pytest.raises(ValueError, match="the runs log different task orders"):
        plot_forgetting_curves({"ACL": [[both]], "other": [[one]]}, out)
    assert not out.exists()


def test_cli_forgetting_curves_from_metrics_files_and_val_objective_refused_across_acl_loss(
    tmp_path: Path, figures, capsys: pytest.CaptureFixture[str]
) -> None:
    dirs = [
        _run(tmp_path, "acl0", True, ACL),
        _run(tmp_path, "acl1", True, ACL),
        _run(tmp_path, "noacl0", False, NO_ACL),
    ]
    out = tmp_path / "curves.png"
    args = ["acl", "curves", *map(str, dirs), "--out", str(out), "--x", "step", "--labels", "ACL,ACL,no-ACL"]
    assert main([*args, "--forgetting"]) == 0
    assert_png(out)
    panels = _thick(figures["curves.png"])
    assert panels[OBJECTIVE]["ACL"][-1] == pytest.approx((200.0, 100 * (0.9 + 0.8 + 0.85) / 3))
    assert panels[OBJECTIVE]["no-ACL"][-1] == pytest.approx((200.0, 100 * (0.9 + 0.875 + 0.40) / 3))
    out.unlink()
    assert main(args) == 2  # each run's own val_objective: not one measure across train.acl_loss
    err = capsys.readouterr().err
    assert "--key val_objective: not the same measure" in err and "--forgetting" in err
    assert not out.exists()
    assert main([*args, "--key", "val_A|A->B"]) == 0  # one logged term, the same measure in both
    assert compare_curves(dirs[:2], tmp_path / "same.png", x="step").is_file()  # one kind
