"""Locating and reading the frozen config files.

Config lives in the repository's ``config/`` folder (next to the package in an editable install);
``CUBE_CONFIG_DIR`` points elsewhere, e.g. for a user's own study.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cube.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent


def config_dir() -> Path:
    return Path(os.environ.get("CUBE_CONFIG_DIR", REPO_ROOT / "config"))


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
