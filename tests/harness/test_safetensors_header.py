"""Hostile model folders (issue 48 section 2): safetensors headers that lie, a pickle under a
.safetensors name, configs and indexes that are not what they say, links to nothing, devices and
FIFOs in a file's place. Each is one line, before anything is hashed or loaded; none hangs."""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest

from cube.errors import ConfigError
from cube.harness.model_spec import check_folder, parameter_count
from cube.harness.safetensors_header import read_header

GOOD = {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
        "__metadata__": {"format": "pt"}}


def safetensors(path: Path, header: object, data: bytes = bytes(32), length: int | None = None,
                raw: bytes | None = None) -> Path:
    text = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def entry(**change) -> dict:
    return {**GOOD, "a": {**GOOD["a"], **change}}


LIES = [
    ("length 2^62", dict(header=GOOD, length=2**62), "header length 4,611,686,018,427,387,904 bytes"),
    ("length past the end", dict(header=GOOD, length=10_000), "past the file's"),
    ("not JSON", dict(header=None, raw=b"{not json"), "a header that is not JSON"),
    ("deep", dict(header=None, raw=b"[" * 200_000 + b"]" * 200_000), "a header nesting too deep"),
    ("a list", dict(header=[1, 2]), "a header that is a JSON list"),
    ("a tensor as a string", dict(header={**GOOD, "a": "x"}), "tensor 'a' is a str"),
    ("wrong dtype", dict(header=entry(dtype="F128")), "has dtype 'F128'"),
    ("negative shape", dict(header=entry(shape=[-2, 3])), "has shape [-2, 3]"),
    ("missing shape", dict(header={**GOOD, "a": {"dtype": "F32", "data_offsets": [0, 24]}}), "has shape None"),
    ("offsets past the end", dict(header=entry(data_offsets=[0, 10**9])), "outside the file's 32 data bytes"),
    ("truncated data", dict(header=GOOD, data=bytes(20)), "outside the file's 20 data bytes"),
    ("shape against offsets", dict(header=entry(shape=[3, 3])), "shape [3, 3] of F32 is 36 bytes"),
]


def test_a_true_header_reads_as_its_tensors(tmp_path):
    tensors = read_header(safetensors(tmp_path / "m.safetensors", GOOD))
    assert [(t.name, t.dtype, t.shape, t.count) for t in tensors] == [("a", "F32", (2, 3), 6), ("b", "BF16", (4,), 4)]


@pytest.mark.parametrize("case, made, needle", LIES, ids=[c[0] for c in LIES])
def test_each_lying_header_is_one_line_before_anything_else(tmp_path, case, made, needle):
    path = safetensors(tmp_path / "m.safetensors", **made)
    with pytest.raises(ConfigError) as caught:
        read_header(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not a safetensors file (") and needle in message and "\n" not in message


def test_a_pickle_named_safetensors_is_refused_unread(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(pickle.dumps({"weight": [1.0] * 10}, protocol=2))
    with pytest.raises(ConfigError, match=r"a pickle or a torch.save archive under a .safetensors name"):
        read_header(path)


# ---- a whole folder ------------------------------------------------------------------------------------

@pytest.fixture
def folder(tmp_path) -> Path:
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
    safetensors(out / "model.safetensors", GOOD)
    return out


def test_a_true_folder_passes_and_counts_its_parameters(folder):
    check_folder(folder)
    assert parameter_count(folder) == 10


@pytest.mark.parametrize("name, text, needle", [
    ("config.json", "[1, 2]", "a JSON list, not the object a config.json is"),
    ("config.json", '"llama"', "a JSON str, not the object a config.json is"),
    ("config.json", "[" * 200_000 + "]" * 200_000, "a config.json nesting too deep to parse"),
    ("tokenizer_config.json", "[]", "a JSON list, not the object a tokenizer_config.json is"),
    ("tokenizer_config.json", "{" * 1 + '"a":' * 1 + "[" * 200_000 + "]" * 200_000 + "}", "nesting too deep"),
    ("model.safetensors.index.json", json.dumps({"weight_map": {"a": "../outside.safetensors"}}),
     "names '../outside.safetensors', not a file of this folder"),
    ("model.safetensors.index.json", json.dumps({"weight_map": {"a": "/etc/passwd"}}), "not a file of this folder"),
    ("model.safetensors.index.json", json.dumps({"weight_map": ["a"]}), "no weight_map of tensor -> file name"),
    ("model.safetensors.index.json", "[" * 200_000 + "]" * 200_000, "nesting too deep"),
])
def test_configs_and_indexes_that_are_not_what_they_say_are_one_line(folder, name, text, needle):
    (folder / name).write_text(text)
    (folder.parent / "outside.safetensors").write_bytes(b"secret")
    with pytest.raises(ConfigError) as caught:
        check_folder(folder)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_link_to_nothing_a_device_or_a_fifo_as_weights_is_refused_without_a_hang(folder):
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(folder / "gone.safetensors")
    with pytest.raises(ConfigError, match=r"model.safetensors: no such safetensors file \(a link to nothing\)"):
        check_folder(folder)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"a device, FIFO or socket, not a regular safetensors file"):
        check_folder(folder)
    (folder / "model.safetensors").unlink()
    safetensors(folder / "model.safetensors", GOOD)
    os.mkfifo(folder / "tokenizer.json")  # the identity hash would wait on it for ever
    with pytest.raises(ConfigError, match=r"tokenizer.json: a device, FIFO or socket, not a regular tokenizer.json"):
        check_folder(folder)
