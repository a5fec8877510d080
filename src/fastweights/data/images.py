"""Images from outside the data sets (PIL images, numpy arrays, torch tensors) in the data sets' own form:
uint8, grayscale ``[N, S, S]`` or RGB channels-first ``[N, 3, S, S]``, resized to ``S`` by the loaders'
resize (:func:`fastweights.data.sources._resize.resize_image`, PIL bilinear).

- :func:`uint8_images`: any number of images of any kind → a list of uint8 ``[H, W]`` (grayscale) or
  channels-last ``[H, W, 3]`` (RGB) arrays, the pixels as they are.
- :func:`dataset_images`: such a list → one array of the data sets' form, at the model's image size, in
  one colour mode (grayscale images repeated to RGB; RGB images to grayscale as PIL's ``"L"``).

From there the images take the evaluation's path into a model
(:class:`fastweights.cl.split_protocol.ImageEmbedder`: normalisation with the data's pixel statistics,
grayscale repeated for a 3-channel backbone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from fastweights.checks import check_int

from .sources._decode import GRAY_MODES
from .sources._resize import resize_image

__all__ = ["uint8_images", "dataset_images", "is_grayscale", "GRAY_MODES"]
_CHANNEL_SIZES = (1, 3, 4)  # a channel axis: gray, RGB, RGBA


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray | torch.Tensor):
        dtype = str(x.dtype).removeprefix("torch.")
        return f"a {type(x).__name__} of shape {list(x.shape)} and dtype {dtype}"
    return f"a {type(x).__name__}"


def _as_uint8(arr: np.ndarray, where: str) -> np.ndarray:
    """Pixel values as uint8: uint8 as they are, other integers (and bool) in ``[0, 255]``, floats in
    ``[0, 1]`` (``torchvision``'s ``ToTensor`` range) times 255, rounded."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if arr.size == 0:
        raise ValueError(f"{where}: expected an image with pixels, given an empty array {list(arr.shape)}")
    if np.issubdtype(arr.dtype, np.integer):
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi > 255:
            raise ValueError(f"{where}: expected integer pixels in [0, 255], given values in [{lo}, {hi}]")
        return arr.astype(np.uint8)
    if np.issubdtype(arr.dtype, np.floating):
        values = arr.astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError(f"{where}: expected finite pixel values, given NaN or Inf")
        lo, hi = float(values.min()), float(values.max())
        if lo < -1e-6 or hi > 1 + 1e-6:
            raise ValueError(
                f"{where}: expected float pixels in [0, 1] (uint8 / 255, as ToTensor gives them), given "
                f"values in [{lo:.4g}, {hi:.4g}]; pass the raw image, not a normalised one (the model's own "
                "normalisation is applied to it)"
            )
        return np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)
    raise ValueError(f"{where}: expected uint8, integer or float pixels, given dtype {arr.dtype}")


def _channels_last(arr: np.ndarray, first: bool) -> np.ndarray:
    """One image ``[H, W]``, ``[C, H, W]`` (``first``) or ``[H, W, C]`` → ``[H, W]`` or ``[H, W, 3]``."""
    if arr.ndim == 3:
        arr = np.moveaxis(arr, 0, -1) if first else arr
        if arr.shape[-1] == 1:
            arr = arr[..., 0]
        elif arr.shape[-1] == 4:  # RGBA: the alpha channel is dropped, as PIL's convert("RGB") does
            arr = arr[..., :3]
    return np.ascontiguousarray(arr)


def _channel_first(shape: Sequence[int], torch_like: bool, *, stacked: bool = False) -> bool | None:
    """Where the channel axis of one image ``[C, H, W]`` / ``[H, W, C]`` is: True = first, False = last,
    None = neither. Last: ``C`` = 1, 3 or 4 (RGBA); first: ``C`` = 1 or 3, or also 4 in a 4-D stack
    (a 3-D ``[4, H, W]`` is four grayscale images). When both ends could be, tensors are CHW (PyTorch's
    convention) and arrays HWC (PIL's and numpy's)."""
    first = shape[0] in ((1, 3, 4) if stacked else (1, 3))
    last = shape[-1] in _CHANNEL_SIZES
    if first and last:
        return torch_like
    return True if first else (False if last else None)


def _from_pil(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("L" if img.mode in GRAY_MODES else "RGB"))


def _one(x: Any, where: str) -> np.ndarray:
    """One image of any kind → uint8 ``[H, W]`` or ``[H, W, 3]``."""
    if isinstance(x, Image.Image):
        return _from_pil(x)
    torch_like = isinstance(x, torch.Tensor)
    if torch_like:
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray):
        raise ValueError(
            f"{where}: expected a PIL image, a numpy array or a torch tensor, given {_describe(x)}"
        )
    if x.ndim == 2:
        return _as_uint8(x, where)
    if x.ndim == 3:
        first = _channel_first(x.shape, torch_like)
        if first is not None:
            return _channels_last(_as_uint8(x, where), first)
    raise ValueError(
        f"{where}: expected one image [H, W], [C, H, W] (C = 1 or 3) or [H, W, C] (C = 1, 3 or 4), given "
        f"{_describe(x)}"
    )


def uint8_images(images: Any, what: str = "images") -> list[np.ndarray]:
    """The images of ``images`` as uint8 ``[H, W]`` (grayscale) or ``[H, W, 3]`` (RGB) arrays, any sizes.

    ``images`` is one image or several:

    - a PIL image (grayscale modes :data:`GRAY_MODES` as grayscale, any other mode converted to RGB);
    - a numpy array or torch tensor: ``[H, W]`` one grayscale image; ``[H, W, C]`` with ``C`` = 1, 3 or 4,
      or ``[C, H, W]`` with ``C`` = 1 or 3, one image (when both ends could be the channel axis, e.g.
      ``[3, 5, 3]``, a tensor is read as ``[C, H, W]`` and an array as ``[H, W, C]``); any other 3-D shape
      is a stack of grayscale images ``[N, H, W]`` (so ``[3, H, W]`` is one RGB image: give three
      grayscale images as ``[3, 1, H, W]`` or a list); 4-D is a stack ``[N, C, H, W]`` or
      ``[N, H, W, C]``;
    - a list or tuple of single images of these kinds (for images of different sizes or kinds).

    Pixels: uint8 as they are; other integers in ``[0, 255]``; floats in ``[0, 1]`` (``ToTensor``'s range)
    times 255, rounded; an alpha channel is dropped. A tensor may live on any device.

    Raises:
        ValueError: naming ``what`` (and the list index) for another type, shape or pixel range.
    """
    if isinstance(images, list | tuple):
        return [_one(x, f"{what}[{i}]") for i, x in enumerate(images)]
    if isinstance(images, Image.Image):
        return [_from_pil(images)]
    torch_like = isinstance(images, torch.Tensor)
    arr = images.detach().cpu().numpy() if torch_like else images
    if not isinstance(arr, np.ndarray):
        raise ValueError(
            f"{what}: expected a PIL image, a numpy array, a torch tensor or a list of them, given "
            f"{_describe(images)}"
        )
    if arr.ndim == 2:
        return [_as_uint8(arr, what)]
    if arr.ndim == 3:
        first = _channel_first(arr.shape, torch_like)
        if first is not None:
            return [_channels_last(_as_uint8(arr, what), first)]
        pixels = _as_uint8(arr, what)
        return [np.ascontiguousarray(p) for p in pixels]
    if arr.ndim == 4:
        first = _channel_first(arr.shape[1:], torch_like, stacked=True)
        if first is not None:
            pixels = _as_uint8(arr, what)
            return [_channels_last(p, first) for p in pixels]
    raise ValueError(
        f"{what}: expected one image ([H, W], [C, H, W], [H, W, C]) or a stack of them ([N, H, W], "
        f"[N, C, H, W], [N, H, W, C]; C = 1, 3 or 4), given {_describe(images)}"
    )


def is_grayscale(image: np.ndarray) -> bool:
    """Whether a :func:`uint8_images` entry is grayscale (``[H, W]``)."""
    return image.ndim == 2


def dataset_images(images: Sequence[np.ndarray], *, size: int, channels: int) -> np.ndarray:
    """:func:`uint8_images` entries → the data sets' uint8 form at ``size``: ``[N, size, size]``
    (``channels=1``; RGB images converted as PIL's ``"L"``, ITU-R 601-2 luma, what
    :func:`~fastweights.data.sources._decode.read_image` does) or ``[N, 3, size, size]`` (``channels=3``;
    grayscale images repeated to 3 channels). Each image is resized by the loaders' PIL bilinear resize
    (:func:`~fastweights.data.sources._resize.resize_image`; a non-square image is stretched to a square).

    Raises:
        ValueError: for ``size < 1``, ``channels`` other than 1 or 3, or an entry that is not uint8
            ``[H, W]`` / ``[H, W, 3]``.
    """
    check_int("size", size)
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 (grayscale) or 3 (RGB), given {channels!r}")
    out = np.empty((len(images), *((3,) if channels == 3 else ()), size, size), dtype=np.uint8)
    for i, img in enumerate(images):
        if not (isinstance(img, np.ndarray) and img.dtype == np.uint8) or not (
            img.ndim == 2 or (img.ndim == 3 and img.shape[-1] == 3)
        ):
            raise ValueError(
                f"images[{i}]: expected uint8 [H, W] or [H, W, 3] (uint8_images), given {_describe(img)}"
            )
        if channels == 1 and img.ndim == 3:  # decoded as grayscale first, then resized (as the loaders)
            img = np.asarray(Image.fromarray(img).convert("L"))
        img = resize_image(img, size)
        if channels == 3:
            out[i] = np.moveaxis(img, -1, 0) if img.ndim == 3 else img[None]  # gray: broadcast to 3
        else:
            out[i] = img
    return out
