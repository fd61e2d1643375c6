"""cube: trustworthy multiple-choice LLM evaluation.

One package per stage of the flow, which runs one way:

    protocol/    items, taxonomy, label sets, prompts, tokenization, benchmark data
    tokenizers/  registry sources, GGUF, conversion, and the GPU-free audit
    records/     schema (the scorer groups), store, leakage (audit and scrub), merge,
                 provenance
    harness/     runner, scorers, extraction, models, dtype, backends/
    importers/   other harnesses' runs as records (lm-eval, OpenCompass), beside the harness:
                 one contract, one writer (record_row)
    analysis/    rescore, confirm, flagged, stats, simulate, credit
    paper/       figures, charts, book, smoke, claims
    release/     the release bundle

``commands/`` holds one module per CLI command; ``config``, ``models_config`` (config/models.yaml,
typed), ``errors``, ``atomic`` and ``checksums`` are shared by every stage. Imports follow the
flow: a stage uses the stages before it and ``records/``, the format the harness writes and
everything after it reads (the leakage rules live there because they define "records without
benchmark text"); ``scripts/check_imports.py`` holds that order and finds any import against it,
or any circle.
"""

__version__ = "0.1.0"
