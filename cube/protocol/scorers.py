"""Scorers: turn the log-probabilities a backend returns into one score per option.

Each scorer is a short pure function so that one forward pass feeds all of them and any of them
can be re-run later from stored log-probabilities. Sums are taken in float64 so that a scorer
agrees with a naive reference to float error whatever dtype the backend used.

Ties are never hidden: options whose scored token ids are identical (e.g. two labels that share
a first token under M1-strict) get identical scores by construction, are listed in
``tie_groups``, and a prediction decided by the tie-break (the first option in order) is
flagged ``tied``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cube.protocol.extract import extract_lenient, extract_strict

TIE_BREAK = "first_in_order"  # the rule applied when several options share the top score


@dataclass(frozen=True)
class ContinuationScores:
    """What a backend returns for one option's continuation."""

    token_ids: np.ndarray  # the continuation's token ids (int)
    logprobs: np.ndarray  # log p(token_i | context, tokens_<i), one per token
    text: str  # the continuation text (M4 divides by its UTF-8 bytes)
    unconditional_logprobs: np.ndarray | None = (
        None  # same tokens after the unconditional context (M5)
    )

    def __post_init__(self) -> None:
        ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        lps = np.asarray(self.logprobs, dtype=np.float64).reshape(-1)
        if ids.size == 0 or ids.size != lps.size:
            raise ValueError(
                f"continuation {self.text!r}: {ids.size} token ids, {lps.size} logprobs"
            )
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "logprobs", lps)
        if self.unconditional_logprobs is not None:
            unc = np.asarray(self.unconditional_logprobs, dtype=np.float64).reshape(-1)
            if unc.size != ids.size:
                raise ValueError(
                    f"continuation {self.text!r}: {unc.size} unconditional logprobs, "
                    f"{ids.size} tokens"
                )
            object.__setattr__(self, "unconditional_logprobs", unc)


@dataclass(frozen=True)
class ScoreResult:
    """A scorer's decision for one item."""

    pred: int  # the predicted option (after the tie-break)
    tied: bool  # True when more than one option shares the top score
    tie_groups: tuple[tuple[int, ...], ...]  # options tied by construction (identical token ids)
    scores: np.ndarray  # one score per option (higher is better)
    tie_break: str = TIE_BREAK


StrictResult = ScoreResult  # the name M1-strict's callers use


def _sums(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return np.array([np.sum(a, dtype=np.float64) for a in arrays], dtype=np.float64)


def _lengths(arrays: Sequence[np.ndarray]) -> np.ndarray:
    lengths = np.array([np.size(a) for a in arrays], dtype=np.float64)
    if np.any(lengths == 0):
        raise ValueError(f"empty continuation at option {int(np.argmin(lengths))}")
    return lengths


def tie_groups(keys: Sequence[Hashable]) -> tuple[tuple[int, ...], ...]:
    """Groups (size >= 2) of option indices whose keys are equal, in order of first appearance."""
    groups: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def decide(scores: np.ndarray, groups: tuple[tuple[int, ...], ...] = ()) -> ScoreResult:
    """Argmax with the tie-break made explicit.

    Members of a tie group scored the same tokens in the same context, so they get the group's
    first member's score: a numerical wobble between batches cannot hide a tie.
    """
    scores = np.array(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"expected one score per option, got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError(f"NaN score at option {int(np.argmax(np.isnan(scores)))}")
    for group in groups:
        scores[list(group)] = scores[group[0]]
    pred = int(np.argmax(scores))  # numpy returns the first maximum: the tie-break rule
    tied = int(np.count_nonzero(scores == scores[pred])) > 1
    return ScoreResult(pred=pred, tied=tied, tie_groups=groups, scores=scores)


# --- the scorers over arrays --------------------------------------------------------------------


def m1_seq(label_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M1-seq: log p(full label token sequence | prompt) per label."""
    _lengths(label_token_logprobs)
    return _sums(label_token_logprobs)


def m1_strict(first_token_logprobs: Sequence[float], first_token_ids: Sequence[int]) -> ScoreResult:
    """M1-strict: argmax of each label's first-token log-probability.

    Labels sharing a first token id are indistinguishable here; they tie by construction.
    """
    if len(first_token_logprobs) != len(first_token_ids):
        raise ValueError(
            f"{len(first_token_logprobs)} first-token logprobs but {len(first_token_ids)} token ids"
        )
    ids = [int(i) for i in first_token_ids]
    return decide(np.asarray(first_token_logprobs, dtype=np.float64), tie_groups(ids))


def m2_sum(option_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M2: raw sum of the option text's log-probabilities (favours short options)."""
    _lengths(option_token_logprobs)
    return _sums(option_token_logprobs)


def m3_mean(option_token_logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """M3: mean log-probability per token (length normalisation by the tokenizer's count)."""
    return _sums(option_token_logprobs) / _lengths(option_token_logprobs)


def m4_per_byte(
    option_token_logprobs: Sequence[np.ndarray], option_texts: Sequence[str]
) -> np.ndarray:
    """M4: log-probability per UTF-8 byte, a length normalisation that is tokenizer-independent."""
    if len(option_token_logprobs) != len(option_texts):
        raise ValueError(f"{len(option_token_logprobs)} options but {len(option_texts)} texts")
    _lengths(option_token_logprobs)
    n_bytes = np.array([len(t.encode("utf-8")) for t in option_texts], dtype=np.float64)
    if np.any(n_bytes == 0):
        raise ValueError(f"empty option text at option {int(np.argmin(n_bytes))}")
    return _sums(option_token_logprobs) / n_bytes


def m5_pmi(conditional: Sequence[np.ndarray], unconditional: Sequence[np.ndarray]) -> np.ndarray:
    """M5: log p(option | question, cue) - log p(option | cue alone), which removes the option's
    prior plausibility (pointwise mutual information)."""
    if len(conditional) != len(unconditional):
        raise ValueError(
            f"{len(conditional)} conditional but {len(unconditional)} unconditional options"
        )
    for i, (c, u) in enumerate(zip(conditional, unconditional)):
        if np.size(c) != np.size(u):
            raise ValueError(
                f"option {i}: {np.size(c)} conditional but {np.size(u)} unconditional tokens"
            )
    _lengths(conditional)
    return _sums(conditional) - _sums(unconditional)


def option_distribution(scores: np.ndarray) -> np.ndarray:
    """Softmax over the options (last axis): the probabilities ECE is computed from.

    Shifted by the row maximum so that log-probability sums of -1e4 do not underflow to 0/0.
    """
    scores = np.asarray(scores, dtype=np.float64)
    top = np.max(scores, axis=-1, keepdims=True)
    if not np.all(np.isfinite(top)):
        raise ValueError("every row of scores needs at least one finite score")
    weights = np.exp(scores - top)
    return weights / np.sum(weights, axis=-1, keepdims=True)


# --- the registry: one uniform signature over ContinuationScores --------------------------------


def _token_keys(options: Sequence[ContinuationScores]) -> list[tuple[int, ...]]:
    return [tuple(o.token_ids.tolist()) for o in options]


def score_m1_seq(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m1_seq([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m1_strict(options: Sequence[ContinuationScores]) -> ScoreResult:
    return m1_strict([o.logprobs[0] for o in options], [o.token_ids[0] for o in options])


def score_m2(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m2_sum([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m3(options: Sequence[ContinuationScores]) -> ScoreResult:
    return decide(m3_mean([o.logprobs for o in options]), tie_groups(_token_keys(options)))


def score_m4(options: Sequence[ContinuationScores]) -> ScoreResult:
    scores = m4_per_byte([o.logprobs for o in options], [o.text for o in options])
    return decide(scores, tie_groups(_token_keys(options)))


def score_m5(options: Sequence[ContinuationScores]) -> ScoreResult:
    missing = [i for i, o in enumerate(options) if o.unconditional_logprobs is None]
    if missing:
        raise ValueError(f"M5 needs unconditional logprobs; option(s) {missing} have none")
    scores = m5_pmi([o.logprobs for o in options], [o.unconditional_logprobs for o in options])
    return decide(scores, tie_groups(_token_keys(options)))


def score_m4_char(loglikelihoods: Sequence[float], choices: Sequence[str]) -> ScoreResult:
    """M4-char: a choice's summed log-likelihood per character, lm-evaluation-harness's acc_norm.

    Read from an imported run's logged totals (there are no per-token log-probabilities to
    share), so no tie groups: the import records its own from the tokens lm-eval scored.
    """
    totals = np.asarray(loglikelihoods, dtype=np.float64)
    if totals.shape != (len(choices),):
        raise ValueError(f"{totals.size} log-likelihoods but {len(choices)} choices")
    return decide(totals / np.array([max(len(c), 1) for c in choices], dtype=np.float64))


def score_oc_ppl(ppls: Sequence[float]) -> ScoreResult:
    """OC-ppl: OpenCompass's PPL mode, the label whose whole prompt has the lowest perplexity
    (the mean cross-entropy over the prompt, not the label alone); read from an imported run."""
    return decide(-np.asarray(ppls, dtype=np.float64))


def extract_oc_gen(text: str, labels: Sequence[str]) -> int | None:
    """M6-oc: OpenCompass's ``first_capital_postprocess``, the first upper-case letter anywhere in
    the generation; None when it is no label (OpenCompass counts that wrong, cube a parse failure)."""
    first = next((ch for ch in text if ch.isupper()), "")
    return list(labels).index(first) if first in labels else None


def extract_es_logged(extracted: str | None, labels: Sequence[str]) -> int | None:
    """M6-es and M6-inspect: another harness's own extracted answer as its log kept it (EvalScope's
    ``parse_answers_zh``, inspect_ai's ``choice`` scorer); one label is that label, nothing or
    several a parse failure."""
    return list(labels).index(extracted) if extracted in labels else None


def score_top_logprobs(label_logprobs: Sequence[float | None], floor: float) -> ScoreResult:
    """M1-inspect: each label's log-probability at the answer token of a logged generation, read
    from that position's top-K log-probabilities (inspect_ai's ``--logprobs --top-logprobs K``).

    A label outside the top-K (None) has no number in the log, only a bound: its log-probability
    is at most the K-th one, ``floor``. It scores ``floor``, and labels outside the top-K form one
    tie group (the log cannot order them), so that a decision among them is a recorded tie, never
    a silent guess; a label inside the top-K that beats ``floor`` is decided exactly.
    """
    if not label_logprobs:
        raise ValueError("no labels to score")
    absent = tuple(i for i, lp in enumerate(label_logprobs) if lp is None)
    scores = np.array([floor if lp is None else lp for lp in label_logprobs], dtype=np.float64)
    if any(lp is not None and lp < floor for lp in label_logprobs):
        raise ValueError(f"a label's log-probability is below the top-K floor {floor}")
    return decide(scores, (absent,) if len(absent) > 1 else ())


def score_tf(margins: Sequence[float]) -> ScoreResult:
    """TF: each statement's log p(true word) - log p(false word); the statement judged most true
    is the MCQ answer read off the same pass (the four margins are what partial credit reads)."""
    return decide(np.asarray(margins, dtype=np.float64))


def extract_m6(text: str, labels: Sequence[str], option_texts: Sequence[str],
               answer_word: str = "答案") -> tuple[int | None, int | None]:
    """M6: the answer the strict and the lenient extractor read off one generation (None: none
    found, a parse failure), in the order of the entry's record names. ``answer_word``: the prompt
    format's (``Answer`` in en_mcq)."""
    return extract_strict(text, labels, answer_word), extract_lenient(text, labels, option_texts, answer_word)


# --- the scorer table: one entry per scorer, beside its function ----------------------------------
#
# Everything else is derived from it: the record names and scorer groups of the schema
# (cube.records.schema), the runner's passes and the records each writes (cube.harness.passes),
# the run log's protocols (cube.records.provenance), the --scorers help and the docs' scorer
# table (markdown_table; a test holds README.md and book/method.md to it). A new scorer that
# reads an existing pass is one entry here plus its test.


@dataclass(frozen=True)
class ScoringPass:
    """What the backend computes once per item and every scorer reading it shares.

    ``cells``: "each" runs once per protocol cell; "label_set_shots" once per (label set, shots)
    (chain of thought: the cue and option order do not reach its prompt); "none" once per item
    whatever the cells, its records under ``fixed_cell``. ``context`` replaces the cell's answer
    context in the records (chain of thought has its own instruction, not the cell's cue).
    """

    kind: str  # the job kind: every shard of the pass is named "<kind>--<cell>--<chunk>"
    reads: str  # label | cloze | generation | judgement
    computes: str  # what the backend returns, for the docs
    cells: str
    fixed_cell: tuple[str, str, int, str] | None = None  # (label_set, context, shots, order)
    context: str | None = None


# In the order the runner plans them: per cell the label and generation passes, then the rest.
PASSES: dict[str, ScoringPass] = {p.kind: p for p in (
    ScoringPass("label", "label", "log p of each label after the MC prompt", "each"),
    ScoringPass("gen", "generation", "one greedy generation after the cue", "each"),
    ScoringPass("cloze", "cloze", "log p of each option text after the question (and after the cue alone)",
                "none", fixed_cell=("-", "cloze", 0, "original")),
    ScoringPass("tf", "judgement", "log p of the true and the false word after each option as a statement",
                "none", fixed_cell=("-", "judgement", 0, "original")),
    ScoringPass("cot", "generation", "one greedy chain of thought after its own instruction",
                "label_set_shots", context="cot"),
)}


@dataclass(frozen=True)
class Scorer:
    """One scorer (modelled on lighteval's ``Metric``: metric_name, category, sample_level_fn).

    ``score`` is the per-item function; its arguments follow from the pass: label and cloze
    scorers take the options' ``ContinuationScores`` and return a ``ScoreResult``, judgement
    scorers the statements' margins, generation scorers (text, labels, shown option texts) and
    return one answer (or None) per record name. ``pass_kind`` None: ``cube run`` has no pass for
    it, only an import writes its records.
    """

    name: str  # the name a run asks for (--scorers); records carry ``records``
    reads: str  # label | cloze | generation | judgement | imported
    records: tuple[str, ...]  # the scorer names its records carry
    description: str
    score: Callable[..., Any]
    pass_kind: str | None
    needs_unconditional: bool = False  # its pass also scores each option after the cue alone (PMI)

    def __post_init__(self) -> None:
        if self.pass_kind is not None and self.pass_kind not in PASSES:
            raise ValueError(f"scorer {self.name}: unknown pass {self.pass_kind!r}; known: {', '.join(PASSES)}")
        if not self.records:
            raise ValueError(f"scorer {self.name}: writes no records")

    def __call__(self, *args: Any) -> Any:
        return self.score(*args)


SCORERS: dict[str, Scorer] = {s.name: s for s in (
    Scorer("M1-seq", "label", ("M1-seq",), "log p of the full label token sequence", score_m1_seq, "label"),
    Scorer("M1-strict", "label", ("M1-strict",),
           "first-token argmax; labels sharing a first token tie, recorded, never hidden", score_m1_strict, "label"),
    Scorer("M2", "cloze", ("M2",), "sum of the option text's log-probabilities", score_m2, "cloze"),
    Scorer("M3", "cloze", ("M3",), "mean log-probability per token", score_m3, "cloze"),
    Scorer("M4", "cloze", ("M4",), "log-probability per UTF-8 byte", score_m4, "cloze"),
    Scorer("M5", "cloze", ("M5",), "PMI: log p(option after the question) - log p(option after the cue alone)", score_m5,
           "cloze", needs_unconditional=True),
    Scorer("M6", "generation", ("M6-strict", "M6-lenient"),
           "greedy answer, read by a strict and a lenient extractor; parse failures apart", extract_m6, "gen"),
    Scorer("M6-cot", "generation", ("M6-strict", "M6-lenient"),
           "greedy chain of thought (context cot), the same two extractors", extract_m6, "cot"),
    Scorer("TF", "judgement", ("TF",), "each option as a 对/错 statement, for partial credit", score_tf, "tf"),
    Scorer("M4-char", "imported", ("M4-char",),
           "log-likelihood per character, lm-eval's acc_norm (imported runs only)", score_m4_char, None),
    Scorer("OC-ppl", "imported", ("OC-ppl",),
           "-PPL of each label's whole prompt, OpenCompass's PPL mode (imported runs only)", score_oc_ppl, None),
    Scorer("M6-oc", "imported", ("M6-oc",),
           "the first capital letter of a generation, OpenCompass's gen mode (imported runs only)",
           extract_oc_gen, None),
    Scorer("M6-es", "imported", ("M6-es",),
           "EvalScope's extracted answer of a generation, as its review logged it (imported runs only)",
           extract_es_logged, None),
    Scorer("M6-inspect", "imported", ("M6-inspect",),
           "inspect_ai's choice scorer's answer of a generation, as its log logged it (imported runs only)",
           extract_es_logged, None),
    Scorer("M1-inspect", "imported", ("M1-inspect",),
           "each label's log-probability at the answer token of inspect_ai's generation, from its logged top-K; "
           "a label outside the top-K scores the K-th, tied with any other outside (imported runs only)",
           score_top_logprobs, None),
)}


def pass_scorers(kind: str, scorers: Sequence[str] | None = None) -> tuple[str, ...]:
    """The scorers of pass ``kind`` in table order (of ``scorers`` only, where given)."""
    return tuple(s.name for s in SCORERS.values()
                 if s.pass_kind == kind and (scorers is None or s.name in scorers))


def run_scorers() -> tuple[str, ...]:
    """The scorers ``cube run`` can ask for: every entry with a pass, in table order."""
    return tuple(s.name for s in SCORERS.values() if s.pass_kind is not None)


def markdown_table() -> str:
    """The docs' scorer table (README.md, book/method.md), one row per entry."""
    rows = ["| scorer | reads | records | what it scores |", "|---|---|---|---|"]
    for s in SCORERS.values():
        records = ", ".join(f"`{r}`" for r in s.records)
        rows.append(f"| `{s.name}` | {s.reads} | {records} | {s.description} |")
    return "\n".join(rows) + "\n"
