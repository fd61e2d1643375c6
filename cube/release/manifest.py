"""The bundle's MANIFEST.json: what it derives from the records, and the check that it still does."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cube import __version__
from cube.errors import CubeError, RecordsError
from cube.files import read_json
from cube.models_config import ModelsConfig, models_config
from cube.protocol.benchmarks import benchmark_licences
from cube.records.store import protocols
from cube.release.layout import BUNDLE_SCHEMA, MANIFEST_NAME, PREDICTION_PATH, RECORDS_DIR
from cube.release.texts import bundle_readme

# The registered benchmarks and the terms under which their items are published (the registry's
# licence notes: cube.protocol.benchmarks). Records name items by uid + qhash only, so a bundle
# redistributes none of their text.
BENCHMARK_LICENCES = benchmark_licences()


def item_counts(table: pa.Table) -> dict[str, dict[str, int]]:
    """Distinct items per benchmark and split, read from the uid (benchmark/subject/split/row)."""
    counts: dict[str, dict[str, int]] = {}
    for uid in pc.unique(table.column("uid")).to_pylist():
        parts = uid.split("/")
        if len(parts) != 4:
            raise RecordsError(f"column uid: {uid!r} is not benchmark/subject/split/row")
        split = counts.setdefault(parts[0], {})
        split[parts[2]] = split.get(parts[2], 0) + 1
    return {b: dict(sorted(s.items())) for b, s in sorted(counts.items())}


def model_sources(
    models: Iterable[str],
    config: ModelsConfig | None = None,
    prediction: Mapping[str, Any] | None = None,
    families: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Each model with where its weights and tokenizer came from, pinned by sha256.

    The tokenizer source is the one the frozen prediction audited (else the config's offline
    source), so a reader can check that the audited tokenizer is the model's own. ``config``:
    config/models.yaml as :func:`cube.models_config.models_config` reads it (the default);
    ``families``: the family of a model the config does not know (from the records' manifest).
    """
    config = config if config is not None else models_config()
    audited = (prediction or {}).get("sources") or {}
    out: dict[str, dict[str, Any]] = {}
    for model in sorted(models):
        entry: dict[str, Any]
        demo = config.demo_models.get(model)
        checkpoint = config.checkpoints.get(model)
        if demo:
            entry = {"kind": "demo_model", "family": demo.family, "upstream": demo.upstream,
                     "quantisation": demo.quantisation, "licence": demo.licence,
                     "provenance": demo.provenance, "gguf_sha256": demo.gguf_sha256,
                     "parts": [{"spec": part.spec, "sha256": part.sha256} for part in demo.parts]}
        elif checkpoint:
            entry = {"kind": "checkpoint", "family": checkpoint.family, "hf": checkpoint.hf,
                     "revision": checkpoint.revision, "role": checkpoint.role}
        else:
            entry = {"kind": "unknown", "family": (families or {}).get(model),
                     "note": "not in config/models.yaml"}
        family = entry.get("family")
        offline = config.families[family].offline if family in config.families else None
        tokenizer = audited.get(family) or (offline.as_dict() if offline else None)
        if tokenizer:
            entry["tokenizer"] = {"spec": tokenizer.get("spec"), "sha256": tokenizer.get("sha256")}
        out[model] = entry
    return out


def manifest_problems(root: Path, table: pa.Table) -> list[str]:
    """What the bundle's MANIFEST.json (and the README made from it) claims, against the records.

    SHA256SUMS only says that no file changed since it was written; a MANIFEST.json edited with
    its sum updated (``n_records: 99999, synthetic: true``) passed verify. Everything the manifest
    derives from the records is recomputed from them here: the count, the synthetic flag of the
    records' own manifest, the models, the protocols and the item counts, and the prediction's
    content hash. The README is re-rendered from the manifest. This catches an edit to one file
    that its neighbours contradict; a forger who rewrites records, manifest and sums together
    passes (see the README's "What the checks guarantee").
    """
    from cube.records.store import read_manifest
    from cube.tokenizers.audit import read_prediction

    path = root / MANIFEST_NAME
    try:
        manifest = read_json(path, CubeError, "bundle manifest")
        records_manifest = read_manifest(root / RECORDS_DIR)
        doc = read_prediction(root / PREDICTION_PATH)
    except CubeError as exc:
        return [str(exc)]
    if not isinstance(manifest, dict):
        return [f"{path}: not a JSON object"]

    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    derived = {
        "n_records": table.num_rows,
        "synthetic": bool(records_manifest.get("synthetic")),
        "protocols": protocols(table),
        "items": item_counts(table),
        "prediction": {"path": PREDICTION_PATH, "content_sha256": doc.get("content_sha256")},
        # the records' own mark, without the prefix every reader adds (a complete bundle has none)
        "incomplete": list(records_manifest.get("incomplete") or []),
    }
    problems = []
    for key, value in derived.items():
        found = manifest.get(key, [] if key == "incomplete" else None)
        if canonical(found) != canonical(value):
            shown = canonical(found)
            problems.append(f"{path}: {key} {shown[:60]} does not match the records and prediction "
                            f"it describes ({canonical(value)[:60]})")
    models = sorted(pc.unique(table.column("model")).to_pylist())
    if not isinstance(manifest.get("models"), dict) or sorted(manifest["models"]) != models:
        listed = sorted(manifest["models"]) if isinstance(manifest.get("models"), dict) else manifest.get("models")
        problems.append(f"{path}: models {listed!r} are not the records' models {models!r}")
    readme = root / "README.md"  # re-rendered only by the cube version that wrote it (its wording may change)
    if not problems and readme.is_file() and manifest.get("cube_version") == __version__:
        try:
            written = readme.read_text(encoding="utf-8")
            expected = bundle_readme(manifest)
        except (UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError):
            written, expected = "", None
        if written != expected:
            problems.append(f"{readme}: does not say what {MANIFEST_NAME} says (re-rendered from it, it differs)")
    return problems


def check_manifest(path: Path) -> None:
    manifest = read_json(path, CubeError, "bundle manifest")
    if not isinstance(manifest, dict) or manifest.get("bundle_schema") != BUNDLE_SCHEMA:
        found = manifest.get("bundle_schema") if isinstance(manifest, dict) else None
        raise CubeError(f"{path}: bundle_schema {found!r} is not {BUNDLE_SCHEMA!r}")
