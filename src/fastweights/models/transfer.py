"""Weights of one in-context classifier into another whose number of classes differs.

The ACL paper's 5-task meta-finetuning (Irie et al. 2025, §4.3; automated-cl's
``--train_splitmnist_style*`` runs) starts the 2-way domain-incremental or the 10-way class-incremental
model from the 5-way 2-task checkpoint. Only the two label-sized tensors differ: ``input_proj`` reads
``[features F; one-hot of N labels; unknown]`` (``F + N + 1`` columns) and ``out_layer`` has ``N`` rows.
The reference copies a contiguous block of columns and so shifts the feature columns and the label
columns (a bug); here every column keeps its meaning (see :func:`load_classifier_weights`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from fastweights.models.in_context import InContextClassifier

__all__ = ["load_classifier_weights"]

_REMAPPED = ("input_proj.weight", "out_layer.weight", "out_layer.bias")


def _shape(t: Tensor) -> list[int]:
    return [int(x) for x in t.shape]


def _check_keys(own: Mapping[str, Tensor], state_dict: Mapping[str, object]) -> None:
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if missing or unexpected:
        parts = [
            f"missing {missing[:5]}" if missing else "",
            f"unexpected {unexpected[:5]}" if unexpected else "",
        ]
        raise ValueError(
            f"state_dict: expected the parameters of this classifier, got {', '.join(p for p in parts if p)}"
        )
    for k, v in state_dict.items():
        if not isinstance(v, Tensor):
            raise ValueError(f"state_dict[{k!r}]: expected a tensor, got {type(v).__name__}")


def load_classifier_weights(model: InContextClassifier, state_dict: Mapping[str, Tensor]) -> list[str]:
    """Load ``state_dict`` (of an :class:`InContextClassifier` with ``N_old`` classes) into ``model``
    (``N_new = model.num_classes`` classes), in place.

    With ``N_old == N_new`` this is ``model.load_state_dict(state_dict, strict=True)``. Otherwise, with
    ``F`` the backbone's feature size and ``n = min(N_old, N_new)``:

    - ``input_proj.weight [D, F + N + 1]``: feature columns ``0..F-1`` → ``0..F-1``; label column ``c``
      → ``F + c`` for ``c < n``; the unknown-label column ``F + N_old`` → ``F + N_new``;
    - ``out_layer.weight [N, D]`` / ``out_layer.bias [N]``: rows ``c < n`` copied;
    - label columns and output rows ``>= N_old`` (growing) keep the model's current (fresh) values;
      those ``>= N_new`` of the checkpoint (shrinking) are dropped;
    - every other tensor (``input_proj.bias`` included) is copied and must have the model's shape.

    A sequence whose labels are all ``< n`` then gives the new model's logits ``[..., :n]`` equal to
    the old model's ``[..., :n]`` (the unknown token is mapped too, so queries agree as well). This is
    the mapping by meaning; the reference's contiguous-block copy, which shifts the columns, is not
    reproduced.

    Returns:
        Human-readable notes of what was remapped (empty when ``N_old == N_new``), for the log.

    Raises:
        ValueError: when the keys differ from the model's (naming the missing/unexpected ones), a value
            is not a tensor, or a tensor's shape differs from the model's other than by the class count
            (naming the parameter and both shapes, e.g. a 1-channel checkpoint into a 3-channel model).
    """
    own = model.state_dict()
    _check_keys(own, state_dict)
    out = state_dict["out_layer.weight"]
    if out.dim() != 2 or out.shape[0] < 2:
        raise ValueError(
            f"state_dict['out_layer.weight']: expected shape [N, D] with N >= 2 classes, got {_shape(out)}"
        )
    n_old, n_new = int(out.shape[0]), model.num_classes
    f = model.backbone.feature_dim
    expected = {k: (_shape(v), "the model's") for k, v in own.items()}
    if n_old != n_new:  # the label-sized tensors as a checkpoint with n_old classes has them
        d_model = int(own["out_layer.weight"].shape[1])
        why = f"{n_old} classes"
        expected["input_proj.weight"] = ([d_model, f + n_old + 1], f"{f} features + {why} + unknown")
        expected["out_layer.weight"] = ([n_old, d_model], why)
        expected["out_layer.bias"] = ([n_old], why)
    for k, v in state_dict.items():
        shape, why = expected[k]
        if _shape(v) != shape:
            raise ValueError(f"state_dict[{k!r}]: expected shape {shape} ({why}), got {_shape(v)}")
    if n_old == n_new:
        model.load_state_dict(state_dict, strict=True)
        return []
    n = min(n_old, n_new)
    new = {k: (v if k in _REMAPPED else state_dict[k]) for k, v in own.items()}
    with torch.no_grad():
        w_old, w = state_dict["input_proj.weight"], own["input_proj.weight"].clone()
        w[:, : f + n] = w_old[:, : f + n]  # features, then the shared labels
        w[:, f + n_new] = w_old[:, f + n_old]  # unknown -> unknown
        out_w, out_b = own["out_layer.weight"].clone(), own["out_layer.bias"].clone()
        out_w[:n] = state_dict["out_layer.weight"][:n]
        out_b[:n] = state_dict["out_layer.bias"][:n]
    new.update({"input_proj.weight": w, "out_layer.weight": out_w, "out_layer.bias": out_b})
    model.load_state_dict(new, strict=True)
    kept = (
        f"; new label columns {n_old}..{n_new - 1} and output rows {n_old}..{n_new - 1} keep their fresh init"
        if n_new > n_old
        else f"; the checkpoint's label columns and output rows {n_new}..{n_old - 1} are dropped"
    )
    return [
        f"input_proj.weight: {f} feature columns and label columns 0..{n - 1} copied, unknown-label column "
        f"{n_old} -> {n_new}" + kept,
        f"out_layer.weight, out_layer.bias: rows 0..{n - 1} copied ({n_old} -> {n_new} classes)",
    ]
