from __future__ import annotations

import pytest
import torch

from fastweights.cl.context_replay import (
    ContextReplay,
    context_replay,
    replay_generator,
    replay_memory,
    replay_support,
    replay_supports,
)


def _task(labels: list[list[int]], offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Support ``[B, T, 2]``: feature 0 = the demo's index + ``offset``, feature 1 its label."""
    lab = torch.tensor(labels, dtype=torch.int64)
    idx = torch.arange(lab.shape[1], dtype=torch.float32).expand(lab.shape) + offset
    return torch.stack([idx, lab.float()], dim=-1), lab


# two sequences, 2 classes x 3 shots, interleaved differently
A = _task([[0, 1, 1, 0, 0, 1], [1, 1, 0, 1, 0, 0]], 100.0)
B = _task([[2, 3, 3, 2, 2, 3], [3, 2, 2, 3, 3, 2]], 200.0)  # class-incremental labels of task 1
C = _task([[4, 5, 4, 5], [5, 4, 5, 4]], 300.0)


def test_memory_keeps_the_first_per_class_of_each_class_in_support_order():
    f, lab = replay_memory(*A, per_class=2)
    assert lab.tolist() == [[0, 1, 1, 0], [1, 1, 0, 0]]
    assert f[..., 0].tolist() == [[100, 101, 102, 103], [100, 101, 102, 104]]
    # per_class >= K: the whole support, unchanged
    for per_class in (3, 20):
        f, lab = replay_memory(*A, per_class=per_class)
        assert torch.equal(f, A[0]) and torch.equal(lab, A[1])


def test_before_puts_the_memory_first_and_keeps_labels():
    out = replay_support([A[0], B[0]], [A[1], B[1]], *C, per_class=1, order="before")
    assert out.labels.tolist() == [[0, 1, 2, 3, 4, 5, 4, 5], [1, 0, 3, 2, 5, 4, 5, 4]]
    assert out.features[0, :4, 0].tolist() == [100, 101, 200, 201]
    assert torch.equal(out.features[:, 4:], C[0]) and out.positions.tolist() == [[4, 5, 6, 7]] * 2
    assert torch.equal(out.features[..., 1].long(), out.labels)  # every demo keeps its own label
    full = replay_support([A[0]], [A[1]], *C, per_class=5, order="before")  # >= K: all demos of A
    assert torch.equal(full.features, torch.cat([A[0], C[0]], dim=1))


def test_mixed_is_a_per_sequence_shuffle_reproducible_from_the_generator():
    args = ([A[0], B[0]], [A[1], B[1]], *C)
    one = replay_support(*args, per_class=2, order="mixed", generator=torch.Generator().manual_seed(3))
    two = replay_support(*args, per_class=2, order="mixed", generator=torch.Generator().manual_seed(3))
    other = replay_support(*args, per_class=2, order="mixed", generator=torch.Generator().manual_seed(4))
    assert torch.equal(one.features, two.features) and torch.equal(one.labels, two.labels)
    assert not torch.equal(one.features, other.features)
    before = replay_support(*args, per_class=2, order="before")
    assert one.features.shape == before.features.shape == (2, 12, 2)
    for b in range(2):  # the same demos, in another order; the two sequences permuted independently
        assert sorted(one.features[b, :, 0].tolist()) == sorted(before.features[b, :, 0].tolist())
    assert torch.equal(one.features[..., 1].long(), one.labels)
    own = one.features.gather(1, one.positions.unsqueeze(-1).expand(-1, -1, 2))
    assert torch.equal(own, C[0])  # positions find the task's own demos in support order
    g = replay_generator(7, 1)
    assert torch.equal(g.get_state(), replay_generator(7, 1).get_state())
    assert not torch.equal(g.get_state(), replay_generator(7, 2).get_state())


def test_supports_of_a_sequence():
    feats, labels = [A[0], B[0], C[0]], [A[1], B[1], C[1]]
    assert replay_supports(feats, labels, None)[2].features is C[0]
    out = replay_supports(feats, labels, ContextReplay(3, "before"))
    assert out[0].features is A[0]
    assert torch.equal(out[1].features, torch.cat([A[0], B[0]], dim=1))
    assert torch.equal(out[2].features, torch.cat([A[0], B[0], C[0]], dim=1))  # own supports only
    assert context_replay(0, "mixed") is None and context_replay(2, "before") == ContextReplay(2, "before")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(per_class=0), "^per_class: expected an int >= 1, got 0$"),
        (dict(per_class=2, order="after"), "^order: expected one of"),
        (dict(per_class=2, order="mixed"), "^generator: expected a torch.Generator"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        replay_support([A[0]], [A[1]], *C, **kwargs)


def test_bad_supports_are_named():
    with pytest.raises(ValueError, match="earlier_features, earlier_labels"):
        replay_support([A[0]], [], *C, per_class=1, order="before")
    with pytest.raises(ValueError, match="earlier task 0 features"):
        replay_support([A[0][:1]], [A[1][:1]], *C, per_class=1, order="before")
    with pytest.raises(ValueError, match="support labels"):
        replay_support([A[0]], [A[1]], C[0], C[1].int(), per_class=1, order="before")
    uneven = torch.tensor([[0, 0, 1], [0, 1, 2]])  # per_class 1 keeps 2 and 3 demos
    with pytest.raises(ValueError, match="different numbers"):
        replay_memory(torch.zeros(2, 3, 1), uneven, 1)
    with pytest.raises(ValueError, match="^per_class"):
        ContextReplay(0)
