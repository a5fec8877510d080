from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from fastweights.cl.tasks import to_model_images
from fastweights.data.episodes import EpisodeSampler
from fastweights.data.sources import miniimagenet
from fastweights.data.sources.base import channel_stats
from fastweights.data.sources.miniimagenet import load_mini_imagenet
from tests.data.formats import write_mini_imagenet_csv, write_mini_imagenet_pkl

WNIDS = {
    "train": ["n01532829", "n01558993", "n01704323"],
    "val": ["n01855672", "n02091244"],
    "test": ["n01930112", "n01981276"],
}


def resized_chw(img: np.ndarray, size: int) -> np.ndarray:
    return np.asarray(Image.fromarray(img).resize((size, size), Image.Resampling.BILINEAR)).transpose(2, 0, 1)


def test_csv_layout(tmp_path):
    decoded = write_mini_imagenet_csv(tmp_path, WNIDS, per_class=3, size=20)
    pools = load_mini_imagenet(tmp_path, image_size=16, cache_dir=tmp_path / "cache")
    assert list(pools) == ["train", "val", "test"]
    for split, wnids in WNIDS.items():
        pool = pools[split]
        assert pool.name == f"Mini-ImageNet/{split}" and pool.channels == 3
        assert pool.images.shape == (len(wnids), 3, 3, 16, 16) and pool.images.dtype == np.uint8
        assert pool.class_names == pool.alphabets == wnids
        for c, wnid in enumerate(wnids):
            for i, img in enumerate(decoded[split][wnid]):
                np.testing.assert_array_equal(pool.images[c, i], resized_chw(img, 16))
        means, stds = channel_stats(pools["train"].images)
        assert pool.mean == pytest.approx(means) and pool.std == pytest.approx(stds)
        assert isinstance(pool.mean, tuple) and len(pool.mean) == 3


def test_csv_cache_skips_decoding(tmp_path, monkeypatch):
    write_mini_imagenet_csv(tmp_path / "mini-imagenet", WNIDS, per_class=2)  # subfolder accepted
    first = load_mini_imagenet(tmp_path, image_size=8, cache_dir=tmp_path / "cache")

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although cached")

    monkeypatch.setattr(miniimagenet, "read_image", no_decoding)
    again = load_mini_imagenet(tmp_path, image_size=8, cache_dir=tmp_path / "cache")
    np.testing.assert_array_equal(first["test"].images, again["test"].images)
    assert len(list((tmp_path / "cache").glob("mini_imagenet-*.npz"))) == 1
    with pytest.raises(AssertionError, match="decoded although cached"):  # another size: another entry
        load_mini_imagenet(tmp_path, image_size=12, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("size", [84, 32])
def test_pickle_layout(tmp_path, size):
    written = write_mini_imagenet_pkl(tmp_path, WNIDS, per_class=2)
    assert (tmp_path / "mini-imagenet-cache-validation.pkl").is_file()
    pools = load_mini_imagenet(tmp_path, image_size=size, cache=False)
    for split, (data, class_dict) in written.items():
        pool = pools[split]
        assert pool.class_names == sorted(class_dict) and pool.images.shape == (
            len(class_dict),
            2,
            3,
            size,
            size,
        )
        for c, wnid in enumerate(sorted(class_dict)):
            for i, row in enumerate(class_dict[wnid]):
                np.testing.assert_array_equal(pool.images[c, i], resized_chw(data[row], size))


def test_rgb_episodes_and_model_inputs(tmp_path):
    write_mini_imagenet_pkl(tmp_path, WNIDS, per_class=4, size=16)
    pool = load_mini_imagenet(tmp_path, image_size=16, cache=False)["train"]
    (e,) = EpisodeSampler(pool).sample(
        np.random.default_rng(0), batch_size=2, num_tasks=1, n_way=3, k_shot=2, n_query=2
    )
    assert e.support_images.shape == (2, 6, 3, 16, 16) and e.query_images.shape == (2, 6, 3, 16, 16)
    x = to_model_images(e.support_images, pool.mean, pool.std, "cpu", torch.float64, channels=pool.channels)
    assert x.shape == (2, 6, 3, 16, 16)
    for c in range(3):
        np.testing.assert_allclose(
            x[:, :, c].numpy(), (e.support_images[:, :, c] / 255.0 - pool.mean[c]) / pool.std[c], rtol=1e-12
        )
    whole = to_model_images(pool.images, pool.mean, pool.std, "cpu", torch.float64, channels=3)
    np.testing.assert_allclose(whole.mean(dim=(0, 1, 3, 4)).numpy(), 0.0, atol=1e-9)  # train statistics
    np.testing.assert_allclose(whole.std(dim=(0, 1, 3, 4), unbiased=False).numpy(), 1.0, atol=1e-9)


def test_duplicate_image_across_splits_raises(tmp_path):
    written = write_mini_imagenet_pkl(tmp_path, WNIDS, per_class=2, size=8)
    data, class_dict = written["test"]
    data[class_dict["n01981276"][1]] = written["train"][0][written["train"][1]["n01704323"][0]]
    with open(tmp_path / "mini-imagenet-cache-test.pkl", "wb") as f:
        pickle.dump({"image_data": data, "class_dict": class_dict}, f)
    with pytest.raises(ValueError, match="no image in two splits") as err:
        load_mini_imagenet(tmp_path, image_size=8, cache=False)
    assert "train:n01704323 ~ test:n01981276" in str(err.value)


def test_shared_class_raises(tmp_path):
    write_mini_imagenet_csv(
        tmp_path, {**WNIDS, "val": [*WNIDS["val"], WNIDS["test"][0]]}, per_class=2, size=8
    )
    with pytest.raises(ValueError, match="disjoint classes.*val:n01930112 = test:n01930112"):
        load_mini_imagenet(tmp_path, image_size=8, cache=False)


def test_missing_folder_names_the_layouts(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_mini_imagenet(tmp_path / "nowhere", cache=False)
    msg = str(err.value)
    for part in (
        "train.csv",
        "images/",
        "mini-imagenet-cache-train.pkl",
        str(tmp_path / "nowhere" / "miniimagenet"),
    ):
        assert part in msg
    write_mini_imagenet_csv(tmp_path, WNIDS, per_class=2, size=8)
    missing = sorted((tmp_path / "images").glob("n01855672*"))[0]
    missing.unlink()
    with pytest.raises(FileNotFoundError, match="expected the image") as err:
        load_mini_imagenet(tmp_path, cache=False)
    assert str(missing) in str(err.value)


def test_malformed_files(tmp_path):
    write_mini_imagenet_csv(tmp_path / "csv", WNIDS, per_class=2, size=8)
    jpg = sorted((tmp_path / "csv" / "images").glob("*.jpg"))[0]
    jpg.write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(ValueError, match="Pillow can decode") as err:
        load_mini_imagenet(tmp_path / "csv", cache=False)
    assert str(jpg) in str(err.value)
    (tmp_path / "csv" / "val.csv").write_text("name;label\nx.jpg;n0\n")
    with pytest.raises(ValueError, match="expected the header 'filename,label'") as err:
        load_mini_imagenet(tmp_path / "csv", cache=False)
    assert str(tmp_path / "csv" / "val.csv") in str(err.value)

    pkl = tmp_path / "pkl"
    pkl.mkdir()
    write_mini_imagenet_pkl(pkl, WNIDS, per_class=2, size=8)
    with open(pkl / "mini-imagenet-cache-train.pkl", "wb") as f:
        pickle.dump({"images": np.zeros((2, 8, 8, 3), np.uint8)}, f)
    with pytest.raises(ValueError, match="'image_data' uint8 \\[N, H, W, 3\\] and 'class_dict'"):
        load_mini_imagenet(pkl, cache=False)
    with open(pkl / "mini-imagenet-cache-train.pkl", "wb") as f:
        pickle.dump({"image_data": np.zeros((2, 8, 8, 3), np.uint8), "class_dict": {"n0": [0, 5]}}, f)
    with pytest.raises(ValueError, match="class_dict\\['n0'\\] to be indices in \\[0, 2\\)"):
        load_mini_imagenet(pkl, cache=False)
    with open(pkl / "mini-imagenet-cache-train.pkl", "wb") as f:
        pickle.dump({"image_data": os.getcwd, "class_dict": {}}, f)  # a global that is not numpy
    with pytest.raises(ValueError, match="pickled dict of numpy arrays"):
        load_mini_imagenet(pkl, cache=False)


def test_uneven_class_sizes(tmp_path):
    write_mini_imagenet_pkl(tmp_path, WNIDS, per_class=3, size=8)
    with open(tmp_path / "mini-imagenet-cache-test.pkl", "rb") as f:
        d = pickle.load(f)
    d["class_dict"]["n01930112"] = d["class_dict"]["n01930112"][:2]
    with open(tmp_path / "mini-imagenet-cache-test.pkl", "wb") as f:
        pickle.dump(d, f)
    with pytest.raises(ValueError, match="same number of images in every class.*n01981276 \\(3\\)"):
        load_mini_imagenet(tmp_path, image_size=8, cache=False)
