"""Seeds as an axis of ``compare``: parsing, aggregation over seeds, the paired verdict on hand-made
numbers, the Markdown, and a sweep of two tiny ACL seeds through the CLI."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from fastweights.cli import main
from fastweights.recipes.compare import MAX_SEED, Score, parse_seeds, seed_markdown, summarize_seeds


def test_parse_seeds_accepts_distinct_non_negative_integers():
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds(" 7 ") == [7]
    for bad in ("", "0,,1", "a", "1.5", "-1", "0,0", str(MAX_SEED + 1)):
        with pytest.raises(ValueError, match=r"^--seeds: expected"):
            parse_seeds(bad)


def _scores(values: dict[str, list[float]], spread: float | None = 1.0, higher: bool = True):
    return {
        label: {s: {"acc (%)": Score(v, spread, higher)} for s, v in enumerate(vals)}
        for label, vals in values.items()
    }


def test_summary_is_the_mean_and_t_interval_over_seeds_with_within_run_spread_apart():
    summary = summarize_seeds(_scores({"acl": [80.0, 82.0, 84.0], "no-acl": [70.0, 73.0, 76.0]}, spread=0.5))
    acl = summary["variants"]["acl"]["acc (%)"]
    assert acl["mean"] == pytest.approx(82.0)
    assert acl["ci95"] == pytest.approx(stats.t.ppf(0.975, 2) * 2.0 / math.sqrt(3))  # s = 2
    assert acl["per_seed"] == {"0": 80.0, "1": 82.0, "2": 84.0}
    assert acl["within_run"] == pytest.approx(0.5)
    assert summary["reference"] == "acl" and list(summary["paired"]) == ["no-acl"]
    # differences -10, -9, -8: mean -9, s = 1 -> CI 2.48, excludes 0 -> worse
    d = summary["paired"]["no-acl"]["acc (%)"]
    assert d["mean"] == pytest.approx(-9.0) and d["ci95"] == pytest.approx(
        stats.t.ppf(0.975, 2) / math.sqrt(3)
    )
    assert d["verdict"] == "worse" and d["differences"] == pytest.approx([-10.0, -9.0, -8.0])


@pytest.mark.parametrize(
    ("ref", "other", "higher", "verdict"),
    [
        ([1.0, 2.0, 3.0], [2.0, 3.1, 3.9], True, "better"),  # +1.0, +1.1, +0.9
        ([1.0, 2.0, 3.0], [2.0, 3.1, 3.9], False, "worse"),  # the same numbers as a loss
        ([1.0, 2.0, 3.0], [3.0, 1.0, 3.5], True, "not distinguishable"),  # +2, -1, +0.5
        ([1.0], [5.0], True, "not distinguishable"),  # one seed: no interval
    ],
)
def test_paired_verdict_on_hand_made_numbers(ref, other, higher, verdict):
    scores = {
        "a": {s: {"m": Score(v, None, higher)} for s, v in enumerate(ref)},
        "b": {s: {"m": Score(v, None, higher)} for s, v in enumerate(other)},
    }
    summary = summarize_seeds(scores)
    assert summary["paired"]["b"]["m"]["verdict"] == verdict
    assert summary["variants"]["a"]["m"]["within_run"] is None


def test_variants_with_other_seeds_or_metrics_are_refused():
    good = _scores({"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"scores\['b'\]: expected the seeds \[0, 1\]"):
        summarize_seeds({**good, "b": {0: {"acc (%)": Score(1.0)}}})
    with pytest.raises(ValueError, match=r"scores\['b'\]\[1\]: expected the metrics of its seed 0"):
        summarize_seeds({**good, "b": {0: {"x": Score(1.0)}, 1: {"y": Score(1.0)}}})
    with pytest.raises(ValueError, match="at least one variant"):
        summarize_seeds({})


def test_variants_with_other_metrics_are_paired_on_the_common_ones():
    a = {s: {"shared": Score(v), "only a": Score(1.0)} for s, v in enumerate([80.0, 82.0, 84.0])}
    b = {s: {"shared": Score(v), "only b": Score(2.0)} for s, v in enumerate([85.0, 88.0, 90.0])}
    summary = summarize_seeds({"a": a, "b": b})
    assert summary["metrics"] == ["shared", "only a", "only b"]
    assert set(summary["variants"]["b"]) == {"shared", "only b"}
    assert set(summary["paired"]["b"]) == {"shared"}  # +5, +6, +6
    assert summary["paired"]["b"]["shared"]["verdict"] == "better"
    md = "\n".join(seed_markdown(summary))
    assert "| only b | — | 2.00 ± 0.00 | — |" in md and "| only a | 1.00 ± 0.00 | — | — |" in md


def test_markdown_says_what_every_plus_minus_is():
    md = "\n".join(
        seed_markdown(summarize_seeds(_scores({"acl": [80.0, 82.0, 84.0], "no-acl": [70, 73, 76]})))
    )
    assert "Training seeds: 0, 1, 2 (n = 3)" in md and "Student t, 2 degrees of freedom" in md
    assert "| metric | acl | no-acl | no-acl − acl |" in md
    assert "| acc (%) | 82.00 ± 4.97 | 73.00 ± 7.45 | -9.00 ± 2.48 (worse) |" in md
    assert "| acc (%) | 80.00 | 82.00 | 84.00 | 70.00 | 73.00 | 76.00 |" in md  # per seed
    assert "| acc (%) | ± 1.00 | ± 1.00 |" in md  # within one run
    one = "\n".join(seed_markdown(summarize_seeds(_scores({"acl": [80.0]}, spread=None))))
    assert "none with one seed" in one and "| acc (%) | 80.00 |" in one and "| acc (%) | — |" in one


_SMALL_ACL = ["train.max_steps=2", "eval.episodes=4", "eval.split_benchmarks=[digits]"]
_NO_SPLIT = [*_SMALL_ACL[:-1], "eval.split_benchmarks=[]"]  # the cheaper evaluation: no split benchmark


def test_compare_seeds_trains_every_variant_per_seed_and_aggregates(tmp_path, capsys, data_cache):
    root = tmp_path / "seeds"
    args = ["acl", "compare", "--vary", "train.acl_loss=true,false", "--seeds", "0,1", "--preset", "smoke"]
    seeded = "train.warmup_steps=1{seed}"  # any override may hold the run's seed
    assert main([*args, "--run-root", str(root), f"data.cache_dir={data_cache}", *_SMALL_ACL, seeded]) == 0
    out = capsys.readouterr().out
    assert "Training seeds: 0, 1 (n = 2)" in out and "Differences: variant − acl_loss=true" in out
    table = json.loads((root / "comparison.json").read_text())
    runs = ["acl_loss=true/seed0", "acl_loss=true/seed1", "acl_loss=false/seed0", "acl_loss=false/seed1"]
    assert list(table["results"]) == runs
    assert [r[0] for r in table["rows"]] == [r.replace("/seed", " seed ") for r in runs]
    for run in runs:
        assert f"seed: {run[-1]}" in (root / run / "config.yaml").read_text()
        assert f"warmup_steps: 1{run[-1]}" in (root / run / "config.yaml").read_text()  # {seed} substituted
    summary = table["seeds"]
    assert summary["seeds"] == [0, 1] and summary["reference"] == "acl_loss=true"
    metric = summary["metrics"][0]
    assert metric.endswith("(%)") and summary["paired"]["acl_loss=false"][metric]["n"] == 2
    per_seed = [table["results"][f"acl_loss=true/seed{s}"]["fewshot"]["accuracy"] * 100 for s in (0, 1)]
    assert summary["variants"]["acl_loss=true"][metric]["per_seed"] == {"0": per_seed[0], "1": per_seed[1]}
    assert (root / "comparison_seeds.png").stat().st_size > 0
    # again: every run is finished and its results.json current -> nothing trained or evaluated again
    stamps = {run: (root / run / "results.json").stat().st_mtime_ns for run in runs}
    assert main([*args, "--run-root", str(root), f"data.cache_dir={data_cache}", *_SMALL_ACL, seeded]) == 0
    assert {run: (root / run / "results.json").stat().st_mtime_ns for run in runs} == stamps
    assert json.loads((root / "comparison.json").read_text())["seeds"] == summary
    # another eval override (no split benchmark) -> evaluated again
    assert main([*args, "--run-root", str(root), f"data.cache_dir={data_cache}", *_NO_SPLIT, seeded]) == 0
    assert all((root / run / "results.json").stat().st_mtime_ns != stamps[run] for run in runs)
    capsys.readouterr()
    bad = [*args[:4], "--seeds", "0,0", "--preset", "smoke", "--run-root", str(tmp_path / "x")]
    assert main(bad) == 2 and "--seeds: expected distinct" in capsys.readouterr().err
    bad = [*args, "--run-root", str(tmp_path / "y"), "train.seed=3"]
    assert main(bad) == 2 and "train.seed is set by --seeds" in capsys.readouterr().err
    bad = [
        *args[:4],
        "--preset",
        "smoke",
        "--run-root",
        str(tmp_path / "x"),
        "train.init_from=r/seed{seed}/b.pt",
    ]
    assert main(bad) == 2 and "{seed} stands for the training seed of --seeds" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_compare_presets_runs_each_preset_with_the_same_overrides(tmp_path, capsys, data_cache):
    from fastweights.config import preset_path

    other = tmp_path / "smoke-b.yaml"  # the smoke preset with another learning rate
    other.write_text(preset_path("acl", "smoke").read_text() + "\n# a second preset\n")
    root = tmp_path / "presets"
    args = ["acl", "compare", "--presets", f"smoke,{other}", "--seeds", "0,1", "--run-root", str(root)]
    assert main([*args, f"data.cache_dir={data_cache}", *_NO_SPLIT, "train.lr=0.002"]) == 0
    table = json.loads((root / "comparison.json").read_text())
    runs = ["smoke/seed0", "smoke/seed1", "smoke-b/seed0", "smoke-b/seed1"]
    assert list(table["results"]) == runs
    for run in runs:
        cfg = (root / run / "config.yaml").read_text()
        assert f"seed: {run[-1]}" in cfg and "lr: 0.002" in cfg
    assert table["seeds"]["reference"] == "smoke"
    capsys.readouterr()
    for bad, says in (
        ("smoke", "expected two or more distinct presets"),
        ("smoke,smoke", "expected two or more distinct presets"),
        ("smoke,nope", "--presets: unknown preset 'nope'"),
    ):
        assert main(["acl", "compare", "--presets", bad, "--run-root", str(tmp_path / "z")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("fastweights: error: --presets:") and says in err[0]
    with pytest.raises(SystemExit) as exit_:  # argparse: the three axes exclude each other
        main(["acl", "compare", "--presets", "smoke,quick", "--models", "srwm"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_a_copied_run_folder_keeps_its_evaluation():
    from fastweights.recipes.compare import _same_evaluation

    cmd = "fastweights acl eval runs/new/srwm/seed0 --checkpoint best eval.episodes=4"
    assert _same_evaluation("fastweights acl eval runs/old/seed0 --checkpoint best eval.episodes=4", cmd)
    for other in (
        "fastweights acl eval runs/old/seed0 --checkpoint latest eval.episodes=4",
        "fastweights acl eval runs/old/seed0 --checkpoint best eval.episodes=6",
        "fastweights acl eval runs/old/seed0 --checkpoint best",
        "fastweights fewshot eval runs/old/seed0 --checkpoint best eval.episodes=4",
        "fastweights acl eval 'unclosed",
        None,
    ):
        assert not _same_evaluation(other, cmd)
