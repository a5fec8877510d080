"""The concept-exclusion list: no meta-training or meta-validation class shows a test benchmark's class.

The detectors here are written independently of ``fastweights.data.concepts``: words derived from each
benchmark's class names (with the synonyms a reviewer would look for), matched against every
meta-training and meta-validation name of EmojiImages, and the Unicode facts of FontGlyphs' letters. A
class that matches must be excluded by the module or listed there as reviewed."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pytest

from fastweights.data.concepts import (
    BENCHMARK_CLASSES,
    EMOJI_REVIEWED,
    emoji_exclusion,
    exclude_benchmark_concepts,
    glyph_exclusion,
)
from fastweights.data.sources import emoji
from fastweights.data.sources.base import ClassPool

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
FASHION_SYNONYMS = (
    "jeans", "pants", "shorts", "sweater", "jacket", "uniform", "shoe", "shoes", "skate", "boots",
    "handbag", "purse", "backpack", "luggage", "briefcase", "suitcase", "bags",
)  # fmt: skip


def _words(name: str) -> set[str]:
    tokens = re.findall(r"[\w’'!]+(?:-[\w’']+)*", name)
    return {t for tok in tokens for t in [tok, *tok.split("-")]}


def _benchmark_words() -> dict[str, set[str]]:
    out = {}
    for bench, classes in BENCHMARK_CLASSES.items():
        words = set()
        for c in classes:
            for part in c.lower().split("/"):
                words |= {part, *part.split(" ")}
        out[bench] = words
    out["fashion_mnist"] |= {f"{w}s" for w in out["fashion_mnist"]} | set(FASHION_SYNONYMS)
    for bench in ("digits", "mnist", "colour_digits"):
        out[bench] |= {*DIGIT_WORDS, "digit", "digits", "number", "numbers", "numeral", "keycap", "hundred"}
    return out


def _flagged(name: str, words: dict[str, set[str]]) -> list[str]:
    w = _words(name)
    lower = {x.lower() for x in w}
    hits = [b for b, ws in words.items() if b != "font_letters" and lower & ws]
    if any(ch.isdigit() for ch in name):
        hits.append("digits")
    # letters A-J: a one-letter word, an upper-case acronym holding one, or a name about Latin letters
    if any(re.fullmatch(r"[A-Z]{1,5}!?", x) and set(x) & set("ABCDEFGHIJ") for x in w) or lower & {
        "latin",
        "letter",
        "letters",
        "abc",
        *"abcdefghij",
    }:
        hits.append("font_letters")
    return hits


@pytest.mark.skipif(not emoji.EMOJI_TEST.is_file(), reason="unicode-data missing")
def test_no_emoji_training_class_names_a_benchmark_concept():
    catalog, _ = emoji.emoji_catalog()
    split = emoji.emoji_subgroup_splits()
    words = _benchmark_words()
    leaks = []
    for e in catalog:
        if split.get(e.subgroup) not in ("train", "val") or emoji_exclusion(e.name, e.subgroup):
            continue
        hits = _flagged(e.name, words)
        if hits and e.name not in EMOJI_REVIEWED:
            leaks.append(f"{e.name} [{e.subgroup}]: {hits}")
    assert not leaks, f"meta-training/validation emoji that name a test benchmark's concept: {leaks}"


@pytest.mark.skipif(not emoji.EMOJI_TEST.is_file(), reason="unicode-data missing")
def test_the_named_leaks_of_the_audit_are_excluded():
    catalog, _ = emoji.emoji_catalog()
    by_name = {e.name: e for e in catalog}
    audit = ["input numbers", "t-shirt", "jeans", "coat", "dress", "woman’s sandal", "woman’s boot",
             "hiking boot", "running shoe", "handbag", "purse", "backpack", "calendar", "pager", "ATM sign",
             "luggage"]  # fmt: skip
    for name in [*(f"keycap: {d}" for d in range(11)), *audit]:
        e = by_name[name]
        assert emoji_exclusion(e.name, e.subgroup), name
    for name in ["grinning face", "dog", "one o’clock", "red apple"]:
        e = by_name[name]
        assert emoji_exclusion(e.name, e.subgroup) is None, name


def test_no_numeral_and_no_latin_a_to_j_passes_the_glyph_rule():
    """Every letter of the Unicode database that has a numeric value, a DIGIT/NUMBER/NUMERAL name, or
    decomposes to a Latin A-J, is excluded; examples of kept letters stay."""
    missed = []
    for cp in range(0x30000):
        ch = chr(cp)
        if unicodedata.category(ch) not in ("Lu", "Ll", "Lt", "Lo"):
            continue
        name = unicodedata.name(ch, "")
        base = unicodedata.normalize("NFKD", ch)[0]
        numeral = unicodedata.numeric(ch, None) is not None or re.search(r"DIGIT|NUMBER|NUMERAL", name)
        latin_a_j = "LATIN" in name and base in "ABCDEFGHIJabcdefghij"
        if (numeral or latin_a_j) and glyph_exclusion(cp) is None:
            missed.append(f"U+{cp:04X} {name}")
    assert not missed, missed[:20]
    for cp in (
        0x4E00,
        0x0773,
        0x0063,
        0x0180,
        0x0253,
        0x1D00,
        0x0131,
        0xFF21,
    ):  # 一, digit-above, c, ƀ, ɓ, ᴀ, ı, Ａ
        assert glyph_exclusion(cp), f"U+{cp:04X}"
    for cp in (0x004B, 0x006B, 0x03B1, 0x0627, 0x05D0, 0x00C6):  # K, k, α, ا, א, Æ
        assert glyph_exclusion(cp) is None, f"U+{cp:04X}"


def _pool(name: str, class_names: list[str], alphabets: list[str]) -> ClassPool:
    images = np.arange(len(class_names) * 2 * 4 * 4, dtype=np.uint8).reshape(len(class_names), 2, 4, 4)
    return ClassPool(name, images, class_names, alphabets, mean=0.25, std=0.5)


def test_exclude_benchmark_concepts_filters_train_and_val_only():
    names = ["keycap: 7 (U+0037 U+FE0F U+20E3)", "dog (U+1F415)", "pager (U+1F4DF)", "cat (U+1F408)"]
    subgroups = ["keycap", "animal-mammal", "phone", "animal-mammal"]
    pools = {s: _pool(f"EmojiImages/{s}", names, subgroups) for s in ("train", "val", "test")}
    out = exclude_benchmark_concepts("emoji", pools)
    for split in ("train", "val"):
        assert out[split].class_names == ["dog (U+1F415)", "cat (U+1F408)"]
        assert out[split].alphabets == ["animal-mammal"] * 2
        np.testing.assert_array_equal(out[split].images, pools[split].images[[1, 3]])
        assert (out[split].mean, out[split].std) == (pools[split].mean, pools[split].std)
    assert out["test"] is pools["test"]
    letters = ["LATIN SMALL LETTER C (U+0063)", "LATIN CAPITAL LETTER K (U+004B)"]
    glyphs = {s: _pool(f"FontGlyphs/{s}", letters, ["Latin", "Latin"]) for s in ("train", "val", "test")}
    assert exclude_benchmark_concepts("fontglyphs", glyphs)["train"].class_names == [
        "LATIN CAPITAL LETTER K (U+004B)"
    ]
    assert exclude_benchmark_concepts("omniglot", pools) is pools  # user data: used as it is


def test_a_class_name_without_its_code_points_is_an_error():
    pools = {s: _pool(f"EmojiImages/{s}", ["dog"], ["animal-mammal"]) for s in ("train", "val", "test")}
    with pytest.raises(ValueError, match=r"^class_names: expected 'NAME \(U\+XXXX \.\.\.\)', given 'dog'$"):
        exclude_benchmark_concepts("emoji", pools)
