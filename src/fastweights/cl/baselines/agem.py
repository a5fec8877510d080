"""A-GEM, averaged gradient episodic memory (Chaudhry et al. 2019, "Efficient lifelong learning with
A-GEM", §4, Eq. 11): the gradient of the current mini-batch is projected so that it does not increase
the average loss on a batch of the episodic memory."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.checks import check_int

from .memory import Rehearsal, per_class_choice

__all__ = ["AGEM", "project"]


def project(g: Tensor, g_ref: Tensor) -> Tensor:
    """A-GEM's projection (Eq. 11) of the flat gradient ``g [P]`` given the reference gradient
    ``g_ref [P]``: ``g − (g·g_ref / g_ref·g_ref) g_ref`` if ``g·g_ref < 0``, else ``g`` itself (also for
    ``g_ref = 0``). The result has a non-negative dot product with ``g_ref``."""
    dot = torch.dot(g, g_ref)
    norm = torch.dot(g_ref, g_ref)
    if dot >= 0 or norm == 0:
        return g
    return g - (dot / norm) * g_ref


class AGEM(Rehearsal):
    """A-GEM with an episodic memory of ``per_class`` examples per class of every past task.

    - Memory: at the end of each task, ``per_class`` training examples of each of its labels chosen at
      random (all of them if fewer) are added — the paper fills its memory with random examples of each
      task; its size is counted per class here, like replay's; while task ``t`` is trained the memory
      holds examples of tasks ``< t`` only.
    - Step (tasks ``t > 0``): after ``backward()``, the reference gradient ``g_ref`` of the mean
      cross-entropy on ``min(memory_batch, len(memory))`` distinct memory examples (drawn with the
      trainer's generator; ``torch.autograd.grad``, so the mini-batch's gradients in ``p.grad`` are left
      as they are) is computed, and the mini-batch gradient ``g`` (all trainable parameters flattened)
      is replaced by :func:`project` ``(g, g_ref)``. The model stays in training mode for ``g_ref``
      (a learner with batch-norm running statistics would update them there).

    Args:
        per_class: memory examples per class of each past task (int >= 1).
        memory_batch: memory examples per reference gradient (int >= 1, default 256).

    Raises:
        ValueError: naming ``per_class`` / ``memory_batch`` unless each is an int >= 1.
    """

    name = "agem"
    HPARAMS = ("per_class", "memory_batch")

    def __init__(self, per_class: int = 20, memory_batch: int = 256) -> None:
        super().__init__(per_class)
        check_int("memory_batch", memory_batch)
        self.memory_batch = memory_batch

    def before_step(self, model: nn.Module, t: int) -> None:
        if t == 0 or len(self.memory) == 0:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        xm, ym = self.memory.sample(self.memory_batch, self._generator())
        ref = torch.autograd.grad(F.cross_entropy(model(xm), ym), params, allow_unused=True)
        g = _flat([p.grad for p in params], params)
        new = project(g, _flat(list(ref), params))
        if new is g:
            return
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = new[offset : offset + n].view_as(p).clone()
            offset += n

    def after_task(self, model: nn.Module, t: int, x: Tensor, y: Tensor) -> None:
        idx = per_class_choice(y, self.per_class, self._generator())
        self.memory.add(x[idx], y[idx])


def _flat(grads: list[Tensor | None], params: list[nn.Parameter]) -> Tensor:
    """Gradients flattened into one vector (zeros for a parameter without one)."""
    return torch.cat(
        [(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params, strict=True)]
    )
