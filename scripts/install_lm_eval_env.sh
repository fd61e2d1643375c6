#!/usr/bin/env bash
# Build .venv-lmeval: lm-evaluation-harness 0.4.13 in an environment of its own.
#
# What it is for: `cube import lm-eval` is tested on REAL lm-eval output (tests/importers/test_lm_eval.py
# runs lm_eval from here on a demo model), and the speed comparison against lm-eval reuses it.
# cube itself is not installed here: cube reads lm-eval's output files, it never imports lm-eval.
#
# Why not `pip install lm-eval==0.4.13`: three of its dependencies (sqlitedict, rouge-score,
# word2number) exist only as sdists, and this project never builds an sdist. They are used only by
# generation metrics, never by the log-likelihood (multiple-choice) tasks, so lm-eval's own wheel
# goes in with --no-deps and every other dependency it needs for those tasks is installed from
# wheels only (--only-binary :all:). torch comes first, at the one version this project allows.
#
# Usage: scripts/install_lm_eval_env.sh          (idempotent: re-running skips a finished build)
#        LMEVAL_VENV=/path/to/venv PY=python3.11 scripts/install_lm_eval_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
VENV=${LMEVAL_VENV:-.venv-lmeval}
LMEVAL_VERSION=0.4.13
BIN="$VENV/bin"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" && "$STAMP" -nt "$0" ]]; then
    echo "$VENV is up to date (delete $STAMP to reinstall)"
    exit 0
fi

start=$(date +%s)
test -x "$BIN/python" || "$PY" -m venv "$VENV"
PIP=("$BIN/python" -m pip install -q --only-binary :all:)

echo "[1/4] torch==2.13.0 (the only torch this project installs)"
"${PIP[@]}" "torch==2.13.0"

echo "[2/4] lm-eval==$LMEVAL_VERSION, its wheel alone (--no-deps: three of its deps are sdist-only)"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$BIN/python" -m pip download -q --no-deps --only-binary :all: "lm-eval==$LMEVAL_VERSION" -d "$wheels"
"$BIN/python" -m pip install -q --no-deps "$wheels"/lm_eval-"$LMEVAL_VERSION"-py3-none-any.whl

echo "[3/4] the dependencies multiple-choice tasks need, wheels only"
"${PIP[@]}" "datasets>=2.16.0" "evaluate>=0.4.0" jinja2 pytablewriter "sacrebleu>=1.5.0" \
    "scikit-learn>=0.24.1" dill more_itertools typing_extensions "tqdm>=4.59.0" \
    "transformers>=5.16.1,<5.20" accelerate "tokenizers==0.23.3" safetensors \
    tenacity aiohttp requests  # lm-eval's [api] extra: local-completions (benchmarks/served_vs_lm_eval.py)

echo "[4/4] checking the environment imports"
"$BIN/python" - <<'EOF'
import lm_eval, lm_eval.evaluator, lm_eval.models.huggingface, lm_eval.tasks  # noqa: F401
import importlib.metadata as md
import torch, transformers
print("lm-eval", md.version("lm_eval"), "| torch", torch.__version__,
      "| transformers", transformers.__version__, "| tokenizers", md.version("tokenizers"))
EOF
touch "$STAMP"
echo "done in $(( $(date +%s) - start )) s"
