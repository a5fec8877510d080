from __future__ import annotations

import numpy as np
import pytest
import torch

import fastweights.cl.split_protocol as sp
from fastweights.cl.split_protocol import evaluate_pool_split, evaluate_split_benchmark, evaluate_split_tasks
from fastweights.cl.tasks import to_model_images
from fastweights.data.sources.base import ClassPool, LabeledImages, SplitDataset
from fastweights.data.streams import pool_split_tasks, split_benchmark
from fastweights.models.backbones import Conv4
from fastweights.models.in_context import InContextClassifier
from fastweights.models.transfer import load_classifier_weights


def _model(n=5, in_channels=1):
    """An untrained float64 model whose predictions depend on its inputs and demonstrations."""
    torch.manual_seed(0)
    model = InContextClassifier(
        Conv4(in_channels, 8, image_size=16), n, d_model=12, num_layers=1, num_heads=3, d_ff=12
    ).double()
    with torch.no_grad():
        model.out_layer.bias.zero_()
        model.input_proj.weight.mul_(3.0)
        model.out_layer.weight.mul_(3.0)
    return model


def _images(rng, protos, labels):
    noise = rng.integers(-60, 61, (len(labels), *protos.shape[1:]))
    return np.clip(protos[labels] + noise, 0, 255).astype(np.uint8)


def _dataset(rgb=False):
    """10 classes (a noisy prototype each), 4 train and 5 test images per class."""
    rng = np.random.default_rng(0)
    protos = rng.integers(0, 256, (10, *((3,) if rgb else ()), 16, 16))

    def part(per_class):
        labels = np.repeat(np.arange(10), per_class)
        return LabeledImages(_images(rng, protos, labels), labels.astype(np.int64))

    return SplitDataset("toy", part(4), part(5), 10, 0.5, 0.3)


def _pool(classes=12, m=8, rgb=False):
    rng = np.random.default_rng(1)
    protos = rng.integers(0, 256, (classes, *((3,) if rgb else ()), 16, 16))
    images = _images(rng, protos, np.repeat(np.arange(classes), m)).reshape(classes, m, *protos.shape[1:])
    return ClassPool("toypool", images, [f"k{i}" for i in range(classes)], ["a"] * classes, 0.5, 0.3)


# Results of cl.protocols.evaluate_split_benchmark before it moved here (commit fdcccb3), on _model /
# _dataset with k_shot=2, runs=2: mean R, its std over the runs, ACC mean/std.
OLD = {
    (5, "domain"): (
        [
            [0.3, 0.7, 0.5, 0.4, 0.4],
            [0.3, 0.7, 0.5, 0.5, 0.4],
            [0.3, 0.7, 0.5, 0.4, 0.4],
            [0.3, 0.7, 0.5, 0.4, 0.4],
            [0.3, 0.7, 0.6, 0.4, 0.4],
        ],
        np.zeros((5, 5)),
        (0.48, 0.0),
    ),
    (5, "class"): ([[0.0, 0.5], [0.0, 0.5]], np.zeros((2, 2)), (0.25, 0.0)),
    (10, "class"): (
        [
            [0.0, 0.0, 0.4, 0.0, 0.1],
            [0.0, 0.0, 0.4, 0.0, 0.1],
            [0.0, 0.0, 0.4, 0.0, 0.1],
            [0.0, 0.0, 0.35, 0.0, 0.1],
            [0.0, 0.0, 0.35, 0.0, 0.1],
        ],
        [[0.0] * 5] * 3 + [[0.0, 0.0, 0.05, 0.0, 0.0]] * 2,
        (0.09, 0.01),
    ),
}


@pytest.mark.parametrize(("n", "scenario"), list(OLD))
def test_split_benchmark_equals_the_previous_implementation(n, scenario):
    R, R_std, (acc, acc_std) = OLD[(n, scenario)]
    model = _model(n)
    model.train()
    res = evaluate_split_benchmark(model, _dataset(), k_shot=2, runs=2, scenario=scenario)
    assert model.training  # restored
    np.testing.assert_allclose(res["R"], R, atol=1e-12)
    np.testing.assert_allclose(res["R_std"], R_std, atol=1e-12)
    assert {k: res["ACC"][k] for k in ("mean", "std")} == pytest.approx(
        {"mean": acc, "std": acc_std}, abs=1e-12
    )
    assert len(res["ACC"]["per_run"]) == 2 and np.mean(res["ACC"]["per_run"]) == pytest.approx(acc, abs=1e-12)
    T = len(R)
    n_out = 2 if scenario == "domain" else 2 * T
    assert res["task_names"] == ["0/1", "2/3", "4/5", "6/7", "8/9"][:T]
    assert (res["runs"], res["k_shot"], res["scenario"], res["num_tasks"]) == (2, 2, scenario, T)
    assert (res["n_out"], res["chance"]) == (n_out, 1.0 / n_out)


def test_split_benchmark_matrix_and_chance():
    res = evaluate_split_benchmark(_model(), _dataset(), k_shot=2, runs=2, scenario="domain")
    R = np.array(res["R"])
    assert R.shape == (5, 5) and res["runs"] == 2 and res["chance"] == 0.5
    assert np.all((R >= 0) & (R <= 1)) and np.allclose(R * 10, np.round(R * 10))  # 10 test images per task


def test_split_benchmark_row_i_queries_the_state_after_task_i(monkeypatch):
    """R[i, j] must be measured from the state reached after the demos of tasks 0..i (in order)."""
    model = _model()
    calls: list[tuple[str, int]] = []
    real_forward, real_query = model.forward_features, model.query_features

    def forward(features, labels, state=None):
        calls.append(("learn", int(labels.numel())))
        return real_forward(features, labels, state)

    def query(features, state=None):
        calls.append(("query", int(features.shape[1])))
        return real_query(features, state)

    monkeypatch.setattr(model, "forward_features", forward)
    monkeypatch.setattr(model, "query_features", query)
    evaluate_split_benchmark(model, _dataset(), k_shot=2, runs=1, query_batch=4)
    # learn task 0, query all 5 tasks (10 queries each, in batches of 4), learn task 1, query all 5, ...
    assert calls == [
        c for _ in range(5) for c in [("learn", 4)] + [("query", 4), ("query", 4), ("query", 2)] * 5
    ]


def test_two_task_class_incremental_from_a_ten_output_model():
    ds = _dataset()
    five = _model(5)
    ten = _model(10)
    res = evaluate_split_benchmark(ten, ds, k_shot=2, runs=2, scenario="class", num_tasks=2)
    assert np.array(res["R"]).shape == (2, 2) and res["n_out"] == 4 and res["num_tasks"] == 2
    assert res["chance"] == 0.25 and res["task_names"] == ["0/1", "2/3"]
    # the 10-output model initialised from the 5-output one computes the same logits 0..4 on these
    # sequences (labels < 4): its 2-task column equals the 5-output model's (default 2 tasks)
    load_classifier_weights(ten, five.state_dict())
    a = evaluate_split_benchmark(ten, ds, k_shot=2, runs=2, scenario="class", num_tasks=2)
    b = evaluate_split_benchmark(five, ds, k_shot=2, runs=2, scenario="class")
    assert a["R"] == b["R"] and a["ACC"] == b["ACC"]
    three = evaluate_split_benchmark(_model(10), ds, k_shot=2, runs=1, scenario="class", num_tasks=3)
    assert np.array(three["R"]).shape == (3, 3) and three["chance"] == pytest.approx(1 / 6)
    dom = evaluate_split_benchmark(_model(5), ds, k_shot=2, runs=2, scenario="domain", num_tasks=3)
    np.testing.assert_allclose(dom["R"], np.array(OLD[(5, "domain")][0])[:3, :3], atol=1e-12)  # a prefix
    with pytest.raises(ValueError, match=r"num_tasks: expected <= the 5 class pairs of 'toy', got 6"):
        evaluate_split_benchmark(_model(10), ds, k_shot=2, runs=1, scenario="class", num_tasks=6)
    with pytest.raises(ValueError, match=r"num_tasks: 'class' with 3 tasks .* 6 outputs; the model has 5"):
        evaluate_split_benchmark(_model(5), ds, k_shot=2, runs=1, scenario="class", num_tasks=3)
    with pytest.raises(ValueError, match=r"scenario: 'class' with 1 tasks needs >= 2 tasks .* has 3"):
        evaluate_split_benchmark(_model(3), ds, k_shot=2, runs=1, scenario="class")
    with pytest.raises(ValueError, match=r"scenario: expected one of \['domain', 'class'\], got 'task'"):
        evaluate_split_benchmark(_model(5), ds, k_shot=2, runs=1, scenario="task")


def test_grayscale_images_are_repeated_for_a_three_channel_model():
    """Repeating a gray image to 3 channels = a 1-channel conv with the 3 channels' weights summed."""
    three = _model(5, in_channels=3)
    one = _model(5, in_channels=1)
    sd = three.state_dict()
    sd["backbone.blocks.0.0.weight"] = sd["backbone.blocks.0.0.weight"].sum(dim=1, keepdim=True)
    one.load_state_dict(sd)
    ds = _dataset()
    a = evaluate_split_benchmark(three, ds, k_shot=2, runs=2)
    b = evaluate_split_benchmark(one, ds, k_shot=2, runs=2)
    assert a["R"] == b["R"] and a["ACC"] == b["ACC"]
    rgb = _dataset(rgb=True)
    assert np.array(evaluate_split_benchmark(three, rgb, k_shot=2, runs=1)["R"]).shape == (5, 5)
    with pytest.raises(ValueError, match=r"channels: expected grayscale .* 1-channel backbone, got RGB"):
        evaluate_split_benchmark(one, rgb, k_shot=2, runs=1)


def _naive_R(model, tasks, n_out, pool):
    """R[i, j] with each query a length-1 forward (unknown label) from the state after tasks 0..i."""

    def x(images):
        return to_model_images(images, pool.mean, pool.std, "cpu", torch.float64, channels=pool.channels)

    R, state = np.zeros((len(tasks), len(tasks))), None
    with torch.no_grad():
        for i, task in enumerate(tasks):
            labels = torch.from_numpy(task.support_labels)[None]
            _, state = model(x(task.support_images)[None], labels, state)
            for j, t in enumerate(tasks):
                hits = 0
                for image, label in zip(x(t.query_images), t.query_labels, strict=True):
                    logits, _ = model(image[None, None], torch.tensor([[model.num_classes]]), state)
                    hits += int(logits[0, 0, :n_out].argmax()) == label
                R[i, j] = hits / len(t.query_labels)
    return R


@pytest.mark.parametrize("scenario", ["domain", "class"])
def test_pool_split_matches_a_naive_evaluation(scenario):
    pool, model = _pool(), _model(10)
    kw = dict(num_tasks=4, k_shot=2, n_query_per_class=3, seed=5)
    res = evaluate_pool_split(model, pool, runs=1, scenario=scenario, **kw)
    n_out = 2 if scenario == "domain" else 8
    tasks = pool_split_tasks(pool, run=0, scenario=scenario, **kw)
    np.testing.assert_allclose(res["R"], _naive_R(model.eval(), tasks, n_out, pool), atol=1e-12)
    assert res["task_names"] == [t.name for t in tasks] and res["n_out"] == n_out
    assert {k: res[k] for k in ("dataset", "num_tasks", "scenario", "k_shot", "n_way", "seed")} == {
        "dataset": "toypool",
        "num_tasks": 4,
        "scenario": scenario,
        "k_shot": 2,
        "n_way": 2,
        "seed": 5,
    }
    assert len(set(np.array(res["R"]).ravel().tolist())) > 1  # not a constant prediction


def test_pool_split_is_deterministic_with_disjoint_demos_and_queries(monkeypatch):
    pool, model = _pool(), _model(10)
    seen: list[list] = []

    def recording(*args, **kwargs):
        tasks = pool_split_tasks(*args, **kwargs)
        seen.append(tasks)
        return tasks

    monkeypatch.setattr(sp, "pool_split_tasks", recording)
    kw = dict(num_tasks=3, k_shot=2, runs=3, n_query_per_class=3, seed=2, scenario="class")
    a = evaluate_pool_split(model, pool, **kw)
    assert evaluate_pool_split(model, pool, **kw) == a
    runs = seen[:3]
    assert len(seen) == 6
    for tasks in runs:
        for t in tasks:
            demos = {img.tobytes() for img in t.support_images}
            assert not demos & {img.tobytes() for img in t.query_images}
    for t0, t1 in zip(runs[0], runs[1], strict=True):
        assert np.array_equal(t0.query_images, t1.query_images)  # fixed queries
        assert not np.array_equal(t0.support_images, t1.support_images)  # per-run demos
    for t, task in enumerate(runs[0]):  # class-incremental labels are shifted by 2 per task
        assert set(task.support_labels.tolist()) == set(task.query_labels.tolist()) == {2 * t, 2 * t + 1}
    assert a["runs"] == 3 and a["n_out"] == 6
    assert evaluate_pool_split(model, pool, **{**kw, "seed": 3})["task_names"] != a["task_names"]


def test_pool_split_rgb_pool():
    res = evaluate_pool_split(
        _model(5, in_channels=3), _pool(rgb=True), num_tasks=2, k_shot=1, runs=1, n_query_per_class=2
    )
    assert np.array(res["R"]).shape == (2, 2)


def test_errors():
    pool, model = _pool(), _model(5)
    ds = _dataset()
    good = dict(runs=1, n_out=2, mean=0.5, std=0.3, channels=1)

    def tasks(r):
        return split_benchmark(ds, k_shot=1, run=r)

    cases = [
        (dict(good, runs=0), "runs: expected an int >= 1, got 0"),
        (dict(good, n_out=1), r"n_out: expected an int >= 2, got 1"),
        (dict(good, n_out=6), r"n_out: expected <= the model's 5 outputs, got 6"),
        (dict(good, query_batch=0), "query_batch: expected an int >= 1"),
        (dict(good, channels=2), r"channels: expected 0 \(features\), 1 \(grayscale\) or 3 \(RGB\), got 2"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            evaluate_split_tasks(model, tasks, **kw)
    with pytest.raises(
        ValueError, match=r"tasks_for_run\(0\): expected a list of >= 2 Task objects, got a list of 1"
    ):
        evaluate_split_tasks(model, lambda r: tasks(r)[:1], **good)
    with pytest.raises(ValueError, match=r"tasks_for_run\(1\): expected 5 tasks like run 0, got 4"):
        evaluate_split_tasks(model, lambda r: tasks(r)[: 5 - r], **dict(good, runs=2))
    with pytest.raises(
        ValueError,
        match=r"tasks_for_run\(0\)\[2\]\.support_labels: expected labels in \[0, n_out=4\), got \S+ \[4, 5\]",
    ):
        evaluate_split_tasks(
            model, lambda r: split_benchmark(ds, k_shot=1, run=r, scenario="class"), **good | {"n_out": 4}
        )
    model.train()
    with pytest.raises(ValueError, match=r"num_tasks: expected num_tasks \* n_way <= the 12 classes"):
        evaluate_pool_split(model, pool, num_tasks=7, k_shot=1, runs=1, n_query_per_class=2)
    assert model.training  # restored after an error too
    with pytest.raises(
        ValueError, match=r"num_tasks: scenario 'class' with 3 tasks of 2 classes needs 6 outputs"
    ):
        evaluate_pool_split(model, pool, num_tasks=3, k_shot=1, runs=1, n_query_per_class=2, scenario="class")
    with pytest.raises(ValueError, match=r"k_shot: expected k_shot \+ n_query_per_class <= the 8 examples"):
        evaluate_pool_split(model, pool, num_tasks=2, k_shot=6, runs=1, n_query_per_class=3)
    with pytest.raises(ValueError, match=r"scenario: expected one of \['domain', 'class'\], got 'x'"):
        evaluate_pool_split(model, pool, num_tasks=2, k_shot=1, runs=1, n_query_per_class=2, scenario="x")


# ------------------------------------------------------------------ tasks learned alone, features in


def test_task_alone_renumbers_labels():
    from fastweights.data.streams import Task

    t = Task(
        "x",
        np.zeros((4, 2), np.float32),
        np.array([6, 7, 6, 7]),
        np.zeros((2, 2), np.float32),
        np.array([7, 6]),
    )
    alone = sp.task_alone(t)
    assert alone.support_labels.tolist() == [0, 1, 0, 1] and alone.query_labels.tolist() == [1, 0]


def test_evaluate_tasks_alone_on_features_matches_a_fresh_state():
    from fastweights.data.streams import ClassExamples, class_sequence_tasks
    from fastweights.models.backbones import FeatureInput

    torch.manual_seed(0)
    model = InContextClassifier(FeatureInput(6), 4, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    rng = np.random.default_rng(0)
    classes = [
        [
            ClassExamples(
                f"{t}{c}",
                rng.normal(size=(4, 6)).astype(np.float32),
                rng.normal(size=(3, 6)).astype(np.float32),
            )
            for c in range(2)
        ]
        for t in range(2)
    ]

    def stream(r):
        return class_sequence_tasks(classes, k_shot=2, run=r)

    res = sp.evaluate_tasks_alone(model, stream, runs=2, mean=0.0, std=1.0, channels=0)
    assert list(res["tasks"]) == ["00/01", "10/11"] and res["runs"] == 2

    def by_hand(r: int) -> float:  # task 1 of run r alone: labels 0/1, the first two logits
        task = sp.task_alone(stream(r)[1])
        with torch.no_grad():
            support, labels = torch.from_numpy(task.support_images), torch.from_numpy(task.support_labels)
            _, state = model.forward_features(support[None], labels[None])
            logits = model.query_features(torch.from_numpy(task.query_images)[None], state)[0]
        return float((logits[:, :2].argmax(-1).numpy() == task.query_labels).mean())

    acc0, acc1 = by_hand(0), by_hand(1)
    assert res["tasks"]["10/11"]["mean"] == pytest.approx((acc0 + acc1) / 2)
    # the same features through evaluate_split_tasks (channels=0: features passed through unchanged)
    full = evaluate_split_tasks(model, stream, runs=1, n_out=4, mean=0.0, std=1.0, channels=0)
    assert len(full["R"]) == 2


def test_to_model_images_passes_features_through():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = to_model_images(x, 0.5, 2.0, "cpu", torch.float64, channels=0)
    assert t.dtype == torch.float64 and t.tolist() == x.tolist()


@pytest.mark.parametrize("order", ["before", "mixed"])
def test_split_tasks_with_context_replay_read_the_memory_with_each_later_task(order):
    from fastweights.cl.context_replay import ContextReplay, replay_generator, replay_support
    from fastweights.data.streams import ClassExamples, class_sequence_tasks
    from fastweights.models.backbones import FeatureInput

    torch.manual_seed(0)
    model = InContextClassifier(FeatureInput(6), 6, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    rng = np.random.default_rng(0)
    classes = [
        [
            ClassExamples(
                f"{t}{c}",
                rng.normal(size=(4, 6)).astype(np.float32),
                rng.normal(size=(3, 6)).astype(np.float32),
            )
            for c in range(2)
        ]
        for t in range(3)
    ]

    def stream(r):
        return class_sequence_tasks(classes, k_shot=2, run=r)

    kw = dict(runs=2, n_out=6, mean=0.0, std=1.0, channels=0)
    replay = ContextReplay(1, order)
    res = evaluate_split_tasks(model, stream, replay=replay, replay_seed=9, **kw)
    assert res["context_replay"] == {"per_class": 1, "order": order}
    off = evaluate_split_tasks(model, stream, **kw)
    assert off["context_replay"] == {"per_class": 0, "order": None}

    def by_hand(r: int) -> np.ndarray:  # run r's matrix, the supports extended by hand
        tasks, g = stream(r), replay_generator(9, r)
        feats = [torch.from_numpy(t.support_images)[None] for t in tasks]
        labels = [torch.from_numpy(t.support_labels)[None] for t in tasks]
        R, state = np.zeros((3, 3)), None
        with torch.no_grad():
            for i in range(3):
                f, lab = feats[i], labels[i]
                if i:
                    f, lab, _ = replay_support(
                        feats[:i], labels[:i], f, lab, per_class=1, order=order, generator=g
                    )
                    assert lab.shape[1] == 4 + 2 * i and set(lab[0, : 2 * i].tolist()) <= set(
                        range(2 * i + 2)
                    )
                _, state = model.forward_features(f, lab, state)
                for j, t in enumerate(tasks):
                    logits = model.query_features(torch.from_numpy(t.query_images)[None], state)[0]
                    R[i, j] = float((logits[:, :6].argmax(-1).numpy() == t.query_labels).mean())
        return R

    np.testing.assert_allclose(res["R"], (by_hand(0) + by_hand(1)) / 2, atol=1e-12)
