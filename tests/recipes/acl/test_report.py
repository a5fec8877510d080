"""The ACL run's report (``report.md`` + ``plots/``) and the report pieces every recipe uses."""

import copy
import json

import pytest

from fastweights.io import JsonlLogger
from fastweights.recipes.acl.report import write_report
from fastweights.recipes.reporting import command_markdown, md_table, run_header, save_evaluation
from tests.recipes.acl_results import assert_png, paper_results, single_pair_results, summary


def test_full_report(tmp_path):
    with JsonlLogger(tmp_path / "metrics.jsonl") as log:
        log.log(step=0, loss=1.0)  # no val_acc: ignored
        for i in range(4):
            log.log(step=i, minutes=0.5 * i, val_acc=0.2 + 0.1 * i)
    # round-trip through JSON as the recipe does
    out = write_report(json.loads(json.dumps(single_pair_results())), tmp_path)
    assert out == tmp_path / "report.md"
    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == ["accuracy_matrix_split-digits_domain.png", "forgetting.png", "learning_curve.png"]
    for name in plots:
        assert_png(tmp_path / "plots" / name)
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
    res = single_pair_results()
    del res["forgetting"], res["split"]
    out = write_report(res, tmp_path)
    md = out.read_text(encoding="utf-8")
    assert "61.00 ± 1.20" in md
    assert "forgetting" not in md.lower()
    assert not (tmp_path / "plots").exists()

    out = write_report({}, tmp_path / "empty")
    assert "No results." in out.read_text(encoding="utf-8")

    only_split = {"split": single_pair_results()["split"]}
    write_report(only_split, tmp_path / "split")
    assert [p.name for p in (tmp_path / "split" / "plots").iterdir()] == [
        "accuracy_matrix_split-digits_domain.png"
    ]


def test_report_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="results: expected a dict"):
        write_report([1], tmp_path)
    with pytest.raises(ValueError, match="expected key 'R'"):
        write_report({"split": {"x": {"ACC": {"mean": 1.0}}}}, tmp_path)


def test_full_report_paper_layouts(tmp_path):
    out = write_report(json.loads(json.dumps(paper_results())), tmp_path)
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
        assert_png(tmp_path / "plots" / name)
        assert f"(plots/{name})" in md
    assert not list(tmp_path.rglob("*.tmp"))


def _broken(path, value):
    """paper_results() with the item at ``path`` (keys/indices) replaced by ``value`` (``...`` = deleted)."""
    res = copy.deepcopy(paper_results())
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
            summary(5, 0.5),
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
            summary(5, 0.5),
            r"2 tasks for the scenario 'class-2task', given 5",
        ),
        (
            ("split", "Split-Digits/class"),
            summary(2, 0.5),
            r"\['Split-Digits/class'\]: the same cell as 'Split-Digits/class-2task'",
        ),
        (("long_span", "tasks"), {}, r"results\['long_span'\]\['tasks'\]: expected a non-empty dict"),
        (
            ("long_span", "tasks", "many"),
            summary(5, 0.5),
            r"expected positive task counts as keys, given 'many'",
        ),
        (
            ("long_span", "tasks", "5", "ACC"),
            ...,
            r"\['tasks'\]\['5'\]\['ACC'\]: expected a dict with key 'mean'",
        ),
        (
            ("long_span", "tasks", "10"),
            summary(5, 0.5),
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


def test_md_table_escapes_cells():
    assert md_table(["a|b", "c"], [[1, "x\ny"], [0.5, None]]) == [
        "| a\\|b | c |",
        "|---|---|",
        "| 1 | x y |",
        "| 0.5 | None |",
    ]


def test_run_header_and_command_markdown():
    assert command_markdown(" fastweights lm train \n") == "`fastweights lm train`"
    assert command_markdown("fastweights lm train\nfastweights lm train --resume") == (
        "\n\n```\nfastweights lm train\nfastweights lm train --resume\n```\n"
    )
    run = {"steps": 40, "trained_steps": 50, "command": "fastweights lm train", "checkpoint": "best"}
    assert run_header({**run, "train_minutes": 1.26, "eval_minutes": 0.5}, "; 3 runs") == [
        "- trained: 50 steps: `fastweights lm train`",
        "- evaluated: the best checkpoint (step 40, 1.3 min of training), in 0.50 min; 3 runs",
    ]
    del run["trained_steps"]
    assert run_header({**run, "train_minutes": 2.0})[0] == "- trained: 40 steps: `fastweights lm train`"


def test_save_evaluation_writes_results_and_copies_the_log(tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "eval" / "x"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    calls = []
    results = {"accuracy": 0.5}
    assert save_evaluation(results, run_dir, out, lambda r, d: calls.append((r, d))) is results
    assert calls == [(results, out)]
    assert json.loads((out / "results.json").read_text()) == results
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    # default out_dir: the run folder itself (its log is not copied onto itself)
    save_evaluation({"accuracy": 0.7}, run_dir, None, lambda r, d: calls.append((r, d)))
    assert calls[-1] == ({"accuracy": 0.7}, run_dir)
    assert json.loads((run_dir / "results.json").read_text()) == {"accuracy": 0.7}
