"""``cube run``: score a model on benchmark items under protocol cells, writing records."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    p = subparsers.add_parser("run", help="score a model under protocol cells; resumable Parquet records")
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
    p.add_argument("--label-sets", type=comma_list("--label-sets"), default=",".join(D("label_sets")),
                   help=f"comma-separated label sets (default {','.join(D('label_sets'))}; the study's: L1_halfwidth, "
                        "L2_fullwidth, L3_ganzhi, L4_circled). Your own: add it to label_sets.yaml in a copy of "
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
    served.add_argument("--request-timeout", type=float, metavar="S", help="seconds per request (default 120)")
    p.set_defaults(func=run)


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
    """Each cell's score of this run's model and scorers in the store, with its shares of tied
    decisions and parse failures beside it (issue 36 §4): a run ends with its results, as every other
    harness's does, and a tie-break's accuracy never stands as a plain number. The same warnings as
    ``cube rescore`` follow."""
    from cube.analysis.rescore import rescore, select
    from cube.records.store import read_records

    from cube.commands.rescore import _share, shows_thinking, thinking_header, thinking_shares, with_noise_marks

    from cube.records.schema import record_names

    # the records' scorer names: M6 and M6-cot write M6-strict and M6-lenient (a run of those showed no table)
    table = select(read_records(out, verify=False, allow_incomplete=True), model=spec.model,
                   scorer=list(record_names(spec.scorers)))
    if table.num_rows == 0:
        return
    result = rescore(with_noise_marks(table, str(out)), level="overall")
    rows = [r for r in result.rows.to_pylist() if r["aggregation"] == "micro"]
    thinking = shows_thinking(rows)  # a reasoning checkpoint's no-answer shares, where it had some
    print(f"{'cell':<58} {'n':>5} {'acc':>6}  {'95% CI':<15} {'tied':>6} {'parse-fail':>10} {'in-noise':>8}"
          + (thinking_header() if thinking else ""))
    for r in rows:
        cell = f"{r['model']} {r['scorer']} {r['label_set']} {r['context']} {r['shots']}-shot {r['order']}"
        print(f"{cell:<58} {r['n']:>5} {r['accuracy']:>6.3f}  [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}] "
              f"{r['tie_rate']:>6.1%} {r['parse_failure_rate']:>10.1%} {_share(r['within_noise_rate']):>8}"
              + (thinking_shares(r) if thinking else ""))
    for warning in result.warnings:
        print(warning)


def run(args: argparse.Namespace) -> int:
    from cube.harness.build import build_spec as build
    from cube.harness.runner import resume_plan
    from cube.harness.runner import run as run_spec
    from cube.records.store import create_store, writer_lock

    from cube.harness.build import degenerate_warnings, model_of
    from cube.protocol.user_file import option_warnings
    from cube.tokenizers.audit import format_run_audit

    check_out(args.out)
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
        for line in degenerate_warnings(spec) + option_warnings(list(spec.items)):
            print(f"WARNING: {line}", file=sys.stderr)
        dtype = spec.settings.dtype
        print(f"{spec.model}: {len(spec.items)} items x {len(spec.cells)} cells, {len(plan.todo)} shards to run, "
              f"{plan.done} already done (config {spec.config_hash()}); {dtype} ({spec.settings.dtype_reason}); "
              f"model {spec.settings.model_source}, sha256 {spec.settings.model_sha256[:16]}...",
              file=sys.stderr)
        if not plan.todo:
            print_scores(config.out, spec)
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
        print(f"server: {served.requests} requests, {served.prompts} prompts, {served.prompt_tokens} prompt tokens "
              f"read, {backend.client.retried} retries" + (f"; generations' finish reasons: {reasons}" if reasons else ""),
              file=sys.stderr)
    print_scores(config.out, spec)
    return 0
