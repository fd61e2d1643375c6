"""The scorers and their table moved to ``cube.protocol.scorers``: a scorer is part of the protocol,
and the record schema (``cube.records``, read without the harness) derives its scorer names and
groups from the table. Kept so that existing imports keep working."""

from cube.protocol.scorers import (
    PASSES,
    SCORERS,
    TIE_BREAK,
    ContinuationScores,
    Scorer,
    ScoreResult,
    ScoringPass,
    StrictResult,
    decide,
    extract_m6,
    m1_seq,
    m1_strict,
    m2_sum,
    m3_mean,
    m4_per_byte,
    m5_pmi,
    markdown_table,
    option_distribution,
    pass_scorers,
    score_m1_seq,
    score_m1_strict,
    score_m2,
    score_m3,
    score_m4,
    score_m4_char,
    score_m5,
    score_tf,
    tie_groups,
)

__all__ = ["PASSES", "SCORERS", "TIE_BREAK", "ContinuationScores", "ScoreResult", "Scorer", "ScoringPass",
           "StrictResult", "decide", "extract_m6", "m1_seq", "m1_strict", "m2_sum", "m3_mean", "m4_per_byte",
           "m5_pmi", "markdown_table", "option_distribution", "pass_scorers", "score_m1_seq", "score_m1_strict",
           "score_m2", "score_m3", "score_m4", "score_m4_char", "score_m5", "score_tf", "tie_groups"]
