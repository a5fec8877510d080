"""The FontGlyphs build pipeline: candidates -> look-alike filters -> alphabet split -> renders.

Used by :func:`fastweights.data.sources.glyphs.load_font_glyphs` (see its docstring); every random
choice derives from ``(seed, step, script)`` so that results do not depend on the worker count.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from . import _render
from ._fonts import LGC, build_catalog
from .base import pixel_stats

log = logging.getLogger(__name__)
SPLITS = ("train", "val", "test")
__all__ = ["SPLITS", "FILTERS", "GlyphConfig", "build_glyphs", "held_out_lookalikes"]
LOOKALIKE_BITS = 6  # non-LGC glyph this close to a Latin/Greek/Cyrillic letter -> dropped
DUPLICATE_BITS = 2  # two glyphs of one script this close -> the later one is dropped
LEAKAGE_BITS = 6  # held-out glyph this close to a meta-train glyph -> dropped
# Held-out glyph whose 16 x 16 shape vector correlates this much with a meta-train glyph's -> dropped.
# Chosen by measurement on the default build (seed 0, 32 px): each held-out class the hash filter
# kept, against its most correlated meta-train class, pairs inspected as image sheets. >= 0.93:
# nearly all pairs are one shape (bars, rings, crosses, X, K, Δ, Σ, S, □ across scripts); 0.90-0.93:
# mostly; 0.88-0.90: about half (asterisks, ovals, P, T, S-curves drawn at another stroke weight).
# The same letter in two of its fonts correlates 0.87 (median of 1,487 pairs), so a held-out glyph
# dropped here is closer to a meta-train glyph than half the font variants of one letter are.
LEAKAGE_NCC = 0.88
PRESAMPLE_FACTOR = 3  # scripts with more candidates than 3 x max_classes_per_script are pre-sampled
FILTERS = {
    "lookalike_bits": LOOKALIKE_BITS,
    "duplicate_bits": DUPLICATE_BITS,
    "leakage_bits": LEAKAGE_BITS,
    "leakage_ncc": LEAKAGE_NCC,
}  # the filter thresholds: part of the cache key


@dataclass(frozen=True)
class GlyphConfig:
    """The arguments of ``load_font_glyphs`` that determine its output (they form the cache key)."""

    image_size: int
    examples_per_class: int
    max_classes_per_script: int
    max_scripts: int | None
    seed: int
    val_scripts: float | tuple[str, ...]
    test_scripts: float | tuple[str, ...]


def _script_rng(seed: int, step: int, script: str = "") -> np.random.Generator:
    return np.random.default_rng([seed, step, zlib.crc32(script.encode())])


def _popcount_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamming distances between uint64 hashes: int ``[len(a), len(b)]``."""
    x = a[:, None] ^ b[None, :]
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int64)
    return np.unpackbits(x.view(np.uint8).reshape(*x.shape, 8), axis=-1).sum(-1).astype(np.int64)


def _min_dist(a: np.ndarray, b: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """For each hash in ``a`` the smallest Hamming distance to ``b`` (65 when ``b`` is empty)."""
    out = np.full(len(a), 65, dtype=np.int64)
    if len(b):
        for i in range(0, len(a), chunk):
            out[i : i + chunk] = _popcount_dist(a[i : i + chunk], b).min(1)
    return out


def _max_ncc(a: np.ndarray, b: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """For each shape vector in ``a`` its largest correlation with a row of ``b`` (-1 when ``b`` is empty).

    ``a`` float32 ``[n, D]``, ``b`` float32 ``[m, D]``, rows zero-mean and unit-norm
    (:func:`._render.shape_vector`), so a dot product is a normalised cross-correlation.
    Returns float64 ``[n]``.
    """
    out = np.full(len(a), -1.0)
    if len(b):
        for i in range(0, len(a), chunk):
            out[i : i + chunk] = (a[i : i + chunk] @ b.T).max(1)
    return out


def held_out_lookalikes(
    hashes: np.ndarray, shapes: np.ndarray, train_hashes: np.ndarray, train_shapes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Which held-out glyphs look like a meta-train glyph: bool ``[n]`` masks ``(by_hash, by_shape)``.

    ``hashes`` uint64 ``[n]`` / ``train_hashes`` ``[m]`` are :func:`._render.phash` values,
    ``shapes`` float32 ``[n, D]`` / ``train_shapes`` ``[m, D]`` :func:`._render.shape_vector` rows of
    the same clean renders. ``by_hash``: Hamming distance ``<= LEAKAGE_BITS`` to some train hash;
    ``by_shape``: not ``by_hash`` but a correlation ``>= LEAKAGE_NCC`` with some train shape (the
    sparse shapes the DCT hash misses).
    """
    by_hash = _min_dist(hashes, train_hashes) <= LEAKAGE_BITS
    by_shape = ~by_hash & (_max_ncc(shapes, train_shapes) >= LEAKAGE_NCC)
    return by_hash, by_shape


def _parallel(
    fn: Callable[..., Any],
    chunks: list[Any],
    kwargs: dict[str, Any],
    workers: int,
    desc: str,
    progress: bool,
    sizes: list[int],
) -> list[Any]:
    """Run ``fn(chunk, **kwargs)`` over chunks (in worker processes if workers > 1), in order."""
    bar = tqdm(total=sum(sizes), desc=desc, unit="glyph", disable=not progress, leave=False)
    results: list[Any] = []
    try:
        if workers <= 1 or len(chunks) <= 1:
            for chunk, n in zip(chunks, sizes, strict=True):
                results.append(fn(chunk, **kwargs))
                bar.update(n)
            return results
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(fn, chunk, **kwargs) for chunk in chunks]
            for fut, n in zip(futures, sizes, strict=True):
                results.append(fut.result())
                bar.update(n)
        return results
    finally:
        bar.close()


def _chunked(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _select_scripts(catalog: dict[str, dict[int, list[str]]], cfg: GlyphConfig) -> list[str]:
    scripts = [s for s, cps in catalog.items() if cps]
    if cfg.max_scripts is None or len(scripts) <= cfg.max_scripts:
        return scripts
    keep = [s for s in LGC if s in scripts][: cfg.max_scripts]
    others = [s for s in scripts if s not in LGC]
    pick = _script_rng(cfg.seed, 0).choice(len(others), cfg.max_scripts - len(keep), replace=False)
    return sorted(keep + [others[i] for i in pick])


def _split_scripts(nonempty: list[str], cfg: GlyphConfig) -> dict[str, list[str]]:
    held = [s for s in nonempty if s not in LGC]
    out: dict[str, list[str]] = {}
    if isinstance(cfg.val_scripts, tuple) or isinstance(cfg.test_scripts, tuple):
        for name, arg in (("val_scripts", cfg.val_scripts), ("test_scripts", cfg.test_scripts)):
            if not isinstance(arg, tuple):
                raise ValueError(
                    f"{name}: expected a list of script names like the other split, given {arg!r}"
                )
            bad = [s for s in arg if s not in held]
            if bad:
                raise ValueError(
                    f"{name}: expected non-Latin/Greek/Cyrillic scripts among {held}, given {bad}"
                )
        if set(cfg.val_scripts) & set(cfg.test_scripts):
            raise ValueError("val_scripts/test_scripts: expected disjoint lists, given overlapping ones")
        out["val"], out["test"] = sorted(cfg.val_scripts), sorted(cfg.test_scripts)
    else:
        n = len(held)
        n_val = n_test = 0
        if n >= 3:
            n_val = max(1, round(cfg.val_scripts * n)) if cfg.val_scripts > 0 else 0
            n_test = max(1, round(cfg.test_scripts * n)) if cfg.test_scripts > 0 else 0
            while n_val + n_test > n - 1:
                n_val, n_test = (n_val - 1, n_test) if n_val >= n_test else (n_val, n_test - 1)
        perm = [held[i] for i in _script_rng(cfg.seed, 1).permutation(n)]
        out["val"], out["test"] = sorted(perm[:n_val]), sorted(perm[n_val : n_val + n_test])
    taken = set(out["val"]) | set(out["test"])
    out["train"] = [s for s in nonempty if s not in taken]
    return out


def build_glyphs(
    cfg: GlyphConfig, fonts: list[Any], workers: int, progress: bool
) -> tuple[dict[str, Any], dict]:
    """Build the three splits: ``({split}_images|_codepoints|_alphabets arrays + stats, info dict)``.

    ``stats`` is float64 ``[2]``, the pixel mean and std of the train images (``images / 255``): the
    normalisation of every split, as for the other sources. Held-out (val/test) candidates that look
    like a kept meta-train class are dropped (:func:`held_out_lookalikes`) before the per-script cap;
    the info's ``dropped`` counts each filter and the log reports the counts.
    """
    t0 = time.time()
    res = max(_render.BASE_RES, cfg.image_size)
    catalog = build_catalog(fonts)
    scripts = _select_scripts(catalog, cfg)
    cap, pre = cfg.max_classes_per_script, PRESAMPLE_FACTOR * cfg.max_classes_per_script
    cand: list[tuple[str, int]] = []
    for s in scripts:
        cps = list(catalog[s])
        if s not in LGC and len(cps) > pre:
            cps = sorted(int(c) for c in _script_rng(cfg.seed, 2, s).choice(cps, pre, replace=False))
        cand += [(s, cp) for cp in cps]
    items = [(catalog[s][cp][0], cp) for s, cp in cand]
    chunks = _chunked(items, 256)
    sizes = [len(c) for c in chunks]
    canon = _parallel(_render.canonical_job, chunks, {"res": res}, workers, "glyph hashes", progress, sizes)
    hashes = np.concatenate([c[0] for c in canon])
    shapes = np.concatenate([c[1] for c in canon])
    ok = hashes != -1
    h = hashes.view(np.uint64)
    script_of = np.array([s for s, _ in cand])
    is_lgc = np.isin(script_of, LGC)
    dropped = {"no_ink": int((~ok).sum())}
    # 1) non-LGC glyphs that look like a Latin/Greek/Cyrillic letter
    other = ok & ~is_lgc
    near = _min_dist(h[other], h[ok & is_lgc]) <= LOOKALIKE_BITS
    idx = np.flatnonzero(other)[near]
    ok[idx] = False
    dropped["lgc_lookalike"] = len(idx)
    # 2) duplicates within a script (greedy in code-point order)
    n_dup = 0
    by_script: dict[str, list[int]] = {}
    for s in scripts:
        members = np.flatnonzero(ok & (script_of == s))
        d = _popcount_dist(h[members], h[members])
        kept: list[int] = []
        for j in range(len(members)):
            if kept and d[j, kept].min() <= DUPLICATE_BITS:
                n_dup += 1
            else:
                kept.append(j)
        by_script[s] = [int(members[j]) for j in kept]
    dropped["duplicate"] = n_dup

    def capped(s: str, members: list[int]) -> list[int]:
        if len(members) <= cap:
            return members
        return sorted(int(i) for i in _script_rng(cfg.seed, 3, s).choice(members, cap, replace=False))

    nonempty = [s for s in scripts if by_script[s]]
    split_scripts = _split_scripts(nonempty, cfg)
    final = {s: capped(s, by_script[s]) for s in split_scripts["train"]}
    train_idx = [i for s in split_scripts["train"] for i in final[s]]
    train_h, train_shapes = h[train_idx], shapes[train_idx]
    n_leak = n_shape = 0
    for split in ("val", "test"):
        for s in split_scripts[split]:
            members = np.asarray(by_script[s], dtype=np.int64)
            leak, shape_leak = held_out_lookalikes(h[members], shapes[members], train_h, train_shapes)
            n_leak += int(leak.sum())
            n_shape += int(shape_leak.sum())
            final[s] = capped(s, [int(i) for i in members[~(leak | shape_leak)]])
        split_scripts[split] = [s for s in split_scripts[split] if final[s]]
    dropped["leakage"] = n_leak
    dropped["leakage_shape"] = n_shape
    log.info(
        "FontGlyphs filters dropped %d empty renders, %d non-LGC look-alikes of LGC letters, "
        "%d duplicates within a script, %d held-out classes by hash (<= %d bits) and %d more by shape "
        "correlation (>= %.2f) with a meta-train class",
        dropped["no_ink"],
        dropped["lgc_lookalike"],
        dropped["duplicate"],
        n_leak,
        LEAKAGE_BITS,
        n_shape,
        LEAKAGE_NCC,
    )
    order = [(split, s, i) for split in SPLITS for s in split_scripts[split] for i in final[s]]
    classes = [(cand[i][1], catalog[s][cand[i][1]]) for _, s, i in order]
    chunks = _chunked(classes, 32)
    kwargs = {"seed": cfg.seed, "m": cfg.examples_per_class, "res": res, "size": cfg.image_size}
    parts = _parallel(
        _render.examples_job, chunks, kwargs, workers, "glyph examples", progress, [len(c) for c in chunks]
    )
    shape = (0, cfg.examples_per_class, cfg.image_size, cfg.image_size)
    images = np.concatenate(parts) if parts else np.zeros(shape, dtype=np.uint8)
    arrays: dict[str, Any] = {}
    info_splits = {}
    for split in SPLITS:
        sel = np.array([k for k, (sp, _, _) in enumerate(order) if sp == split], dtype=np.int64)
        cps = np.array([classes[k][0] for k in sel], dtype=np.int64)
        arrays[f"{split}_images"] = (
            np.ascontiguousarray(images[sel]) if len(sel) else np.zeros(shape, np.uint8)
        )
        arrays[f"{split}_codepoints"] = cps
        arrays[f"{split}_alphabets"] = np.array([order[k][1] for k in sel], dtype=str)
        info_splits[split] = {
            "num_scripts": len(split_scripts[split]),
            "num_classes": len(sel),
            "scripts": {s: len(final[s]) for s in split_scripts[split]},
        }
    mean, std = pixel_stats(arrays["train_images"])
    arrays["stats"] = np.array([mean, std], dtype=np.float64)
    info = {
        "fonts": len(fonts),
        "catalog_classes": sum(len(v) for v in catalog.values()),
        "catalog_scripts": len(catalog),
        "selected_scripts": len(scripts),
        "candidates": len(cand),
        "dropped": dropped,
        "splits": info_splits,
        "normalisation": {"source": "train", "mean": mean, "std": std},
        "build_seconds": round(time.time() - t0, 1),
    }
    return arrays, info
