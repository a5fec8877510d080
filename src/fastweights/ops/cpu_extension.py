"""Build and load the package's compiled CPU kernels (``csrc/<stem>.cpp``), one torch extension each.

Each kernel is built on first use with ``torch.utils.cpp_extension.load`` (a C++ compiler and ninja are
needed; ~30 s once) into ``$TORCH_EXTENSIONS_DIR/<name>`` or ``~/.cache/fastweights/extensions/<name>``,
the name hashed from the CPU model and its ISA flags (``-march=native``), the compiler flags, the source
and the torch installation it compiles against (its version and folder: the build file names that
torch's headers, so two virtualenvs sharing one folder would rebuild each other's kernel at every
switch); it is compiled from a copy of the source in that folder, so every install of the package at
another path with the same torch (a wheel, a checkout) shares one build; ``scripts/setup.sh`` builds
them. When a kernel cannot be built, one line is logged and its op uses PyTorch instead. Builds are
serialised by an OS file lock (``filelock``), which the kernel releases when a process dies; holding it,
a build removes the baton file that torch's own builder leaves behind when a process is killed mid-build
(torch would wait for it forever).

``FASTWEIGHTS_CPU_KERNEL=0`` (read at every call of :meth:`CpuExtension.enabled`) turns every compiled
kernel off.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FLAGS", "CpuExtension", "package_ninja_dir"]

_BUILD_TIMEOUT_S = 900  # waiting for another process's build
# -fassociative-math lets the compiler vectorise the dot products (sums in another order: fp64 results
# equal the references to ~1e-15); the public ops reject NaN/Inf inputs, so no finite-math flag is needed
FLAGS = [
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-fopenmp",  # at::parallel_for's OpenMP backend is inlined into the extension: without it, serial
]
_UNSET = object()


def package_ninja_dir() -> str | None:
    """The folder of the ``ninja`` executable that the ``ninja`` package (a dependency) installed, found
    from the package's file record, so also when the running interpreter is not the one it was installed
    for (a virtualenv that reaches the packages through a ``.pth`` file, where ``ninja.BIN_DIR`` is
    empty); None without the package or its executable."""
    from importlib import metadata

    try:
        files = metadata.files("ninja") or []
    except metadata.PackageNotFoundError:
        return None
    for record in files:
        if record.name in ("ninja", "ninja.exe") and record.parent.name in ("bin", "Scripts"):
            path = Path(str(record.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return str(path.parent)
    return None


@contextlib.contextmanager
def _package_ninja_first() -> Iterator[None]:
    """Put the ``ninja`` package's executable (:func:`package_ninja_dir`) first on ``PATH`` while
    building. torch's builder runs whichever ``ninja`` ``PATH`` finds first, and ninja versions do not
    read each other's build log (1.11 from Debian, 1.13 from PyPI): a shell with the virtualenv activated
    and a process started as ``.venv/bin/…`` without it then rebuilt the kernel (~30 s) at every
    switch."""
    bin_dir = package_ninja_dir()
    if bin_dir is None:  # no ninja package: torch uses PATH's (or says it is missing)
        yield
        return
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = bin_dir + os.pathsep + path
    try:
        yield
    finally:
        os.environ["PATH"] = path


class CpuExtension:
    """The kernel compiled from ``csrc/<stem>.cpp``, built once per process on first use.

    Args:
        stem: the source's file name without ``.cpp``; the extension is named
            ``fastweights_<stem>_<hash>``.
        what: the kernel in words, for the log (``"fused CPU SRWM kernel"``).
        fallback: what runs instead when it cannot be built, for the log.
        logger: the logger of the op module that uses it.
    """

    def __init__(self, stem: str, what: str, fallback: str, logger: logging.Logger) -> None:
        self.source = Path(__file__).with_name("csrc") / f"{stem}.cpp"
        self.stem, self.what, self.fallback, self.log = stem, what, fallback, logger
        self._module: Any = _UNSET

    def build_name(self) -> str:
        """The extension's name, per CPU model and ISA flags (``-march=native`` builds must not be shared
        between CPUs, e.g. a home folder mounted on several cluster nodes), source and compiler flags (two
        installed versions of the package never rebuild each other's kernel) and torch installation (its
        headers' folder is in the build file)."""
        import torch

        try:
            lines = Path("/proc/cpuinfo").read_text().splitlines()
            keys = ("model name", "flags")
            model = " ".join(next((x for x in lines if x.startswith(key)), "") for key in keys)
        except OSError:
            model = platform.processor()
        torch_install = f"{torch.__version__} {Path(torch.__file__).resolve().parent}"
        key = hashlib.sha1(f"{platform.machine()} {model} {FLAGS} {torch_install}".encode())
        key.update(self.source.read_bytes())
        return f"fastweights_{self.stem}_{key.hexdigest()[:12]}"

    def build_directory(self) -> Path:
        """The build folder of this source on this machine (created)."""
        base = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "fastweights" / "extensions"
        path = Path(base) / self.build_name()
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _source_copy(self, folder: Path) -> Path:
        """The source, copied into the build folder (the folder's name hashes its content): the build
        file names this copy, so installs of the package at other paths (a wheel, an editable checkout,
        a second virtualenv) find the same build up to date instead of rebuilding it for their path."""
        copy = folder / self.source.name
        if not copy.is_file() or copy.read_bytes() != self.source.read_bytes():
            tmp = folder / f".{self.source.name}.{os.getpid()}.tmp"
            tmp.write_bytes(self.source.read_bytes())
            os.replace(tmp, copy)
        return copy

    def build(self) -> Any:
        """Compile (or find up to date) and import the extension.

        Raises:
            Exception: whatever torch's builder raises (no compiler, no ninja, a compile error) or
                ``filelock.Timeout`` after 15 minutes of waiting for another process's build.
        """
        from filelock import FileLock
        from torch.utils.cpp_extension import load

        name = self.build_name()
        folder = self.build_directory()
        with FileLock(str(folder / "fastweights-build.lock"), timeout=_BUILD_TIMEOUT_S):
            baton = folder / "lock"  # torch's FileBaton: only a killed build leaves it while we hold our lock
            if baton.exists():
                self.log.info("removing the stale build lock %s (a build was killed)", baton)
                baton.unlink(missing_ok=True)
            library = folder / f"{name}.so"
            built = library.stat().st_mtime_ns if library.exists() else None
            if built is None:
                self.log.info("building the %s in %s (first use, ~30 s)", self.what, folder)
            with _package_ninja_first():
                module = load(
                    name=name,
                    sources=[str(self._source_copy(folder))],
                    extra_cflags=FLAGS,
                    extra_ldflags=["-fopenmp"],
                    build_directory=str(folder),
                )
            if built is not None and library.stat().st_mtime_ns != built:
                self.log.info("rebuilt the %s in %s (ninja found it out of date)", self.what, folder)
            return module

    def load(self) -> Any:
        """The extension module, or None when it cannot be built (logged once per process)."""
        if self._module is _UNSET:
            self._module = None
            try:
                self._module = self.build()
            except Exception as err:  # no compiler / ninja / headers, lock timeout: fall back, say so once
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                self.log.warning("%s unavailable (%s); using %s", self.what, first, self.fallback)
        return self._module

    def available(self) -> bool:
        """Whether the kernel is built (building it on the first call)."""
        return self.load() is not None

    def enabled(self) -> bool:
        """Whether the ops dispatch to the kernel: ``FASTWEIGHTS_CPU_KERNEL`` is not ``0`` (read at every
        call) and the kernel builds."""
        return os.environ.get("FASTWEIGHTS_CPU_KERNEL", "1") != "0" and self.available()
