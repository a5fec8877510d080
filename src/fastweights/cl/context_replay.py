"""In-context replay: an episodic memory of earlier tasks' demonstrations, re-read in the sequence.

A method of this library (no paper has it). The classic replay baseline
(:mod:`fastweights.cl.baselines.replay`; Hsu et al. 2018, Chaudhry et al. 2019) keeps ``per_class``
examples of every seen class and mixes them into each mini-batch of later tasks. An in-context learner
(ACL, Irie et al. 2025) gets the same memory here: task ``i >= 1`` is read as its *extended support*,
the stored demonstrations of tasks ``0..i-1`` together with task ``i``'s own, either all memory first
(``"before"``) or shuffled together (``"mixed"``, the analogue of mixing memory into each batch).

The memory is deterministic: for each earlier task, the first ``per_class`` demonstrations of each class
in their support order, kept in that order. With ``per_class >= K`` (``K`` demonstrations per class) it
holds every earlier demonstration, exactly what a memory of that capacity holds after ``K``-shot tasks;
with ``per_class < K`` it keeps the first ``per_class`` of each class (a "first seen" memory, not the
reservoir or random choice of the baselines, so that the extended support depends on nothing but the
demonstrations). Stored demonstrations keep their original labels (class-incremental: the global ones).

- :func:`replay_memory`: one task's stored demonstrations.
- :func:`replay_support`: task ``i``'s extended support from the earlier tasks' supports.
- :func:`replay_supports`: the extended supports of every task of a sequence.
- :class:`ContextReplay`: the two settings (``per_class``, ``order``), as the evaluators take them;
  :func:`replay_generator`: the stream of the ``"mixed"`` permutations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from fastweights.checks import check_choice, check_int, describe

__all__ = [
    "REPLAY_ORDERS",
    "ContextReplay",
    "ReplaySupport",
    "context_replay",
    "replay_generator",
    "replay_record",
    "replay_memory",
    "replay_support",
    "replay_supports",
]

#: ``"before"``: the memory first, then the task's demonstrations; ``"mixed"``: shuffled together
REPLAY_ORDERS = ("before", "mixed")


@dataclass(frozen=True)
class ContextReplay:
    """In-context replay settings: ``per_class`` (>= 1) stored demonstrations per class of every earlier
    task, read in ``order`` (one of :data:`REPLAY_ORDERS`). "Off" is ``None`` where one is taken.

    Raises:
        ValueError: naming ``per_class`` or ``order``.
    """

    per_class: int
    order: str = "mixed"

    def __post_init__(self) -> None:
        check_int("per_class", self.per_class)
        check_choice("order", self.order, REPLAY_ORDERS)

    def record(self) -> dict[str, int | str]:
        """``{"per_class", "order"}`` (for ``results.json``)."""
        return {"per_class": self.per_class, "order": self.order}


def context_replay(per_class: int, order: str) -> ContextReplay | None:
    """The :class:`ContextReplay` of a config's two keys; ``None`` (off) for ``per_class == 0``."""
    return None if per_class == 0 else ContextReplay(per_class, order)


def replay_record(replay: ContextReplay | None) -> dict[str, int | str]:
    """What ``results.json`` records of ``replay``: ``{"per_class": 0, "order": None}`` when off."""
    return {"per_class": 0, "order": None} if replay is None else replay.record()


def replay_generator(*keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for the ``"mixed"`` permutations, seeded from the non-negative ints
    ``keys`` (e.g. ``(train.seed, step)`` or ``(eval.seed, run)``) through ``numpy.random.SeedSequence``:
    reproducible, and apart from every other random stream of a run (none of them is advanced)."""
    seed = int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator().manual_seed(seed)


class ReplaySupport(NamedTuple):
    """Task ``i``'s extended support: ``features [B, L, F]``, ``labels [B, L]`` int64 and ``positions
    [B, N*K]`` int64, the index in ``0..L-1`` of each of task ``i``'s own demonstrations (in their
    support order) inside the extended sequence."""

    features: Tensor
    labels: Tensor
    positions: Tensor


def _check_support(name: str, features: object, labels: object) -> None:
    if not isinstance(features, Tensor) or features.dim() != 3:
        raise ValueError(f"{name} features: expected a tensor [B, T, F], got {describe(features)}")
    if (
        not isinstance(labels, Tensor)
        or labels.dtype != torch.int64
        or tuple(labels.shape) != tuple(features.shape[:2])
    ):
        raise ValueError(
            f"{name} labels: expected an int64 tensor of shape {list(features.shape[:2])}, "
            f"got {describe(labels)}"
        )


def replay_memory(features: Tensor, labels: Tensor, per_class: int) -> tuple[Tensor, Tensor]:
    """One task's stored demonstrations: of each class (per sequence of the batch), the first
    ``per_class`` demonstrations in support order, kept in that order.

    Args:
        features: the task's support features ``[B, T, F]`` (any float dtype).
        labels: its labels ``[B, T]`` int64.
        per_class: demonstrations kept per class (>= 1).

    Returns:
        ``(features [B, M, F], labels [B, M])``; ``M = sum over classes of min(count, per_class)``, the
        whole support when ``per_class`` reaches every class's count.

    Raises:
        ValueError: naming ``per_class`` (not an int >= 1) or the support (bad shapes or dtypes, or
            sequences of the batch that would keep different numbers of demonstrations).
    """
    check_int("per_class", per_class)
    _check_support("support", features, labels)
    same = labels.unsqueeze(2) == labels.unsqueeze(1)  # [B, T, T]: same class
    earlier = torch.ones_like(same[0]).tril(-1)  # [T, T]: s < t
    rank = (same & earlier).sum(dim=2)  # [B, T]: earlier demos of the same class
    keep = rank < per_class
    counts = keep.sum(dim=1)
    if counts.numel() and not bool((counts == counts[0]).all()):
        raise ValueError(
            f"support labels: per_class={per_class} keeps different numbers of demonstrations in the "
            f"sequences of the batch ({counts.tolist()}); expected tasks with the same class counts"
        )
    m = int(counts[0]) if counts.numel() else 0
    # stable: the kept positions of each sequence in their support order
    index = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :m]
    feats = features.gather(1, index.unsqueeze(-1).expand(-1, -1, features.shape[-1]))
    return feats, labels.gather(1, index)


def replay_support(
    earlier_features: Sequence[Tensor],
    earlier_labels: Sequence[Tensor],
    features: Tensor,
    labels: Tensor,
    *,
    per_class: int,
    order: str = "mixed",
    generator: torch.Generator | None = None,
) -> ReplaySupport:
    """Task ``i``'s extended support: the :func:`replay_memory` of each earlier task (``0..i-1``, in task
    order) and task ``i``'s demonstrations, memory first (``order="before"``) or shuffled together
    (``"mixed"``: an independent permutation per sequence of the batch, drawn from ``generator``, so a
    generator in the same state gives the same sequence). This library's in-context replay (see the
    module docstring); no earlier task gives task ``i``'s support unchanged.

    Args:
        earlier_features: the support features ``[B, T_j, F]`` of each earlier task (same ``B``, ``F``,
            dtype and device as ``features``).
        earlier_labels: their labels ``[B, T_j]`` int64, the original ones (class-incremental: global).
        features, labels: task ``i``'s support ``[B, T, F]`` / ``[B, T]`` int64.
        per_class: stored demonstrations per class of each earlier task (>= 1).
        order: ``"before"`` or ``"mixed"``.
        generator: the random stream of ``"mixed"`` (required there, unused for ``"before"``); its
            device's permutations are moved to ``features``' device.

    Returns:
        :class:`ReplaySupport`: ``features [B, M + T, F]``, ``labels [B, M + T]`` int64 (stored labels
        unchanged) and the ``positions [B, T]`` of task ``i``'s own demonstrations in it.

    Raises:
        ValueError: naming ``per_class``, ``order`` or ``generator`` (missing for ``"mixed"``), or the
            support whose shapes, dtypes or devices do not fit (``earlier_features``/``earlier_labels``
            of different lengths included).
    """
    check_int("per_class", per_class)
    check_choice("order", order, REPLAY_ORDERS)
    if order == "mixed" and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator for order 'mixed', got {generator!r}")
    if len(earlier_features) != len(earlier_labels):
        raise ValueError(
            f"earlier_features, earlier_labels: expected one label tensor per feature tensor, got "
            f"{len(earlier_features)} and {len(earlier_labels)}"
        )
    _check_support("support", features, labels)
    b, t, f = features.shape
    parts_f, parts_l = [], []
    for j, (ef, el) in enumerate(zip(earlier_features, earlier_labels, strict=True)):
        _check_support(f"earlier task {j}", ef, el)
        if ef.shape[0] != b or ef.shape[2] != f or ef.dtype != features.dtype or ef.device != features.device:
            raise ValueError(
                f"earlier task {j} features: expected [{b}, T, {f}] {features.dtype} on {features.device} "
                f"like the task's support, got {describe(ef)}"
            )
        mf, ml = replay_memory(ef, el, per_class)
        parts_f.append(mf)
        parts_l.append(ml)
    m = sum(p.shape[1] for p in parts_l)
    feats = torch.cat([*parts_f, features], dim=1)
    labs = torch.cat([*parts_l, labels], dim=1)
    own = torch.arange(m, m + t, device=features.device).expand(b, t)
    if order == "before" or m == 0:
        return ReplaySupport(feats, labs, own)
    assert generator is not None
    perm = torch.argsort(torch.rand(b, m + t, generator=generator, device=generator.device), dim=1)
    perm = perm.to(features.device)  # position p of the extended sequence holds source perm[:, p]
    feats = feats.gather(1, perm.unsqueeze(-1).expand(-1, -1, f))
    labs = labs.gather(1, perm)
    inverse = torch.argsort(perm, dim=1)  # source s sits at position inverse[:, s]
    return ReplaySupport(feats, labs, inverse[:, m:])


def replay_supports(
    features: Sequence[Tensor],
    labels: Sequence[Tensor],
    replay: ContextReplay | None,
    generator: torch.Generator | None = None,
) -> list[ReplaySupport]:
    """The supports a sequence of tasks is read with: task 0's unchanged and, with ``replay``, task
    ``i >= 1``'s :func:`replay_support` from tasks ``0..i-1`` (their own supports, not their extended
    ones), ``"mixed"`` permutations drawn from ``generator`` in task order. ``replay=None``: every support
    unchanged (``positions`` = ``0..T-1``).

    Raises:
        ValueError: as :func:`replay_support`.
    """
    out = []
    for i, (f, lab) in enumerate(zip(features, labels, strict=True)):
        if replay is None or i == 0:
            out.append(ReplaySupport(f, lab, torch.arange(f.shape[1], device=f.device).expand(f.shape[:2])))
            continue
        out.append(
            replay_support(
                features[:i],
                labels[:i],
                f,
                lab,
                per_class=replay.per_class,
                order=replay.order,
                generator=generator,
            )
        )
    return out
