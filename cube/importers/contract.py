"""The one contract every importer follows, and the one writer of imported records.

An importer reads another harness's output folder and turns it into :class:`Decision` s (one
per item, scorer and protocol cell: numbers and the item it was matched to, never benchmark
text) and a manifest ``metadata`` dict (what the harness logged about how it scored). Everything
after that is shared, so that an imported record means what a record of ``cube run`` means:

- :func:`records` builds every row through :func:`cube.records.schema.record_row`, the builder
  cube's own harness uses;
- :func:`check_metadata_clean` refuses a manifest that quotes the benchmark;
- :func:`write_store` writes the store all or nothing;
- each importer describes the protocol of a stored cell as a :class:`ScoringProtocol` (template,
  label tokens, normalisation, extractor, aggregation), read by ``cube explain`` without knowing
  which harness wrote the store (``cube.importers.registry``).

Adding a harness is one module with a :class:`HarnessImporter` (and its entry in the registry)
plus its test; a larger importer is a package of one module per step, its ``importer`` module
holding the :class:`HarnessImporter` (``cube.importers.lm_eval``, ``cube.importers.opencompass``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cube.errors import HarnessImportError, WriteError
from cube.files import check_within
from cube.protocol.items import Item
from cube.protocol.scorers import ScoreResult

# The splits an import matches against: a harness's prompts may quote any split (dev exemplars).
BENCHMARK_SPLITS = {"cmmlu": ("dev", "test"), "ceval": ("dev", "val", "test")}

# --------------------------------------------------------------------------------------------
# What an importer produces
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """One imported decision, before it is a record: the item it was matched to, the scorer and
    cell it was made under, and either a scored ``result`` or a generation's extracted ``pred``."""

    item: Item
    scorer: str
    cell: tuple[str, str, int, str]  # label_set, context, shots, order
    gold: int
    result: ScoreResult | None  # a scored decision; None: a generation (``pred``, ``generation``)
    pred: int | None = None  # a generation's extracted answer; None: a parse failure
    generation: str | None = None
    first_token_ids: Sequence[int] | None = None
    n_tokens: Sequence[int] | None = None
    thinking: str | None = None  # cube.protocol.thinking's outcome of cube's re-read; None: not recorded


def generation_decisions(item: Item, cell: tuple[str, str, int, str], gold: int, scorer: str,
                         harness_pred: int | None, text: str, labels: Sequence[str],
                         leakage: Any | None, parse_failed: dict[str, int]) -> list[Decision]:
    """The records of one generation: the harness's own answer (``scorer``, ``harness_pred``) and
    cube's strict and lenient extraction beside it (the scorer table's M6), the text stored scrubbed
    of the item's text where ``leakage`` (a ``cube.records.leakage`` index) is given; each answer
    not found counts in ``parse_failed`` under its scorer. cube's extractors read the text after a
    thinking block (``cube.protocol.thinking``), as on cube's own generations; the logs say nothing of
    why a generation ended, so an unclosed block is no answer after thinking, never a truncation."""
    from cube.protocol.scorers import SCORERS
    from cube.protocol.thinking import split_thinking, thinking_outcome

    split = split_thinking(text)
    strict, lenient = SCORERS["M6"].score(split.answer_text, labels, list(item.options))
    if leakage is not None:
        from cube.records.leakage import scrub

        text = scrub(text, item.question, item.options, index=leakage).text
    out = []
    for name, pred in zip((scorer, *SCORERS["M6"].records), (harness_pred, strict, lenient)):
        if pred is None:
            parse_failed[name] = parse_failed.get(name, 0) + 1
        ours = name != scorer  # the harness's own answer is as it logged it: its reading, not cube's
        out.append(Decision(item, name, cell, gold, None, pred=pred, generation=text,
                            thinking=thinking_outcome(split, pred is not None, None) if ours else None))
    return out


def records(model: str, decisions: Sequence[Decision]) -> list[dict]:
    """The records of ``decisions``, each built by ``record_row`` as cube's own harness builds them."""
    from cube.records.schema import record_row  # pyarrow: not needed to list the importers (cube --help)

    return [record_row(model, d.item, d.scorer, d.cell, d.gold, d.result, pred=d.pred, generation=d.generation,
                       first_token_ids=d.first_token_ids, n_tokens=d.n_tokens, thinking=d.thinking) for d in decisions]


@dataclass
class Imported:
    """An import before it is written: the records, what each unit of the run (an lm-eval task, an
    OpenCompass dataset) contributed, and what the manifest keeps."""

    model: str
    decisions: list[Decision]
    units: list[Any]  # the importer's own per-task (per-dataset) summaries, for its report
    metadata: dict[str, Any]

    @property
    def rows(self) -> list[dict]:
        return records(self.model, self.decisions)


@dataclass(frozen=True)
class ScoringProtocol:
    """How one side of a comparison was scored, as its records' store says; None where it does not.

    ``cube explain`` compares two of these field by field; an importer builds one from the
    manifest it wrote (``HarnessImporter.describe``), cube's own records from cube's templates.
    """

    harness: str  # cube | lm-eval | OpenCompass | ...
    prompt: str | None  # template up to where the label is written, placeholders for item text
    label_prefix: str | None  # written between the prompt and the label (lm-eval's target_delimiter)
    tokenization: str | None  # how the label's tokens are cut from the prompt's
    normalisation: str  # what the scorer normalises over (or how it decides)
    audit_verdict: str | None  # the tokenizer audit's verdict of this cell (DEGEN, max1tok, ...)
    decides_as: str | None = None  # another scorer whose decisions this one's equal on these items
    extractor: str | None = None  # how an answer is read off a generation; None for scored options
    aggregation: str | None = None  # how the harness turned decisions into its reported number
    # "micro" or "macro": how the harness averages a benchmark's subjects into the number it
    # reports (the records' mean, or the mean of subjects' means); what ``agg=harness`` selects
    headline: str | None = None
    # "none" (the plain prompt) or "model (template sha256 ...)": the chat-template axis
    # (cube.protocol.chat); None where the store does not say
    chat_template: str | None = None
    # the sha256 of the template's UTF-8 text where the store recorded it (cube's cells, lm-eval's
    # chat_template_sha): two "model" sides are the same template only where both digests say so
    chat_template_sha256: str | None = None
    # what each few-shot exemplar shows (EXEMPLARS_*): "none" at 0 shots; None where the store does
    # not say. The exemplars' place in the prompt is EXEMPLAR_SLOT, so that their count and content
    # are a factor of their own, apart from the prompt's bytes (EvalScope's C-Eval exemplars carry a
    # worked explanation; cube's, lm-eval's and OpenCompass's the answer alone)
    exemplars: str | None = None
    # the precision the harness ran the model in, as its logged configuration says (an import's
    # records may not carry one); None where it does not say (a served model: the server's)
    dtype: str | None = None

    @property
    def generation(self) -> bool:
        """Whether the side reads its answer off a generation (no label is scored)."""
        return self.extractor is not None and self.extractor != SCORED_DECISION

    def full_text(self) -> str | None:
        """What the model reads, label included: equal full texts with a different split differ
        only in how the label is tokenized. A generation's is its prompt (no label is written)."""
        if self.prompt is None:
            return None
        if self.generation:
            return self.prompt
        if self.label_prefix is None:
            return None
        return self.prompt + self.label_prefix + "{{label}}"

    def text_without_exemplars(self) -> str | None:
        """The full text with the exemplars' slot taken out: what ``prompt_bytes`` compares."""
        text = self.full_text()
        return None if text is None else text.replace(EXEMPLAR_SLOT, "")


# Where a prompt's few-shot exemplars go (a placeholder, never their text), and what they show.
EXEMPLAR_SLOT = "{{exemplars}}"
EXEMPLARS_NONE = "none"
EXEMPLARS_ANSWER = "question, options, then the answer label"
EXEMPLARS_EXPLANATION = "question, options, a worked explanation (解析), then the answer label"


def exemplars_of(shots: int, content: str | None) -> str | None:
    """A side's exemplars as ``ScoringProtocol.exemplars``: "none" at 0 shots, else the count and
    what each shows (None where the content is not known)."""
    if int(shots) == 0:
        return EXEMPLARS_NONE
    return None if content is None else f"{int(shots)} exemplars: {content}"


def dtype_name(value: object) -> str | None:
    """A logged precision as cube names it: ``torch.float32`` and ``float32`` are ``float32``;
    None for anything else (``auto`` says nothing of what ran)."""
    name = str(value).removeprefix("torch.") if value is not None else ""
    return name if name in ("float32", "bfloat16", "float16") else None


# How a side's chat form is compared: its kind, the text before the first space ("none" or "model").
def chat_kind(chat_template: str | None) -> str | None:
    return None if chat_template is None else chat_template.split(" ", 1)[0]


CHAT_BY_SERVER = "model (the server's, behind a chat completions API)"


# The extractor of each stored generation scorer, and the decision rule of every scored one.
EXTRACTORS = {
    "M6-strict": "cube's strict extractor (the last 答案：X)",
    "M6-lenient": "cube's lenient extractor (答案：X, 答案是X, 选X, a bare label, an option's text)",
    "M6-oc": "OpenCompass's first_capital_postprocess (the first capital letter anywhere)",
    "M6-es": "EvalScope's parse_answers_zh (the last 答案：X, else its fallback), as its review logged it",
    "M6-inspect": "inspect_ai's choice scorer (the letters after ANSWER:), as its log logged it",
}
SCORED_DECISION = "argmax of the scores, the first option on a tie"


def extractor_of(scorer: str) -> str:
    """How the scorer's records turn what the model did into an answer."""
    return EXTRACTORS.get(scorer, SCORED_DECISION)


@dataclass(frozen=True)
class RunsRead:
    """What an importer read of a folder before any item is matched: enough to load the benchmark
    and the tokenizer the audit needs."""

    runs: tuple[Any, ...]  # the importer's own run records
    benchmark: str  # cmmlu | ceval
    model: str | None  # the records' model name the run gives; None: it names none (--model)
    tokenizer_spec: str | None  # the tokenizer the run names; None: it names none (--tokenizer)
    where: str  # the file that would have named them, for messages


@dataclass(frozen=True)
class HarnessImporter:
    """One harness ``cube import`` reads: its command's texts and the importer's functions.

    ``read(folder, benchmark)``: the runs below ``folder`` (``benchmark``: the user's --benchmark,
    for importers whose runs may not say). ``run(runs, items, model, tokenizer, family,
    tokenizer_source)``: the :class:`Imported` of ``RunsRead.runs``, nothing written. ``describe(metadata, cell,
    contexts, normalisation)``: one stored cell's :class:`ScoringProtocol`.
    """

    name: str  # cube import NAME
    source: str  # the manifest's metadata.source of a store it wrote
    label: str  # the harness's name in reports and explain
    help: str
    folder_help: str
    model_help: str
    read: Callable[[Path, str | None], RunsRead]
    run: Callable[..., Imported]
    format_report: Callable[[Imported, Path | None], str]
    report_json: Callable[[Imported, Path | None], dict[str, Any]]
    describe: Callable[[Mapping[str, Any], Mapping[str, Any], Sequence[str], str], ScoringProtocol]
    benchmark_option: bool = False  # whether --benchmark is offered (the runs may not say)
    audits: bool = True  # whether its records have label tokens a tokenizer audit judges (generations: no)


# --------------------------------------------------------------------------------------------
# Checks every import makes
# --------------------------------------------------------------------------------------------


def refuse_used_out(out: Path) -> None:
    """An import writes a new store: an existing file or non-empty folder is refused first."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise HarnessImportError(f"--out {out} exists and is not an empty folder; give a new one")


def one_benchmark(benchmarks: set[str]) -> str:
    """The one benchmark of a folder's runs; a mix is refused (records name one benchmark's items)."""
    if len(benchmarks) != 1:
        raise HarnessImportError(f"the run mixes benchmarks ({', '.join(sorted(benchmarks))}); "
                                 "import one benchmark at a time")
    return next(iter(benchmarks))


# A name from a harness's config that names a folder or file of its output (a model, a dataset, a
# subset): one with a separator or "..", such as "../../elsewhere", would read outside the folder given.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,199}$")


def plain_name(kind: str, value: Any, where: str | Path) -> str:
    """``value`` where it is a plain name (letters, digits, _ . + -), else one line naming it."""
    if not isinstance(value, str) or not _PLAIN_NAME.match(value) or ".." in value:
        raise HarnessImportError(f"{where}: {kind} {str(value)[:60]!r} is not a plain name (letters, "
                                 "digits, _ . + -); it would name a file outside this folder")
    return value


def one_model(names: set[str], given: str | None, kind: str = "model") -> str:
    """The records' model name: ``given`` (--model, a plain name), else the runs' one model; runs
    of several models are refused (a store's records of one import are one model's)."""
    if len(names) != 1:
        raise HarnessImportError(f"the folder holds runs of {len(names)} models ({', '.join(sorted(names))}); "
                                 "import each model's runs on their own")
    return plain_name(kind, given, "--model") if given else next(iter(names))


def run_folders(folder: str | Path, predictions: str, harness: str, give: str) -> list[Path]:
    """The run folders at or below ``folder``: each the grandparent's parent of a ``predictions``
    glob match (``**/predictions/*/*.json``), none of them outside ``folder``. ``give``: what the
    user should give instead, for the message."""
    folder = Path(folder)
    if not folder.is_dir():
        raise HarnessImportError(f"{folder}: not a folder (give {give})")
    found = sorted({p.parents[2] for p in folder.glob(predictions)})
    if not found:
        raise HarnessImportError(f"{folder}: no {predictions.removeprefix('**/')} below it; not {harness} output "
                                 "folder")
    for run in found:
        check_within(run, folder, HarnessImportError, f"{harness.split(' ', 1)[-1]} run folder")
    return found


def items_by_hash(items: Sequence[Item]) -> dict[str, list[Item]]:
    """The benchmark's items by question hash, the key every importer matches a prompt's question by."""
    out: dict[str, list[Item]] = {}
    for item in items:
        out.setdefault(item.qhash, []).append(item)
    return out


def check_metadata_clean(metadata: Mapping[str, Any], items: Sequence[Item]) -> None:
    """Refuse a manifest that would quote the benchmark (e.g. fewshot samples inlined in a config),
    under the rules a generation is audited by (``cube.records.leakage.audit_metadata``)."""
    from cube.records.leakage import audit_metadata, build_index

    texts, hits = audit_metadata(metadata, build_index(items))
    if hits:
        encoded = f", {hits[0].encoding}" if hits[0].encoding else ""
        raise HarnessImportError(
            f"the logged task configuration quotes benchmark text ({len(hits)} span(s), e.g. a {hits[0].kind}"
            f"{encoded} at offset {hits[0].offset} of a {len(texts[hits[0].text])}-character field); nothing written"
        )


def write_store(out: str | Path, imported: Imported) -> Path:
    """Write the records as a new store at ``out``, all or nothing.

    The store is written and read back (every check a reader makes) in a hidden sibling folder,
    then renamed into place: a failure at any step leaves no ``out`` at all.
    """
    from cube.records.store import from_columns, read_records, write_records

    out = Path(out)
    refuse_used_out(out)
    rows = imported.rows
    if not rows:
        raise HarnessImportError("no records to write")
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    table = from_columns(columns, len(rows))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    except OSError as exc:
        raise WriteError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        write_records(staging, table, metadata=imported.metadata)
        read_records(staging)
        (staging / ".manifest.lock").unlink(missing_ok=True)
        if out.exists():
            out.rmdir()
        os.rename(staging, out)
    except OSError as exc:
        raise WriteError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out
