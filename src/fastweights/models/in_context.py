"""In-context classifier: backbone features + label token → sequence layers → class logits.

Architecture of the SRWM/ACL models (Irie et al. 2022 §4; ACL paper §3; ``model_few_shot.py``):
``u_t = Linear([features(x_t); onehot(y_t)])`` over ``N + 1`` label entries (index ``N`` is the
"unknown" label of queries), then ``L × [sequence layer, pre-LN feed-forward]``, then ``Linear(D → N)``
at every position (no final norm). Each sequence layer brings its own block around its core (norm,
residual, output projection: its native form, or with ``layer_options={"block": "pre_ln"}`` the same
``x + W_o·core(LN(x))`` for every layer); the feed-forward is ``z + FF(LN(z))``. Stateful: the fast
weights after one call continue in the next.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from fastweights.checks import check_real, describe
from fastweights.layers import FeedForward, make_sequence_layer
from fastweights.layers.base import check_input_dtype, check_layer_input

__all__ = ["InContextClassifier"]

State = tuple[Any, ...]


class InContextClassifier(nn.Module):
    """Stateful in-context learner over (image, label) sequences.

    Args:
        backbone: module mapping ``[N, C, S, S]`` images to ``[N, F]`` features (also for ``N = 0``,
            as :class:`~fastweights.models.backbones.Conv4` does); must expose ``feature_dim``.
        num_classes: number of output classes ``N``; labels are in ``0..N-1`` and ``N`` = unknown.
        d_model, num_layers, num_heads, d_ff, dropout: the sequence part (ACL: 256, 2, 16, 512, 0.1).
        sequence_layer: name accepted by ``fastweights.layers.make_sequence_layer`` (default "srwm").
        input_init_scale: factor on the initial weights and bias of ``input_proj`` (1 = PyTorch's
            default init, the reference's): the scale of the first sequence layer's input, which the
            SRWM reads without normalisation (so it sets how peaked its softmax keys/queries start).
        layer_options: extra keyword options of every sequence layer (e.g. ``{"init": "modern"}`` for
            the SRWM; ``{"block": "pre_ln"}``: the same pre-LN residual block around every layer's core,
            see :class:`~fastweights.layers.base.SequenceLayer`), passed to ``make_sequence_layer``.
        label_init_scale: factor on the initial weights of ``input_proj``'s ``N + 1`` label columns
            (1 = PyTorch's default init, the reference's). With the default init a label one-hot
            contributes ~1/9 of the first layer input's RMS against 128 features; a larger factor makes
            the label token more visible from the start, which shortens the delayed-label plateau of
            every sequence layer (this library's option; ``docs/results.md``, "SRWM fidelity").

    Call ``logits, state = model(images [B, T, C, S, S], labels [B, T] int64, state=None)``. The
    state is a tuple with one entry per sequence layer (``num_layers``); ``None`` starts from the slow
    weights. ``T = 0`` (or ``B = 0``) gives empty logits ``[B, 0, N]`` and the state unchanged (the
    initial state when ``state`` is None), as the sequence layers do.

    Raises:
        ValueError: for ``num_classes < 2``, an ``input_init_scale`` or ``label_init_scale`` that is not
            a finite number > 0, or a bad layer size (see ``make_sequence_layer``).
        TypeError: for a ``layer_options`` key the layer does not accept (named by Python).
    """

    def __init__(
        self,
        backbone: nn.Module,
        num_classes: int,
        *,
        d_model: int = 256,
        num_layers: int = 2,
        num_heads: int = 16,
        d_ff: int = 512,
        dropout: float = 0.0,
        sequence_layer: str = "srwm",
        label_init_scale: float = 1.0,
        input_init_scale: float = 1.0,
        layer_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes: expected >= 2, got {num_classes}")
        check_real("label_init_scale", label_init_scale, 0.0, low_open=True)
        check_real("input_init_scale", input_init_scale, 0.0, low_open=True)
        self.backbone, self.num_classes = backbone, num_classes
        self.input_proj = nn.Linear(backbone.feature_dim + num_classes + 1, d_model)
        with torch.no_grad():
            self.input_proj.weight.mul_(float(input_init_scale))
            self.input_proj.bias.mul_(float(input_init_scale))
            self.input_proj.weight[:, backbone.feature_dim :].mul_(float(label_init_scale))
        self.seq_layers = nn.ModuleList(
            make_sequence_layer(sequence_layer, d_model, num_heads, dropout=dropout, **(layer_options or {}))
            for _ in range(num_layers)
        )
        self.ff_layers = nn.ModuleList(FeedForward(d_model, d_ff, dropout) for _ in range(num_layers))
        self.out_layer = nn.Linear(d_model, num_classes)

    @property
    def unknown_label(self) -> int:
        """Label index fed with queries (the "unknown" token ∅ of the ACL paper)."""
        return self.num_classes

    def embed(self, images: Tensor) -> Tensor:
        """Backbone features of ``images [..., C, S, S]`` → ``[..., F]`` (one backbone call); with a
        :class:`~fastweights.models.backbones.FeatureInput` backbone the input already is ``[..., F]``.

        Raises:
            ValueError: from the backbone for bad ``images`` (shape, dtype, NaN/Inf for ``Conv4``).
        """
        k = getattr(self.backbone, "example_dims", 3)  # dims of one example: [C, S, S], or [F] for features
        lead = images.shape[:-k]
        return self.backbone(images.reshape(-1, *images.shape[-k:])).reshape(*lead, self.backbone.feature_dim)

    def _layer_states(self, state: State | None) -> State:
        """``state`` as one entry per sequence layer (``None`` = slow weights for every layer)."""
        n = len(self.seq_layers)
        if state is None:
            return (None,) * n
        if not isinstance(state, (tuple, list)) or len(state) != n:
            got = (
                f"a {type(state).__name__} of length {len(state)}"
                if isinstance(state, (tuple, list))
                else describe(state)
            )
            raise ValueError(
                f"state: expected None or a tuple of {n} per-layer states (one per sequence layer, as "
                f"returned by this model), got {got}"
            )
        return tuple(state)

    def _check_features(self, features: Tensor) -> None:
        check_layer_input(features, self.backbone.feature_dim, "features")
        check_input_dtype("features", features, self, "model")

    def _inputs(self, features: Tensor, labels: Tensor) -> Tensor:
        """``input_proj([features; onehot(labels)])`` for ``features`` already checked."""
        if (
            not isinstance(labels, Tensor)
            or labels.dtype not in (torch.int64, torch.int32)
            or labels.shape != features.shape[:2]
        ):
            raise ValueError(
                f"labels: expected an integer tensor of shape {list(features.shape[:2])}, "
                f"got {describe(labels)}"
            )
        if labels.numel() and (labels.min() < 0 or labels.max() > self.num_classes):
            raise ValueError(
                f"labels: expected values in [0, {self.num_classes}] ({self.num_classes} = unknown), "
                f"got range [{int(labels.min())}, {int(labels.max())}]"
            )
        onehot = nn.functional.one_hot(labels.long(), self.num_classes + 1).to(features.dtype)
        return self.input_proj(torch.cat([features, onehot], dim=-1))

    def forward_features(
        self, features: Tensor, labels: Tensor, state: State | None = None
    ) -> tuple[Tensor, State]:
        """Sequence part on precomputed features ``[B, T, F]`` → ``(logits [B, T, N], state)``.

        Raises:
            ValueError: for bad ``features`` (shape ``[B, T, F]``, the model's dtype, NaN/Inf), ``labels``
                (integer ``[B, T]`` in ``[0, N]``) or ``state`` (one entry per sequence layer).
        """
        states = self._layer_states(state)
        self._check_features(features)
        h = self._inputs(features, labels)
        new_states = []
        for seq, ff, s in zip(self.seq_layers, self.ff_layers, states, strict=True):
            h, s = seq(h, s)
            h = ff(h)
            new_states.append(s)
        return self.out_layer(h), tuple(new_states)

    def forward_features_online(
        self, features: Tensor, labels: Tensor, state: State | None = None
    ) -> tuple[Tensor, Tensor, State]:
        """Like :meth:`forward_features`, plus *online* predictions: ``online[:, t]`` are the logits
        for image ``t`` fed with the unknown label from the state after demonstrations ``0..t-1`` —
        the prediction of each demonstration's label before it is revealed.

        Returns ``(logits [B, T, N], online [B, T, N], state)``.

        Raises:
            ValueError: as for :meth:`forward_features`.
        """
        states = self._layer_states(state)
        self._check_features(features)
        h = self._inputs(features, labels)
        h_read = self._inputs(features, torch.full_like(labels, self.unknown_label))
        new_states = []
        for seq, ff, s in zip(self.seq_layers, self.ff_layers, states, strict=True):
            h, h_read, s = seq.forward_with_reads(h, h_read, s)
            h, h_read = ff(h), ff(h_read)
            new_states.append(s)
        return self.out_layer(h), self.out_layer(h_read), tuple(new_states)

    def query_features(self, features: Tensor, state: State | None = None) -> Tensor:
        """Logits ``[B, Q, N]`` of ``Q`` independent queries (unknown label), each a one-step call
        from ``state`` whose own update is discarded (ACL query semantics, ACL paper §3).

        Raises:
            ValueError: for bad ``features`` ``[B, Q, F]`` or ``state`` (as for :meth:`forward_features`).
        """
        states = self._layer_states(state)
        self._check_features(features)
        labels = torch.full(features.shape[:2], self.unknown_label, dtype=torch.long, device=features.device)
        h = self._inputs(features, labels)
        for seq, ff, s in zip(self.seq_layers, self.ff_layers, states, strict=True):
            h = ff(seq.read(h, s))
        return self.out_layer(h)

    def _check_images(self, images: Tensor, layout: str) -> None:
        if not isinstance(images, Tensor) or images.dim() != 5:
            raise ValueError(f"images: expected a 5-D tensor {layout}, got {describe(images)}")
        if images.is_floating_point():
            check_input_dtype("images", images, self, "model")

    def forward(self, images: Tensor, labels: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``images [B, T, C, S, S]``, ``labels [B, T]`` → ``(logits [B, T, N], state)``.

        Raises:
            ValueError: for bad ``images`` (rank, the model's dtype; shape and values as checked by the
                backbone), ``labels`` or ``state`` (see :meth:`forward_features`).
        """
        self._check_images(images, "[B, T, C, S, S]")
        return self.forward_features(self.embed(images), labels, state)

    def query(self, images: Tensor, state: State | None = None) -> Tensor:
        """``images [B, Q, C, S, S]`` → logits ``[B, Q, N]`` of independent queries from ``state``.

        Raises:
            ValueError: as for :meth:`forward` (without labels).
        """
        self._check_images(images, "[B, Q, C, S, S]")
        return self.query_features(self.embed(images), state)
