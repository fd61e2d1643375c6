"""The per-cell accuracy table that ``cube rescore`` and ``cube run`` both print: its shared columns.

Both commands end with one row per cell: accuracy and interval, chance, and the shares of tied
decisions, parse failures, decisions within the precision's noise and (a reasoning checkpoint's)
answers lost to the thinking block. What those share columns mean (the table's footer and both
commands' ``--help``), how a share or a chance level is written, and the noise marks the in-noise
column reads are one definition here, so that the two tables cannot drift apart and neither
command reaches into the other for them. Only ``cube.protocol.thinking`` is imported at module
level: ``--help`` reads ``COLUMNS_MEAN`` and must not need pyarrow.
"""

from __future__ import annotations

from cube.protocol.thinking import THINKING_FAILURES

# What the accuracy table's share columns mean: its footer in `cube rescore` and `cube run`, and
# their --help. The bounds are cube.analysis.noise.DECISION_NOISE's (a test holds them equal; not
# imported here: --help must not need pyarrow).
IN_NOISE_MEANS = ("in-noise: the share of a cell's decisions whose margin (top score minus the runner-up) is within "
                  "its precision's measured noise, so that a change of batch layout alone can flip them (bf16 0.454 "
                  "nats, fp32 3.3e-5; ties and generations apart; '-' not known); most of them so: score in float32 "
                  "(--dtype float32)")
COLUMNS_MEAN = f"tied: decisions a tie-break made; parse-fail: generations no extractor could read; {IN_NOISE_MEANS}"


def shows_thinking(rows: list[dict]) -> bool:
    """Whether any row counts a generation that gave no answer because of its thinking block: the
    table then shows those shares (issue 49) beside parse failures, of which they are a part."""
    return any(r.get(f"n_{o}") for r in rows for o in THINKING_FAILURES)


def thinking_header() -> str:
    return f" {'cut-think':>9} {'no-ans-think':>12}"


def thinking_shares(r: dict) -> str:
    return f" {share(r.get(f'{THINKING_FAILURES[0]}_rate')):>9} {share(r.get(f'{THINKING_FAILURES[1]}_rate')):>12}"


def rate(value) -> str:
    """A chance level (the mean of 1/N over the records: cube.analysis.chance) to three places."""
    return "-" if value is None else f"{value:.3f}"


def share(rate) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def with_noise_marks(table, path: str):
    """``table`` with each decision marked when its margin is within its precision's measured
    noise (``cube.analysis.noise``), from the precision each cell's manifest entry records."""
    from cube.analysis.noise import cell_dtypes, mark_within_noise
    from cube.records.store import read_manifest

    return mark_within_noise(table, cell_dtypes(read_manifest(path)))
