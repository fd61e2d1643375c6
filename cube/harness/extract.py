"""Answer extraction (M6) moved to ``cube.protocol.extract``: reading an answer off a generation is
part of the protocol, and the scorer table (``cube.protocol.scorers``), which the record schema
reads, holds it. Kept so that existing imports keep working."""

from cube.protocol.extract import extract_lenient, extract_strict

__all__ = ["extract_lenient", "extract_strict"]
