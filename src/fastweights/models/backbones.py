"""Vision backbones for in-context image classification (Conv-4 of Vinyals et al. 2016, as in modern-srwm)."""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fastweights.checks import check_choice, check_finite, check_int, describe
from fastweights.layers.base import check_input_dtype
from fastweights.ops.pool_norm_relu import pool_norm_relu

__all__ = ["CONV4_IMPLS", "CONV4_PRECISIONS", "Conv4", "FeatureInput", "NORMS"]

NORMS = ("instance", "batch", "none")  # the normalisations of Conv4's blocks
CONV4_IMPLS = ("fast", "reference")  # how Conv4 computes its blocks (same parameters and function)
CONV4_PRECISIONS = ("fp32", "bf16")  # Conv4.precision: the compute dtype of its training-mode forward


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "instance":
        return nn.InstanceNorm2d(channels, affine=True)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm: expected 'instance', 'batch' or 'none', got {kind!r}")


class _ChannelsLastGrad(torch.autograd.Function):
    """Identity whose backward hands on its gradient in channels-last layout."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        return grad.contiguous(memory_format=torch.channels_last)


def _fusable(norm: nn.Module, dropout: nn.Module) -> bool:
    """Whether a block's pool, norm and ReLU run as one fused op: an affine instance norm with the
    statistics of each image (no running ones) and no active dropout between them."""
    instance = isinstance(norm, nn.InstanceNorm2d) and norm.affine and not norm.track_running_stats
    return instance and not (dropout.training and dropout.p > 0)


class Conv4(nn.Module):
    """Conv-4: 4 × [Conv3×3(pad 1) → Norm → MaxPool 2 → Dropout → ReLU], then flatten (C, H, W).

    The ACL paper uses InstanceNorm (it generalises better than BatchNorm for continual learning; ACL
    §3; affine as in automated-cl). ``pool_before_norm=True`` swaps pool and norm, which normalises
    4× fewer pixels (a CPU speed option; not the reference order).

    Args:
        in_channels: image channels (1 for the grayscale datasets shipped here, 3 for RGB).
        channels: feature maps per conv (32 in the ACL model).
        image_size: input height = width; must be divisible by 16.
        norm: ``"instance"`` (default), ``"batch"`` or ``"none"``.
        dropout: dropout rate after each pool (the reference's ``vision_dropout``).
        impl: ``"fast"`` (default): convolutions in channels-last memory layout (NHWC, which oneDNN's
            convolutions run natively on CPU) and, with the instance norm, each block's pooling, norm
            and ReLU as one fused op (:func:`fastweights.ops.pool_norm_relu.pool_norm_relu`: one pass
            per image, one byte per pooled value for the argmax); other norms or active dropout run
            module by module in channels-last (the instance norm's gradient handed back in that layout,
            the ReLU in place); ``"reference"``: the plain ``nn.Sequential`` of the modules in NCHW
            layout. The same parameters (state-dict keys) and function: outputs and gradients agree
            to float rounding (``tests/models/test_backbones.py``); with ``dropout > 0`` the masks are
            drawn in the other layout's order (the same distribution, other draws). Settable after
            construction.
        precision: ``"fp32"`` (default): compute in the parameters' dtype; ``"bf16"``: in training mode,
            the blocks run under ``torch.autocast`` to bfloat16 (convolutions and the fused
            pool-norm-ReLU on bfloat16 maps; parameters, their gradients and the norm's statistics stay
            float32) and the features are returned in float32; evaluation mode always computes in the
            parameters' dtype. Only a speed option for CPUs/GPUs with native bfloat16 (the recipes'
            ``train.backbone_precision`` checks that); settable after construction.

    Input ``[N, in_channels, S, S]`` float in the dtype of the parameters (``N = 0`` allowed); output
    ``[N, channels * (S/16)²]`` (``feature_dim``).

    Raises:
        ValueError: unless ``in_channels``, ``channels`` and ``image_size`` are positive ints and
            ``image_size`` a multiple of 16, or for an unknown ``norm`` (naming the argument).
    """

    def __init__(
        self,
        in_channels: int = 1,
        channels: int = 32,
        *,
        image_size: int = 32,
        norm: str = "instance",
        dropout: float = 0.0,
        pool_before_norm: bool = False,
        impl: str = "fast",
        precision: str = "fp32",
    ) -> None:
        super().__init__()
        check_int("in_channels", in_channels)
        check_int("channels", channels)
        if check_int("image_size", image_size) % 16:
            raise ValueError(f"image_size: expected a multiple of 16, got {image_size}")
        blocks = []
        for i in range(4):
            conv = nn.Conv2d(in_channels if i == 0 else channels, channels, 3, padding=1)
            pool, nrm = nn.MaxPool2d(2), _norm(norm, channels)
            order = [conv, pool, nrm] if pool_before_norm else [conv, nrm, pool]
            blocks.append(nn.Sequential(*order, nn.Dropout(dropout), nn.ReLU()))
        self.blocks = nn.Sequential(*blocks)
        self.in_channels, self.image_size = in_channels, image_size
        self.pool_before_norm = pool_before_norm
        self.feature_dim = channels * (image_size // 16) ** 2
        self.impl = impl
        self.precision = precision

    @property
    def precision(self) -> str:
        """``"fp32"`` or ``"bf16"``: the compute dtype of the training-mode forward (see the class)."""
        return self._precision

    @precision.setter
    def precision(self, value: str) -> None:
        check_choice("precision", value, CONV4_PRECISIONS)
        self._precision = value

    @property
    def impl(self) -> str:
        """``"fast"`` or ``"reference"``: how the blocks are computed (see the class)."""
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        check_choice("impl", value, CONV4_IMPLS)
        self._impl = value

    def _fast_blocks(self, x: Tensor) -> Tensor:
        """The blocks of ``impl="fast"``: ``[N, C, S, S]`` → ``[N, C', S/16, S/16]`` (channels-last)."""
        for block in self.blocks:
            conv, norm, dropout = block[0], block[2 if self.pool_before_norm else 1], block[3]
            # a channels-last weight makes the convolution channels-last: an NCHW input (the images) is
            # reordered inside it, so the convolution keeps the caller's tensor for its weight gradient
            # instead of a channels-last copy of the batch
            weight = conv.weight.contiguous(memory_format=torch.channels_last)
            x = F.conv2d(x, weight, conv.bias, conv.stride, conv.padding)
            if _fusable(norm, dropout):
                # pooling, norm and ReLU in one pass over the channels-last maps (fastweights.ops)
                x = pool_norm_relu(x, norm.weight, norm.bias, pool_first=self.pool_before_norm, eps=norm.eps)
            else:
                x = self._block_tail(block, x)
        return x

    @staticmethod
    def _block_tail(block: nn.Sequential, x: Tensor) -> Tensor:
        """A block after its convolution, module by module (batch norm, no norm, or active dropout)."""
        for m in list(block)[1:]:
            if isinstance(m, nn.MaxPool2d):
                x = m(x.contiguous(memory_format=torch.channels_last))
            elif isinstance(m, nn.InstanceNorm2d):
                # computed by PyTorch in NCHW; its input gradient is handed back channels-last, which
                # keeps the max-pool backward before it off a slow mixed-layout path (measured 3×)
                x = m(_ChannelsLastGrad.apply(x))
            elif isinstance(m, nn.ReLU):
                # in place, on the layout of the next convolution: the tensor ReLU keeps for its
                # backward is then the one the convolution keeps, not a second copy of the maps
                x = torch.relu_(x.contiguous(memory_format=torch.channels_last))
            elif not (isinstance(m, nn.Dropout) and m.p == 0.0):
                x = m(x)
        return x

    def forward(self, images: Tensor) -> Tensor:
        """``images [N, in_channels, S, S]`` → features ``[N, feature_dim]`` (``N = 0`` gives ``[0, F]``).

        Raises:
            ValueError: naming ``images`` unless it is a finite float tensor of that shape in the
                parameters' dtype (uint8 pixels are converted by ``cl.tasks.to_model_images``).
        """
        expected = (self.in_channels, self.image_size, self.image_size)
        if not isinstance(images, Tensor) or images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images: expected shape [N, in_channels, S, S] = [N, {', '.join(map(str, expected))}] "
                f"(in_channels={self.in_channels}, image_size={self.image_size}), got {describe(images)}"
            )
        if not images.is_floating_point():
            raise ValueError(
                f"images: expected a floating-point dtype, got {images.dtype} (convert uint8 pixels with "
                "fastweights.cl.tasks.to_model_images)"
            )
        check_input_dtype("images", images, self, "backbone")
        check_finite("images", images)
        if images.shape[0] == 0:  # the norms reject empty batches
            return images.new_zeros(0, self.feature_dim)
        blocks = self.blocks if self.impl == "reference" else self._fast_blocks
        if self.training and self.precision == "bf16":
            with torch.autocast(images.device.type, dtype=torch.bfloat16):
                maps = blocks(images)
            return maps.float().flatten(1)
        return blocks(images).flatten(1)  # the fast path's flatten copies into (C, H, W) order


class FeatureInput(nn.Module):
    """Stand-in backbone for inputs that already are features (``[N, F]`` in, the same tensor out):
    an :class:`~fastweights.models.in_context.InContextClassifier` over synthetic features or a frozen
    encoder's cached ones (:mod:`fastweights.models.frozen`, :mod:`fastweights.data.features`).

    ``encoder_sha256`` (a frozen encoder's weights hash, 64 hex digits) is kept as a uint8 buffer, so a
    checkpoint records which encoder made the features it was trained on (:meth:`trained_encoder`).

    Raises:
        ValueError: unless ``feature_dim`` is an int >= 1 and ``encoder_sha256`` None or 64 hex digits.
    """

    example_dims = 1  # one example is a vector [F] (Conv4's is an image [C, S, S])

    def __init__(self, feature_dim: int, encoder_sha256: str | None = None) -> None:
        super().__init__()
        check_int("feature_dim", feature_dim)
        self.feature_dim = feature_dim
        if encoder_sha256 is not None:
            if not (isinstance(encoder_sha256, str) and re.fullmatch(r"[0-9a-f]{64}", encoder_sha256)):
                raise ValueError(f"encoder_sha256: expected 64 hex digits, got {encoder_sha256!r}")
            self.register_buffer(
                "encoder_sha256", torch.tensor(list(encoder_sha256.encode()), dtype=torch.uint8)
            )

    def trained_encoder(self) -> str | None:
        """The encoder weights hash this module holds (after ``load_state_dict``: the checkpoint's)."""
        buf = getattr(self, "encoder_sha256", None)
        return None if buf is None else bytes(buf.tolist()).decode()

    def forward(self, x: Tensor) -> Tensor:
        """``x [N, F]`` float → ``x`` itself.

        Raises:
            ValueError: naming ``features`` unless ``x`` is a floating-point ``[N, feature_dim]`` tensor.
        """
        if (
            not isinstance(x, Tensor)
            or x.dim() != 2
            or x.shape[1] != self.feature_dim
            or not x.is_floating_point()
        ):
            raise ValueError(f"features: expected a float tensor [N, {self.feature_dim}], got {describe(x)}")
        return x
