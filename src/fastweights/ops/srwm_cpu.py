"""The fused CPU SRWM kernel (``csrc/srwm_cpu.cpp``): the forward and reversal backward of
:mod:`fastweights.ops.srwm_autograd` with the time loop in compiled code, one (batch, head) fast-weight
matrix at a time, parallel over batch × heads (``at::parallel_for``, torch's intra-op threads).

Used by default: :func:`fastweights.ops.srwm` and :func:`fastweights.ops.srwm_with_reads` (so every SRWM
layer) send CPU float32/float64 inputs here; ``FASTWEIGHTS_CPU_KERNEL=0`` keeps them on the PyTorch fast
path. Same math, layout and saved per-step vectors as that fast path (see :mod:`fastweights.ops.srwm`
for the equations), with or without the read-only stream; float32 uses a vectorised exp (~1 ulp).

Built on first use with ``torch.utils.cpp_extension.load`` (a C++ compiler and ninja are needed;
~30 s once) into ``$TORCH_EXTENSIONS_DIR/<name>`` or ``~/.cache/fastweights/extensions/<name>``, the
name hashed from the CPU model and its ISA flags (``-march=native``), the compiler flags, the source
and the torch installation it compiles against (its version and folder: the build file names that
torch's headers, so two virtualenvs sharing one folder would rebuild each other's kernel at every
switch); it is compiled from a copy of the source in that folder, so every install of the package at
another path with the same torch (a wheel, a checkout) shares one build; ``scripts/setup.sh`` builds
it. When it cannot be built, one line is logged and the fast path is used. Builds are serialised by
an OS file lock (``filelock``), which the kernel releases when a process dies; holding it, a build
removes the baton file that torch's own builder leaves behind when a process is killed mid-build
(torch would wait for it forever).

Measured (benchmarks/layers.py, B=8 H=8 E=32 T=1024, fp32, fwd+bwd, 2 threads; docs/results.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = ["available", "enabled", "srwm_fused_cpu"]

log = logging.getLogger(__name__)
_SOURCE = Path(__file__).with_name("csrc") / "srwm_cpu.cpp"
_state: dict[str, Any] = {}
_BUILD_TIMEOUT_S = 900  # waiting for another process's build
# -fassociative-math lets the compiler vectorise the dot products (sums in another order: fp64 results
# equal the reference to ~1e-15); the public ops reject NaN/Inf inputs, so no finite-math flag is needed
_FLAGS = [
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-fopenmp",  # at::parallel_for's OpenMP backend is inlined into the extension: without it, serial
]


def _build_name() -> str:
    """The extension's name, per CPU model and ISA flags (``-march=native`` builds must not be shared
    between CPUs, e.g. a home folder mounted on several cluster nodes), source and compiler flags (two
    installed versions of the package never rebuild each other's kernel) and torch installation (its
    headers' folder is in the build file)."""
    import torch

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = " ".join(next((x for x in lines if x.startswith(key)), "") for key in ("model name", "flags"))
    except OSError:
        model = platform.processor()
    torch_install = f"{torch.__version__} {Path(torch.__file__).resolve().parent}"
    key = hashlib.sha1(f"{platform.machine()} {model} {_FLAGS} {torch_install}".encode())
    key.update(_SOURCE.read_bytes())
    return f"fastweights_srwm_cpu_{key.hexdigest()[:12]}"


def _build_directory(name: str) -> Path:
    base = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "fastweights" / "extensions"
    path = Path(base) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _source_copy(folder: Path) -> Path:
    """The kernel source, copied into the build folder (the folder's name hashes its content): the build
    file names this copy, so installs of the package at other paths (a wheel, an editable checkout, a
    second virtualenv) find the same build up to date instead of rebuilding it for their source path."""
    copy = folder / _SOURCE.name
    if not copy.is_file() or copy.read_bytes() != _SOURCE.read_bytes():
        tmp = folder / f".{_SOURCE.name}.{os.getpid()}.tmp"
        tmp.write_bytes(_SOURCE.read_bytes())
        os.replace(tmp, copy)
    return copy


def _build() -> Any:
    from filelock import FileLock
    from torch.utils.cpp_extension import load

    name = _build_name()
    folder = _build_directory(name)
    with FileLock(str(folder / "fastweights-build.lock"), timeout=_BUILD_TIMEOUT_S):
        baton = folder / "lock"  # torch's FileBaton: only a killed build leaves it while we hold our lock
        if baton.exists():
            log.info("removing the stale build lock %s (a build was killed)", baton)
            baton.unlink(missing_ok=True)
        if not (folder / f"{name}.so").exists():
            log.info("building the fused CPU SRWM kernel in %s (first use, ~30 s)", folder)
        return load(
            name=name,
            sources=[str(_source_copy(folder))],
            extra_cflags=_FLAGS,
            extra_ldflags=["-fopenmp"],
            build_directory=str(folder),
        )


def _load() -> Any:
    if "module" not in _state:
        _state["module"] = None
        try:
            _state["module"] = _build()
        except Exception as err:  # no compiler / ninja / headers, lock timeout: fall back, say so once
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            log.warning("fused CPU SRWM kernel unavailable (%s); using the PyTorch fast path", first)
    return _state["module"]


def available() -> bool:
    """Whether the fused CPU kernel is built (building it on the first call)."""
    return _load() is not None


def enabled() -> bool:
    """Whether the ops dispatch to the kernel: ``FASTWEIGHTS_CPU_KERNEL`` is not ``0`` (read at every
    call) and the kernel builds."""
    return os.environ.get("FASTWEIGHTS_CPU_KERNEL", "1") != "0" and available()


class _FusedSRWM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, x_read: Tensor | None, w0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, steps, h, e = x.shape
        c = w0.shape[-1]
        o = c - 2 * e - 4
        x = x.contiguous()
        xr = x_read.contiguous() if x_read is not None else x.new_empty(0)
        y, y_read, act, diff, w = _load().srwm_forward(x, xr, x_read is not None, w0, o)
        ctx.save_for_backward(x, xr, act, diff, w)
        ctx.read = x_read is not None
        ctx.shape = (b, steps, h, e, c, o)
        if x_read is None:
            ctx.mark_non_differentiable(y_read)
        return y, y_read, w.clone()  # w is saved

    @staticmethod
    def backward(
        ctx: Any, g_y: Tensor | None, g_y_read: Tensor | None, g_w: Tensor | None
    ) -> tuple[Tensor, Tensor | None, Tensor]:
        x, xr, act, diff, w = ctx.saved_tensors
        b, steps, h, e, c, o = ctx.shape
        read = ctx.read

        def grad_out(g: Tensor | None) -> Tensor:
            return g.to(x.dtype) if g is not None else x.new_zeros(b, steps, h, o)

        gyr = grad_out(g_y_read) if read else x.new_empty(0)
        gw = g_w.to(x.dtype) if g_w is not None else torch.zeros_like(w)
        g_x, g_xr, g_w0 = _load().srwm_backward(x, xr, read, act, diff, w, grad_out(g_y), gyr, gw)
        return g_x, (g_xr if read else None), g_w0


def srwm_fused_cpu(
    x: Tensor, w0: Tensor, x_read: Tensor | None = None
) -> tuple[Tensor, Tensor | None, Tensor]:
    """``x [B, T, H, E]``, ``w0 [B, H, E, C]``, optional read-only stream ``x_read [B, T, H, E]`` (CPU,
    float32/float64, one dtype, validated by the public ops) → ``(y [B, T, H, d_out], y_read
    [B, T, H, d_out] or None, final fast weights [B, H, E, C])``, differentiable in every input;
    ``y_read_t = x_read_t W^y_{t-1}`` as in :func:`fastweights.ops.srwm_with_reads`.

    Raises:
        RuntimeError: when the kernel is not available (check :func:`available` first).
    """
    if _load() is None:
        raise RuntimeError("the fused CPU SRWM kernel is not available (see the log for why)")
    y, y_read, w = _FusedSRWM.apply(x, x_read, w0)
    return y, (y_read if x_read is not None else None), w
