from __future__ import annotations

import pickle

import numpy as np
import pytest
from PIL import Image

from fastweights.data.sources._decode import load_pickle, read_image


def test_read_image(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "x.png")
    np.testing.assert_array_equal(read_image(tmp_path / "x.png", rgb=True), rgb)
    gray = read_image(tmp_path / "x.png", rgb=False)
    assert gray.shape == (6, 5) and gray.dtype == np.uint8
    with pytest.raises(FileNotFoundError, match="y.png"):
        read_image(tmp_path / "y.png", rgb=True)
    (tmp_path / "z.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(ValueError, match="z.png: expected an image Pillow can decode"):
        read_image(tmp_path / "z.png", rgb=True)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_load_pickle_arrays_and_bytes_keys(tmp_path, protocol):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    obj = {b"data": arr, b"names": [b"apple", b"aquarium_fish"], "n": 3, b"nested": {b"k": [1, 2]}}
    (tmp_path / "p").write_bytes(pickle.dumps(obj, protocol=protocol))
    got = load_pickle(tmp_path / "p")
    assert set(got) == {"data", "names", "n", "nested"} and got["names"] == ["apple", "aquarium_fish"]
    assert got["nested"] == {"k": [1, 2]}
    np.testing.assert_array_equal(got["data"], arr)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_load_pickle_refuses_code_and_non_dicts(tmp_path, capsys):
    (tmp_path / "evil").write_bytes(pickle.dumps({"x": _Evil()}))
    with pytest.raises(ValueError, match="evil: expected a pickled dict of numpy arrays.*builtins.print"):
        load_pickle(tmp_path / "evil")
    assert "pwned" not in capsys.readouterr().out
    (tmp_path / "list").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(ValueError, match="expected a pickled dict, given list"):
        load_pickle(tmp_path / "list")
    with pytest.raises(FileNotFoundError, match="nothing"):
        load_pickle(tmp_path / "nothing")
