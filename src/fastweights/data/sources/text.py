"""Byte-level language-modelling corpus: encoding, the built-in corpus, user corpora, splits and windows.

Tokens are the bytes of the UTF-8 text (``VOCAB_SIZE = 256``, no special tokens). The built-in corpus
comes from files already on the machine (never a download), in this order of preference:

1. ``"bible-kjv"``: the King James Bible of the Debian package ``bible-kjv`` (the ``bible`` program and
   its compressed ``/usr/lib/bible.data``), dumped with ``bible -p /usr/lib -l 100000 Gen1:1-Rev22:21``:
   a heading line per chapter (``"Genesis 1"``) between blank lines, then one line per verse (``"  1 In
   the beginning God created the heaven and the earth."``); 66 books, 1,189 chapters, 31,102 verses,
   4,298,238 ASCII bytes (the leading blank line is dropped).
2. ``"python-docs"``: the reStructuredText sources of the Python documentation of the Debian package
   ``python3.X-doc`` (``/usr/share/doc/python3.X/html/_sources/**/*.txt``; the running version's first).
3. ``"python-stdlib"``: the ``*.py`` files of the running Python's standard library
   (``sysconfig.get_paths()["stdlib"]``, without ``site-packages``/``dist-packages``), always available.

Files are concatenated in sorted relative-path order with ``"\\n"`` between them. The built corpus is
cached (atomic write) in ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``, keyed by the size and
modification time of its source files.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from fastweights.io import atomic_write_with

from ._cache import cache_key, default_cache_dir, files_fingerprint

__all__ = [
    "VOCAB_SIZE",
    "TEXT_SUFFIXES",
    "encode",
    "decode",
    "default_corpus",
    "load_corpus",
    "split_corpus",
    "sample_windows",
    "eval_windows",
]

log = logging.getLogger(__name__)

VOCAB_SIZE = 256
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".py")
_CACHE_VERSION = 1
_DOC_ROOT = Path("/usr/share/doc")  # python3.X-doc puts its reST sources in python3.X/html/_sources
_BIBLE_EXE = Path("/usr/bin/bible")
_BIBLE_DIR = Path("/usr/lib")  # holds bible.data (the compressed text) and bible.data.conc
_BIBLE_ARGS = ("-l", "100000", "Gen1:1-Rev22:21")  # no pretty-print wrapping; the whole book range
_LAYOUT = "a UTF-8 text file or a folder of text files (*" + ", *".join(TEXT_SUFFIXES) + ")"


def encode(text: str) -> torch.Tensor:
    """The UTF-8 bytes of ``text`` as int64 ``[N]`` token ids in ``[0, 255]`` (``TypeError`` if not str)."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, given {type(text).__name__}")
    raw = text.encode("utf-8")
    if not raw:
        return torch.empty(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)


def decode(ids: torch.Tensor | Sequence[int]) -> str:
    """Text of byte ids (a 1-D integer tensor of any dtype/device, or a sequence of ints).

    Invalid UTF-8 is decoded with ``errors="replace"`` (U+FFFD). Raises ``ValueError`` naming ``ids``
    when it is not 1-D, not integer, or holds a value outside ``[0, 255]``.
    """
    try:
        seq = ids if isinstance(ids, torch.Tensor) else list(ids)
        t = (
            seq
            if isinstance(seq, torch.Tensor)
            else torch.as_tensor(seq)
            if seq
            else torch.empty(0, dtype=torch.int64)
        )
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise ValueError(f"ids: expected a tensor or sequence of byte ids in [0, 255] ({err})") from err
    if t.dim() != 1:
        raise ValueError(f"ids: expected a 1-D sequence of byte ids, given shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"ids: expected integer byte ids, given dtype {t.dtype}")
    if t.numel() == 0:
        return ""
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= VOCAB_SIZE:
        raise ValueError(f"ids: expected byte ids in [0, {VOCAB_SIZE - 1}], given values in [{lo}, {hi}]")
    return t.to(device="cpu", dtype=torch.uint8).numpy().tobytes().decode("utf-8", errors="replace")


def _bible_installed() -> bool:
    return os.access(_BIBLE_EXE, os.X_OK) and (_BIBLE_DIR / "bible.data").is_file()


def _bible_kjv() -> bytes | None:
    """The KJV text from the ``bible`` program, or None when it is not installed or fails."""
    if not _bible_installed():
        return None
    try:  # -p: read the data only from /usr/lib (not the current folder); cwd and env fixed for determinism
        out = subprocess.run(
            [str(_BIBLE_EXE), "-p", str(_BIBLE_DIR), *_BIBLE_ARGS],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            timeout=120,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        log.warning("bible-kjv: the bible program failed (%s); using the next corpus", err)
        return None
    text = out.lstrip(b"\n")
    return text if text.count(b"\n") > 30000 else None  # 31,102 verse lines when complete


def _text_files(root: Path, suffixes: Sequence[str], skip: Sequence[str] = ()) -> list[Path]:
    """Regular files under ``root`` ending in one of ``suffixes``, sorted by relative POSIX path.

    Hidden files/folders (leading ".") and folders named in ``skip`` are ignored; folder links are not
    followed.
    """
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skip]
        for name in files:
            p = Path(folder, name)
            if not name.startswith(".") and name.endswith(tuple(suffixes)) and p.is_file():
                found.append(p)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _join(files: Sequence[Path]) -> bytes:
    return b"\n".join(p.read_bytes() for p in files)


def _pydoc_files() -> list[Path]:
    here = _DOC_ROOT / f"python{sys.version_info.major}.{sys.version_info.minor}" / "html" / "_sources"
    roots = [here] + sorted(p for p in _DOC_ROOT.glob("python3.*/html/_sources") if p != here)
    for root in roots:
        if root.is_dir():
            files = _text_files(root, (".txt",))
            if files:
                return files
    return []


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return _text_files(root, (".py",), skip=("site-packages", "dist-packages", "__pycache__"))


def _cached(
    name: str, fingerprint: object, build: Callable[[], bytes | None], cache_dir: Path | None
) -> bytes | None:
    """``build()`` through the cache file ``<cache_dir>/text-<name>-<key>.txt`` (None: no cache)."""
    path = None
    if cache_dir is not None:
        key = cache_key({"version": _CACHE_VERSION, "name": name, "source": fingerprint})
        path = cache_dir / f"text-{name}-{key}.txt"
        if path.is_file() and path.stat().st_size > 0:
            return path.read_bytes()
    data = build()
    if data and path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_with(path, lambda f: f.write(data), mode=0o644)
        log.info("cached %s (%d bytes)", path, len(data))
    return data


def default_corpus(*, cache_dir: str | os.PathLike | None = None, cache: bool = True) -> tuple[str, bytes]:
    """The built-in corpus as ``(name, bytes)``: ``"bible-kjv"``, else ``"python-docs"``, else
    ``"python-stdlib"`` (see the module docstring for what each is and how it is obtained).

    ``cache_dir`` defaults to ``$FASTWEIGHTS_CACHE`` or ``~/.cache/fastweights``; ``cache=False`` builds
    the text every time and writes nothing. The result is deterministic for given installed files.
    """
    folder = None if not cache else Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if _bible_installed():
        fp = [files_fingerprint([_BIBLE_DIR / "bible.data", _BIBLE_EXE]), list(_BIBLE_ARGS)]
        data = _cached("bible-kjv", fp, _bible_kjv, folder)
        if data:
            return "bible-kjv", data
    for name, files in (("python-docs", _pydoc_files()), ("python-stdlib", _stdlib_files())):
        if files:
            data = _cached(name, files_fingerprint(files), lambda files=files: _join(files), folder)
            if data:
                return name, data
    raise FileNotFoundError("no built-in text corpus found (not even the Python standard library sources)")


def load_corpus(
    path: str | os.PathLike | None, *, cache_dir: str | os.PathLike | None = None
) -> tuple[str, bytes]:
    """The corpus at ``path`` (the ``data.path`` setting) as ``(name, bytes)``; ``name`` is ``str(path)``.

    - ``None``: :func:`default_corpus` (``cache_dir`` is passed on).
    - a file: its bytes, whatever its name.
    - a folder: every regular file under it whose name ends in one of ``TEXT_SUFFIXES`` (``.txt``,
      ``.md``, ``.rst``, ``.py``; HTML and other files are ignored, as are hidden files and folders),
      in sorted relative-path order, joined with ``b"\\n"``.

    Every file must be UTF-8 text (no NUL bytes). Raises ``FileNotFoundError`` when ``path`` does not
    exist and ``ValueError`` when it is an empty string, when a file is not UTF-8 text (naming the file
    and the byte offset), or when the file is empty or the folder holds no non-empty text file; all
    name ``data.path`` and the expected layout.
    """
    if path is None:
        return default_corpus(cache_dir=cache_dir)
    if not str(path).strip():
        raise ValueError(f"data.path: expected {_LAYOUT} (or null for the built-in corpus), given ''")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data.path: expected {_LAYOUT}, given {str(p)!r} (not found)")
    if p.is_dir():
        files = _text_files(p, TEXT_SUFFIXES)
        if not files:
            raise ValueError(f"data.path: expected {_LAYOUT}, given folder {str(p)!r} with no such file")
    elif p.is_file():
        files = [p]
    else:
        raise ValueError(f"data.path: expected {_LAYOUT}, given {str(p)!r} (not a regular file or folder)")
    for f in files:
        _check_utf8_text(f)
    data = _join(files)
    if not data.strip():
        raise ValueError(f"data.path: expected {_LAYOUT}, given {str(p)!r} holding no text (empty)")
    return str(p), data


def _check_utf8_text(path: Path) -> None:
    """Raise ``ValueError`` naming ``data.path`` and ``path`` unless the file is UTF-8 text without NUL
    bytes (binary files, e.g. a checkpoint or an image, are refused rather than trained on)."""
    raw = path.read_bytes()
    nul = raw.find(b"\0")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if nul < 0 or err.start < nul:
            raise ValueError(
                f"data.path: expected UTF-8 text, given {str(path)!r} with a non-UTF-8 byte at offset "
                f"{err.start} (a binary file?)"
            ) from None
    if nul >= 0:
        raise ValueError(
            f"data.path: expected UTF-8 text, given {str(path)!r} with a NUL byte at offset {nul} "
            "(a binary file?)"
        )


def split_corpus(
    data: bytes, valid_fraction: float = 0.05, test_fraction: float = 0.05
) -> dict[str, torch.Tensor]:
    """Fixed byte-offset splits of ``data``: uint8 1-D tensors ``"train"`` (the first bytes), ``"valid"``
    (the next ``int(len * valid_fraction)``) and ``"test"`` (the last ``int(len * test_fraction)``).

    The splits are contiguous views of one buffer; their concatenation is ``data``. Raises
    ``ValueError`` naming the argument when a fraction is not in ``(0, 1)``, when the fractions sum to
    1 or more, or when ``data`` is too short for every split to be non-empty.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"data: expected bytes, given {type(data).__name__}")
    for arg, f in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f < 1.0:
            raise ValueError(f"{arg}: expected a number in (0, 1), given {f!r}")
    if valid_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"valid_fraction + test_fraction: expected < 1, given {valid_fraction} + {test_fraction}"
        )
    n = len(data)
    n_valid, n_test = int(n * valid_fraction), int(n * test_fraction)
    n_train = n - n_valid - n_test
    if min(n_train, n_valid, n_test) < 1:
        raise ValueError(
            f"data: {n} bytes give empty splits (train {n_train}, valid {n_valid}, test {n_test}); "
            "expected a longer corpus or larger fractions"
        )
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return {"train": t[:n_train], "valid": t[n_train : n_train + n_valid], "test": t[n_train + n_valid :]}


def _check_windows(data: torch.Tensor, seq_len: int) -> None:
    if not isinstance(data, torch.Tensor) or data.dim() != 1:
        shape = tuple(data.shape) if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"data: expected a 1-D uint8 tensor of byte ids, given {shape}")
    if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool:
        raise ValueError(f"data: expected an integer (uint8) tensor, given dtype {data.dtype}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len: expected an int >= 1, given {seq_len!r}")
    if data.numel() < seq_len + 1:
        raise ValueError(
            f"data: expected at least seq_len + 1 = {seq_len + 1} bytes, given {data.numel()}; "
            "use a shorter seq_len or a longer corpus/split"
        )


def sample_windows(
    data: torch.Tensor, seq_len: int, batch_size: int, generator: torch.Generator
) -> torch.Tensor:
    """``batch_size`` windows of ``seq_len + 1`` consecutive bytes at uniform random start offsets.

    ``data``: 1-D integer (uint8) tensor. Returns int64 ``[batch_size, seq_len + 1]`` on ``data``'s
    device: inputs are ``[:, :-1]``, targets ``[:, 1:]``. Start offsets are drawn with ``generator`` (on
    any device), so a seeded generator gives the same batch. Raises ``ValueError`` naming the
    argument for a bad ``data``/``seq_len``/``batch_size`` or when ``data`` is shorter than
    ``seq_len + 1``.
    """
    _check_windows(data, seq_len)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, given {batch_size!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator: expected a torch.Generator, given {type(generator).__name__}")
    n_starts = data.numel() - seq_len
    starts = torch.randint(0, n_starts, (batch_size,), generator=generator, device=generator.device)
    idx = starts.to(data.device)[:, None] + torch.arange(seq_len + 1, device=data.device)
    return data[idx].to(torch.int64)


def eval_windows(data: torch.Tensor, seq_len: int, max_windows: int | None = None) -> torch.Tensor:
    """Deterministic evaluation windows from the start of ``data``: int64 ``[N, seq_len + 1]``.

    Window ``i`` is ``data[i * seq_len : (i + 1) * seq_len + 1]`` (stride ``seq_len``): consecutive
    windows share one byte, the last target of one being the first input of the next, so the targets
    ``[:, 1:]`` tile ``data[1 : N * seq_len + 1]`` without gaps or overlap (every byte after the first is
    scored exactly once, and a model state can be carried from one window to the next). ``N =
    (len(data) - 1) // seq_len``, capped at ``max_windows``; the remaining tail is dropped. Raises
    ``ValueError`` naming the argument for a bad ``data``/``seq_len``/``max_windows`` or when ``data``
    is shorter than ``seq_len + 1``.
    """
    _check_windows(data, seq_len)
    n = (data.numel() - 1) // seq_len
    if max_windows is not None:
        if isinstance(max_windows, bool) or not isinstance(max_windows, int) or max_windows < 1:
            raise ValueError(f"max_windows: expected None or an int >= 1, given {max_windows!r}")
        n = min(n, max_windows)
    return data[: n * seq_len + 1].unfold(0, seq_len + 1, seq_len).to(torch.int64)
