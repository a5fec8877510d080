"""The held-out look-alike filters of the FontGlyphs build (``_glyph_build``) and their shape vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastweights.data.sources import _fonts, _render
from fastweights.data.sources._glyph_build import (
    LEAKAGE_BITS,
    LEAKAGE_NCC,
    _max_ncc,
    _popcount_dist,
    held_out_lookalikes,
)

DEJAVU = str(_fonts.dejavu_dir() / "DejaVuSans.ttf")
NOTO = Path("/usr/share/fonts/truetype/noto")


def _noto(script: str) -> str:
    return str(NOTO / f"NotoSans{script}-Regular.ttf")


# (font, character) pairs that are one shape; the Noto ones are pairs of letters from different
# scripts that the hash filter let through into the held-out splits of the default build.
LOOKALIKES = [
    pytest.param((DEJAVU, "|"), (DEJAVU, "l"), id="bar-l"),
    pytest.param((DEJAVU, "|"), (DEJAVU, "I"), id="bar-I"),
    pytest.param((DEJAVU, "O"), (DEJAVU, "ο"), id="O-omicron"),
    pytest.param((DEJAVU, "S"), (DEJAVU, "Ѕ"), id="S-dze"),
    pytest.param((DEJAVU, "*"), (DEJAVU, "∗"), id="asterisk-operator"),
    pytest.param((_noto("Nabataean"), "\U00010889"), (_noto("OldPermic"), "\U00010358"), id="bars"),
    pytest.param((_noto("OldItalic"), "\U0001030f"), (_noto("MendeKikakui"), "\U0001e827"), id="rings"),
    pytest.param((_noto("Thai"), "\u0e23"), (_noto(""), "\u0455"), id="S-shapes"),
    pytest.param((_noto("Brahmi"), "\U00011029"), (_noto("ZanabazarSquare"), "\U00011a20"), id="squares"),
    pytest.param((_noto("Cuneiform"), "\U0001212d"), (_noto("WarangCiti"), "\U000118b7"), id="diamonds"),
    pytest.param((_noto("OldItalic"), "\U0001031f"), (_noto("Lycian"), "\U0001028c"), id="asterisks"),
    pytest.param((_noto("OldHungarian"), "\U00010c9d"), (_noto("OldTurkic"), "\U00010c29"), id="zigzags"),
    pytest.param((_noto("OldSogdian"), "\U00010f0f"), (_noto("Avestan"), "\U00010b20"), id="L-shapes"),
]
# distinct letters, the closest ones first (E/F and I/T correlate about 0.82)
DISTINCT = [("E", "F"), ("I", "T"), ("O", "Q"), ("b", "d"), ("□", "◇"), ("l", "—"), ("A", "B")]


def _canonical(font: str, ch: str) -> tuple[np.ndarray, np.ndarray]:
    """(hash uint64 [1], shape vector float32 [1, D]) of a clean render, via the build's job."""
    if not Path(font).is_file():
        pytest.skip(f"font {font} not installed (fonts-noto-core)")
    hashes, shapes = _render.canonical_job([(font, ord(ch))], res=_render.BASE_RES)
    assert hashes[0] != -1, f"{font} draws no ink for {ch!r}"
    return hashes.view(np.uint64), shapes


@pytest.mark.parametrize("held, train", LOOKALIKES)
def test_lookalike_pairs_are_flagged(held, train):
    h, s = _canonical(*held)
    th, ts = _canonical(*train)
    by_hash, by_shape = held_out_lookalikes(h, s, th, ts)
    assert by_hash[0] or by_shape[0]
    assert float(s[0] @ ts[0]) >= LEAKAGE_NCC  # the shape filter alone catches every pair
    # the two filters never count a glyph twice
    assert not (by_hash[0] and by_shape[0])


def test_hash_filter_misses_what_the_shape_filter_catches():
    pairs = [((DEJAVU, "O"), (DEJAVU, "ο")), ((DEJAVU, "*"), (DEJAVU, "∗"))]
    for held, train in pairs:
        h, s = _canonical(*held)
        th, ts = _canonical(*train)
        assert _popcount_dist(h, th)[0, 0] > LEAKAGE_BITS, held  # e.g. 32 and 24 bits apart
        by_hash, by_shape = held_out_lookalikes(h, s, th, ts)
        assert not by_hash[0] and by_shape[0], held


@pytest.mark.parametrize("a, b", DISTINCT)
def test_distinct_letters_are_not_flagged(a, b):
    h, s = _canonical(DEJAVU, a)
    th, ts = _canonical(DEJAVU, b)
    by_hash, by_shape = held_out_lookalikes(h, s, th, ts)
    assert not by_hash[0] and not by_shape[0]
    assert float(s[0] @ ts[0]) < LEAKAGE_NCC - 0.04  # a margin, not a near miss


def test_filter_against_many_train_glyphs():
    held = [_canonical(DEJAVU, c) for c in "ѕ∗ЖA"]
    train = [_canonical(DEJAVU, c) for c in "S*OBCD"]
    h, s = np.concatenate([x[0] for x in held]), np.concatenate([x[1] for x in held])
    th, ts = np.concatenate([x[0] for x in train]), np.concatenate([x[1] for x in train])
    by_hash, by_shape = held_out_lookalikes(h, s, th, ts)
    np.testing.assert_array_equal(by_hash | by_shape, [True, True, False, False])
    # without train glyphs nothing is flagged
    none = held_out_lookalikes(h, s, th[:0], ts[:0])
    assert not none[0].any() and not none[1].any()


def test_max_ncc_chunks_and_empty():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 16)).astype(np.float32)
    b = rng.standard_normal((11, 16)).astype(np.float32)
    np.testing.assert_allclose(_max_ncc(a, b, chunk=5), (a @ b.T).max(1), rtol=1e-6)
    np.testing.assert_array_equal(_max_ncc(a, b[:0]), np.full(37, -1.0))


def test_shape_vector_is_a_normalised_low_resolution_copy():
    img = _render.clean_render(DEJAVU, ord("A"))
    v = _render.shape_vector(img)
    assert v.dtype == np.float32 and v.shape == (_render.SHAPE_RES**2,)
    assert abs(float(v.mean())) < 1e-6 and abs(float(np.linalg.norm(v)) - 1) < 1e-5
    # invariant to contrast: a dimmer copy has the same vector
    dim = Image.fromarray((np.asarray(img) // 2).astype(np.uint8))
    np.testing.assert_allclose(_render.shape_vector(dim), v, atol=2e-3)
    np.testing.assert_array_equal(_render.shape_vector(Image.new("L", (64, 64), 0)), 0)


def test_canonical_job_marks_empty_renders():
    hashes, shapes = _render.canonical_job([(DEJAVU, ord(" ")), (DEJAVU, ord("A"))], res=64)
    assert hashes[0] == -1 and not shapes[0].any()
    assert hashes[1] != -1
    img = _render.clean_render(DEJAVU, ord("A"))
    assert hashes.view(np.uint64)[1] == _render.phash(img)
    np.testing.assert_array_equal(shapes[1], _render.shape_vector(img))
