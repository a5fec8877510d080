"""A Vision Transformer image encoder that reads torchvision's ``vit_b_16`` state-dict layout.

The model is ViT as in Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", §3.1 Eq. 1–4: the image
is cut into ``P x P`` patches that are linearly embedded (a stride-``P`` convolution), a learned class
token is prepended and learned position embeddings are added (Eq. 1); each of the ``L`` pre-LN blocks
computes ``x = x + MSA(LN(x))`` (Eq. 2) and ``x = x + MLP(LN(x))`` (Eq. 3, a two-layer MLP with the exact
erf GELU); the image representation is the class token after the final LayerNorm (Eq. 4). LayerNorms use
``eps = 1e-6`` and there is no dropout (the encoder is used frozen).

Parameter names and shapes are those of torchvision's ``vit_b_16`` (``D`` hidden size, ``P`` patch size,
``G = S / P`` the patch grid of the trained image size ``S``, ``M`` the MLP width, ``C`` classes)::

    class_token [1, 1, D]         conv_proj.weight [D, 3, P, P]     conv_proj.bias [D]
    encoder.pos_embedding [1, 1 + G*G, D]                           encoder.ln.{weight,bias} [D]
    encoder.layers.encoder_layer_{i}.ln_1.{weight,bias} [D]         (same for ln_2)
    encoder.layers.encoder_layer_{i}.self_attention.in_proj_weight [3D, D]   .in_proj_bias [3D]
    encoder.layers.encoder_layer_{i}.self_attention.out_proj.weight [D, D]   .out_proj.bias [D]
    encoder.layers.encoder_layer_{i}.mlp.0.weight [M, D]  .mlp.0.bias [M]
    encoder.layers.encoder_layer_{i}.mlp.3.weight [D, M]  .mlp.3.bias [D]
    heads.head.weight [C, D]  heads.head.bias [C]    (optional classifier; unused for features)

Older torchvision files name the MLP layers ``mlp.linear_1`` / ``mlp.linear_2``; they are read as
``mlp.0`` / ``mlp.3``. For ViT-B/16: ``D = 768``, ``P = 16``, ``L = 12``, ``M = 3072``, 12 heads, ``S = 224``.
"""

from __future__ import annotations

import hashlib
import logging
import math
import pickle
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fastweights.models.frozen import IMAGENET_MEAN, IMAGENET_STD, FrozenEncoder, file_sha256

__all__ = [
    "ViTB16",
    "ViTConfig",
    "ViTEncoderNet",
    "infer_vit_config",
    "interpolate_pos_embedding",
    "load_vit_b16",
    "state_dict_sha256",
    "vit_from_state_dict",
]

log = logging.getLogger(__name__)

_KEY = "model.backbone_weights"
_LN_EPS = 1e-6
_LAYER = re.compile(r"encoder\.layers\.encoder_layer_(\d+)\.")
_OLD_MLP = ((".mlp.linear_1.", ".mlp.0."), (".mlp.linear_2.", ".mlp.3."))
_B16 = (768, 16, 12, 3072)  # D, P, L, M of ViT-B/16


@dataclass(frozen=True)
class ViTConfig:
    """Hyper-parameters of a :class:`ViTEncoderNet` (``num_classes = 0``: no ``heads.head``)."""

    hidden_dim: int
    patch_size: int
    num_layers: int
    mlp_dim: int
    image_size: int
    num_heads: int
    num_classes: int = 0


class _EncoderBlock(nn.Module):
    """One pre-LN block (Eq. 2–3): ``x + MSA(ln_1(x))`` then ``x + MLP(ln_2(x))``; ``[N, T, D]``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        d = cfg.hidden_dim
        self.ln_1 = nn.LayerNorm(d, eps=_LN_EPS)
        self.self_attention = nn.MultiheadAttention(d, cfg.num_heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(d, eps=_LN_EPS)
        # indices 0 and 3 carry the parameters, as in torchvision (Linear, GELU, Dropout, Linear, Dropout)
        self.mlp = nn.Sequential(
            nn.Linear(d, cfg.mlp_dim), nn.GELU(), nn.Identity(), nn.Linear(cfg.mlp_dim, d)
        )

    def forward(self, x: Tensor) -> Tensor:
        h = self.ln_1(x)
        x = x + self.self_attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class _Encoder(nn.Module):
    """``pos_embedding``, the blocks ``layers.encoder_layer_{i}`` and the final LayerNorm ``ln``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        g = cfg.image_size // cfg.patch_size
        self.pos_embedding = nn.Parameter(torch.zeros(1, 1 + g * g, cfg.hidden_dim))
        blocks = ((f"encoder_layer_{i}", _EncoderBlock(cfg)) for i in range(cfg.num_layers))
        self.layers = nn.Sequential(OrderedDict(blocks))
        self.ln = nn.LayerNorm(cfg.hidden_dim, eps=_LN_EPS)


class ViTEncoderNet(nn.Module):
    """ViT (Dosovitskiy et al. 2021, §3.1 Eq. 1–4) with torchvision's ``vit_b_16`` parameter names.

    :meth:`forward` returns the class token after the final LayerNorm (the penultimate features; the
    optional ``heads.head`` classifier is kept only so that full torchvision files load unchanged).

    Args:
        config: the hyper-parameters (:func:`infer_vit_config` reads them from a state dict).
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        d, p = config.hidden_dim, config.patch_size
        self.config = config
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.conv_proj = nn.Conv2d(3, d, kernel_size=p, stride=p)
        self.encoder = _Encoder(config)
        if config.num_classes:
            self.heads = nn.Sequential(OrderedDict(head=nn.Linear(d, config.num_classes)))
        self._pos_cache: dict[tuple[Any, ...], Tensor] = {}

    def pos_embedding_for(self, grid_h: int, grid_w: int) -> Tensor:
        """The position embeddings ``[1, 1 + grid_h * grid_w, D]`` of a ``grid_h x grid_w`` patch grid.

        The trained grid returns ``encoder.pos_embedding`` itself; another grid its bicubic
        interpolation (:func:`interpolate_pos_embedding`), computed once per grid, device and dtype and
        cached while the parameter is frozen and unchanged.
        """
        pos = self.encoder.pos_embedding
        g = self.config.image_size // self.config.patch_size
        if (grid_h, grid_w) == (g, g):
            return pos
        if pos.requires_grad:
            return interpolate_pos_embedding(pos, (grid_h, grid_w))
        key = (grid_h, grid_w, pos.device, pos.dtype, pos._version)
        if key not in self._pos_cache:
            with torch.no_grad():
                self._pos_cache[key] = interpolate_pos_embedding(pos, (grid_h, grid_w))
        return self._pos_cache[key]

    def forward(self, x: Tensor) -> Tensor:
        """Class-token features of normalised images.

        Args:
            x: ``[N, 3, H, W]`` floating point (the parameters' dtype), ``H`` and ``W`` multiples of ``P``;
                a size other than the trained ``image_size`` interpolates the position embeddings.

        Returns:
            ``[N, D]``, the dtype of ``x``.

        Raises:
            ValueError: naming ``x`` for another shape, ``image_size`` when ``H`` or ``W`` is not a
                multiple of the patch size.
        """
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"x: expected images [N, 3, S, S], got shape {list(x.shape)}")
        p = self.config.patch_size
        n, _, h, w = x.shape
        if h % p or w % p or h == 0 or w == 0:
            raise ValueError(f"image_size: expected a positive multiple of the patch size {p}, got {h}x{w}")
        tokens = self.conv_proj(x).flatten(2).transpose(1, 2)  # [N, G_h * G_w, D], row-major patches
        tokens = torch.cat([self.class_token.expand(n, -1, -1), tokens], dim=1)
        tokens = tokens + self.pos_embedding_for(h // p, w // p)
        return self.encoder.ln(self.encoder.layers(tokens))[:, 0]


def interpolate_pos_embedding(pos: Tensor, grid: tuple[int, int]) -> Tensor:
    """Resize position embeddings to another patch grid (the class-token row is kept).

    Args:
        pos: ``[1, 1 + G*G, D]`` floating point, patches in row-major order of a square ``G x G`` grid.
        grid: the new grid ``(G_h, G_w)``.

    Returns:
        ``[1, 1 + G_h * G_w, D]``, the patch rows interpolated bicubically (``align_corners=False``).
    """
    cls, patches = pos[:, :1], pos[:, 1:]
    g, d = math.isqrt(patches.shape[1]), pos.shape[-1]
    patches = patches.reshape(1, g, g, d).permute(0, 3, 1, 2)
    patches = F.interpolate(patches, size=grid, mode="bicubic", align_corners=False)
    return torch.cat([cls, patches.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], d)], dim=1)


def _bad(expected: str, got: str, source: str | None = None) -> ValueError:
    where = f" ({source})" if source else ""
    return ValueError(" ".join(f"{_KEY}: expected {expected}, got {got}{where}".split()))


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"shape {list(value.shape)} ({value.dtype})"
    return f"a {type(value).__name__}"


def _tensor(state: Mapping[str, Any], key: str, ndim: int, source: str | None) -> tuple[int, ...]:
    if key not in state:
        raise _bad(f"key {key!r} (torchvision vit_b_16 layout)", "a state dict without it", source)
    value = state[key]
    if not isinstance(value, Tensor) or value.dim() != ndim:
        raise _bad(f"{key!r} a {ndim}-d tensor", _describe(value), source)
    return tuple(value.shape)


def _expected_shapes(cfg: ViTConfig) -> dict[str, tuple[int, ...]]:
    d, p, m, g = cfg.hidden_dim, cfg.patch_size, cfg.mlp_dim, cfg.image_size // cfg.patch_size
    shapes = {"class_token": (1, 1, d), "conv_proj.weight": (d, 3, p, p), "conv_proj.bias": (d,)}
    shapes["encoder.pos_embedding"] = (1, 1 + g * g, d)
    for i in range(cfg.num_layers):
        pre = f"encoder.layers.encoder_layer_{i}."
        for ln in ("ln_1", "ln_2"):
            shapes[pre + ln + ".weight"] = shapes[pre + ln + ".bias"] = (d,)
        shapes[pre + "self_attention.in_proj_weight"] = (3 * d, d)
        shapes[pre + "self_attention.in_proj_bias"] = (3 * d,)
        shapes[pre + "self_attention.out_proj.weight"] = (d, d)
        shapes[pre + "self_attention.out_proj.bias"] = (d,)
        shapes[pre + "mlp.0.weight"], shapes[pre + "mlp.0.bias"] = (m, d), (m,)
        shapes[pre + "mlp.3.weight"], shapes[pre + "mlp.3.bias"] = (d, m), (d,)
    shapes["encoder.ln.weight"] = shapes["encoder.ln.bias"] = (d,)
    if cfg.num_classes:
        shapes["heads.head.weight"], shapes["heads.head.bias"] = (cfg.num_classes, d), (cfg.num_classes,)
    return shapes


def _normalise(obj: object, source: str | None) -> dict[str, Any]:
    """The state dict in ``obj`` (itself, or its ``"state_dict"`` / ``"model"`` entry), old MLP names
    mapped to ``mlp.0`` / ``mlp.3``."""
    if isinstance(obj, Mapping):
        for wrapper in ("state_dict", "model"):
            if wrapper in obj and isinstance(obj[wrapper], Mapping):
                obj = obj[wrapper]
                break
    if not isinstance(obj, Mapping) or not all(isinstance(k, str) for k in obj):
        raise _bad("a dict of tensors (a torchvision vit_b_16 state dict)", f"a {type(obj).__name__}", source)
    state: dict[str, Any] = {}
    for key, value in obj.items():
        new = key
        for old, repl in _OLD_MLP:
            new = new.replace(old, repl)
        if new in state:
            raise _bad("one name per parameter", f"both {key!r} and {new!r}", source)
        state[new] = value
    return state


def infer_vit_config(
    state: Mapping[str, Any], *, num_heads: int | None = None, source: str | None = None
) -> ViTConfig:
    """Hyper-parameters of a state dict in torchvision's ``vit_b_16`` layout (module docstring).

    ``D`` and ``P`` come from ``conv_proj.weight``, ``L`` from the ``encoder_layer_{i}`` keys, ``M`` from
    ``mlp.0.weight``, the trained image size ``S = sqrt(T - 1) * P`` from the ``T`` rows of
    ``encoder.pos_embedding``, ``C`` from ``heads.head.weight`` (0 without it); heads ``D // 64`` unless
    ``num_heads`` is given. Every key and shape is then checked.

    Raises:
        ValueError: naming ``model.backbone_weights`` for a missing, unexpected or misshapen entry
            (``source``, e.g. the file, is quoted), or ``num_heads`` when it does not divide ``D``.
    """
    state = _normalise(state, source)
    d, cin, p, p2 = _tensor(state, "conv_proj.weight", 4, source)
    if cin != 3 or p != p2 or min(d, p) < 1:
        raise _bad("'conv_proj.weight' of shape [D, 3, P, P]", f"shape {[d, cin, p, p2]}", source)
    one, t, d_pos = _tensor(state, "encoder.pos_embedding", 3, source)
    g = math.isqrt(max(t - 1, 0))
    if one != 1 or d_pos != d or t < 2 or g * g != t - 1:
        raise _bad(f"'encoder.pos_embedding' of shape [1, 1 + G*G, {d}]", f"shape {[one, t, d_pos]}", source)
    layers = sorted({int(m.group(1)) for k in state if (m := _LAYER.match(k))})
    if layers != list(range(len(layers))) or not layers:
        raise _bad("layers 'encoder.layers.encoder_layer_{i}' numbered 0..L-1", f"indices {layers}", source)
    mlp = _tensor(state, "encoder.layers.encoder_layer_0.mlp.0.weight", 2, source)[0]
    classes = _tensor(state, "heads.head.weight", 2, source)[0] if "heads.head.weight" in state else 0
    heads = d // 64 if num_heads is None else num_heads
    if heads < 1 or d % heads:
        hint = f" (the default D // 64 for D = {d}; pass num_heads)" if num_heads is None else ""
        raise ValueError(f"num_heads: expected a positive divisor of the hidden size {d}, got {heads}{hint}")
    cfg = ViTConfig(d, p, len(layers), mlp, g * p, heads, classes)
    expected = _expected_shapes(cfg)
    missing = [k for k in expected if k not in state]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise _bad(f"key {missing[0]!r}{more}", "a state dict without it", source)
    extra = [k for k in state if k not in expected]
    if extra:
        raise _bad("only torchvision vit_b_16 keys", f"unexpected key {extra[0]!r}", source)
    for key, shape in expected.items():
        value = state[key]
        if not isinstance(value, Tensor) or tuple(value.shape) != shape or not value.is_floating_point():
            raise _bad(f"{key!r} a floating-point tensor of shape {list(shape)}", _describe(value), source)
    return cfg


def state_dict_sha256(state: Mapping[str, Tensor]) -> str:
    """Hex SHA-256 of a state dict: its sorted keys, dtypes, shapes and tensor bytes."""
    h = hashlib.sha256()
    for key in sorted(state):
        t = state[key].detach().cpu().contiguous()
        h.update(f"{key}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class ViTB16(FrozenEncoder):
    """The frozen ViT encoder ``frozen:vit_b16``: class-token features after the final LayerNorm.

    Inputs are ImageNet-normalised (``IMAGENET_MEAN`` / ``IMAGENET_STD`` of ``images / 255``);
    ``image_size`` is the trained size ``S`` (224 for torchvision's ViT-B/16), the natural argument of
    :meth:`~fastweights.models.frozen.FrozenEncoder.encode`.

    Args:
        net: the loaded :class:`ViTEncoderNet`.
        weights_sha256: hex SHA-256 of the weights (file or state dict).
    """

    net: ViTEncoderNet

    def __init__(self, net: ViTEncoderNet, *, weights_sha256: str) -> None:
        super().__init__(
            net,
            name="vit_b16",
            feature_dim=net.config.hidden_dim,
            weights_sha256=weights_sha256,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
        )
        self.image_size = net.config.image_size  # the size the weights were trained at

    def check_image_size(self, image_size: int) -> None:
        """Raises ``ValueError`` naming ``model.backbone_image_size`` unless it is a multiple of the patch."""
        p = self.net.config.patch_size
        if image_size % p:
            raise ValueError(
                f"model.backbone_image_size: expected a multiple of the ViT patch size {p}, got {image_size}"
            )

    def fingerprint(self) -> dict[str, Any]:
        return {"config": repr(self.net.config)}

    def features(self, x: Tensor) -> Tensor:
        """``x [N, 3, S, S]`` float32, ImageNet-normalised, ``S`` a multiple of ``P`` → ``[N, D]`` float32.

        Raises:
            ValueError: naming ``image_size`` when ``S`` is not a multiple of the patch size.
        """
        return self.net(x)


def vit_from_state_dict(
    state: Mapping[str, Any],
    *,
    num_heads: int | None = None,
    weights_sha256: str | None = None,
    source: str | None = None,
) -> ViTB16:
    """A frozen :class:`ViTB16` from a state dict in torchvision's ``vit_b_16`` layout.

    Args:
        state: the state dict (or a dict with it under ``"state_dict"`` / ``"model"``); floating-point
            tensors of any dtype, copied into float32 parameters.
        num_heads: attention heads (default ``D // 64``).
        weights_sha256: recorded as the encoder's ``weights_sha256`` (default
            :func:`state_dict_sha256` of ``state``).
        source: where ``state`` came from, quoted in error messages.

    Raises:
        ValueError: see :func:`infer_vit_config`.
    """
    cfg = infer_vit_config(state, num_heads=num_heads, source=source)
    state = _normalise(state, source)
    if (cfg.hidden_dim, cfg.patch_size, cfg.num_layers, cfg.mlp_dim) != _B16:
        log.warning("vit_b16: weights %s are not ViT-B/16 (%s); used as given", source or "(state dict)", cfg)
    with torch.device("meta"):  # no random initialisation: every parameter is loaded below
        net = ViTEncoderNet(cfg)
    net.to_empty(device="cpu")
    net.load_state_dict(state, strict=True)
    return ViTB16(net, weights_sha256=weights_sha256 or state_dict_sha256(state))


def load_vit_b16(path: str | Path, *, num_heads: int | None = None) -> ViTB16:
    """The frozen ViT encoder from a weights file in torchvision's ``vit_b_16`` state-dict layout.

    The file is read with ``torch.load(path, map_location="cpu", weights_only=True)``; it holds the state
    dict or a dict with it under ``"state_dict"`` / ``"model"``. ``weights_sha256`` is the file's SHA-256.

    Args:
        path: the weights file.
        num_heads: attention heads (default ``D // 64``: 12 for ViT-B/16).

    Raises:
        ValueError: naming ``model.backbone_weights`` when ``path`` is not a file, is not readable by
            ``torch.load`` or does not hold a ViT state dict (see :func:`infer_vit_config`).
    """
    file = Path(path)
    if not file.is_file():
        raise _bad("a weights file (torchvision vit_b_16 state dict)", f"{path} (not a file)")
    try:
        obj = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # any unreadable file is the user's input error, reported in one line
        first = (str(e).strip().splitlines() or [""])[0][:200]
        if isinstance(e, pickle.UnpicklingError):  # torch's text here is advice about weights_only
            first = "not a file written by torch.save"
        first = f"damaged or not a PyTorch weights file: {type(e).__name__}: {first}"
        raise _bad("a file torch.load(weights_only=True) can read", f"{path} ({first})") from None
    return vit_from_state_dict(obj, num_heads=num_heads, weights_sha256=file_sha256(file), source=str(path))
