from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources import omniglot
from fastweights.data.sources.base import pixel_stats
from fastweights.data.sources.omniglot import load_omniglot, omniglot_split
from tests.data.formats import ink, split_tree, write_omniglot_hdf5, write_omniglot_pngs

# A few characters of the real Vinyals split (Gurmukhi straddles train and test).
CHARS = {
    "train": [
        ("background", "Alphabet_of_the_Magi", "character01"),
        ("background", "Alphabet_of_the_Magi", "character02"),
        ("evaluation", "Gurmukhi", "character01"),
    ],
    "val": [("background", "Armenian", "character01"), ("background", "Armenian", "character02")],
    "test": [("evaluation", "Gurmukhi", "character42"), ("evaluation", "ULOG", "character26")],
}
SPLITS = {s: split_tree(c) for s, c in CHARS.items()}
ALL = [c for cs in CHARS.values() for c in cs]


def expected_image(mask: np.ndarray, size: int) -> np.ndarray:
    """White ink (255) on black, resized with PIL's bilinear filter."""
    return np.asarray(
        Image.fromarray(mask.astype(np.uint8) * 255).resize((size, size), Image.Resampling.BILINEAR)
    )


def test_packaged_vinyals_split():
    splits = {s: omniglot_split(s) for s in ("train", "val", "test")}
    assert [len(v) for v in splits.values()] == [1028, 172, 423]
    assert [len({a for _, a, _ in v}) for v in splits.values()] == [33, 5, 13]
    sets = [set(v) for v in splits.values()]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    gurmukhi = [sum(a == "Gurmukhi" for _, a, _ in v) for v in splits.values()]
    assert gurmukhi == [41, 0, 4]  # straddles train/test at character level
    for split, chars in CHARS.items():
        assert set(chars) <= set(splits[split])
    assert sum(len(v) for v in splits.values()) == 1623


@pytest.fixture()
def png_root(tmp_path):
    masks = write_omniglot_pngs(tmp_path / "data", ALL, drawers=2)
    return tmp_path / "data", masks


def test_png_layout(png_root, tmp_path):
    root, masks = png_root
    pools = load_omniglot(root, image_size=28, splits=SPLITS, cache_dir=tmp_path / "cache")
    assert list(pools) == ["train", "val", "test"]
    for split, chars in CHARS.items():
        pool = pools[split]
        assert pool.name == f"Omniglot/{split}" and pool.channels == 1
        assert pool.images.shape == (len(chars), 2, 28, 28) and pool.images.dtype == np.uint8
        assert pool.class_names == [f"{a}/{c}" for _, a, c in chars]
        assert pool.alphabets == [a for _, a, _ in chars]
        for i, ch in enumerate(chars):
            for d in range(2):
                np.testing.assert_array_equal(pool.images[i, d], expected_image(masks[ch][d], 28))
        assert np.median(pool.images) == 0 and pool.images.max() == 255  # white ink on black
        assert (pool.mean, pool.std) == pytest.approx(pixel_stats(pools["train"].images))  # train statistics
    assert pools["test"].alphabets[0] == pools["train"].alphabets[2] == "Gurmukhi"


def test_hdf5_layout_matches_pngs(png_root, tmp_path):
    root, masks = png_root
    write_omniglot_hdf5(tmp_path / "h5", masks)
    from_png = load_omniglot(root, image_size=20, splits=SPLITS, cache=False)
    from_h5 = load_omniglot(tmp_path / "h5", image_size=20, splits=SPLITS, cache=False)
    for split in CHARS:
        np.testing.assert_array_equal(from_png[split].images, from_h5[split].images)
        assert from_png[split].class_names == from_h5[split].class_names
        assert from_png[split].mean == from_h5[split].mean


def test_full_vinyals_split_from_hdf5(tmp_path):
    import h5py

    path = tmp_path / "omniglot" / "data.hdf5"
    path.parent.mkdir()
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        for split in ("train", "val", "test"):
            for group, alphabet, character in omniglot_split(split):
                bits = rng.integers(0, 2, (1, 12, 12), dtype=np.uint8) * 255
                f.create_dataset(f"images_{group}/{alphabet}/{character}", data=bits)
        f.create_dataset(
            "images_background/Extra/character99", data=np.zeros((1, 12, 12), np.uint8)
        )  # unlisted
    pools = load_omniglot(tmp_path, image_size=8, cache=False)
    assert {s: p.images.shape for s, p in pools.items()} == {
        "train": (1028, 1, 8, 8),
        "val": (172, 1, 8, 8),
        "test": (423, 1, 8, 8),
    }
    assert sum(a == "Gurmukhi" for a in pools["test"].alphabets) == 4
    assert EpisodeSampler(pools["test"], rotations=True).num_classes == 4 * 423


def test_rotated_episodes(png_root):
    root, _ = png_root
    pool = load_omniglot(root, splits=SPLITS, cache=False)["train"]
    (e,) = EpisodeSampler(pool, rotations=True).sample(
        np.random.default_rng(0), batch_size=4, num_tasks=1, n_way=3, k_shot=1, n_query=1
    )
    assert e.support_images.shape == (4, 3, 28, 28) and e.query_images.shape == (4, 3, 28, 28)


def test_cache_is_reused_and_invalidated(png_root, tmp_path, monkeypatch):
    root, masks = png_root
    cache = tmp_path / "cache"
    first = load_omniglot(root, splits=SPLITS, cache_dir=cache)
    assert len(list(cache.glob("omniglot-*.npz"))) == 1

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although cached")

    monkeypatch.setattr(omniglot, "read_image", no_decoding)
    again = load_omniglot(root, splits=SPLITS, cache_dir=cache)
    np.testing.assert_array_equal(first["val"].images, again["val"].images)
    monkeypatch.undo()
    # rewriting a drawing changes the files' fingerprint -> rebuilt, new content
    group, alphabet, character = CHARS["val"][0]
    png = sorted((root / "omniglot-py" / f"images_{group}" / alphabet / character).glob("*.png"))[0]
    Image.fromarray(np.where(ink(999), 0, 255).astype(np.uint8)).convert("1").save(png)
    rebuilt = load_omniglot(root, splits=SPLITS, cache_dir=cache)
    np.testing.assert_array_equal(rebuilt["val"].images[0, 0], expected_image(ink(999), 28))
    assert len(list(cache.glob("omniglot-*.npz"))) == 2


def test_duplicate_drawing_across_splits_raises(tmp_path):
    masks = write_omniglot_pngs(tmp_path, ALL, drawers=2)
    src = sorted((tmp_path / "omniglot-py/images_background/Alphabet_of_the_Magi/character02").glob("*.png"))[
        1
    ]
    dst = sorted((tmp_path / "omniglot-py/images_evaluation/ULOG/character26").glob("*.png"))[0]
    dst.write_bytes(src.read_bytes())
    assert masks  # written
    with pytest.raises(ValueError, match="no image in two splits") as err:
        load_omniglot(tmp_path, splits=SPLITS, cache=False)
    assert "train:Alphabet_of_the_Magi/character02" in str(err.value)
    assert "test:ULOG/character26" in str(err.value)


def test_shared_character_raises(png_root):
    root, _ = png_root
    splits = {**SPLITS, "val": split_tree([*CHARS["val"], CHARS["train"][0]])}
    with pytest.raises(ValueError, match="disjoint classes") as err:
        load_omniglot(root, splits=splits, cache=False)
    assert "train:Alphabet_of_the_Magi/character01 = val:Alphabet_of_the_Magi/character01" in str(err.value)


def test_missing_folder_names_the_layouts(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_omniglot(tmp_path / "nowhere", cache=False)
    msg = str(err.value)
    assert str(tmp_path / "nowhere" / "omniglot-py" / "images_background") in msg
    assert str(tmp_path / "nowhere" / "omniglot" / "data.hdf5") in msg
    write_omniglot_pngs(tmp_path, ALL[:-1])  # ULOG/character26 missing
    with pytest.raises(FileNotFoundError, match="ULOG/character26") as err:
        load_omniglot(tmp_path, splits=SPLITS, cache=False)
    assert str(tmp_path / "omniglot-py" / "images_evaluation" / "ULOG" / "character26") in str(err.value)


def test_malformed_files(png_root, tmp_path):
    root, masks = png_root
    bad_png = sorted((root / "omniglot-py/images_background/Armenian/character01").glob("*.png"))[0]
    bad_png.write_bytes(b"not a png")
    with pytest.raises(ValueError, match="expected an image Pillow can decode") as err:
        load_omniglot(root, splits=SPLITS, cache=False)
    assert str(bad_png) in str(err.value)
    h5 = tmp_path / "h5" / "omniglot" / "data.hdf5"
    h5.parent.mkdir(parents=True)
    h5.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="expected an HDF5 file") as err:
        load_omniglot(tmp_path / "h5", splits=SPLITS, cache=False)
    assert str(h5) in str(err.value)
    write_omniglot_hdf5(tmp_path / "h5", {c: m for c, m in masks.items() if c != CHARS["val"][1]})
    with pytest.raises(ValueError, match="images_background/Armenian/character02"):
        load_omniglot(tmp_path / "h5", splits=SPLITS, cache=False)
    with pytest.raises(ValueError, match="splits\\['val'\\]: expected"):
        load_omniglot(root, splits={**SPLITS, "val": ["Armenian/character01"]}, cache=False)
    with pytest.raises(ValueError, match="image_size"):
        load_omniglot(root, image_size=2, splits=SPLITS, cache=False)


def test_uneven_drawing_counts(tmp_path):
    write_omniglot_pngs(tmp_path, ALL, drawers=2)
    write_omniglot_pngs(tmp_path / "more", CHARS["val"][:1], drawers=3)
    extra = tmp_path / "more/omniglot-py/images_background/Armenian/character01"
    for p in extra.glob("*.png"):
        p.rename(tmp_path / "omniglot-py/images_background/Armenian/character01" / f"x{p.name}")
    with pytest.raises(ValueError, match="same number of images in every class"):
        load_omniglot(tmp_path, splits=SPLITS, cache=False)
