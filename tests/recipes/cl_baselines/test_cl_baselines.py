"""The cl-baselines recipe: cells, search on training data only, run-folder safety, resume, report and
the comparison with ACL models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from fastweights.cli import main
from fastweights.config import load_config, preset_path
from fastweights.recipes import cl_baselines as cb
from fastweights.recipes.cl_baselines import compare as baselines_compare
from fastweights.recipes.cl_baselines import report as cb_report
from fastweights.recipes.cl_baselines.compare import compare
from fastweights.recipes.cl_baselines.config import (
    BaselinesConfig,
    BaselinesDataConfig,
    BaselinesSearchConfig,
    BaselinesTrainConfig,
    BaselinesTrainGrid,
)
from fastweights.recipes.cl_baselines.data import Streams, load_benchmark
from fastweights.recipes.cl_baselines.report import method_rows, seen_task_curve
from fastweights.train.run_folder import RunFolderError


def tiny_config(**kw) -> BaselinesConfig:
    base = dict(
        name="tiny",
        threads=1,
        methods=["sgd", "l2"],
        runs=2,
        scenarios=["domain", "class-2task"],
        budgets=["fewshot", "full"],
        data=BaselinesDataConfig(benchmarks=["digits"]),
        train=BaselinesTrainConfig(
            fewshot=BaselinesTrainGrid(epochs=[2], batch_size=[10]),
            full=BaselinesTrainGrid(epochs=[1], batch_size=[128], sgd_lr=[0.01, 0.05]),
        ),
        search=BaselinesSearchConfig(runs=1, grids={"l2": {"lam": [0.1, 10.0]}}),
    )
    base.update(kw)
    return BaselinesConfig(**base)


def _numbers(results: dict) -> dict:
    """The measured content of results (cells without their wall-clock ``seconds``)."""
    return {
        k: {m: {f: v for f, v in cell.items() if f != "seconds"} for m, cell in row.items()}
        for k, row in results["cells"].items()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("clb") / "run"
    return run_dir, cb.run(tiny_config(), run_dir, command="test")


@pytest.fixture
def no_plots(monkeypatch):
    """Runs whose numbers (not report) a test checks skip drawing the report's plots (a dozen figures,
    most of a tiny run's time); the finished run draws them all (test_run_writes_every_cell_report_and_plots
    checks them)."""
    monkeypatch.setattr(cb_report, "_plots", lambda results, plots: [])


def test_run_writes_every_cell_report_and_plots(finished):
    run_dir, res = finished
    assert set(res["cells"]) == {
        f"Split-Digits/{v}/{b}" for v in ("domain", "class-2task") for b in ("fewshot", "full")
    }
    for key, row in res["cells"].items():
        assert set(row) == {"sgd", "l2"}
        for cell in row.values():
            R = np.asarray(cell["test"]["R"])
            T = 5 if "/domain/" in key else 2
            assert R.shape == (T, T) and len(cell["R_runs"]) == 2
            assert 0.0 <= cell["test"]["ACC"]["mean"] <= 1.0
    assert (run_dir / "report.md").is_file() and (run_dir / "results.json").is_file()
    assert sorted(p.name for p in (run_dir / "plots").glob("acc_*.png")) == sorted(
        f"acc_{v}_{b}.png" for v in ("domain", "class_2task") for b in ("fewshot", "full")
    )
    text = (run_dir / "report.md").read_text()
    assert "Hsu" in text and "fine-tune (SGD)" in text and "Split-Digits ACC" in text
    assert "not MNIST" in text and "Dashed lines: chance" in text and (run_dir / "report.html").is_file()


def test_search_records_the_grid_and_picks_the_best_validation_point(finished):
    _, res = finished
    cell = res["cells"]["Split-Digits/domain/full"]["l2"]
    assert [row["hparams"]["lam"] for row in cell["search"]] == [0.1, 10.0]
    best = max(cell["search"], key=lambda row: row["val_ACC"])
    assert cell["hparams"]["lam"] == best["hparams"]["lam"]
    assert res["cells"]["Split-Digits/domain/fewshot"]["sgd"]["search"] == []  # nothing to search


def test_training_settings_are_searched_per_optimizer(finished):
    run_dir, _ = finished
    found = json.loads(cb.cell_path(run_dir, "digits", "domain", "full", "_settings-sgd").read_text())
    assert [row["settings"]["lr"] for row in found["search"]] == [0.01, 0.05]
    best = max(found["search"], key=lambda row: row["val_ACC"])
    assert found["best"] == best["settings"]


def test_validation_streams_never_touch_test_queries():
    cfg = tiny_config()
    data = load_benchmark(cfg.data, "digits")
    streams = Streams(data, cfg.data, 0.2)
    test = streams.get("domain", "full", 0)
    val = streams.get("domain", "full", 0, validation=True)
    test_queries = {t.query_x.numpy().tobytes() for task in test for t in [task]}
    for task in val:  # validation queries are training images, and not trained on in the search
        assert task.query_x.numpy().tobytes() not in test_queries
        train_rows = {r.tobytes() for r in task.x.numpy()}
        assert not any(q.tobytes() in train_rows for q in task.query_x.numpy())


def test_fewshot_stream_is_the_acl_demonstrations():
    from fastweights.data.streams import split_benchmark

    cfg = tiny_config()
    data = load_benchmark(cfg.data, "digits")
    tasks = Streams(data, cfg.data, 0.2).get("domain", "fewshot", 3)
    ref = split_benchmark(data, k_shot=5, run=3, scenario="domain")
    assert len(tasks) == 5
    for got, want in zip(tasks, ref, strict=True):
        assert got.x.shape[0] == 10 and np.array_equal(got.y.numpy(), want.support_labels)
        assert got.query_x.shape[0] == len(want.query_labels)


def test_resume_after_a_kill_gives_the_same_numbers(finished, tmp_path, monkeypatch, no_plots):
    _, full = finished
    run_dir = tmp_path / "run"
    real = cb._method_cell
    calls = {"n": 0}

    def killed_after_three(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(cb, "_method_cell", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        cb.run(tiny_config(), run_dir, command="first")
    assert not (run_dir / "results.json").exists()
    assert len(list((run_dir / "cells").glob("**/[!_]*.json"))) == 3
    monkeypatch.setattr(cb, "_method_cell", real)
    resumed = cb.run(tiny_config(), run_dir, resume=True, command="second")
    assert _numbers(resumed) == _numbers(full)
    assert (run_dir / "command.txt").read_text() == "first\nsecond\n"


def test_same_seed_same_numbers_and_methods_share_initialisations(finished, tmp_path, no_plots):
    _, full = finished
    again = cb.run(tiny_config(), tmp_path / "again")
    assert _numbers(again) == _numbers(full)


@pytest.mark.slow
def test_worker_processes_give_the_same_numbers(finished, tmp_path, no_plots):
    _, full = finished
    parallel = cb.run(tiny_config(workers=2), tmp_path / "parallel")
    assert _numbers(parallel) == _numbers(full)


def test_run_folder_safety(finished, tmp_path, no_plots):
    run_dir, _ = finished
    with pytest.raises(FileExistsError, match="--resume"):
        cb.run(tiny_config(), run_dir)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not empty"):
        cb.run(tiny_config(), other)
    assert (other / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match=r"runs cannot change when resuming .*: threads, workers$"):
        cb.run(tiny_config(), run_dir, resume=True, overrides=["runs=3"])
    again = cb.run(tiny_config(), run_dir, resume=True, overrides=["runs=2", "threads=1"])  # its own values
    assert _numbers(again) == _numbers(cb.run(tiny_config(), run_dir, resume=True))


def test_force_starts_over(tmp_path, no_plots):
    run_dir = tmp_path / "run"
    cfg = tiny_config(methods=["sgd"], scenarios=["class-2task"], budgets=["fewshot"], runs=1)
    cb.run(cfg, run_dir)
    stale = cb.cell_path(run_dir, "digits", "domain", "full", "sgd")
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    res = cb.run(cfg, run_dir, force=True)
    assert not stale.exists() and list(res["cells"]) == ["Split-Digits/class-2task/fewshot"]


def test_a_bad_grid_value_fails_before_anything_is_written(tmp_path):
    cfg = tiny_config(search=BaselinesSearchConfig(runs=1, grids={"l2": {"lam": [-1.0]}}))
    with pytest.raises(ValueError, match=r"search\.grids\.l2: lam"):
        cb.run(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "override, key",
    [
        ("methods=[sgd,rehearsal]", "methods"),
        ("methods=[sgd,sgd]", "methods"),
        ("scenarios=[task]", "scenarios"),
        ("budgets=[half]", "budgets"),
        ("runs=0", "runs"),
        ("learner=resnet", "learner"),
        ("data.benchmarks=[cifar]", r"data\.benchmarks"),
        ("data.benchmarks=[mnist]", r"data\.mnist_dir"),
        ("data.image_size=20", r"data\.image_size"),
        ("data.k_shot=0", r"data\.k_shot"),
        ("search.val_fraction=0.9", r"search\.val_fraction"),
        ("search.grids={ewc2: {lam: [1.0]}}", r"search\.grids"),
        ("search.grids={l2: {lam: []}}", r"search\.grids"),
        ("train.full.lr=[]", r"train\.full\.lr"),
        ("train.full.epochs=[0]", r"train\.full\.epochs"),
        ("train.optimizer=rmsprop", r"train\.optimizer"),
    ],
)
def test_bad_config_values_name_the_key(override, key):
    with pytest.raises(ValueError, match=key):
        load_config(BaselinesConfig, preset_path("cl_baselines", "smoke"), [override])


def test_every_preset_loads():
    for name in ("smoke", "quick"):
        cfg = load_config(BaselinesConfig, preset_path("cl_baselines", name))
        assert cfg.name == name


def test_seen_task_curve_and_method_rows_on_a_hand_made_matrix():
    R = [[0.9, 0.1], [0.5, 0.8]]
    assert seen_task_curve(R) == pytest.approx([0.9, 0.65])
    summary = {"ACC": {"mean": 0.65, "std": 0.01}, "BWT": {"mean": -0.4, "std": 0.02}}
    cells = {"Split-X/class-2task/full": {"ewc": {"test": summary}}}
    header, rows = method_rows(cells, "class-2task", "full")
    assert header == ["method", "Split-X ACC", "Split-X BWT"]
    assert rows == [["EWC", "65.0 ± 1.0", "-40.0 ± 2.0"]]


def test_compare_puts_acl_and_baselines_in_one_table(finished, tmp_path):
    run_dir, res = finished
    acl = tmp_path / "acl-model"
    acl.mkdir()
    summary = {"ACC": {"mean": 0.9, "std": 0.01}, "k_shot": 5, "runs": 2}
    streams = baselines_compare._streams(res["config"])  # the baselines' whole stream definition
    results = {"split": {"Split-Digits/domain": summary}, "split_streams": streams}
    (acl / "results.json").write_text(json.dumps(results))
    out = tmp_path / "cmp"
    got = compare(run_dir, [acl], out)
    rows = got["tables"]["domain"]["rows"]
    assert rows[0][0] == "ACL: acl-model" and rows[0][2] == "90.0 ± 1.0"
    assert {r[0] for r in rows[1:]} == {"fine-tune (SGD)", "L2"}
    assert all(r[0] != "ACL: acl-model" for r in got["tables"]["class-2task"]["rows"])
    assert (out / "comparison.md").is_file() and (out / "plots" / "compare_domain.png").is_file()
    compare(run_dir, [acl], out)  # an earlier comparison of the same run may be replaced
    with pytest.raises(FileNotFoundError, match="no config.yaml"):
        compare(run_dir, [tmp_path / "empty"], tmp_path / "cmp2")
    # results measured on other streams (any part of the definition) are not reused: with no config to
    # evaluate again, the compare stops and names the streams it needs
    for key, value in (
        ("seed", 7),
        ("query_per_class", 3),
        ("benchmarks", ["fashion_mnist"]),
        ("version", "0.0"),
    ):
        other = tmp_path / f"other-{key}"
        other.mkdir()
        changed = {**results, "split_streams": {**streams, key: value}}
        (other / "results.json").write_text(json.dumps(changed))
        with pytest.raises(FileNotFoundError, match="was not measured on these streams"):
            compare(run_dir, [other], tmp_path / f"cmp-{key}")
    old = tmp_path / "older"  # results from before streams were recorded
    old.mkdir()
    (old / "results.json").write_text(json.dumps({"split": {"Split-Digits/domain": summary}}))
    with pytest.raises(FileNotFoundError, match="was not measured on these streams"):
        compare(run_dir, [old], tmp_path / "cmp-older")


def test_compare_evaluates_an_acl_checkpoint_on_the_same_streams(finished, tmp_path):
    run_dir, _ = finished
    acl = Path(__file__).resolve().parents[3] / "pretrained" / "acl-5task-domain"
    if not (acl / "model.safetensors").is_file():
        pytest.skip("shipped model not present")
    got = compare(run_dir, [acl], tmp_path / "cmp")
    split = json.loads((tmp_path / "cmp" / "acl" / "acl-5task-domain.json").read_text())["split"]
    assert split["Split-Digits/domain"]["runs"] == 2 and split["Split-Digits/domain"]["k_shot"] == 5
    assert got["tables"]["domain"]["rows"][0][0] == "ACL: acl-5task-domain"


def _acl_like_run(root: Path) -> None:
    (root / "r").mkdir()
    (root / "r" / "config.yaml").write_text("name: acl\ntrain:\n  lr: 0.001\n")


def _other_files(root: Path) -> None:
    (root / "r").mkdir()
    (root / "r" / "notes.txt").write_text("mine")


def _finished_copy(finished_dir: Path):
    def setup(root: Path) -> None:
        shutil.copytree(finished_dir, root / "done")
        (root / "o").mkdir()
        (root / "o" / "config.yaml").write_text("name: other\n")

    return setup


CLI_CASES = [
    (["run", "--preset", "nope"], "preset", None),
    (["run", "--preset", "{root}/missing.yaml"], "missing.yaml", None),
    (["run", "--methods", "sgd,magic"], "methods", None),
    (["run", "--budget", "half"], "--budget", None),
    (["run", "runs=-1"], "runs", None),
    (["run", "data.benchmarks=[mnist]"], "data.mnist_dir", None),
    (["run", "data.benchmarks=[mnist]", "data.mnist_dir={root}/nomnist"], "data.mnist_dir", None),
    (
        ["run", "data.fashion_mnist_dir={root}/nofm", "data.benchmarks=[fashion_mnist]"],
        "fashion_mnist_dir",
        None,
    ),
    (["run", "search.grids={si: {xi: [0.0]}}", "methods=[si]"], "search.grids.si: xi", None),
    (["run", "search.grids={replay: {per_class: [2.5]}}", "methods=[replay]"], "search.grids.replay", None),
    (["run"], "already holds a run", _acl_like_run),
    (["run", "--resume"], "config", _acl_like_run),
    (["run"], "not empty", _other_files),
    (["compare", "{root}/missing", "--out", "{root}/o"], "results.json", None),
    (["compare", "{root}/done", "--out", "{root}/o"], "already holds a run", "finished"),
    (["compare", "{root}/done", "--acl", "{root}/nothing", "--out", "{root}/o2"], "--acl", "finished"),
]


@pytest.mark.parametrize(
    "argv, match, setup", CLI_CASES, ids=[f"{c[0][0]}-{i}" for i, c in enumerate(CLI_CASES)]
)
def test_cli_bad_inputs_are_one_line_and_change_nothing(argv, match, setup, finished, tmp_path, capsys):
    if setup == "finished":
        _finished_copy(finished[0])(tmp_path)
    elif setup is not None:
        setup(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = [a.replace("{root}", str(tmp_path)) for a in argv]
    extra = ["--run-dir", str(tmp_path / "r")] if argv[0] == "run" else []
    try:
        rc = main(["cl-baselines", *argv, *extra])
    except SystemExit as exit_:  # argparse usage errors
        rc = exit_.code
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and match in lines[0], err
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
    if setup is None and argv[0] == "run":
        assert not (tmp_path / "r").exists()


def test_split_emoji_with_the_conv4_learner_uses_acls_emoji_stream(tmp_path, no_plots):
    from fastweights.data.streams import pool_split_tasks

    cfg = tiny_config(
        methods=["sgd"],
        runs=1,
        learner="conv4",
        scenarios=["domain"],
        budgets=["fewshot", "full"],
        data=BaselinesDataConfig(benchmarks=["emoji"]),
        train=BaselinesTrainConfig(  # one learning rate per budget: no settings search to train
            fewshot=BaselinesTrainGrid(epochs=[2], batch_size=[10]),
            full=BaselinesTrainGrid(epochs=[1], batch_size=[128]),
        ),
    )
    res = cb.run(cfg, tmp_path / "run")
    assert set(res["cells"]) == {"Split-Emoji/domain/fewshot", "Split-Emoji/domain/full"}
    pool = load_benchmark(cfg.data, "emoji")
    streams = Streams(pool, cfg.data, 0.2)
    ref = pool_split_tasks(pool, num_tasks=5, k_shot=5, run=0, n_query_per_class=10, seed=1234)
    got = streams.get("domain", "fewshot", 0)
    assert got[0].x.shape == (10, 3, 32, 32)
    assert [t.query_y.tolist() for t in got] == [t.query_labels.tolist() for t in ref]
    full = streams.get("domain", "full", 0)
    assert full[0].x.shape[0] == 2 * (pool.examples_per_class - 10)  # every non-query example


def test_every_method_has_a_registered_strategy():
    from fastweights.cl.baselines import STRATEGIES
    from fastweights.recipes.cl_baselines.config import METHODS, method_strategy

    assert {method_strategy(m) for m in METHODS} == set(STRATEGIES)


def test_a_killed_compare_can_be_run_again_into_its_folder(finished, tmp_path, monkeypatch):
    from fastweights.recipes.cl_baselines import compare as cmp

    run_dir, res = finished
    acl = tmp_path / "acl-model"
    acl.mkdir()
    summary = {"ACC": {"mean": 0.9, "std": 0.01}, "k_shot": 5, "runs": 2}
    results = {"split": {"Split-Digits/domain": summary}, "split_streams": cmp._streams(res["config"])}
    (acl / "results.json").write_text(json.dumps(results))

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cmp, "acl_split_results", killed)
    with pytest.raises(KeyboardInterrupt):
        compare(run_dir, [acl], tmp_path / "cmp")
    monkeypatch.undo()
    got = compare(run_dir, [acl], tmp_path / "cmp")  # no --force needed
    assert got["tables"]["domain"]["rows"][0][0] == "ACL: acl-model"


def test_paired_rows_pair_acl_and_each_method_run_by_run():
    from fastweights.recipes.cl_baselines.compare import paired_rows

    def summary(per_run):
        return {"ACC": {"mean": sum(per_run) / len(per_run), "std": 0.0, "per_run": per_run}}

    baselines = {
        "config": {"data": {"benchmarks": ["digits", "fashion_mnist"]}, "budgets": ["full"]},
        "cells": {
            "Split-Digits/domain/full": {"ewc": {"test": summary([0.60, 0.70, 0.65])}},
            "Split-FashionMNIST/domain/full": {"ewc": {"test": {"ACC": {"mean": 0.5, "std": 0.0}}}},  # older
        },
    }
    acl = {
        "m": {"Split-Digits/domain": summary([0.70, 0.80, 0.76]), "Split-FashionMNIST/domain": summary([0.5])}
    }
    header, rows = paired_rows("domain", baselines, acl)
    assert header == ["ACL model", "vs method", "budget", "Split-Digits", "Split-FashionMNIST"]
    # differences +0.10, +0.10, +0.11: mean 10.3 points, CI 4.30 * 0.577 / sqrt(3) = 1.4 -> better
    assert rows == [["m", "EWC", "full budget", "+10.3 ± 1.4 (better)", "—"]]
    acl_close = {"m": {"Split-Digits/domain": summary([0.70, 0.60, 0.66])}}  # +0.10, -0.10, +0.01
    assert paired_rows("domain", baselines, acl_close)[1][0][3].endswith("(not distinguishable)")
    assert paired_rows("class-2task", baselines, acl)[1] == []  # the ACL model has no such column


def test_acl_names_are_the_shortest_distinct_path_tails(tmp_path):
    from fastweights.recipes.cl_baselines.compare import acl_names

    root = tmp_path / "runs"
    assert acl_names([root / "acl-cross", root / "acl-5task"]) == ["acl-cross", "acl-5task"]
    seeds = [root / "q" / "acl_loss=true" / "seed0", root / "q" / "acl_loss=false" / "seed0"]
    assert acl_names(seeds) == ["acl_loss=true/seed0", "acl_loss=false/seed0"]
    one_group = [root / "x" / "srwm" / f"seed{k}" for k in range(3)]  # the seed folder keeps its group
    assert acl_names(one_group) == ["srwm/seed0", "srwm/seed1", "srwm/seed2"]
    with pytest.raises(ValueError, match="^--acl: expected distinct folders"):
        acl_names([root / "a", root / "x" / ".." / "a"])


def test_seed_rows_average_each_seeds_acc_with_a_t_interval():
    from scipy import stats

    from fastweights.recipes.cl_baselines.compare import seed_rows

    baselines = {"config": {"data": {"benchmarks": ["digits", "fashion_mnist"]}}}
    acl = {
        f"acl_loss=true/seed{k}": {"Split-Digits/domain": {"ACC": {"mean": v, "std": 0.02}}}
        for k, v in enumerate([0.70, 0.74, 0.72])
    }
    acl["acl-cross"] = {"Split-Digits/domain": {"ACC": {"mean": 0.9, "std": 0.0}}}  # not a seed group
    acl["other/seed0"] = {"Split-Digits/domain": {"ACC": {"mean": 0.5, "std": 0.0}}}  # a group of one
    rows = seed_rows("domain", baselines, acl)
    ci = 100 * stats.t.ppf(0.975, 2) * 0.02 / 3**0.5  # s = 0.02 over the three seeds
    assert rows == [
        [
            "ACL: acl_loss=true, 3 seeds",
            "mean ± 95% CI over seeds [per seed]",
            f"72.0 ± {ci:.1f} [70.0, 74.0, 72.0]",
            "—",
        ]
    ]
    assert seed_rows("class", baselines, acl) == []


def test_seed_groups_are_compared_with_the_baselines_over_seeds_and_shared_draws():
    from scipy import stats

    from fastweights.recipes.cl_baselines.compare import SEEDS_ONLY, comparison_rows, paired_rows

    def summary(mean, per_run=None):
        return {"ACC": {"mean": mean, "std": 0.0, **({"per_run": per_run} if per_run else {})}}

    baselines = {
        "config": {"data": {"benchmarks": ["digits", "fashion_mnist"], "k_shot": 5}, "budgets": ["fewshot"]},
        "cells": {
            "Split-Digits/domain/fewshot": {"sgd": {"test": summary(0.70, [0.6, 0.8])}},
            "Split-FashionMNIST/domain/fewshot": {"sgd": {"test": summary(0.70)}},  # no per-run values
        },
    }
    acl = {
        f"g/seed{k}": {
            "Split-Digits/domain": summary(v, [v, v]),
            "Split-FashionMNIST/domain": summary(v, [v, v]),
        }
        for k, v in enumerate([0.74, 0.76, 0.75])
    }
    acl["single"] = {"Split-Digits/domain": summary(0.65, [0.6, 0.7])}
    header, rows = paired_rows("domain", baselines, acl)
    # seeds x draws, in points: d = [[14, -6], [16, -4], [15, -5]]; mean 5.0; row means 4, 6, 5 -> MS_a = 2;
    # column means 15, -5 -> MS_b = 600; no residual -> MS_e = 0; V = (2 + 600 - 0) / 6; Satterthwaite:
    # 602² / (2²/2 + 600²/1 + 0) = 362404 / 360002 df
    crossed = stats.t.ppf(0.975, 362404 / 360002) * (602 / 6) ** 0.5
    # without per-run values: over the seeds, +4, +6, +5 -> CI t(0.975, 2) * 1.0 / sqrt(3), marked
    seeds = stats.t.ppf(0.975, 2) * 1.0 / 3**0.5
    assert rows[0] == [
        "g, 3 seeds",
        "fine-tune (SGD)",
        "few-shot budget",
        f"+5.0 ± {crossed:.1f} (not distinguishable)",
        f"+5.0 ± {seeds:.1f} (better) {SEEDS_ONLY}",
    ]
    # run by run: 0.0 and -0.1 -> -5.0 ± t(0.975, 1) * 0.0707 / sqrt(2)
    assert rows[1] == [
        "single",
        "fine-tune (SGD)",
        "few-shot budget",
        "-5.0 ± 63.5 (not distinguishable)",
        "—",
    ]
    assert len(rows) == 2  # the group's members have no rows of their own
    names = [r[0] for r in comparison_rows("domain", baselines, acl)[1]]
    assert names == ["ACL: single", "fine-tune (SGD)"]  # the seeds are shown by seed_rows
    # one seed without per-run values, or another run count, also falls back to the seeds' means
    acl["g/seed1"]["Split-Digits/domain"] = summary(0.76)
    assert paired_rows("domain", baselines, acl)[1][0][3] == f"+5.0 ± {seeds:.1f} (better) {SEEDS_ONLY}"
    acl["g/seed1"]["Split-Digits/domain"] = summary(0.76, [0.76, 0.76, 0.76])
    assert paired_rows("domain", baselines, acl)[1][0][3].endswith(SEEDS_ONLY)
