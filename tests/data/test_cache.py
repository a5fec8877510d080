from __future__ import annotations

import numpy as np

from fastweights.data.sources._cache import cache_key, default_cache_dir, files_fingerprint, load_or_build_npz


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FASTWEIGHTS_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("FASTWEIGHTS_CACHE")
    assert default_cache_dir().parts[-2:] == (".cache", "fastweights")


def test_load_or_build_npz(tmp_path):
    builds = []

    def build():
        builds.append(1)
        return {"a": np.arange(3), "names": np.array(["x", "yy"])}

    path = tmp_path / "sub" / "entry.npz"
    first = load_or_build_npz(path, build)
    second = load_or_build_npz(path, build)
    assert len(builds) == 1 and list(second["names"]) == ["x", "yy"]
    np.testing.assert_array_equal(first["a"], second["a"])
    assert [p.name for p in path.parent.iterdir()] == ["entry.npz"]  # no temporary file left
    path.write_bytes(b"corrupt")
    load_or_build_npz(path, build)
    assert len(builds) == 2 and np.load(path)["a"].tolist() == [0, 1, 2]
    load_or_build_npz(None, build)
    assert len(builds) == 3


def test_fingerprint_and_key(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"1")
    key = cache_key({"files": files_fingerprint([f]), "size": 28})
    assert key == cache_key({"size": 28, "files": files_fingerprint([f])}) and len(key) == 16
    f.write_bytes(b"12")
    assert cache_key({"files": files_fingerprint([f]), "size": 28}) != key
