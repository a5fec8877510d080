"""Whether a device computes bfloat16 natively, for the opt-in bfloat16 paths (a CPU without it emulates
bfloat16 arithmetic through float32 conversions, which is slower than float32)."""

from __future__ import annotations

import torch

__all__ = ["native_bf16"]


def _cpu_has(name: str) -> bool:
    check = getattr(torch.cpu, name, None)  # torch's own CPU feature probes (cpuinfo), private API
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """Whether ``device`` has native bfloat16 arithmetic, and which, in words.

    CPU: AMX tiles (Intel Sapphire Rapids and later) or the AVX-512 BF16 dot products (Intel Cooper
    Lake, AMD Zen 4 and later), as torch's CPU feature probes report them. CUDA:
    ``torch.cuda.is_bf16_supported()`` (compute capability 8.0 and later). Other devices: not known
    here, reported as not native.

    Returns:
        ``(native, description)``, e.g. ``(True, "AVX-512 BF16")`` or ``(False, "no AVX-512 BF16 or AMX")``.
    """
    if device.type == "cpu":
        if _cpu_has("_is_amx_tile_supported"):
            return True, "AMX"
        if _cpu_has("_is_avx512_bf16_supported"):
            return True, "AVX-512 BF16"
        return False, "no AVX-512 BF16 or AMX"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return (True, f"{name}") if torch.cuda.is_bf16_supported() else (False, f"{name}: no native bfloat16")
    return False, f"{device.type}: not known to have native bfloat16"
