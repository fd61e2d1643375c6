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
COMMON=(--benchmark cmmlu --split test --seed 0 --out "$OUT" --dtype bfloat16)

for model in "${MODELS[@]}"; do
  # every label set under the Chinese cue: label scorers + cloze scorers (600 items, all 67 subjects)
  $CUBE run --model "$model" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth,L2_fullwidth,L3_ganzhi,L4_circled --cues zh_cue \
    --scorers M1-seq,M1-strict,M2,M3,M4,M5
  # the English whitespace pair on ABCD
  $CUBE run --model "$model" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues en_label_space,en_prompt_space --scorers M1-seq,M1-strict
  # M6 answer-only generation on ABCD
  $CUBE run --model "$model" --sample 600 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues zh_cue --scorers M6
  # 5-shot on ABCD for a subset (2 items per subject)
  $CUBE run --model "$model" --sample 134 "${COMMON[@]}" \
    --label-sets L1_halfwidth --cues zh_cue --shots 5 --scorers M1-seq,M1-strict
done
