"""``ContinualLearner``: an ACL model learning images in context (fast weights change, slow weights never),
read-only predictions, reset, the state round trip, input kinds and label ranges, on smoke-trained models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from fastweights.cl.split_protocol import evaluate_split_benchmark
from fastweights.data.registry import load_split_dataset
from fastweights.data.streams import split_benchmark
from fastweights.recipes.acl import ContinualLearner


def _images(n: int, seed: int = 0, size: int = 32) -> np.ndarray:
    """``n`` grayscale uint8 images [n, size, size]: a bright square on noise, one position per image."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 60, size=(n, size, size), dtype=np.uint8)
    for i in range(n):
        r, c = rng.integers(0, size - 10, size=2)
        x[i, r : r + 10, c : c + 10] = 200 + i % 50
    return x


@pytest.fixture(scope="module")
def digits():
    return load_split_dataset("digits", image_size=32)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _fast(learner: ContinualLearner) -> list[torch.Tensor]:
    return [s.clone() for s in learner.fast_weights]


def test_learning_changes_the_fast_weights_never_the_slow_ones(smoke_class):
    learner = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    slow = _snapshot(learner.model)
    x = _images(8)
    assert learner.fast_weights is None and learner.labels_seen == ()
    learner.learn(x[:4], [0, 1, 0, 1])
    first = _fast(learner)
    learner.learn(x[4:], [2, 3, 2, 3])
    second = _fast(learner)
    assert all(not torch.equal(a, b) for a, b in zip(first, second, strict=True))
    learner.predict(x)
    learner.predict(x, candidates=10)
    for name, value in learner.model.state_dict().items():
        assert torch.equal(value, slow[name]), name  # bit-identical parameters and buffers
    assert all(p.grad is None for p in learner.model.parameters())
    assert learner.labels_seen == (0, 1, 2, 3) and learner.num_demonstrations == 8
    assert not learner.model.training


def test_predict_reads_without_writing(smoke_class):
    learner = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    x = _images(6)
    learner.learn(x[:4], [0, 1, 0, 1])
    before, state = _fast(learner), learner.state_dict()
    a = learner.predict(x)
    b = learner.predict(x[::-1].copy())
    assert all(torch.equal(s, t) for s, t in zip(before, learner.fast_weights, strict=True))
    assert learner.state_dict()["labels_seen"] == state["labels_seen"] == [0, 1]
    # queries are independent reads: the order of the batch does not change any image's answer
    assert torch.equal(a.labels, b.labels.flip(0)) and torch.allclose(a.probs, b.probs.flip(0), atol=1e-6)
    assert a.labels.dtype == torch.int64 and a.labels.shape == (6,)
    assert a.probs.dtype == torch.float32 and a.probs.shape == (6, 10)
    # restricted to the labels learned so far: zero probability elsewhere, each row sums to one
    assert set(a.labels.tolist()) <= {0, 1} and torch.all(a.probs[:, 2:] == 0)
    torch.testing.assert_close(a.probs.sum(1), torch.ones(6))
    labels, probs = learner.predict(x[:1])  # a tuple
    assert labels.shape == (1,) and probs.shape == (1, 10)


def test_class_incremental_predictions_equal_the_evaluation_protocol(smoke_class, digits):
    """Task by task through the API (5 two-way tasks of Split-Digits, one demonstration draw) gives the
    accuracy matrix of ``evaluate_split_benchmark`` exactly (all cells: queries of tasks not learned yet
    too, with the evaluation's rule: the argmax over all 10 labels of the stream)."""
    learner = ContinualLearner.from_pretrained(smoke_class, device="cpu", mean=digits.mean, std=digits.std)
    expected = evaluate_split_benchmark(
        learner.model, digits, k_shot=2, runs=1, scenario="class", num_tasks=5
    )
    tasks = split_benchmark(digits, k_shot=2, run=0, scenario="class")
    R = np.zeros((5, 5))
    for i, task in enumerate(tasks):
        learner.learn(list(task.support_images), task.support_labels)
        for j, t in enumerate(tasks):
            R[i, j] = (
                learner.predict(t.query_images[:, None], candidates=10).labels.numpy() == t.query_labels
            ).mean()
    assert np.array_equal(R, np.array(expected["R"]))
    assert learner.labels_seen == tuple(range(10))


def test_reset_returns_to_the_slow_weights(smoke_domain):
    learner = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    x = _images(6)
    learner.learn(x, [0, 1, 2, 0, 1, 2])
    once, mean = _fast(learner), learner.mean
    learner.learn(x, [0, 1, 2, 0, 1, 2])
    learner.reset()
    assert learner.fast_weights is None and learner.labels_seen == () and learner.num_demonstrations == 0
    assert learner.mean is None  # taken again from the next batch
    assert learner.channels == 1  # a grayscale model reads every stream in grayscale
    with pytest.raises(ValueError, match="nothing learned yet"):
        learner.predict(x)
    learner.learn(
        x, [0, 1, 2, 0, 1, 2]
    )  # from the slow weights again: the same fast weights as the first time
    assert all(torch.equal(a, b) for a, b in zip(once, learner.fast_weights, strict=True))
    assert learner.mean == mean
    fresh = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    fresh.learn(x, [0, 1, 2, 0, 1, 2])
    assert all(torch.equal(a, b) for a, b in zip(once, fresh.fast_weights, strict=True))


def test_state_round_trip_restores_exactly(smoke_class, smoke_domain, tmp_path):
    learner = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    x, q = _images(8), _images(12, seed=1)
    learner.learn(x[:4], [0, 1, 0, 1])
    learner.learn(x[4:], [2, 3, 2, 3])
    expected = learner.predict(q)
    path = learner.save_state(tmp_path / "state.safetensors")
    other = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    other.load_state(path)
    got = other.predict(q)
    assert torch.equal(got.labels, expected.labels) and torch.equal(got.probs, expected.probs)
    assert other.labels_seen == (0, 1, 2, 3) and other.num_demonstrations == 8
    assert (other.mean, other.std, other.channels) == (learner.mean, learner.std, learner.channels)
    third = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    third.load_state_dict(learner.state_dict())
    assert torch.equal(third.predict(q).probs, expected.probs)
    # continuing after the round trip is continuing the original
    learner.learn(x[:2], [4, 5])
    other.learn(x[:2], [4, 5])
    assert all(torch.equal(a, b) for a, b in zip(learner.fast_weights, other.fast_weights, strict=True))
    # an empty state (the slow weights) round-trips too
    empty = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    other.load_state(empty.save_state(tmp_path / "empty.safetensors"))
    assert other.fast_weights is None and other.labels_seen == ()


def test_a_state_is_refused_by_another_model_and_when_damaged(smoke_class, smoke_domain, tmp_path):
    learner = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    learner.learn(_images(4), [0, 1, 0, 1])
    path = learner.save_state(tmp_path / "state.safetensors")
    other = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    with pytest.raises(ValueError, match="other slow weights"):
        other.load_state(path)
    assert other.fast_weights is None  # unchanged
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ValueError, match=f"{damaged}: damaged or not a learner state"):
        learner.load_state(damaged)
    with pytest.raises(FileNotFoundError, match="no such file"):
        learner.load_state(tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="expected a ContinualLearner state"):
        learner.load_state_dict({"format": "something else"})


def test_input_kinds_give_the_same_predictions(smoke_domain):
    """PIL L and RGB, uint8 HWC, float CHW tensors, stacks and lists: the same pixels, the same answers
    (a grayscale model turns RGB into grayscale as PIL's "L"; a gray image in RGB is exact)."""
    learner = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    x = _images(6)
    learner.learn(x, [0, 1, 2, 3, 4, 0])
    q = _images(5, seed=3)
    ref = learner.predict(q)
    kinds = {
        "stack [N, H, W]": q,
        "PIL L": [Image.fromarray(a) for a in q],
        "PIL RGB": [Image.fromarray(a).convert("RGB") for a in q],
        "PIL LA": [Image.fromarray(a).convert("LA") for a in q],
        "uint8 HWC": [a[:, :, None] for a in q],
        "uint8 HWC RGB stack": np.repeat(q[..., None], 3, axis=-1),
        "float CHW tensor": [torch.from_numpy(a).float()[None] / 255 for a in q],
        "float NCHW tensor": torch.from_numpy(q).float()[:, None] / 255,
        "int64 array": [a.astype(np.int64) for a in q],
    }
    for name, images in kinds.items():  # the same batch of the same pixels: bit for bit the same
        got = learner.predict(images)
        assert torch.equal(got.labels, ref.labels) and torch.equal(got.probs, ref.probs), name
    # one image: 2-D array, PIL image or CHW tensor (a batch of one: equal up to the matmul's rounding)
    one = learner.predict(q[0])
    assert one.probs.shape == (1, 5) and torch.equal(learner.predict(Image.fromarray(q[0])).probs, one.probs)
    assert torch.equal(learner.predict(torch.from_numpy(q[0])[None]).probs, one.probs)
    torch.testing.assert_close(one.probs, ref.probs[:1], atol=1e-5, rtol=1e-5)
    # any size: resized to the model's 32 px as the data loaders resize (PIL bilinear), mixed in one list
    big = Image.fromarray(q[0]).resize((64, 64), Image.Resampling.NEAREST)
    wide = np.zeros((20, 48, 3), dtype=np.uint8)
    got = learner.predict([big, wide, q[1]])
    assert got.labels.shape == (3,)
    torch.testing.assert_close(got.probs[2], ref.probs[1], atol=1e-5, rtol=1e-5)
    assert torch.equal(learner.predict(np.asarray(big)).probs, learner.predict(big).probs)
    shrunk = learner.predict(np.asarray(big.resize((32, 32), Image.Resampling.BILINEAR)))
    assert torch.equal(learner.predict(big).probs, shrunk.probs)  # the resize is PIL's bilinear


def test_rgb_models_keep_the_colour_mode_of_the_stream(smoke_rgb):
    gray = ContinualLearner.from_pretrained(smoke_rgb, device="cpu")
    assert gray.model_channels == 3
    x = _images(4)
    gray.learn(x, [0, 1, 0, 1])  # grayscale demonstrations: normalised as grayscale, repeated to RGB
    assert gray.channels == 1 and isinstance(gray.mean, float)
    rgb = ContinualLearner.from_pretrained(smoke_rgb, device="cpu")
    colour = np.stack([x, 255 - x, x // 2], axis=1)  # [N, 3, H, W]
    rgb.learn(colour, [0, 1, 0, 1])
    assert rgb.channels == 3 and len(rgb.mean) == 3
    later = rgb.predict(list(x))  # grayscale images in an RGB stream: repeated to 3 channels
    assert torch.equal(later.probs, rgb.predict(np.repeat(x[:, None], 3, axis=1)).probs)
    given = ContinualLearner.from_pretrained(
        smoke_rgb, device="cpu", mean=(0.5, 0.4, 0.3), std=0.25, channels=3
    )
    assert given.channels == 3 and given.std == (0.25, 0.25, 0.25)
    given.learn(x, [0, 1, 0, 1])
    given.reset()
    assert given.mean == (0.5, 0.4, 0.3)  # given statistics survive a reset


def test_labels_outside_the_range_are_refused(smoke_class, smoke_domain):
    cls = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    assert (cls.scenario, cls.num_classes, cls.label_space) == ("class", 10, 10)
    assert "class-incremental" in cls.label_meaning and "0..9" in cls.label_meaning
    x = _images(2)
    with pytest.raises(
        ValueError, match=r"labels: 10 is outside the allowed range \[0, 10\) \(class-incremental"
    ):
        cls.learn(x, [0, 10])
    with pytest.raises(ValueError, match=r"labels: -1 is outside"):
        cls.learn(x, [-1, 0])
    with pytest.raises(ValueError, match=r"one label per image \(2 images read\), given 3"):
        cls.learn(x, [0, 1, 2])
    with pytest.raises(ValueError, match="integer label"):
        cls.learn(x, [0.0, 1.0])
    with pytest.raises(ValueError, match=r"candidates: 10 is outside"):
        cls.predict(x, candidates=[0, 10])
    assert cls.fast_weights is None and cls.num_demonstrations == 0  # nothing learned by a refused call
    for t in range(5):  # the label space grows task by task up to the model's 10 outputs
        cls.learn(x, [2 * t, 2 * t + 1])
        assert cls.labels_seen == tuple(range(2 * t + 2))
        assert set(cls.predict(_images(8, seed=t)).labels.tolist()) <= set(range(2 * t + 2))
    dom = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    assert (dom.scenario, dom.num_classes, dom.label_space) == ("domain", 5, 5)
    assert "domain-incremental" in dom.label_meaning and "within each task" in dom.label_meaning
    with pytest.raises(
        ValueError, match=r"labels: 5 is outside the allowed range \[0, 5\) \(domain-incremental"
    ):
        dom.learn(x, np.array([0, 5]))
    dom.learn(x, torch.tensor([0, 4]))
    assert dom.labels_seen == (0, 4)


def test_bad_images_and_arguments(smoke_domain, tmp_path):
    learner = ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    x = _images(2)
    with pytest.raises(ValueError, match=r"float pixels in \[0, 1\]"):
        learner.learn(x.astype(np.float32), [0, 1])  # 0..255 as floats: not ToTensor's range
    with pytest.raises(ValueError, match="expected one image"):
        learner.learn(np.zeros((2, 2, 2, 32, 32), dtype=np.uint8), [0, 1])
    with pytest.raises(ValueError, match=r"images\[1\]: expected a PIL image"):
        learner.learn([x[0], "picture.png"], [0, 1])
    with pytest.raises(ValueError, match="at least one demonstration"):
        learner.learn([], [])
    with pytest.raises(ValueError, match="device"):
        ContinualLearner.from_pretrained(smoke_domain, device="tpu")
    with pytest.raises(ValueError, match="mean, std: expected both"):
        ContinualLearner.from_pretrained(smoke_domain, device="cpu", mean=0.5)
    with pytest.raises(ValueError, match="std: expected a finite number > 0"):
        ContinualLearner.from_pretrained(smoke_domain, device="cpu", mean=0.5, std=0.0)
    with pytest.raises(ValueError, match=r"channels: expected 1 \(the model is grayscale\)"):
        ContinualLearner.from_pretrained(smoke_domain, device="cpu", channels=3)
    with pytest.raises(FileNotFoundError, match="config.yaml"):
        ContinualLearner.from_pretrained(tmp_path / "nothing")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ContinualLearner.from_pretrained(smoke_domain, device="cuda")


def test_loading_leaves_the_torch_threads_as_they_were(smoke_domain):
    threads = torch.get_num_threads()
    ContinualLearner.from_pretrained(smoke_domain, device="cpu")
    assert torch.get_num_threads() == threads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_learner_matches_the_cpu_one(smoke_class, tmp_path):
    cpu = ContinualLearner.from_pretrained(smoke_class, device="cpu")
    gpu = ContinualLearner.from_pretrained(smoke_class, device="cuda")
    assert gpu.device.type == "cuda" and next(gpu.model.parameters()).is_cuda
    x, q = _images(8), _images(16, seed=2)
    for learner in (cpu, gpu):
        learner.learn(x, [0, 1, 2, 3, 0, 1, 2, 3])
    a, b = cpu.predict(q), gpu.predict(q)
    assert b.labels.device.type == "cpu" and b.probs.device.type == "cpu"
    torch.testing.assert_close(b.probs, a.probs, atol=1e-4, rtol=1e-3)
    cpu.load_state(gpu.save_state(tmp_path / "gpu.safetensors"))  # a CUDA state loads on the CPU
    torch.testing.assert_close(cpu.predict(q).probs, b.probs, atol=1e-4, rtol=1e-3)
