"""The bundle's files for a reader: its README (rendered from the manifest) and CITATION.cff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cube import __version__
from cube.records.leakage import MARKER


def citation_cff(version: str = __version__) -> str:
    return f"""cff-version: 1.2.0
message: "If you use these records, please cite them, and the benchmarks they were made on."
type: dataset
title: "cube: per-item records for trustworthy multiple-choice LLM evaluation"
version: "{version}"
authors:
  - name: "The cube authors"
keywords:
  - multiple-choice evaluation
  - tokenizer audit
  - CMMLU
  - C-Eval
references:
  - type: article
    title: "CMMLU: Measuring massive multitask language understanding in Chinese"
    authors:
      - family-names: Li
        given-names: Haonan
    year: 2023
    identifiers:
      - type: other
        value: "arXiv:2306.09212"
    license: CC-BY-NC-SA-4.0
  - type: article
    title: "C-Eval: A Multi-Level Multi-Discipline Chinese Evaluation Suite for Foundation Models"
    authors:
      - family-names: Huang
        given-names: Yuzhen
    year: 2023
    identifiers:
      - type: other
        value: "arXiv:2305.08322"
    license: CC-BY-NC-SA-4.0
"""


def bundle_readme(manifest: Mapping[str, Any]) -> str:
    models = ", ".join(manifest["models"]) or "none"
    items = "; ".join(f"{b}: " + ", ".join(f"{n} {s}" for s, n in splits.items())
                      for b, splits in manifest["items"].items()) or "none"
    scrub = manifest["scrub"]
    audit = manifest["leakage_audit"]
    licences = "\n".join(f"- {v['name']}: {v['licence']} ({v['source']})"
                         for v in manifest["benchmark_licences"].values())
    incomplete = manifest.get("incomplete") or []
    warning = ("" if not incomplete else
               f"**INCOMPLETE**: built with `--allow-incomplete` from a store {len(incomplete)} of whose cells "
               "lack shards their configuration promises (a killed or unfinished run); their accuracies "
               "cover only the records present, and every cube reader of `records/` says so:\n\n"
               + "".join(f"- {line}\n" for line in incomplete) + "\n")
    return f"""# cube release bundle

{warning}Per-item records of multiple-choice LLM evaluations: every protocol slice can be re-scored from
them without running a model. Made with cube {manifest["cube_version"]}.

- `records/`: {manifest["n_records"]:,} records (Parquet, schema `{manifest["records_schema"]}`,
  their own `MANIFEST.json` with a sha256 per shard). Models: {models}.
  Items: {items}.
- `predictions/audit_frozen.json`: the pre-registered tokenizer audit.
- `MANIFEST.json`: models and their source hashes, protocols, item counts, licences, scrub and
  leakage-audit figures.
- `CLAIMS.md`: each claim of the paper, its notebook and the command that reproduces it.
- `CITATION.cff`: how to cite this bundle and the benchmarks.
- `SHA256SUMS`: the sha256 of every other file.

## No benchmark text

Records name an item by `uid` (benchmark/subject/split/row) and `qhash` (sha256 of the question,
16 hex digits) only. The benchmarks are not redistributed; get them from their publishers:

{licences}

Free text (generations) was scrubbed against each record's own item: {scrub["n_changed"]:,} of
{scrub["n_texts"]:,} texts changed, {scrub["n_spans"]:,} spans ({scrub["n_chars"]:,} characters)
replaced by `{MARKER}`. The scrubbed records then passed the leakage audit against all
{audit["n_items"]:,} {audit["items"]} items ({audit["thresholds"]}): {audit["hits"]} hits.

## Verify and use

```bash
sha256sum -c SHA256SUMS                      # every file as published
cube release verify . --items path/to/cmmlu  # checksums, records, prediction, leakage audit
cube rescore records                         # accuracy of every protocol slice
cube confirm records --prediction predictions/audit_frozen.json
```
"""
