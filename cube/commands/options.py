"""The one parser of comma-separated options, shared by every command (an argparse ``type=``).

``--label-sets ,`` once audited every label set with exit 0 while ``cube run`` refused it: each
command split its lists its own way, one dropping empty entries. Here an empty entry, an empty
list or a repeated name is always an error naming the option and the value as given, never
silently ignored. The error is a ``ConfigError``, which argparse lets through and ``cube.cli``
prints as one line (an ``ArgumentTypeError`` would print the usage block too).
"""

from __future__ import annotations

from typing import Callable

from cube.errors import ConfigError


def parse_comma_list(value: str, option: str, kind: type = str) -> list:
    """``value`` split at commas, stripped; each entry converted with ``kind`` (``str`` or ``int``)."""
    values = [v.strip() for v in str(value).split(",")]
    if not str(value).strip() or any(not v for v in values):
        raise ConfigError(f"{option} {value!r} has an empty entry; give comma-separated "
                          + ("integers" if kind is int else "names"))
    repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if repeated is not None:
        raise ConfigError(f"{option} {value!r} names {repeated!r} twice")
    if kind is int:
        try:
            return [int(v) for v in values]
        except ValueError:
            raise ConfigError(f"{option} {value!r} must be comma-separated integers") from None
    return values


def comma_list(option: str, kind: type = str) -> Callable[[str], list]:
    """An argparse ``type=`` for ``option``: ``add_argument("--label-sets", type=comma_list("--label-sets"))``."""

    def parse(value: str) -> list:
        return parse_comma_list(value, option, kind)

    parse.__name__ = f"comma_list({option})"  # what argparse names in its own messages
    return parse


def random_seed(option: str = "--seed") -> Callable[[str], int]:
    """An argparse ``type=`` for a random seed: an integer of at least 0 (numpy refuses a negative
    seed with a ValueError traceback, after the items are loaded)."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{option} {value!r} is not an integer") from None
        if number < 0:
            raise ConfigError(f"{option} {number} must be at least 0")
        return number

    parse.__name__ = f"random_seed({option})"
    return parse


def joined(value: object) -> str:
    """A parsed list option back in the form it is given on a command line (for logged commands)."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
