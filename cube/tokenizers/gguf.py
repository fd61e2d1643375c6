"""Reading a GGUF file's metadata header, and only its header.

Tokenizers ship inside GGUF model files, often split into chunks. The key/value header sits at
the start of the first chunk, so reading it needs neither the tensor data nor torch. We parse it
ourselves (rather than memory-mapping the whole file with a generic reader) so that a truncated
first chunk still works, and we keep the file's own token ids.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from cube.errors import SourceError

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    """Buffered forward-only reader that names the file when the header runs past its end."""

    def __init__(self, fh: BinaryIO, path: Path, chunk: int = 1 << 22):
        self.fh, self.path, self.chunk = fh, path, chunk
        self.buf = b""
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            self.buf = self.buf[self.pos:]
            self.pos = 0
            while len(self.buf) < n:
                more = self.fh.read(max(self.chunk, n - len(self.buf)))
                if not more:
                    raise SourceError(f"{self.path}: GGUF header is truncated (file ends inside it)")
                self.buf += more
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        return self.take(n).decode("utf-8", errors="surrogateescape")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                raw = self.take(size * count)
                return list(struct.unpack(f"<{count}{fmt[1:]}", raw))
            return [self.value(etype) for _ in range(count)]
        raise SourceError(f"{self.path}: unknown GGUF value type {vtype}")


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """Return the key/value metadata of a GGUF file (or of the first chunk of a split one)."""
    path = Path(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise SourceError(f"cannot open GGUF file {path}: {exc.strerror}") from None
    with fh:
        r = _Reader(fh, path)
        magic = r.take(4)
        if magic != GGUF_MAGIC:
            raise SourceError(f"{path}: not a GGUF file (magic {magic!r})")
        version = r.scalar("<I")
        if version == 1:
            raise SourceError(f"{path}: GGUF version 1 is not supported")
        r.scalar("<Q")  # tensor count
        kv_count = r.scalar("<Q")
        meta: dict[str, Any] = {"GGUF.version": version}
        for _ in range(kv_count):
            key = r.string()
            meta[key] = r.value(r.scalar("<I"))
    return meta


def is_gguf(path: str | Path) -> bool:
    with Path(path).open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC
