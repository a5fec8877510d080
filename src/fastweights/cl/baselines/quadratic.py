"""The weighted quadratic pull towards anchor weights that EWC, online EWC, SI and MAS share:
``Σ_i Ω_i (θ_i − θ*_i)²`` (Kirkpatrick et al. 2017, Eq. 3; Zenke et al. 2017, Eq. 4; Aljundi et al.
2018, Eq. 3 — they differ only in the importance ``Ω`` and the factor in front)."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["accumulate", "quadratic_penalty"]


def quadratic_penalty(model: nn.Module, importance: dict[str, Tensor], star: dict[str, Tensor]) -> Tensor:
    """``Σ_name Σ_i importance[name]_i · (param_i − star[name]_i)²`` over the trainable parameters
    named in ``importance`` (a scalar tensor in the parameters' dtype, differentiable in them; exactly
    ``0`` at ``param = star``).

    Raises:
        ValueError: when ``importance`` names none of the model's trainable parameters.
        KeyError: for a name of ``importance`` missing in ``star``.
    """
    terms = [
        (importance[n] * (p - star[n]) ** 2).sum()
        for n, p in model.named_parameters()
        if p.requires_grad and n in importance
    ]
    if not terms:
        raise ValueError("importance: expected entries for the model's trainable parameters, given none")
    return sum(terms[1:], terms[0])


def accumulate(
    old: dict[str, Tensor] | None, new: dict[str, Tensor], decay: float = 1.0
) -> dict[str, Tensor]:
    """Importances carried over tasks: ``decay · old + new`` per name (``new`` when ``old`` is ``None``;
    online EWC's ``γ F + F_t``, the sums of SI and MAS with ``decay = 1``). New tensors; the inputs are
    left unchanged."""
    if old is None:
        return dict(new)
    return {n: decay * old[n] + v for n, v in new.items()}
