#!/usr/bin/env bash
# Regenerates the archived records in data/records (the records the book executes on).
# Resumable: re-run the same script after a kill; finished shards are skipped.
# Usage: scripts/archive_records.sh [MODEL ...]   (default: the four demo models)
set -euo pipefail
cd "$(dirname "$0")/.."
CUBE=${CUBE:-.venv/bin/cube}
OUT=${OUT:-data/records}
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct)
COMMON=(--benchmark cmmlu --split test --seed 0 --out "$OUT" --dtype auto)

# Subset steps draw their items from the 600-item sample (--within 600) so they pair with it. The
# 5-shot subsets were rerun so in session 4, the chain-of-thought subsets in session 5 (each
# written to a new --out, the old cells dropped with scripts/drop_cells.py, then
# `cube merge data/records data/records NEW`). The book's claim 8 computes which subsets pair;
# the provenance page lists every exact command.
# Step-major order, so that an interrupted session leaves every model with the headline cells.
label_sets_zh() {  # every label set under the Chinese cue: label scorers + cloze (600 items, 67 subjects)
  $CUBE run --model "$1" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth,L2_fullwidth,L3_ganzhi,L4_circled --cues zh_cue \
    --scorers M1-seq,M1-strict,M2,M3,M4,M5
}
whitespace_pair() {  # the English whitespace pair on ABCD
  $CUBE run --model "$1" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues en_label_space,en_prompt_space --scorers M1-seq,M1-strict
}
whitespace_separate() {  # en_prompt_space tokenized lm-evaluation-harness style (context and label apart)
  $CUBE run --model "$1" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues en_prompt_space_separate --scorers M1-seq,M1-strict
}
answer_only() {  # M6 answer-only generation on ABCD
  $CUBE run --model "$1" --sample 600 "${COMMON[@]}" --label-sets L1_halfwidth --cues zh_cue --scorers M6
}
true_false() {  # each item as four 对/错 statements: partial-credit groups (1 item per subject)
  $CUBE run --model "$1" --sample 67 "${COMMON[@]}" --scorers TF
}
chain_of_thought() {  # M6 chain-of-thought on ABCD for a subset (1 item per subject; 512 new tokens)
  $CUBE run --model "$1" --sample 67 --within 600 "${COMMON[@]}" --label-sets L1_halfwidth --cues zh_cue --scorers M6-cot --batch-size 32
}
five_shot() {  # 5-shot on ABCD for a subset (2 items per subject)
  $CUBE run --model "$1" --sample 134 --within 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues zh_cue --shots 5 --scorers M1-seq,M1-strict
}

for step in ${STEPS:-label_sets_zh true_false whitespace_pair whitespace_separate answer_only five_shot chain_of_thought}; do
  for model in "${MODELS[@]}"; do
    "$step" "$model"
  done
done
