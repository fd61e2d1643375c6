"""``cube audit --server URL --model NAME``: the served backend's checks alone, before any run.

Why: a server's numbers are checked before they are trusted (issue 46 §2), and a user deciding
whether to evaluate through a server should see what ``cube run --backend openai`` would find
without writing a store: the label audit on the server's tokens (against cube's copy of the
tokenizer where ``--model`` is a demo model or folder), the precision the server says it runs in,
and the probe of ``cube.harness.backends.served_fast`` (the fast path honoured or not; the same
requests batched, reversed and alone; the fast path against the echo path) on the audit's own
prompts (no benchmark text), printed in one line.
"""

from __future__ import annotations

import argparse
import json

from cube.errors import ConfigError


def audit_server(args: argparse.Namespace) -> int:
    from cube.harness.backends.base import ScoreRequest
    from cube.harness.build import audit_cells, model_of, served_precision_of
    from cube.harness.run_config import RunConfig
    from cube.protocol.label_sets import select_label_sets
    from cube.protocol.prompts import load_contexts, load_templates
    from cube.tokenizers.audit import audit_prompt, format_run_audit

    if not args.model:
        raise ConfigError(f"--server {args.server} needs --model NAME: the model id the server serves")
    clash = [flag for flag, value in (("--families", args.families), ("--tokenizer", args.tokenizer),
                                      ("--freeze", args.freeze), ("--check", args.check),
                                      ("--benchmark", args.benchmark)) if value]
    if clash or args.chat_templates != ["none"]:
        raise ConfigError(f"--server probes one served model on the audit's prompts; {(clash or ['--chat-template'])[0]} "
                          "is not an option of it (drop it)")
    templates = load_templates()
    contexts = args.contexts or [c.name for c in load_contexts(None, templates) if c.tokenization == "in_context"]
    config = RunConfig(model=args.model, backend="openai", base_url=args.server, contexts=tuple(contexts),
                       shots=tuple(sorted(set(args.shots))), strict_audit=args.strict_audit,
                       server_dtype=args.server_dtype)
    model = model_of(config)
    label_sets = select_label_sets(args.label_sets, args.label_set)
    cells = audit_cells(model, label_sets, config, None, templates)
    precision = served_precision_of(model, config)
    backend = model.backend
    backend.fast.configure(precision.dtype, config.strict_audit)
    requests = [ScoreRequest(audit_prompt(ls, context, templates, k),
                             tuple(context.label_prefix + label for label in ls.labels))
                for ls in label_sets for context in load_contexts(config.contexts, templates) for k in config.shots]
    backend.score(requests)
    logged = backend.run_log()
    probe = logged["server_probe"]
    if args.json:
        print(json.dumps({"model": model.name, "server": model.settings.base_url, "dtype": precision.dtype,
                          "dtype_reason": precision.reason, "cells": [c.to_log() for c in cells], **logged},
                         ensure_ascii=False, indent=1))
        return 0
    print(format_run_audit(model.name, cells), end="")
    cache = logged["server_prefix_cache"]
    print(f"server {model.settings.base_url} model {model.settings.model}: precision {precision.dtype or 'not recorded'}"
          f" ({precision.reason}); fast path {probe['fast_path']}; fast vs echo max |d| {_size(probe['fast_vs_echo_max_abs'])}; "
          f"batched/reversed/alone max |d| {_size(probe['order_max_abs'])} (tolerance {probe['tolerance']:g}); "
          f"{len(requests)} requests, {logged['server_prompt_tokens']} prompt tokens read, "
          + (f"{cache['hits']:.0f} of {cache['queries']:.0f} from the prefix cache" if cache else
             "prefix cache not counted"))
    return 0


def _size(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3g}"


__all__ = ["audit_server"]
