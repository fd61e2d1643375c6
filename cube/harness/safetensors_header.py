"""A safetensors file's header, read with bounds and types checked before anything else reads it.

A model folder is a user's (or a stranger's) files: a header that says it is 2^62 bytes long, one
past the end of the file, one that is not JSON or nests 100,000 deep, shapes that are negative or
missing, offsets past the end, a pickle renamed ``.safetensors``, ``/dev/zero`` or a FIFO in the
weights' place: each gave a traceback, an allocation of gigabytes or a hang in the memory check or
the identity hash. ``read_header`` reads at most ``MAX_HEADER_BYTES`` of a regular file and returns
its tensors only once every entry is a tensor the file holds; anything else is one line naming
the file and what is wrong.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from cube.errors import ConfigError

MAX_HEADER_BYTES = 100 << 20  # the safetensors library's own limit
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as the header describes it, checked against the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int  # byte offsets in the data section
    end: int

    @property
    def count(self) -> int:
        total = 1
        for dim in self.shape:
            total *= dim
        return total


def regular_file(path: Path, what: str = "file") -> os.stat_result:
    """``path``'s status where it is a regular file (through links); else one line saying what it is."""
    try:
        status = path.stat()
    except FileNotFoundError:
        link = " (a link to nothing)" if path.is_symlink() else ""
        raise ConfigError(f"{path}: no such {what}{link}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(status.st_mode):
        kind = "a folder" if stat.S_ISDIR(status.st_mode) else "a device, FIFO or socket"
        raise ConfigError(f"{path}: {kind}, not a regular {what} (reading it would not end or would not be the "
                          "file's bytes)")
    return status


def _fail(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path}: not a safetensors file ({why})")


def read_header(path: Path) -> tuple[TensorEntry, ...]:
    """The tensors of one safetensors file, every field checked (module docstring)."""
    size = regular_file(path, "safetensors file").st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _fail(path, f"{size} bytes, shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES or length > size - 8:
            if head[:1] == b"\x80" or head[:2] == b"PK":  # pickle protocol 2+, or torch.save's zip
                raise _fail(path, "a pickle or a torch.save archive under a .safetensors name; cube never unpickles")
            raise _fail(path, f"header length {length:,} bytes, past the file's {size:,} bytes or the "
                              f"{MAX_HEADER_BYTES >> 20} MiB limit")
        raw = fh.read(length)
    try:
        header = json.loads(raw)
    except RecursionError:
        raise _fail(path, "a header nesting too deep to parse") from None
    except ValueError as exc:
        raise _fail(path, f"a header that is not JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise _fail(path, f"a header that is a JSON {type(header).__name__}, not an object")
    data_size = size - 8 - length
    entries = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise _fail(path, "__metadata__ is not an object of strings")
            continue
        entries.append(_entry(path, name, entry, data_size))
    return tuple(entries)


def _entry(path: Path, name: str, entry: object, data_size: int) -> TensorEntry:
    where = f"tensor {name[:80]!r}"
    if not isinstance(entry, dict):
        raise _fail(path, f"{where} is a {type(entry).__name__}, not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise _fail(path, f"{where} has dtype {str(dtype)[:20]!r}, not one of {', '.join(DTYPE_BYTES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise _fail(path, f"{where} has shape {str(shape)[:40]}, not a list of non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise _fail(path, f"{where} has data_offsets {str(offsets)[:40]}, not two integers")
    start, end = offsets
    if not 0 <= start <= end <= data_size:
        raise _fail(path, f"{where} has data_offsets [{start}, {end}] outside the file's {data_size:,} data bytes "
                          "(a truncated file?)")
    tensor = TensorEntry(name, dtype, tuple(shape), start, end)
    if tensor.count * DTYPE_BYTES[dtype] != end - start:
        raise _fail(path, f"{where}: shape {list(shape)} of {dtype} is {tensor.count * DTYPE_BYTES[dtype]:,} bytes, "
                          f"its offsets span {end - start:,}")
    return tensor


def read_json_object(path: Path, what: str) -> dict:
    """A small JSON file (config.json, tokenizer_config.json, an index) that must be an object:
    a list, a string, a file nesting too deep or not a regular file is one line."""
    size = regular_file(path, what).st_size
    if size > MAX_HEADER_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes, more than {MAX_HEADER_BYTES >> 20} MiB; not a {what}")
    try:
        data = json.loads(path.read_bytes())
    except RecursionError:
        raise ConfigError(f"{path}: a {what} nesting too deep to parse") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a JSON {type(data).__name__}, not the object a {what} is")
    return data


__all__ = ["DTYPE_BYTES", "MAX_HEADER_BYTES", "TensorEntry", "read_header", "read_json_object", "regular_file"]
