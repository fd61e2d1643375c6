"""The book's evidence (cube.paper.evidence): what each paired measure compares."""

from __future__ import annotations

import pytest

from tests.record_tables import slice_in




def test_the_book_evidence_refuses_a_mixed_whitespace_pair_and_names_what_it_compares():
    from cube.errors import PrecisionMismatch
    from cube.paper.evidence import calibration_ratios, whitespace_effects

    merged, separate = slice_in("bfloat16", "en_prompt_space", flips={1}), slice_in("float32", "en_label_space", flips={2, 3})
    with pytest.raises(PrecisionMismatch):
        whitespace_effects(separate, merged, points=5.0)
    with pytest.raises(PrecisionMismatch):
        calibration_ratios(separate, merged, B=10)
    (effect,) = whitespace_effects(separate, merged, points=5.0, allow_mixed_precision=True)
    assert effect.precision == "mixed: A bfloat16, B float32"
    assert (effect.acc_merged, effect.acc_separate) == (7 / 8, 6 / 8)
    (same,) = whitespace_effects(slice_in("float32", "en_label_space"), slice_in("float32", "en_prompt_space"), 5.0)
    assert same.precision == "float32"


def test_a_one_precision_rerun_of_one_side_takes_its_place_in_the_pair():
    """The issue-33 reruns: the merged form scored in bf16 against the separate one in fp32 is
    refused, but with the merged cell re-scored in fp32 on the same items, that rerun is paired
    (its own outcomes, not the bf16 ones) and the result says which side was re-run."""
    from cube.paper.evidence import whitespace_effects

    merged, separate = slice_in("bfloat16", "en_prompt_space", flips={1}), slice_in("float32", "en_label_space", flips={2, 3})
    rerun = slice_in("float32", "en_prompt_space", flips={1, 4, 5})
    (effect,) = whitespace_effects(separate, merged, points=5.0, reruns=rerun)
    assert effect.precision == "float32 (side A re-run)"
    assert (effect.acc_merged, effect.acc_separate) == (5 / 8, 6 / 8)
    # a rerun that misses an item of the other side does not stand in: refused again
    from cube.errors import PrecisionMismatch
    with pytest.raises(PrecisionMismatch):
        whitespace_effects(separate, merged, points=5.0, reruns=rerun.slice(0, 7))


def test_a_page_pairs_the_one_precision_rerun_or_refuses_the_pair():
    """Issue 47: the claim-6 page paired the 1.5B's bf16 side with its fp32 side ("compared
    anyway") beside the paper page's rerun. ``one_precision_pair`` gives both pages one pairing:
    the rerun's own outcomes where it covers the other side's items, else a refusal."""
    from cube.errors import PrecisionMismatch
    from cube.paper.evidence import one_precision_pair

    a, b = slice_in("float32", "en_label_space", flips={2, 3}), slice_in("bfloat16", "en_prompt_space", flips={1})
    with pytest.raises(PrecisionMismatch):
        one_precision_pair(a, b)
    rerun = slice_in("float32", "en_prompt_space", flips={1, 4, 5})
    pa_, pb, precision = one_precision_pair(a, b, rerun)
    assert precision == "float32 (side B re-run)"
    assert pb.column("correct").to_pylist() == [i not in {1, 4, 5} for i in range(8)]
    assert pa_.column("uid").to_pylist() == pb.column("uid").to_pylist()
    with pytest.raises(PrecisionMismatch):
        one_precision_pair(a, b, rerun.slice(0, 7))  # a partial rerun never stands in
