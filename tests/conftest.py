"""Shared fixtures: the real offline tokenizers (fetched from the registries as CI does) and the
real benchmark folder. Small synthetic fixtures live next to the tests that use them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cube.config import REPO_ROOT, load_config


@pytest.fixture(scope="session")
def benchmarks_root() -> Path:
    root = Path(os.environ.get("CUBE_BENCHMARKS", REPO_ROOT.parent / "shared" / "benchmarks"))
    if not (root / "cmmlu").is_dir():
        pytest.fail(f"real benchmark data not found at {root} (set CUBE_BENCHMARKS)")
    return root


@pytest.fixture(scope="session")
def family_sources() -> dict[str, dict]:
    families = load_config("models")["families"]
    return {name: entry["offline"] for name, entry in families.items() if entry.get("offline")}


@pytest.fixture(scope="session")
def real_tokenizers(family_sources):
    """Every family with an offline source, resolved through cube's own verified fetch."""
    from cube.sources import resolve_tokenizer

    return {name: resolve_tokenizer(src["spec"], src["sha256"]) for name, src in family_sources.items()}
