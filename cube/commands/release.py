"""Placeholder: replaced by the module that implements `cube release`."""


def register(subparsers) -> None:  # noqa: D103
    pass
