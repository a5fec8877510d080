"""TTT-Linear / TTT-MLP layers against the official ttt-lm-pytorch implementation, in one process:
forward + backward of one layer (hidden 768 = 12 heads × 64, mini-batch 16, L = 2048, batch 1, fp32 by
default), the same weights, outputs compared, time (min over ``--repeats`` rounds after a warm-up, the
two implementations alternating within each round) and peak
memory (``torch.profiler`` allocation events; on CUDA ``max_memory_allocated``).

The official code is not a dependency: point ``--official`` at its ``ttt.py`` (a checkout of
github.com/test-time-training/ttt-lm-pytorch) and put a ``transformers`` 4.4x release on ``PYTHONPATH``
(e.g. ``pip install --target /tmp/hf --no-deps transformers==4.46.3 huggingface_hub==0.26.5
tokenizers==0.20.3 regex requests urllib3 idna charset_normalizer certifi``):

    PYTHONPATH=/tmp/hf python benchmarks/ttt_official.py --official /path/to/ttt.py [--layer linear]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _memory import peak_bytes

from fastweights.layers import TTTLinearLayer, TTTMLPLayer


def _official_module(path: Path):
    if not path.is_file():
        raise SystemExit(f"--official: expected the official ttt.py, got {path} (not a file)")
    spec = importlib.util.spec_from_file_location("ttt_official", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as err:
        raise SystemExit(
            f"--official: {path} needs a transformers 4.4x release on PYTHONPATH ({err})"
        ) from None
    return module


def _time_interleaved(fns: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """Min wall time of each function over ``repeats`` rounds; every round runs all of them one after
    the other, so a slow spell of a shared machine hits both implementations alike (timing one
    implementation's repeats, then the other's, let the machine's drift decide the ratio)."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def compare(official, kind: str, a: argparse.Namespace) -> None:
    """Build both ``kind`` layers with the same weights, check their outputs, print time and memory."""
    config = official.TTTConfig(
        hidden_size=a.hidden,
        num_attention_heads=a.heads,
        mini_batch_size=a.mini_batch,
        ttt_layer_type=kind,
        use_gate=False,
        share_qk=False,
    )
    torch.manual_seed(0)
    ref = (official.TTTLinear if kind == "linear" else official.TTTMLP)(config, layer_idx=0).to(a.device)
    layer = TTTLinearLayer if kind == "linear" else TTTMLPLayer
    ours = layer(a.hidden, a.heads, mini_batch_size=a.mini_batch)
    ours.load_state_dict(ref.state_dict())  # the parameter names are the reference's
    ours.to(a.device)
    x = torch.randn(1, a.L, a.hidden, device=a.device, requires_grad=True)
    position_ids = torch.arange(a.L, device=a.device).unsqueeze(0)
    g = torch.randn(1, a.L, a.hidden, device=a.device)
    runs = {
        "official ttt-lm-pytorch": lambda: ref(x, position_ids=position_ids),
        "fastweights": lambda: ours(x)[0],
    }
    with torch.no_grad():
        diff = (runs["official ttt-lm-pytorch"]() - runs["fastweights"]()).abs().max().item()
    steps = {}
    for name, fn in runs.items():

        def step(fn: Callable[[], torch.Tensor] = fn) -> None:
            (fn() * g).sum().backward()
            x.grad = None
            ref.zero_grad(set_to_none=True)
            ours.zero_grad(set_to_none=True)

        steps[name] = step
    seconds = _time_interleaved(steps, a.repeats)
    rows = {name: (seconds[name], peak_bytes(step, a.device) / 2**20) for name, step in steps.items()}
    base = rows["official ttt-lm-pytorch"][0]
    print(f"TTT-{kind}: outputs differ by at most {diff:.1e}")
    for name, (sec, mb) in rows.items():
        print(f"  {name:24s} {sec:7.3f} s  speed-up over official {base / sec:5.2f}x  peak {mb:7.1f} MB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--official", type=Path, required=True)
    p.add_argument("--layer", choices=["linear", "mlp", "both"], default="both")
    for name, default in (("hidden", 768), ("heads", 12), ("mini-batch", 16), ("L", 2048), ("repeats", 3)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    official = _official_module(a.official)
    print(
        f"TTT layer fwd+bwd, hidden {a.hidden} = {a.heads} heads, mini-batch {a.mini_batch}, L={a.L}, "
        f"batch 1, fp32, {a.device}, {torch.get_num_threads()} threads"
    )
    for kind in ("linear", "mlp") if a.layer == "both" else (a.layer,):
        compare(official, kind, a)


if __name__ == "__main__":
    main()
