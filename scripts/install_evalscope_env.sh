#!/usr/bin/env bash
# Build .venv-evalscope: EvalScope 1.14.1 in an environment of its own.
#
# What it is for: `cube import evalscope` is checked on REAL EvalScope output; the fixture
# tests/fixtures/evalscope was written by this environment (its README says how). cube itself is
# not installed here: cube reads EvalScope's output folder, it never imports it.
#
# Why not `pip install evalscope`: with wheels only (--only-binary :all:, as every environment
# here), its resolution fails: jieba and rouge-score are sdist-only, and modelscope[datasets]
# pins one of them. EvalScope's wheel goes in with --no-deps, then its requirements from wheels,
# less those two (imported only by metrics of generation benchmarks, not by the multiple-choice
# path: a run of `evalscope eval --datasets ceval` works without them) and with modelscope and
# datasets installed apart instead of modelscope[datasets]. No torch: the model is reached through
# an OpenAI-compatible server (scripts/serve_openai_local.py).
#
# Usage: scripts/install_evalscope_env.sh     (idempotent: re-running skips a finished build)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
VENV=${EVALSCOPE_VENV:-.venv-evalscope}
ES_VERSION=1.14.1
STAMP="$VENV/.installed"
if [[ -f "$STAMP" && "$STAMP" -nt "$0" ]]; then
    echo "$VENV is up to date (delete $STAMP to reinstall)"
    exit 0
fi
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --only-binary :all:)
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$VENV/bin/python" -m pip download -q --no-deps --only-binary :all: "evalscope==$ES_VERSION" -d "$wheels"
"$VENV/bin/python" -m pip install -q --no-deps "$wheels"/evalscope-"$ES_VERSION"-py3-none-any.whl
"${PIP[@]}" aiohttp colorlog docstring_parser dotenv editdistance filelock filetype jinja2 jsonlines \
    jsonschema Markdown "math-verify[antlr4_13_2]==0.9.0" "modelscope>=1.34" datasets addict simplejson \
    sortedcontainers more_itertools nltk openai pandas pillow plotly pydantic "pyyaml>=5.1" requests rich \
    rouge-chinese sacrebleu tabulate tqdm "transformers!=4.57.2,>=4.33" zhconv
"$VENV/bin/evalscope" --version
touch "$STAMP"
