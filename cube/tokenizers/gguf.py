"""Reading a GGUF file's metadata header, and only its header.

Tokenizers ship inside GGUF model files, often split into chunks. The key/value header sits at
the start of the first chunk, so reading it needs neither the tensor data nor torch. We parse it
ourselves (rather than memory-mapping the whole file with a generic reader) so that a truncated
first chunk still works, and we keep the file's own token ids.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, BinaryIO

from cube.errors import SourceError

GGUF_MAGIC = b"GGUF"

# GGUF value types -> struct format (scalars); 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Arrays of arrays are legal GGUF, but no real header nests them more than twice; a deeper one
# would make this reader recurse until Python's recursion limit.
_MAX_DEPTH = 8


class _Reader:
    """Buffered forward-only reader that names the file when the header runs past its end.

    Every length and count in a header is the file's word only, so each is checked against the
    bytes the file has left before anything is allocated: a header declaring a string of 2**62
    bytes raised MemoryError (through ``cube audit --tokenizer`` and an lm-eval ``pretrained=``
    path) instead of saying the file is not what it claims.
    """

    def __init__(self, fh: BinaryIO, path: Path, chunk: int = 1 << 22):
        self.fh, self.path, self.chunk = fh, path, chunk
        self.buf = b""
        self.pos = 0
        self.size = os.fstat(fh.fileno()).st_size
        self.offset = 0  # bytes of the file consumed by take()

    def remaining(self) -> int:
        return self.size - self.offset

    def take(self, n: int) -> bytes:
        if n > self.remaining():
            raise SourceError(f"{self.path}: GGUF header declares {n:,} bytes at offset {self.offset:,}, "
                              f"but the file has {self.remaining():,} left (truncated or not a GGUF header)")
        self.offset += n
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

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            if depth >= _MAX_DEPTH:
                raise SourceError(f"{self.path}: GGUF arrays nested more than {_MAX_DEPTH} deep at offset "
                                  f"{self.offset:,}; not a tokenizer header")
            etype = self.scalar("<I")
            count = self.scalar("<Q")
            if etype in _SCALARS:
                fmt = _SCALARS[etype]
                size = struct.calcsize(fmt)
                raw = self.take(size * count)
                return list(struct.unpack(f"<{count}{fmt[1:]}", raw))
            smallest = {_STRING: 8, _ARRAY: 12}.get(etype)  # a length, or a type and a count
            if smallest is None:
                raise SourceError(f"{self.path}: unknown GGUF value type {etype} in an array")
            if count * smallest > self.remaining():
                raise SourceError(f"{self.path}: GGUF header declares an array of {count:,} values at offset "
                                  f"{self.offset:,}, more than the {self.remaining():,} bytes left can hold")
            return [self.value(etype, depth + 1) for _ in range(count)]
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
        if kv_count * 12 > r.remaining():  # each pair: a key length, a value type, at least
            raise SourceError(f"{path}: GGUF header declares {kv_count:,} metadata pairs, more than the "
                              f"{r.remaining():,} bytes of the file can hold")
        meta: dict[str, Any] = {"GGUF.version": version}
        for _ in range(kv_count):
            key = r.string()
            meta[key] = r.value(r.scalar("<I"))
    return meta


def is_gguf(path: str | Path) -> bool:
    with Path(path).open("rb") as fh:
        return fh.read(4) == GGUF_MAGIC
