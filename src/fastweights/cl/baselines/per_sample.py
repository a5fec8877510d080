"""Per-sample gradients of a learner and their sample means: the importances of EWC (squared) and MAS
(absolute values) are means over examples of a function of each example's own gradient, not of the
mini-batch gradient (Kirkpatrick et al. 2017, Eq. 3; Aljundi et al. 2018, Eq. 4).

Each example is one ordinary forward and backward pass (a batch of one). Measured on this project's
CPU for the 2 × 400 MLP and Conv-4 learners, that loop is about 8–20× faster than the vectorised forms
(``torch.func.vmap(grad(...))`` over a ``functional_call``, or a backward batched over unit
cotangents), and it holds one gradient at a time, not one per example; ``vmap`` also cannot
run Conv-4, whose input check is data-dependent control flow.

:func:`mean_over_samples` of the :class:`~fastweights.cl.baselines.learners.MLP` with ``stat`` the square
or the absolute value needs no per-sample gradient at all: the gradient of an example's loss with respect
to a linear layer's weight is the outer product ``δ aᵀ`` of the gradient ``δ`` at the layer's output and
its input ``a``, so ``Σ_k w_k stat(δ_k a_kᵀ) = (w ⊙ stat(δ))ᵀ stat(a)`` over the examples' rows: one
batched forward and backward (the MLP computes every example on its own) gives the same sums up to
floating-point rounding, 4–20× faster than the loop on this CPU (EWC's Fisher, MAS's importance).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from fastweights.checks import check_int

from .learners import MLP

__all__ = ["SampleLoss", "per_sample_grads", "mean_over_samples", "strided_subset"]

SampleLoss = Callable[[Tensor, Tensor], Tensor]
"""``loss(logits [n_out], target [])`` → scalar: the function of one example whose gradient is taken."""


def _check_lengths(x: Tensor, target: Tensor) -> None:
    if len(x) != len(target):
        raise ValueError(f"target: expected {len(x)} entries like x, given {len(target)}")


def _grads(model: nn.Module, x: Tensor, target: Tensor, loss: SampleLoss) -> Iterator[dict[str, Tensor]]:
    """The gradient of each example's loss in turn (``p.grad`` untouched)."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    with torch.enable_grad():
        for k in range(len(x)):
            value = loss(model(x[k : k + 1])[0], target[k])
            grads = torch.autograd.grad(value, list(params.values()), allow_unused=True)
            yield {
                n: torch.zeros_like(p) if g is None else g
                for (n, p), g in zip(params.items(), grads, strict=True)
            }


def per_sample_grads(model: nn.Module, x: Tensor, target: Tensor, loss: SampleLoss) -> dict[str, Tensor]:
    """The gradient of ``loss(model(x[k:k+1])[0], target[k])`` for every example ``k`` separately
    (each example a batch of one, so instance norm statistics are its own).

    Args:
        model: the learner; used as is (call ``model.eval()`` first for dropout-free gradients).
        x: inputs ``[N, ...]`` (``N >= 1``) in the parameters' dtype.
        target: ``[N]``, the second argument of ``loss`` per example (e.g. a label).
        loss: see :data:`SampleLoss`.

    Returns:
        ``{name: [N, *param.shape]}`` for every trainable parameter, in the parameters' dtype (zeros
        where the loss does not depend on a parameter).

    Raises:
        ValueError: when ``x`` is empty or ``x`` and ``target`` differ in length.
    """
    _check_lengths(x, target)
    if len(x) == 0:
        raise ValueError("x: expected at least one example, given none")
    rows = list(_grads(model, x, target, loss))
    return {n: torch.stack([r[n] for r in rows]) for n in rows[0]}


def mean_over_samples(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    loss: SampleLoss,
    stat: Callable[[Tensor], Tensor],
    *,
    weight: Tensor | None = None,
) -> dict[str, Tensor]:
    """``(1/N) Σ_k w_k · stat(g_k)`` per parameter, ``g_k`` the per-sample gradient of
    :func:`per_sample_grads` (``w_k = weight[k]``, default 1), accumulated one example at a time
    (for the MLP learner with ``stat`` ``torch.square`` or ``torch.abs``: from one batched backward per
    256 examples, the module docstring). ``stat`` is elementwise, e.g. ``torch.square`` or ``torch.abs``.

    Returns ``{name: param.shape}`` tensors in the parameters' dtype (zeros for ``N = 0``). Raises
    ``ValueError`` when ``target`` or ``weight`` does not have one entry per example.
    """
    _check_lengths(x, target)
    if weight is not None and tuple(weight.shape) != (len(x),):
        raise ValueError(f"weight: expected shape ({len(x)},), given {tuple(weight.shape)}")
    if type(model) is MLP and (stat is torch.square or stat is torch.abs):
        return _linear_mean(model, x, target, loss, stat, weight)
    out = {n: torch.zeros_like(p.detach()) for n, p in model.named_parameters() if p.requires_grad}
    for k, grads in enumerate(_grads(model, x, target, loss)):
        w = 1.0 if weight is None else float(weight[k])
        for n, g in grads.items():
            out[n].add_(stat(g), alpha=w)
    return {n: v / max(len(x), 1) for n, v in out.items()}


_CHUNK = 256  # examples per batched pass of _linear_mean


def _linear_mean(
    model: nn.Module,
    x: Tensor,
    target: Tensor,
    loss: SampleLoss,
    stat: Callable[[Tensor], Tensor],
    weight: Tensor | None,
) -> dict[str, Tensor]:
    """:func:`mean_over_samples` of a model whose examples are computed independently and whose
    trainable parameters all belong to ``nn.Linear`` layers each applied once to ``[N, in]`` rows (the
    :class:`~fastweights.cl.baselines.learners.MLP`), for a ``stat`` with ``stat(u v) = stat(u) stat(v)``
    (square, absolute value): per layer ``(1/N) Σ_k w_k stat(δ_k) stat(a_k)ᵀ`` (weight) and
    ``(1/N) Σ_k w_k stat(δ_k)`` (bias), ``a_k`` the layer's input and ``δ_k`` the gradient of example
    ``k``'s loss at its output, in batches of :data:`_CHUNK` examples."""
    out = {n: torch.zeros_like(p.detach()) for n, p in model.named_parameters() if p.requires_grad}
    modules = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    seen: dict[str, tuple[Tensor, Tensor]] = {}  # layer name -> its (input, output) in the current chunk

    def keep(name: str) -> Callable[..., None]:
        return lambda _module, inputs, output: seen.__setitem__(name, (inputs[0].detach(), output))

    hooks = [m.register_forward_hook(keep(name)) for name, m in modules.items()]
    try:
        for i in range(0, len(x), _CHUNK):
            xs, ts = x[i : i + _CHUNK], target[i : i + _CHUNK]
            with torch.enable_grad():
                logits = model(xs)
                live = [name for name in modules if seen[name][1].requires_grad]
                if not live:  # no trainable parameter
                    break
                total = _summed_loss(loss, logits, ts)
                deltas = torch.autograd.grad(total, [seen[name][1] for name in live], allow_unused=True)
            w = None if weight is None else weight[i : i + len(ts)].detach().to(logits.dtype)[:, None]
            for name, delta in zip(live, deltas, strict=True):
                if delta is None:
                    continue
                s_delta = stat(delta) if w is None else stat(delta) * w
                if f"{name}.weight" in out:
                    out[f"{name}.weight"].add_(s_delta.T @ stat(seen[name][0]))
                if modules[name].bias is not None and f"{name}.bias" in out:
                    out[f"{name}.bias"].add_(s_delta.sum(0))
            seen.clear()
    finally:
        for h in hooks:
            h.remove()
    return {n: v / max(len(x), 1) for n, v in out.items()}


def _summed_loss(loss: SampleLoss, logits: Tensor, target: Tensor) -> Tensor:
    """``Σ_k loss(logits[k], target[k])``: vectorised by ``torch.func.vmap`` (the same gradients as the
    loop over examples), or that loop for a loss ``vmap`` cannot run (e.g. data-dependent control flow)."""
    try:
        return torch.func.vmap(loss)(logits, target).sum()
    except RuntimeError:
        return torch.stack([loss(logits[k], target[k]) for k in range(len(target))]).sum()


def strided_subset(x: Tensor, y: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """At most ``n`` examples of ``x [N, ...]`` / ``y [N]`` spread evenly over the set (every one when
    ``N <= n``; deterministic, no random draw). Raises ``ValueError`` naming ``n`` unless an int >= 1."""
    check_int("n", n)
    if len(x) <= n:
        return x, y
    idx = torch.linspace(0, len(x) - 1, n).round().long()
    return x[idx], y[idx]
