from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastweights.data.sources import text as T
from fastweights.data.sources.text import (
    VOCAB_SIZE,
    decode,
    default_corpus,
    encode,
    eval_windows,
    load_corpus,
    sample_windows,
    split_corpus,
)


def test_encode_decode_round_trip():
    s = "Hello, wörld — 日本語 🙂\n\ttabs"
    ids = encode(s)
    assert ids.dtype == torch.int64 and ids.dim() == 1 and len(ids) == len(s.encode("utf-8"))
    assert int(ids.min()) >= 0 and int(ids.max()) < VOCAB_SIZE == 256
    assert decode(ids) == s and decode(ids.tolist()) == s and decode(ids.to(torch.uint8)) == s
    assert encode("").shape == (0,) and decode([]) == "" and decode(torch.empty(0, dtype=torch.int64)) == ""
    with pytest.raises(TypeError, match="text"):
        encode(b"bytes")  # type: ignore[arg-type]


def test_decode_invalid_bytes_and_errors():
    assert decode([0xFF, 0x41, 0xC3]) == "\ufffdA\ufffd"
    with pytest.raises(ValueError, match=r"ids: .*\[0, 255\].*\[0, 256\]"):
        decode([0, 256])
    with pytest.raises(ValueError, match="ids"):
        decode(torch.tensor([-1, 3]))
    with pytest.raises(ValueError, match="ids.*1-D"):
        decode(torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="ids.*dtype"):
        decode(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="ids"):
        decode([2**70])


def test_load_corpus_file(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("ab\nçd\n", encoding="utf-8")
    name, data = load_corpus(f)
    assert name == str(f) and data == "ab\nçd\n".encode()
    assert load_corpus(str(f))[1] == data


def test_load_corpus_folder_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "b" / "z.txt").write_bytes(b"BZ")
    (tmp_path / "a.md").write_bytes(b"A")
    (tmp_path / "b.rst").write_bytes(b"B")
    (tmp_path / "c.py").write_bytes(b"C")
    (tmp_path / "skip.html").write_bytes(b"<p>no</p>")
    (tmp_path / "skip.bin").write_bytes(b"\x00")
    (tmp_path / ".hidden" / "h.txt").write_bytes(b"H")
    (tmp_path / ".h.txt").write_bytes(b"H")
    name, data = load_corpus(tmp_path)
    # sorted by relative path: a.md, b.rst, b/z.txt, c.py
    assert name == str(tmp_path) and data == b"A\nB\nBZ\nC"
    assert load_corpus(tmp_path)[1] == data


def test_load_corpus_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data\.path.*text file or a folder.*\*\.txt.*not found"):
        load_corpus(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"data\.path.*empty"):
        load_corpus(empty)
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ValueError, match=r"data\.path.*\*\.txt.*no such file"):
        load_corpus(folder)
    (folder / "x.html").write_bytes(b"<p>x</p>")
    with pytest.raises(ValueError, match=r"data\.path"):
        load_corpus(folder)
    (folder / "e.txt").write_bytes(b"\n")
    with pytest.raises(ValueError, match=r"data\.path.*empty"):
        load_corpus(folder)


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (b"text\x00\x01binary", r"NUL byte at offset 4"),
        (b"caf\xe9 latin-1", r"non-UTF-8 byte at offset 3"),
        (bytes(range(256)), r"NUL byte at offset 0"),
        (b"ok\xff\x00", r"non-UTF-8 byte at offset 2"),
    ],
)
def test_load_corpus_refuses_binary_and_non_utf8(tmp_path, content, what):
    f = tmp_path / "c.txt"
    f.write_bytes(content)
    with pytest.raises(ValueError, match=rf"data\.path: expected UTF-8 text, given .*c\.txt.*{what}"):
        load_corpus(f)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ok.txt").write_text("fine")
    (folder / "bad.md").write_bytes(content)
    with pytest.raises(ValueError, match=r"data\.path: .*bad\.md"):
        load_corpus(folder)


def test_load_corpus_empty_string_is_not_the_current_folder():
    with pytest.raises(ValueError, match=r"data\.path: .*null for the built-in corpus.*given ''"):
        load_corpus("")


def test_split_corpus():
    data = bytes(range(256)) * 4  # 1024 bytes
    s = split_corpus(data, valid_fraction=0.1, test_fraction=0.05)
    assert list(s) == ["train", "valid", "test"]
    assert [len(s[k]) for k in s] == [1024 - 102 - 51, 102, 51]
    assert all(t.dtype == torch.uint8 and t.dim() == 1 for t in s.values())
    assert torch.cat(list(s.values())).numpy().tobytes() == data
    assert bytes(s["test"].tolist()) == data[-51:]
    d = split_corpus(data)
    assert [len(d[k]) for k in d] == [1024 - 51 - 51, 51, 51]


def test_split_corpus_errors():
    data = b"x" * 100
    for kw, arg in [
        ({"valid_fraction": 0.0}, "valid_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"valid_fraction": -0.1}, "valid_fraction"),
        ({"valid_fraction": True}, "valid_fraction"),
    ]:
        with pytest.raises(ValueError, match=arg):
            split_corpus(data, **kw)
    with pytest.raises(ValueError, match="valid_fraction \\+ test_fraction"):
        split_corpus(data, 0.5, 0.5)
    with pytest.raises(ValueError, match="data: 10 bytes give empty splits"):
        split_corpus(b"x" * 10)
    with pytest.raises(TypeError, match="data"):
        split_corpus("text")  # type: ignore[arg-type]


def _data(n: int = 500) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64).remainder(256).to(torch.uint8)


def test_sample_windows():
    data = _data()
    w = sample_windows(data, 16, 8, torch.Generator().manual_seed(0))
    assert w.shape == (8, 17) and w.dtype == torch.int64
    assert int(w.min()) >= 0 and int(w.max()) < 256
    # each row is a run of consecutive bytes of data
    starts = w[:, 0]
    for row, s in zip(w, starts, strict=True):
        assert torch.equal(row, data[int(s) : int(s) + 17].long())
    again = sample_windows(data, 16, 8, torch.Generator().manual_seed(0))
    other = sample_windows(data, 16, 8, torch.Generator().manual_seed(1))
    assert torch.equal(w, again) and not torch.equal(w, other)
    # exactly seq_len + 1 bytes: the only window is the whole data
    tiny = _data(17)
    assert torch.equal(sample_windows(tiny, 16, 3, torch.Generator()), tiny.long().expand(3, 17))


def test_sample_windows_covers_the_end():
    data = _data(20)
    w = sample_windows(data, 4, 2000, torch.Generator().manual_seed(0))
    assert set(w[:, 0].tolist()) == set(range(16))  # every start 0..len-seq_len-1 is drawn


def test_eval_windows():
    data = _data(100)
    w = eval_windows(data, 10)
    assert w.shape == (9, 11) and w.dtype == torch.int64  # (100 - 1) // 10
    assert torch.equal(w, eval_windows(data, 10))
    # inputs and targets each tile the data without gaps or overlap; stride seq_len
    assert torch.equal(w[:, 1:].reshape(-1), data[1:91].long())
    assert torch.equal(w[:, :-1].reshape(-1), data[:90].long())
    assert torch.equal(w[1:, 0], w[:-1, -1])
    assert eval_windows(data, 10, max_windows=3).shape == (3, 11)
    assert torch.equal(eval_windows(data, 10, max_windows=50), w)
    assert eval_windows(_data(11), 10).shape == (1, 11)


def test_window_errors():
    g = torch.Generator()
    with pytest.raises(ValueError, match=r"data: expected at least seq_len \+ 1 = 11 bytes, given 10"):
        eval_windows(_data(10), 10)
    with pytest.raises(ValueError, match="data: expected at least"):
        sample_windows(_data(10), 10, 2, g)
    with pytest.raises(ValueError, match="seq_len"):
        sample_windows(_data(), 0, 2, g)
    with pytest.raises(ValueError, match="batch_size"):
        sample_windows(_data(), 4, 0, g)
    with pytest.raises(ValueError, match="generator"):
        sample_windows(_data(), 4, 2, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_windows"):
        eval_windows(_data(), 4, max_windows=0)
    with pytest.raises(ValueError, match="data.*1-D"):
        eval_windows(_data().reshape(2, -1), 4)
    with pytest.raises(ValueError, match="data.*dtype"):
        eval_windows(torch.zeros(50), 4)


@pytest.mark.skipif(not T._bible_installed(), reason="Debian package bible-kjv not installed")
def test_default_corpus_bible(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTWEIGHTS_CACHE", str(tmp_path))
    name, data = default_corpus()
    assert name == "bible-kjv"
    assert data.startswith(b"Genesis 1\n\n  1 In the beginning God created the heaven and the earth.\n")
    assert data.endswith(b"  21 The grace of our Lord Jesus Christ be with you all. Amen.\n")
    lines = data.split(b"\n")
    assert sum(line.startswith(b"  ") for line in lines) == 31102  # verses
    cached = list(tmp_path.glob("text-bible-kjv-*.txt"))
    assert len(cached) == 1 and cached[0].read_bytes() == data
    monkeypatch.setattr(T, "_bible_kjv", lambda: pytest.fail("cache not used"))
    assert default_corpus() == (name, data)
    assert load_corpus(None, cache_dir=tmp_path) == (name, data)


def test_default_corpus_fallbacks(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "_BIBLE_EXE", tmp_path / "no-bible")
    docs = tmp_path / "doc"
    src = docs / "python3.11" / "html" / "_sources"
    (src / "library").mkdir(parents=True)
    (src / "library" / "os.rst.txt").write_bytes(b"os\n==\n")
    (src / "about.rst.txt").write_bytes(b"About\n")
    (docs / "python3.11" / "html" / "index.html").write_bytes(b"<html></html>")
    monkeypatch.setattr(T, "_DOC_ROOT", docs)
    cache = tmp_path / "cache"
    assert default_corpus(cache_dir=cache) == ("python-docs", b"About\n\nos\n==\n")
    assert len(list(cache.glob("text-python-docs-*.txt"))) == 1
    assert default_corpus(cache=False) == ("python-docs", b"About\n\nos\n==\n")

    monkeypatch.setattr(T, "_DOC_ROOT", tmp_path / "no-docs")
    lib = tmp_path / "lib"
    (lib / "site-packages" / "pkg").mkdir(parents=True)
    (lib / "json").mkdir()
    (lib / "json" / "__init__.py").write_bytes(b"J")
    (lib / "abc.py").write_bytes(b"A")
    (lib / "site-packages" / "pkg" / "x.py").write_bytes(b"X")
    monkeypatch.setattr(T.sysconfig, "get_paths", lambda: {"stdlib": str(lib)})
    assert default_corpus(cache=False) == ("python-stdlib", b"A\nJ")


def test_stdlib_files_real():
    files = T._stdlib_files()
    assert len(files) > 100 and all(p.suffix == ".py" for p in files)
    assert not any("site-packages" in p.parts for p in files)
    root = Path(T.sysconfig.get_paths()["stdlib"])
    rel = [p.relative_to(root).as_posix() for p in files]
    assert rel == sorted(rel) and "os.py" in rel


def test_decode_rejects_float_ids_given_as_a_list():
    with pytest.raises(ValueError, match="ids: expected integer byte ids"):
        decode([65.7, 66.2])
