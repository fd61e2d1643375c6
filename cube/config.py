"""Locating and reading the frozen config files.

Config lives in the repository's ``config/`` folder (next to the package in an editable install);
``CUBE_CONFIG_DIR`` points elsewhere, e.g. for a user's own study.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from cube.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent


def config_dir() -> Path:
    return Path(os.environ.get("CUBE_CONFIG_DIR", REPO_ROOT / "config"))


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning every failure into a one-line ConfigError."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"invalid YAML in {path}{where}") from None


def load_config(name: str) -> Any:
    """Load ``config/<name>.yaml``."""
    return load_yaml(config_dir() / f"{name}.yaml")


def cache_dir() -> Path:
    """The user cache for registry downloads and converted tokenizers."""
    base = os.environ.get("CUBE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "cube"
    )
    return Path(base)
