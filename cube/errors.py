"""The one exception module.

Every error a user can cause by bad input is a ``CubeError``: the CLI prints its message as a
single line and exits non-zero, so messages must name the bad value (file, row, column, spec).
One subclass per kind of failure, so that a caller can catch what it can act on (a
``ChecksumError`` means re-fetch; a ``ResumeMismatch`` means a new ``--out``).

``ValueError`` (or ``TypeError``) is right only for a programming error inside cube or in code
calling its library functions: an argument no user input can produce, such as a negative count
passed by a notebook. It surfaces as a traceback on purpose. Anything that comes from a file, a
config, a CLI flag, a registry or a store is a ``CubeError`` subclass.
"""


class CubeError(Exception):
    """Base class: a user-facing error with a one-line message."""


class ConfigError(CubeError):
    """A config file, label set, template or CLI value is malformed."""


class PrecisionMismatch(ConfigError):
    """Two slices paired for a comparison were scored in different precisions (bf16 against fp32
    moves log-likelihoods enough to flip the few discordant items a paired test rests on)."""


class SourceError(CubeError):
    """A tokenizer or model source cannot be resolved, fetched or parsed."""


class ChecksumError(SourceError):
    """A fetched or cached file does not match the sha256 pinned for it."""


class UnsupportedTokenizer(SourceError):
    """A verified tokenizer file is in a form cube has no converter for (e.g. a SentencePiece GGUF)."""


class PredictionMismatch(CubeError):
    """A frozen audit prediction differs from what the tokenizers give now."""


class ItemsError(CubeError):
    """A benchmark file (CSV, subject map) is missing or has a malformed row."""


class RecordsError(CubeError):
    """A records store (Parquet shards + MANIFEST.json) is missing, corrupt or malformed."""


class WriteError(CubeError):
    """A file cannot be written (disk full, permission denied, a folder where a file should be)."""


class ResumeMismatch(RecordsError):
    """A run would resume a records store written under a different configuration."""


class StoreBusy(RecordsError):
    """Another live process holds a records store's writer lock (wait for it, or use another store)."""


class HarnessImportError(CubeError):
    """Another harness's output (lm-evaluation-harness) is truncated, incomplete, not multiple choice, or names unknown items."""


def text_digest(text: str) -> str:
    """What an error line shows of a prompt, an option or a generation: its length and a digest,
    never the text (a failed CI log must not carry benchmark text, nor a model's quote of it)."""
    import hashlib

    return f"text sha256:{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]} ({len(text)} chars)"


def shown_value(value: object, limit: int = 8) -> str:
    """A bad value as an error line names it: a short one (an answer letter, an index, a split) as it
    is, anything longer only by its digest (it may be an option's or a generation's text, shifted
    into the wrong column)."""
    text = value if isinstance(value, str) else repr(value)
    return repr(value) if len(text) <= limit else text_digest(text)
