"""The ACL paper's table layouts: the forgetting table per ordered domain pair, the split benchmarks in
Table 3's layout, the long-span table (ACL paper §4.1, Table 3 and the Split-Omniglot numbers of its text)."""

import pytest

from fastweights.recipes.acl.paper_tables import (
    forgetting_rows,
    forgetting_table,
    long_span_table,
    long_span_tasks,
    split_table,
)
from tests.recipes.acl_results import paper_results, summary


def test_forgetting_rows_one_row_per_ordered_domain_pair():
    rows = forgetting_rows(paper_results())
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
    res = paper_results()
    del res["forgetting"]["pairs"]
    rows = forgetting_rows(res)
    assert [r.order for r in rows] == ["FontGlyphs → FontGlyphs"]
    res["forgetting"]["task_b"] = "Other"
    assert [r.order for r in forgetting_rows(res)] == ["FontGlyphs → Other", "Other → FontGlyphs"]


def test_split_table_paper_layout():
    header, rows = split_table(paper_results())
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
        {"split": {"Split-X/class": summary(2, 0.6), "Split-FashionMNIST/domain": summary(3, 0.7)}}
    )
    assert header[-1] == "3-task domain-incremental"
    assert rows == [
        ["Split-FashionMNIST", "—", "—", "—", "70.00 ± 2.00"],
        ["Split-X", "—", "60.00 ± 2.00", "—", "—"],
    ]


def test_long_span_table():
    header, rows = long_span_table(paper_results())
    assert header[1] == "ACC (%), FontGlyphs/test" and "a different data set" in header[3]
    assert rows == [
        ["5", "90.00 ± 2.00", "-5.00 ± 1.00", "92.3 ± 0.4"],
        ["10", "80.00 ± 2.00", "-5.00 ± 1.00", "82.0 ± 0.4"],
        ["20", "70.00 ± 1.50", "-5.00 ± 1.00", "67.6 ± 1.1"],
    ]
    res = paper_results()
    res["long_span"]["tasks"] = {"7": {"ACC": {"mean": 0.5, "std": 0.1}}}  # no paper number, no BWT, no R
    assert long_span_table(res)[1] == [["7", "50.00 ± 10.00", "—", "—"]]


def test_long_span_tasks_sorted_by_task_count():
    tasks = long_span_tasks(paper_results())
    assert [T for T, _ in tasks] == [5, 10, 20]
    assert tasks[0][1]["ACC"]["mean"] == 0.9
    with pytest.raises(ValueError, match=r"results\['long_span'\]: expected a dict, given NoneType"):
        long_span_tasks({})
