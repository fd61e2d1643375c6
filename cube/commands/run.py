"""``cube run``: score a model on benchmark items under protocol cells, writing records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cube.commands.extras import declare
from cube.commands.options import comma_list, random_seed
from cube.errors import ConfigError
from cube.harness.backends import BACKENDS
from cube.harness.run_config import RunConfig

D = RunConfig.default  # each default is stated once, in RunConfig


def scorers_help() -> str:
    """``--scorers``'s help, from the scorer table: every scorer a run can ask for. Read from
    ``cube.protocol.scorers`` (numpy only), not the record schema: building the parser must not
    need pyarrow, which the tokenizer audit's install lacks."""
    from cube.protocol.scorers import run_scorers

    return (f"comma-separated, of: {','.join(run_scorers())} (default {','.join(D('scorers'))}; the scorer "
            "table: README, Scoring models)")


def register(subparsers) -> None:
    from cube.analysis.cell_table import COLUMNS_MEAN

    p = subparsers.add_parser("run", help="score a model under protocol cells; resumable Parquet records",
                              epilog="the closing table, one row per cell: " + COLUMNS_MEAN.replace("%", "%%"))
    p.add_argument("--model", required=True,
                   help="a demo model name (config/models.yaml demo_models), a Hugging Face folder, a .gguf file, "
                        "or hf:ORG/NAME@<40-hex commit> (README: Your own model)")
    p.add_argument("--benchmark", default=D("benchmark"),
                   help=f"cmmlu (default {D('benchmark')}), ceval, or your own multiple-choice file: a "
                        ".jsonl/.csv/.parquet file or a folder of dev/val/test files (README: Your benchmark)")
    p.add_argument("--card", type=Path, help="your file's card (YAML: name, language, header, line formats, answer "
                                             "contexts, licence); default: <file stem>.card.yaml beside it")
    p.add_argument("--split", default=D("split"), help=f"the split whose items are scored (default {D('split')})")
    p.add_argument("--data", type=Path, help="benchmark folder (default: the lookup of `cube data list`)")
    p.add_argument("--sample", type=int,
                   help="stratified sample size (every subject represented; below 67, N subjects with one item "
                        "each); left out, every item of the split: all 11,582 CMMLU test items")
    p.add_argument("--seed", type=random_seed(), default=D("seed"),
                   help=f"the sample's random seed (default {D('seed')})")
    p.add_argument("--within", type=int, metavar="N",
                   help="draw --sample from the stratified sample of N items (same seed), so that a "
                        "subset run (CoT, 5-shot) shares its items with the full run")
    p.add_argument("--subjects", type=comma_list("--subjects"), help="comma-separated subjects (default: all)")
    p.add_argument("--label-sets", type=comma_list("--label-sets"),
                   help="comma-separated label sets (default: L1_halfwidth, or A10_halfwidth where an item has more "
                        "than 4 options, each item showing its first N labels; the study's: L1_halfwidth, "
                        "L2_fullwidth, L3_ganzhi, L4_circled; ten-label: A10_halfwidth, A10_fullwidth, A10_ganzhi, "
                        "A10_circled). Your own: add it to label_sets.yaml in a copy of "
                        "the config folder and point CUBE_CONFIG_DIR at it (README: Your own label sets and cues)")
    p.add_argument("--scorers", type=comma_list("--scorers"), default=",".join(D("scorers")),
                   help=scorers_help())
    p.add_argument("--shots", type=comma_list("--shots", int), default=",".join(map(str, D("shots"))),
                   help=f"comma-separated shot counts, e.g. 0,5 (default {','.join(map(str, D('shots')))})")
    p.add_argument("--cues", "--contexts", dest="contexts", type=comma_list("--cues"),
                   help="answer contexts (cues) from templates.yaml (default: the benchmark's own: zh_cue for CMMLU "
                        "and C-Eval, en_label_space for a file in the English format, else its card's); your "
                        "own: in a copy of the config folder under CUBE_CONFIG_DIR, or in your file's card")
    p.add_argument("--orders", type=comma_list("--orders"), default=",".join(D("orders")),
                   help=f"option orders, e.g. original,shift1 (default {','.join(D('orders'))})")
    p.add_argument("--chat-template", dest="chat_templates", type=comma_list("--chat-template"),
                   default=",".join(D("chat_templates")),
                   help="none (the plain prompt, default) and/or model: the prompt as the user turn of the "
                        "checkpoint's own chat template, the answer cue opening the assistant turn (a cell axis)")
    p.add_argument("--thinking", type=comma_list("--thinking"),
                   help="off and/or on: each --chat-template model cell rendered with the template's enable_thinking "
                        "False (its empty thinking block before the cue) or True (a cell axis; a reasoning "
                        "checkpoint whose template takes it, e.g. Qwen3). Log-likelihood scorers need off")
    p.add_argument("--out", type=Path, required=True,
                   help="the records folder (a new one, or the store of a run to resume: the same command resumes it)")
    p.add_argument("--backend", default=D("backend"), choices=list(BACKENDS),
                   help=f"the engine (default {D('backend')}; vllm runs from its own environment, .venv-vllm)")
    p.add_argument("--dtype", default=D("dtype"), choices=["auto", "bfloat16", "float32"],
                   help="auto (default): on a store that holds records, the dtype they were written in; else "
                        "bf16 only where the CPU has a native bf16 unit that a probe confirms clearly faster, or "
                        "on a CUDA device with bf16; fp32 otherwise (logged with why)")
    p.add_argument("--device", default=D("device"), help=f"cpu, cuda, cuda:N or mps (default {D('device')})")
    p.add_argument("--batch-size", type=int, default=D("batch_size"),
                   help=f"requests per forward pass (default {D('batch_size')}); changes scores only by "
                        "floating-point noise, so a resume may use another")
    p.add_argument("--shard-size", type=int, default=D("shard_size"),
                   help=f"items per record shard (default {D('shard_size')})")
    p.add_argument("--shard", default="{}/{}".format(*D("shard")),
                   help="K/N: run only chunks with index %% N == K (default 0/1: all)")
    p.add_argument("--max-new-tokens", "--max-gen-tokens", dest="max_new_tokens", type=int,
                   help="generation length in tokens, a reasoning checkpoint's thinking included: its thinking budget "
                        "(default from templates; recorded in each generation cell)")
    p.add_argument("--strict-audit", action="store_true",
                   help="fail before the model loads if M1-strict is asked for on a cell the audit calls DEGEN "
                        "(default: a warning, and the run goes on)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the checkpoint's own Python code; only with hf:ORG/NAME@<40-hex commit>")
    served = p.add_argument_group("a model behind a server (--backend openai; README: Scoring through a server)")
    served.add_argument("--base-url", help="the OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1; --model "
                                           "is then the model id it serves. The API key, if any, is read from "
                                           "$OPENAI_API_KEY (or the variable --api-key-env names), never an option")
    served.add_argument("--revision", help="what the served weights are (a commit, a tag): recorded as identity")
    served.add_argument("--tokenizer", help="a model SPEC whose tokenizer the server's tokens must match (default: "
                                            "--model itself where it is a demo model or a folder)")
    served.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key")
    served.add_argument("--concurrency", type=int, help="requests in flight at once (default 4)")
    served.add_argument("--request-timeout", type=float, metavar="S",
                        help="seconds a whole request may take, connection to last byte (default 120)")
    served.add_argument("--key-over-http", action="store_true",
                        help="send the API key over plain HTTP to a machine other than this one (default: refused; "
                             "use https)")
    served.add_argument("--server-dtype", metavar="DTYPE",
                        help="the precision the server runs the model in (bfloat16, float16, float32), recorded where "
                             "the server does not say it itself; default: the server's word, else not recorded")
    p.add_argument("--report", type=Path, default=None, metavar="DIR",
                   help="after the run, build `cube report` of the store into DIR (an offline site)")
    p.set_defaults(func=run)
    declare(p, _needs)


def finish(out: Path, report: Path | None) -> None:
    """After the scores: the report built (``--report``), else the command that builds it."""
    from cube.commands.report import report_command

    if report is None:
        print(f"report: {report_command(out)}")
        return
    from cube.report.analysis import analyse
    from cube.report.site import build_report

    analysis = analyse([out])
    print(f"report: {build_report(analysis, report)}")


def command_line(args: argparse.Namespace) -> str:
    """The run as one explicit command (``RunConfig.command_line``), for the run log and provenance."""
    return RunConfig.from_cli(args).command_line()


def check_out(out: Path) -> None:
    """``--out`` must be a records store or a new (or empty) folder: checked before a model loads.

    A folder holding only the store's lock files is empty: another run has just created it (and
    the writer lock then says which), or a run died before it wrote its manifest.
    """
    from cube.records.store import LOCK_FILES, MANIFEST_NAME

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; it must be a records folder")
    if out.is_dir() and not (out / MANIFEST_NAME).exists() and any(p.name not in LOCK_FILES for p in out.iterdir()):
        raise ConfigError(f"--out {out} is a folder with other files and no {MANIFEST_NAME}; "
                          "give a new folder or an existing records store")


def build_spec(args: argparse.Namespace):
    """The ``RunSpec`` of a parsed command line (``cube.harness.build.build_spec``)."""
    from cube.harness.build import build_spec as build

    return build(RunConfig.from_cli(args))


def print_scores(out: Path, spec) -> None:
    """Each cell's score of this run's model and scorers in the store, with its chance level (the
    mean of 1/N over its items: a file of 3- to 5-option items is not held to 1/4) and its shares of
    tied decisions, parse failures and decisions within the precision's noise beside it (issue 36
    §4): a run ends with its results, as every other harness's does, and a tie-break's accuracy
    never stands as a plain number. The same warnings as ``cube rescore`` follow, then what the
    columns mean. A generation scorer's cells are its records' (M6 writes M6-strict and
    M6-lenient): they were left out, selected by the scorer's name. The cell column is as wide as
    its longest cell."""
    from cube.analysis.rescore import rescore
    from cube.analysis.slices import select
    from cube.records.store import read_records

    from cube.analysis.cell_table import (COLUMNS_MEAN, rate, share, shows_thinking, thinking_header, thinking_shares,
                                          with_noise_marks)
    from cube.records.schema import record_names

    # the records' scorer names: M6 and M6-cot write M6-strict and M6-lenient (a run of those showed no table)
    table = select(read_records(out, verify=False, allow_incomplete=True), model=spec.model,
                   scorer=list(record_names(spec.scorers)))
    if table.num_rows == 0:
        return
    result = rescore(with_noise_marks(table, str(out)), level="overall")
    rows = [r for r in result.rows.to_pylist() if r["aggregation"] == "micro"]
    cells = [f"{r['model']} {r['scorer']} {r['label_set']} {r['context']} {r['shots']}-shot {r['order']}" for r in rows]
    width = max(len("cell"), *map(len, cells))
    thinking = shows_thinking(rows)  # a reasoning checkpoint's no-answer shares, where it had some
    print(f"{'cell':<{width}} {'n':>5} {'acc':>6}  {'95% CI':<15} {'chance':>6} {'tied':>6} {'parse-fail':>10} "
          f"{'in-noise':>8}" + (thinking_header() if thinking else ""))
    for cell, r in zip(cells, rows):
        print(f"{cell:<{width}} {r['n']:>5} {r['accuracy']:>6.3f}  [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] "
              f"{rate(r['chance']):>6} {r['tie_rate']:>6.1%} {r['parse_failure_rate']:>10.1%} "
              f"{share(r['within_noise_rate']):>8}" + (thinking_shares(r) if thinking else ""))
    for warning in result.warnings:
        print(warning)
    print(COLUMNS_MEAN)


def cell_count(spec) -> str:
    """``3 cells (1 label, 1 gen, 1 cloze)``: every cell the run writes, the fixed cloze and
    judgement cells and each generation cell included (the line counted label cells alone)."""
    from collections import Counter
    from dataclasses import replace

    from cube.harness.run_spec import plan_jobs

    every = plan_jobs(replace(spec, shard=(0, 1)))  # every cell, whichever shard this process runs
    kinds = Counter(kind for kind, _ in dict.fromkeys((j.kind, j.cell_name) for j in every))
    total = sum(kinds.values())
    return f"{total} cell{'s' if total != 1 else ''} ({', '.join(f'{n} {kind}' for kind, n in kinds.items())})"


def _needs(args: argparse.Namespace) -> tuple[str, ...]:
    """The modules a run needs before it starts: the store's pyarrow, and torch with transformers for
    a model run here (a served model needs neither; vLLM's own environment is checked apart)."""
    needs = ("pyarrow", "torch", "transformers") if args.backend == "hf" else ("pyarrow",)
    # --report builds the site after the run: its stack is checked before hours of scoring, not after
    return needs + (("scipy", "papermill", "jupytext", "ipykernel", "jupyter_book", "altair")
                    if getattr(args, "report", None) is not None else ())


def run(args: argparse.Namespace) -> int:
    from cube.harness.build import build_spec as build
    from cube.harness.resume import resume_plan
    from cube.harness.runner import run as run_spec
    from cube.records.store import create_store, writer_lock

    from cube.harness.build import degenerate_warnings, model_of
    from cube.protocol.user_file import option_warnings
    from cube.tokenizers.audit import format_run_audit

    check_out(args.out)
    if args.report is not None:
        from cube.report.site import check_out as check_report_out

        check_report_out(args.report)
    config = RunConfig.from_cli(args)  # the arguments, checked once, as one typed object
    model = model_of(config)  # a SPEC parsed, or the server behind --base-url asked for its models
    spec = build(config, model)  # every setting is checked, every prompt tried, every cell audited: before a model loads
    with writer_lock(config.out):  # one writer per store, from the resume check to the run log
        create_store(config.out)  # at once, so that the folder reads as a store (check_out) from now on
        plan = resume_plan(spec, config.out)  # the store's recorded configuration, each done shard re-checked
        for line in plan.broken:
            print(line, file=sys.stderr)
        # the audit made before the weights load; printed once the store has taken the run, so
        # that a refused run is its one error line
        print(format_run_audit(spec.model, list(spec.settings.audit)), end="", file=sys.stderr)
        for line in spec.settings.notes:  # what the run chose for the user's file: said, never silent
            print(line, file=sys.stderr)
        for line in degenerate_warnings(spec) + option_warnings(list(spec.items)):
            print(f"WARNING: {line}", file=sys.stderr)
        dtype = spec.settings.dtype
        print(f"{spec.model}: {len(spec.items)} items x {cell_count(spec)}, {len(plan.todo)} shards to run, "
              f"{plan.done} already done (config {spec.config_hash()}); {dtype or 'precision'} ({spec.settings.dtype_reason}); "
              f"model {spec.settings.model_source}, sha256 {spec.settings.model_sha256[:16]}...",
              file=sys.stderr)
        if not plan.todo:
            from cube.harness.run_spec import plan_jobs

            if not plan_jobs(spec):  # a --shard K/N with no chunk: its run log line tells the merge K was run
                from dataclasses import replace

                from cube.harness.runner import IdleBackend

                run_spec(IdleBackend(), spec, config.out, model_sha256=spec.settings.model_sha256, plan=plan,
                         progress=False)
                print(f"shard {config.shard[0]}/{config.shard[1]} holds none of the run's "
                      f"{len(plan_jobs(replace(spec, shard=(0, 1))))} shards: nothing to score; logged for "
                      "the merge", file=sys.stderr)
            print_scores(config.out, spec)
            finish(config.out, args.report)
            return 0
        from cube.harness.backends import open_backend

        backend = open_backend(config.backend, model, dtype=dtype, device=config.device)
        # The plan is this lock's: the library neither re-tries the prompts nor re-plans the resume.
        log = run_spec(backend, spec, config.out, model_sha256=spec.settings.model_sha256, plan=plan)
    print(f"wrote {log['records_written']} records in {log['jobs_run']} shards, {log['wall_s']} s", file=sys.stderr)
    served = getattr(backend, "served", None)
    if served is not None:
        from collections import Counter

        reasons = ", ".join(f"{r} {n}" for r, n in sorted(Counter(map(str, backend.finish_reasons)).items()))
        cache = log.get("server_prefix_cache")
        print(f"server: {served.requests} requests, {served.prompts} prompts ({served.fast_prompts} on the fast path), "
              f"{served.prompt_tokens} prompt tokens read"
              + (f" ({cache['hits']:.0f} of {cache['queries']:.0f} looked up from the prefix cache)" if cache else "")
              + f", {backend.client.retried} retries" + (f"; generations' finish reasons: {reasons}" if reasons else ""),
              file=sys.stderr)
    print_scores(config.out, spec)
    finish(config.out, args.report)
    return 0
