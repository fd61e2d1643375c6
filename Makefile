# Every target installs what it needs into .venv first (idempotent; re-run when pyproject changes).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FROZEN := data/predictions/audit_frozen.json

.PHONY: help install paper audit test smoke-test freeze bench clean

help:
	@echo "make paper       the main job: tokenizer audit checked against the frozen prediction"
	@echo "make test        install everything and run the test suite"
	@echo "make smoke-test  seconds-long end-to-end check"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# The main job. For now: the audit of every offline tokenizer, printed and checked against the
# frozen pre-registration (fails loudly on any difference).
paper: $(STAMP)
	$(BIN)/cube audit
	$(BIN)/cube audit --check $(FROZEN)

audit: paper

freeze: $(STAMP)
	$(BIN)/cube audit --freeze $(FROZEN)

test: $(STAMP)
	$(BIN)/python -m pytest -q

smoke-test: $(STAMP)
	$(BIN)/cube audit --check $(FROZEN)

bench: $(STAMP)
	$(BIN)/python benchmarks/audit_speed.py

clean:
	rm -rf $(VENV) build _build book/_executed .pytest_cache
