"""The paper's claims as the bundle's CLAIMS.md lists them, read from the book's plan.

Which claims there are, their numbers and titles, come from ``config/notebooks.yaml`` and each
claim notebook's heading (``# Claim N: title``), the one place a claim is added: a claim the
bundle listed by hand fell behind (claim 9 was missing). What only the bundle knows, a one-line
statement and the commands that reproduce a claim inside the bundle, is kept here by notebook.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube.errors import ConfigError
from cube.release.layout import PREDICTION_PATH, RECORDS_DIR

# A claim notebook's name: its claim's number, then what it is about (00 is the paper page).
_CLAIM_NAME = re.compile(r"^(\d{2})_[A-Za-z0-9_]+$")
_CLAIM_HEADING = re.compile(r"^Claim (\d+): (.+)$")


@dataclass(frozen=True)
class Claim:
    number: int
    title: str
    statement: str
    notebook: str  # the notebook's name (its source is notebooks/<name>.md)
    commands: tuple[str, ...] = ()  # direct CLI reproductions, run inside the bundle


# What the bundle says of each claim beyond its notebook's heading, by notebook name.
_CONFIRM = f"cube confirm {RECORDS_DIR} --prediction {PREDICTION_PATH}"
CLAIM_DETAILS: dict[str, tuple[str, tuple[str, ...]]] = {
    "01_tokenizer_audit": ("First-token scoring is degenerate exactly in the cells the tokenizer audit "
                           "predicts, before any model runs.", (f"cube audit --check {PREDICTION_PATH}",)),
    "02_preregistered_tests": ("The frozen predictions hold on the observed records; in the flagged cells "
                               "full-sequence scoring recovers accuracy (McNemar).", (_CONFIRM,)),
    "03_rank_instability": ("The footrule between two defensible protocols, set against the "
                            "within-protocol noise floor (mean, 95th percentile, multiple), for the strict "
                            "and the lenient extractor.", ()),
    "04_partial_collision": ("Which labels tie and what the tie-break decides.", (_CONFIRM,)),
    "05_leakage": ("The released records carry no benchmark text; the scrub statistics.",
                   ("cube release verify . --items CMMLU_DIR",)),
    "06_whitespace": ("`Answer:` + ` A` against `Answer: ` + `A`: accuracy (McNemar), ECE and rank changes "
                      "per model, with the label tokenized in context and apart.", ()),
    "07_partial_credit": ("The ladder against additive scoring, random baselines, the best fixed answer "
                          "string and a percentile placement.", ()),
    "08_benchmark_practice": ("Per-subject, per-category and Hard-subset accuracy, parse failures, "
                              "answer-only against chain-of-thought, a regression table.",
                              (f"cube rescore {RECORDS_DIR} --level category",)),
    "09_lm_eval_import": ("An lm-evaluation-harness run's own logs, imported as cube records (uid and "
                          "question hash only), and the protocol it was scored under audited.", ()),
    "10_three_harnesses": ("One demo model scored on the same CMMLU items by cube, lm-evaluation-harness, "
                           "OpenCompass, EvalScope and inspect_ai; each pair's gap split into named factors "
                           "(`cube explain`).", ()),
}


def _heading(source: Path) -> str | None:
    """The notebook's first level-1 heading, read from its MyST source (None if it has none)."""
    for line in source.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return None


def claims(plan: Sequence[Any]) -> tuple[Claim, ...]:
    """Each claim of the paper, in number order: the plan's runs of a claim notebook.

    A claim notebook is a run named ``NN_...`` (NN > 0) after its own source, run without
    parameters (a run with parameters, such as ``01_tokenizer_audit_roman``, restates its
    notebook's claim). Its heading must read ``Claim NN: title``; a source not yet written keeps
    the claim, titled by its name, so that the checklist says it is missing.
    """
    out = []
    for run in plan:
        source = Path(run.source)
        match = _CLAIM_NAME.match(run.name)
        if not match or int(match.group(1)) == 0 or run.name != source.stem or run.parameters:
            continue
        number, title = int(match.group(1)), run.name
        heading = _heading(source) if source.is_file() else None
        if heading is not None:
            claim = _CLAIM_HEADING.match(heading)
            if not claim or int(claim.group(1)) != number:
                raise ConfigError(f"{source}: heading {heading!r} is not 'Claim {number}: <title>' "
                                  f"(its name {run.name} gives claim {number})")
            title = claim.group(2)[:1].upper() + claim.group(2)[1:]
        statement, commands = CLAIM_DETAILS.get(run.name, ("", ()))
        out.append(Claim(number, title, statement, run.name, commands))
    numbers = [c.number for c in out]
    if len(set(numbers)) != len(numbers):
        raise ConfigError(f"config/notebooks.yaml: two claim notebooks share a number ({numbers})")
    return tuple(sorted(out, key=lambda c: c.number))


def claims_checklist(plan: Sequence[Any], repo_root: Path) -> str:
    """CLAIMS.md: each claim -> its notebook and the commands that reproduce it.

    A claim whose notebook source is missing is marked "not yet written", so the checklist never
    promises what cannot be run.
    """
    lines = [
        "# Claims checklist",
        "",
        "Each claim of the paper, the notebook that computes it from these records (and states it",
        "as an assertion), and the command that re-executes it. Notebook commands run in a",
        "checkout of the cube repository; the other commands run inside this bundle.",
        "",
        "| # | Claim | Notebook | Status | Reproduce |",
        "|---|-------|----------|--------|-----------|",
    ]
    listed = claims(plan)
    for claim in listed:
        source = next(Path(r.source) for r in plan if r.name == claim.notebook)
        present = source.is_file()
        try:
            shown = source.relative_to(repo_root).as_posix()
        except ValueError:
            shown = source.as_posix()
        if present:
            status = "present"
            commands = [f"`cube book execute --only {claim.notebook}`"]
        else:
            status = "**not yet written**"
            commands = []
        commands += [f"`{c}`" for c in claim.commands]
        reproduce = "<br>".join(commands) if commands else "—"
        statement = f" {claim.statement}" if claim.statement else ""
        lines.append(f"| {claim.number} | **{claim.title}.**{statement} | `{shown}` | "
                     f"{status} | {reproduce} |")
    n_present = sum("| present |" in line for line in lines)
    lines += ["", f"{n_present} of {len(listed)} claim notebooks present.", ""]
    return "\n".join(lines)
