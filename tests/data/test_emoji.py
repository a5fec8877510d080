from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fastweights.data.concepts import exclude_benchmark_concepts
from fastweights.data.registry import PoolConfig, load_class_pools, load_pools_for
from fastweights.data.sources import _emoji_build as build
from fastweights.data.sources import emoji
from fastweights.data.sources.base import channel_stats
from fastweights.data.sources.emoji import emoji_catalog, emoji_subgroup_splits, load_emoji_images

if not emoji.EMOJI_FONT.is_file():
    pytest.skip(
        f"{emoji.EMOJI_FONT} missing (Debian package fonts-noto-color-emoji)", allow_module_level=True
    )
if not emoji.EMOJI_TEST.is_file():
    pytest.skip(f"{emoji.EMOJI_TEST} missing (Debian package unicode-data)", allow_module_level=True)

TINY = dict(image_size=16, examples_per_class=3, max_classes_per_subgroup=2)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emoji")


@pytest.fixture(scope="module")
def pools(cache):
    return load_emoji_images(seed=0, cache_dir=cache, **TINY)


def _codepoints(label: str) -> tuple[int, ...]:
    inside = label.rsplit("(", 1)[1].rstrip(")")
    return tuple(int(c[2:], 16) for c in inside.split())


def test_shapes_dtypes_names_and_channels(pools):
    assert set(pools) == {"train", "val", "test"}
    for split, pool in pools.items():
        c = pool.num_classes
        assert c > 0, split
        assert pool.name == f"EmojiImages/{split}"
        assert pool.images.dtype == np.uint8 and pool.images.shape == (c, 3, 3, 16, 16)
        assert pool.channels == 3 and len(pool.mean) == 3 and len(pool.std) == 3
        assert len(set(pool.class_names)) == c
        assert max(Counter(pool.alphabets).values()) <= 2  # max_classes_per_subgroup
    assert "grinning face (U+1F600)" in [n for p in pools.values() for n in p.class_names]


def test_splits_are_disjoint_by_subgroup_emoji_and_base_emoji(pools):
    sub = {s: set(p.alphabets) for s, p in pools.items()}
    seqs = {s: {_codepoints(n) for n in p.class_names} for s, p in pools.items()}
    bases = {s: {build.base_key(c) for c in v} for s, v in seqs.items()}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not sub[a] & sub[b]
        assert not seqs[a] & seqs[b]
        assert not bases[a] & bases[b]
    for v in seqs.values():  # no variant survives: every class is its own base
        assert all(build.base_key(c) == tuple(x for x in c if x != build.VS16) for c in v)


def test_packaged_split_covers_every_subgroup_and_every_split_holds_several_groups():
    classes, dropped = emoji_catalog()
    split_of = emoji_subgroup_splits()
    assert {e.subgroup for e in classes} <= set(split_of)
    assert dropped > 1000  # skin tones alone are five variants of hundreds of emoji
    counts = Counter(split_of[e.subgroup] for e in classes)
    groups = {s: {e.group for e in classes if split_of[e.subgroup] == s} for s in counts}
    total = sum(counts.values())
    assert 0.6 < counts["train"] / total < 0.8 and 0.05 < counts["val"] / total < 0.15
    assert 0.12 < counts["test"] / total < 0.25
    assert all(len(g) >= 5 for g in groups.values())
    assert "Component" not in {e.group for e in classes}


def test_base_key_drops_skin_tone_hair_and_gender():
    assert build.base_key((0x1F3C3, 0x1F3FD, 0x200D, 0x2642, 0xFE0F)) == (0x1F3C3,)  # man running: medium
    assert build.base_key((0x1F469, 0x200D, 0x1F9B0)) == (0x1F469,)  # woman: red hair
    assert build.base_key((0x1F44B, 0x1F3FB)) == (0x1F44B,)  # waving hand: light skin tone
    family = (0x1F468, 0x200D, 0x1F469, 0x200D, 0x1F466)
    assert build.base_key(family) == family
    assert build.base_key((0x2640, 0xFE0F)) == (0x2640,)  # the female sign itself is an emoji


def test_base_classes_keep_the_base_and_drop_its_variants():
    e = build.Emoji
    items = [
        e((0x1F3C3,), "People & Body", "person-activity", "person running"),
        e((0x1F3C3, 0x200D, 0x2642, 0xFE0F), "People & Body", "person-activity", "man running"),
        e((0x1F3C3, 0x1F3FB), "People & Body", "person-activity", "person running: light skin tone"),
        e((0x1F3FB,), "Component", "skin-tone", "light skin tone"),
    ]
    classes, dropped = build.base_classes(items)
    assert [c.name for c in classes] == ["person running"] and dropped == 2


def test_same_seed_same_bytes_other_seed_differs(cache, tmp_path, pools):
    again = load_emoji_images(seed=0, cache_dir=tmp_path, **TINY)
    other = load_emoji_images(seed=1, cache_dir=tmp_path, **TINY)
    for split in pools:
        assert pools[split].images.tobytes() == again[split].images.tobytes()
        assert pools[split].class_names == other[split].class_names
        assert not np.array_equal(pools[split].images, other[split].images)


def test_cache_hit_returns_identical_arrays(cache, pools, monkeypatch):
    assert len(list(cache.glob("emoji_images-*.npz"))) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(emoji, "_build", no_build)
    hit = load_emoji_images(seed=0, cache_dir=cache, **TINY)
    for split, pool in pools.items():
        assert np.array_equal(hit[split].images, pool.images)
        assert hit[split].class_names == pool.class_names and hit[split].alphabets == pool.alphabets


def test_train_statistics_normalise_every_split(pools):
    mean, std = channel_stats(pools["train"].images)
    for pool in pools.values():
        assert pool.mean == pytest.approx(mean) and pool.std == pytest.approx(std)
    assert channel_stats(pools["test"].images)[0] != pytest.approx(mean)


def test_occlusion_changes_examples_and_zero_keeps_the_rest(tmp_path):
    none = load_emoji_images(seed=0, occlusion=0.0, cache=False, **TINY)["val"].images
    full = load_emoji_images(seed=0, occlusion=1.0, cache=False, **TINY)["val"].images
    assert none.shape == full.shape and not np.array_equal(none, full)


@pytest.mark.parametrize(
    "attr,package", [("EMOJI_FONT", "fonts-noto-color-emoji"), ("EMOJI_TEST", "unicode-data")]
)
def test_missing_debian_file_names_it_and_its_package(monkeypatch, tmp_path, attr, package):
    missing = tmp_path / "absent.file"
    monkeypatch.setattr(emoji, attr, missing)
    with pytest.raises(FileNotFoundError) as err:
        load_emoji_images(cache_dir=tmp_path, **TINY)
    msg = str(err.value)
    assert str(missing) in msg and package in msg and "\n" not in msg


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"image_size": 4}, "image_size"),
        ({"examples_per_class": 0}, "examples_per_class"),
        ({"occlusion": 1.5}, "occlusion"),
        ({"seed": -1}, "seed"),
        ({"max_classes_per_subgroup": 0}, "max_classes_per_subgroup"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, key, tmp_path):
    with pytest.raises(ValueError, match=f"^{key}: expected"):
        load_emoji_images(cache_dir=tmp_path, **{**TINY, **kwargs})


def test_registry_and_pool_config(cache, pools):
    via = load_class_pools(
        "emoji", image_size=16, examples_per_class=3, max_classes_per_subgroup=2, cache_dir=cache
    )
    expected = exclude_benchmark_concepts("emoji", pools)  # the registry leaves test concepts out
    assert via["train"].images.tobytes() == expected["train"].images.tobytes()
    assert via["train"].num_classes < pools["train"].num_classes  # keycaps, alphanum, clothing
    cfg = PoolConfig(source="emoji", channels=3, image_size=16, examples_per_class=2, cache_dir=str(cache))
    loaded = load_pools_for(cfg)
    assert loaded["test"].images.shape[1:] == (2, 3, 16, 16)
    assert loaded["train"].name == "EmojiImages/train"
    full = load_emoji_images(image_size=16, examples_per_class=2, cache_dir=cache)  # its cache, unfiltered
    assert loaded["test"].class_names == full["test"].class_names  # the concept rules filter train and val
    assert loaded["val"].num_classes < full["val"].num_classes
    names = {n for p in full.values() for n in p.class_names}  # the full set: near-duplicates dropped
    tricolours = {"flag: Clipperton Island (U+1F1E8 U+1F1F5)", "flag: France (U+1F1EB U+1F1F7)"}
    assert len((tricolours | {"flag: St. Martin (U+1F1F2 U+1F1EB)"}) & names) == 1  # one flag, three names
    assert 1500 < len(names) < 1800
    with pytest.raises(ValueError, match=r"^channels: expected 3 for the RGB source\(s\) \['emoji'\].*got 1"):
        PoolConfig(source="emoji", channels=1)
    cfg.channels = 1  # past the config's check, the loaded images are checked too
    with pytest.raises(ValueError, match=r"data\.channels: emoji/train images have 3 channel\(s\)"):
        load_pools_for(cfg)


def test_packaged_split_is_the_documented_procedure():
    """The shipped lists are what scripts/make_emoji_splits.py writes for the installed emoji-test.txt."""
    from fastweights.data.sources._splits import read_split

    classes, _ = emoji_catalog()
    counts = Counter((e.group, e.subgroup) for e in classes)
    made = build.assign_subgroups(counts, {"train": 0.7, "val": 0.1, "test": 0.2})
    for split, tree in made.items():
        assert read_split("emoji", split) == tree, split


def test_assign_subgroups_is_stratified_by_group():
    counts = {("A", f"a{i}"): 10 for i in range(10)} | {("B", f"b{i}"): 5 for i in range(10)}
    out = build.assign_subgroups(counts, {"train": 0.7, "val": 0.1, "test": 0.2})
    for group in ("A", "B"):
        sizes = {s: len(t.get(group, [])) for s, t in out.items()}
        assert sizes == {"train": 7, "val": 1, "test": 2}
    # the result does not depend on the order of the counts
    assert out == build.assign_subgroups(
        dict(reversed(list(counts.items()))), {"train": 0.7, "val": 0.1, "test": 0.2}
    )


def test_subgroup_missing_from_the_split_lists_is_left_out_with_a_warning(monkeypatch, caplog):
    full = emoji_subgroup_splits()
    monkeypatch.setattr(
        emoji, "emoji_subgroup_splits", lambda: {k: v for k, v in full.items() if k != "face-smiling"}
    )
    with caplog.at_level("WARNING", logger=emoji.__name__):
        pools = load_emoji_images(cache=False, **TINY)
    assert "face-smiling" in caplog.text and "no packaged split" in caplog.text
    assert all("face-smiling" not in p.alphabets for p in pools.values())


def test_undrawable_renders_are_detected():
    assert build.render_emoji(emoji.EMOJI_FONT, "\u0378") is None  # unassigned code point: blank
    assert build.render_emoji(emoji.EMOJI_FONT, "\U0001f600\U0001f600") is None  # two glyphs, no ligature
    one = build.render_emoji(emoji.EMOJI_FONT, "\U0001f600")
    assert one.shape == (build.CANVAS, build.CANVAS, 4) and one.dtype == np.uint8
    assert (one[..., 3] >= 128).sum() > build.MIN_OPAQUE


def test_split_lists_with_a_subgroup_twice_or_a_bad_shape_are_errors(monkeypatch):
    lists = {"train": {"G": ["a", "b"]}, "val": {"G": ["b"]}, "test": {}}
    monkeypatch.setattr(emoji, "read_split", lambda bench, split: lists[split])
    with pytest.raises(ValueError, match="emoji/val.json: subgroup 'b' is already in the train split"):
        emoji_subgroup_splits()
    lists["val"] = ["b"]
    with pytest.raises(ValueError, match=r"emoji/val.json: expected \{group: \[subgroup, \.\.\.\]\}"):
        emoji_subgroup_splits()


def test_near_duplicate_renders_are_dropped_and_distinct_faces_kept():
    def r(text):
        return build.render_emoji(emoji.EMOJI_FONT, text)

    france, st_martin = r("\U0001f1eb\U0001f1f7"), r("\U0001f1f2\U0001f1eb")
    neutral, expressionless = r("\U0001f610"), r("\U0001f611")
    assert build.distinct_renders([france, neutral, st_martin, expressionless]) == [0, 1, 3]
    assert build.distinct_renders([]) == []
