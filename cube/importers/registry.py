"""The importers ``cube import`` offers, one entry per harness; ``cube explain`` finds a store's
importer here by the manifest's ``metadata.source``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cube.importers import evalscope, inspect_eval
from cube.importers.lm_eval import importer as lm_eval
from cube.importers.opencompass import importer as opencompass
from cube.importers.contract import HarnessImporter

IMPORTERS: dict[str, HarnessImporter] = {i.name: i for i in (lm_eval.IMPORTER, opencompass.IMPORTER, evalscope.IMPORTER,
                                                             inspect_eval.IMPORTER)}


def importer_of(metadata: Mapping[str, Any]) -> HarnessImporter | None:
    """The importer that wrote a store with this manifest metadata; None for cube's own records
    (or a source no importer of this version knows)."""
    source = metadata.get("source")
    return next((i for i in IMPORTERS.values() if i.source == source), None)
