"""Locating and reading the frozen config files, and the data the package ships.

The config ships inside the package (``cube/_config``, package data), so an installed wheel reads
the same files as a clone; the clone's ``config/`` is a link to it. ``CUBE_CONFIG_DIR`` points
elsewhere, e.g. for a user's own study: a folder holding the same files (copy
``cube/_config`` and edit it: your own answer cues in ``templates.yaml``, label sets in
``label_sets.yaml``, models in ``models.yaml``).

The committed sample records and the frozen audit prediction, which ``cube smoke``, ``cube
confirm`` and ``cube simulate`` read by default, ship the same way (``cube/_data``; the clone's
``data/sample`` and ``data/predictions`` link to them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cube.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent
# The clone in a development checkout; in an installed wheel, the site-packages folder (only the
# clone's own paths, the book and the archived records, are read from here).
REPO_ROOT = PACKAGE_DIR.parent
PACKAGED_CONFIG = PACKAGE_DIR / "_config"
PACKAGED_DATA = PACKAGE_DIR / "_data"
SAMPLE_RECORDS = PACKAGED_DATA / "sample"
FROZEN_PREDICTION = PACKAGED_DATA / "predictions" / "audit_frozen.json"


def config_dir() -> Path:
    """``$CUBE_CONFIG_DIR`` where set, else the config shipped in the package."""
    return Path(os.environ.get("CUBE_CONFIG_DIR") or PACKAGED_CONFIG)


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning every failure into a one-line ConfigError."""
    from cube.files import read_yaml

    return read_yaml(path, ConfigError, "config file")


def load_config(name: str) -> Any:
    """Load ``config/<name>.yaml``."""
    return load_yaml(config_dir() / f"{name}.yaml")


def cache_dir() -> Path:
    """The user cache for registry downloads and converted tokenizers."""
    base = os.environ.get("CUBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cube"
    )
    return Path(base)
