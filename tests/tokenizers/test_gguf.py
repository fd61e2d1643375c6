import struct

import pytest

from cube.errors import SourceError
from cube.tokenizers.gguf import read_gguf_metadata
from cube.tokenizers.sources import fetch_registry_file


@pytest.fixture(scope="module")
def qwen25_chunk(family_sources):
    src = family_sources["qwen2.5"]
    return fetch_registry_file(src["spec"], src["sha256"])


def test_reads_the_tokenizer_from_the_first_chunk_of_a_split_gguf(qwen25_chunk):
    meta = read_gguf_metadata(qwen25_chunk)
    assert meta["general.architecture"] == "qwen2"
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "qwen2"
    assert len(meta["tokenizer.ggml.tokens"]) == len(meta["tokenizer.ggml.token_type"]) == 151936
    assert meta["tokenizer.ggml.eos_token_id"] == 151645


def _gguf_bytes(kvs: list[tuple[str, int, bytes]]) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, vtype, payload in kvs:
        kb = key.encode()
        out += struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype) + payload
    return out


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def test_hand_built_header_parses_every_value_kind(tmp_path):
    arr = struct.pack("<IQ", 8, 2) + _string("a") + _string("bc")
    data = _gguf_bytes([("u32", 4, struct.pack("<I", 7)), ("f32", 6, struct.pack("<f", 0.5)),
                        ("flag", 7, b"\x01"), ("name", 8, _string("甲")), ("toks", 9, arr),
                        ("ints", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", -1, 0, 1))])
    path = tmp_path / "x.gguf"
    path.write_bytes(data + b"\0" * 10)  # tensor info / data would follow
    meta = read_gguf_metadata(path)
    assert meta["u32"] == 7 and meta["f32"] == 0.5 and meta["flag"] is True
    assert meta["name"] == "甲" and meta["toks"] == ["a", "bc"] and meta["ints"] == [-1, 0, 1]


def test_truncated_header_and_wrong_magic_are_one_line_errors(tmp_path):
    data = _gguf_bytes([("name", 8, _string("abcdef"))])
    short = tmp_path / "short.gguf"
    short.write_bytes(data[:-3])
    with pytest.raises(SourceError, match="truncated"):
        read_gguf_metadata(short)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGML" + data[4:])
    with pytest.raises(SourceError, match="not a GGUF file"):
        read_gguf_metadata(bad)


# ---- hostile headers (issue 22, section 3): every length is bounded by the file's size ----------


@pytest.mark.parametrize("name, payload, needle", [
    ("huge string", struct.pack("<Q", 1 << 62) + b"abc", "declares 4,611,686,018,427,387,904 bytes"),
    ("huge scalar array", struct.pack("<IQ", 10, 1 << 60), "declares"),  # 8 bytes x 2**60
    ("huge string array", struct.pack("<IQ", 8, 1 << 61), "an array of 2,305,843,009,213,693,952 values"),
    ("deep arrays", struct.pack("<IQ", 9, 1) * 100_000, "nested more than 8 deep"),
])
def test_a_header_length_beyond_the_file_is_one_line_not_a_memory_error(tmp_path, name, payload, needle):
    """On the main of issue 22 the first raised MemoryError, the deep one RecursionError."""
    path = tmp_path / "evil.gguf"
    path.write_bytes(_gguf_bytes([("tokenizer.ggml.tokens", 9 if "array" in name else 8, payload)]))
    with pytest.raises(SourceError) as caught:
        read_gguf_metadata(path)
    assert needle in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_huge_metadata_count_is_refused_before_reading(tmp_path):
    path = tmp_path / "evil.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 63) + b"\0" * 64)
    with pytest.raises(SourceError, match="declares 9,223,372,036,854,775,808 metadata pairs"):
        read_gguf_metadata(path)


def test_the_cli_audit_of_a_hostile_gguf_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "evil.gguf"
    path.write_bytes(_gguf_bytes([("tokenizer.ggml.model", 8, struct.pack("<Q", 1 << 62) + b"gpt2")]))
    proc = subprocess.run([sys.executable, "-m", "cube", "audit", "--brief", "--tokenizer", f"evil={path}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cube: error: ") and "GGUF header declares" in last
