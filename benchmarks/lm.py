"""Prefill and decode throughput of the language model vs context length, one run per sequence layer.

For each sequence layer (randomly initialised ``CausalLM`` of ``--preset``, fp32, no grad) and each context
length ``L``:

- prefill: one forward over ``L`` tokens (batch ``--batch``) → tokens/s = ``batch * L / seconds``
  (minimum over ``--repeats`` after one untimed call), plus the peak tensor memory of that call;
- decode: from the cache after the prefill, ``--decode-tokens`` single-token steps → tokens/s =
  ``batch * decode_tokens / seconds`` (the per-token cost at context ≈ ``L``).

A context that raises an out-of-memory error is reported as such. The last lines give the ratio
TTT-Linear / softmax attention at the longest context measured for both (the TTT paper's latency
comparison, §3.3 and Fig. "Forward / Generate time per token").

    python benchmarks/lm.py                    # tiny model, contexts 256 … 4096 (minutes on 2 CPU cores)
    python benchmarks/lm.py --small            # contexts 64, 128 (seconds)
    (on CPU the profiler used for peak memory prints "USDT … profiler_start" lines on stderr)
    python benchmarks/lm.py --preset 125m --batch 16 --contexts 2048,4096,8192   # a GPU
"""

from __future__ import annotations

import argparse
import time

import torch
from _memory import peak_bytes

from fastweights.models.lm import CausalLM, LMConfig

LAYERS = ("ttt_linear", "ttt_mlp", "softmax_attention", "deltanet", "srwm")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _best_seconds(fn, repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


@torch.no_grad()
def measure(model: CausalLM, context: int, args: argparse.Namespace) -> dict:
    """Prefill and decode tokens/s and prefill peak MB at ``context`` tokens."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (args.batch, context), device=args.device)
    step = torch.randint(0, vocab, (args.batch, 1), device=args.device)
    model(ids)  # untimed warm-up (allocator, kernels), as in the TTT paper's benchmark protocol
    prefill_s = _best_seconds(lambda: model(ids), args.repeats, args.device)
    peak_mb = peak_bytes(lambda: model(ids), args.device) / 2**20
    _, cache = model(ids)

    def decode() -> None:
        c = cache
        for _ in range(args.decode_tokens):
            _, c = model(step, c)

    decode()  # untimed warm-up
    decode_s = _best_seconds(decode, args.repeats, args.device)
    return {
        "prefill_tok_s": args.batch * context / prefill_s,
        "decode_tok_s": args.batch * args.decode_tokens / decode_s,
        "prefill_peak_mb": peak_mb,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny", help="an LMConfig preset (tiny, 125m, …; vocab set to 256)")
    p.add_argument("--models", default=",".join(LAYERS), help="comma-separated sequence layers")
    p.add_argument("--contexts", default="256,512,1024,2048,4096")
    p.add_argument("--small", action="store_true", help="contexts 64,128 and 4 decode tokens")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    if args.small:
        args.contexts, args.decode_tokens = "64,128", 4
    contexts = [int(c) for c in args.contexts.split(",")]
    layers = [m.strip() for m in args.models.split(",") if m.strip()]
    print(
        f"device {args.device}, {torch.get_num_threads()} threads, fp32, preset {args.preset}, "
        f"batch {args.batch}, {args.decode_tokens} decode tokens"
    )
    print(
        f"{'sequence layer':18s} {'context':>7s} {'prefill tok/s':>14s} {'decode tok/s':>13s} "
        f"{'prefill peak MB':>16s}"
    )
    table: dict[str, dict[int, dict]] = {}
    for layer in layers:
        torch.manual_seed(0)
        model = (
            CausalLM(LMConfig.preset(args.preset, sequence_layer=layer, vocab_size=256))
            .to(args.device)
            .eval()
        )
        table[layer] = {}
        for context in contexts:
            try:
                res = measure(model, context, args)
            except torch.OutOfMemoryError:
                print(f"{layer:18s} {context:7d} {'out of memory':>14s}", flush=True)
                break
            table[layer][context] = res
            print(
                f"{layer:18s} {context:7d} {res['prefill_tok_s']:14,.0f} {res['decode_tok_s']:13,.1f} "
                f"{res['prefill_peak_mb']:16.1f}",
                flush=True,
            )
        del model
    a, b = table.get("ttt_linear", {}), table.get("softmax_attention", {})
    common = sorted(set(a) & set(b))
    if common:
        L = common[-1]
        print(
            f"TTT-Linear / softmax attention at context {L}: prefill "
            f"{a[L]['prefill_tok_s'] / b[L]['prefill_tok_s']:.2f}x, decode "
            f"{a[L]['decode_tok_s'] / b[L]['decode_tok_s']:.2f}x (tokens/s ratio; > 1 = TTT-Linear faster), "
            f"prefill peak memory {a[L]['prefill_peak_mb'] / max(b[L]['prefill_peak_mb'], 1e-3):.2f}x"
        )


if __name__ == "__main__":
    main()
