"""``cube.files``: every loader's "read a file, one-line error", raised as the caller's own class."""

import pytest
import yaml

from cube.errors import ConfigError, ItemsError, RecordsError
from cube.files import read_json, read_json_lines, read_text, read_yaml


def test_a_missing_file_a_folder_and_bad_bytes_are_one_line_each(tmp_path):
    with pytest.raises(ItemsError, match=r"^subject map not found: .*absent\.json$"):
        read_json(tmp_path / "absent.json", ItemsError, "subject map")
    with pytest.raises(ConfigError, match=r"is a folder, not a config file$"):
        read_yaml(tmp_path, ConfigError, "config file")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(RecordsError, match=r"latin1\.txt: manifest is not UTF-8 text \(byte 3\)$"):
        read_text(tmp_path / "latin1.txt", RecordsError, "manifest")


def test_parse_errors_name_the_file_and_the_line(tmp_path):
    (tmp_path / "bad.json").write_text('{\n "a": 1,\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.json: frozen prediction is not valid JSON \(line 3: "):
        read_json(tmp_path / "bad.json", what="frozen prediction")
    (tmp_path / "bad.yaml").write_text("a: 1\nb: [2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"invalid YAML in .*bad\.yaml line 3"):
        read_yaml(tmp_path / "bad.yaml")
    (tmp_path / "log.jsonl").write_text('{"a": 1}\n\n{"b": \n', encoding="utf-8")
    with pytest.raises(RecordsError, match=r"log\.jsonl:3: not a JSON line"):
        read_json_lines(tmp_path / "log.jsonl", RecordsError)


def test_values_come_back_parsed_and_blank_lines_are_skipped(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"a": 1}\n\n[2]\n', encoding="utf-8")
    assert read_json_lines(tmp_path / "log.jsonl") == [(1, {"a": 1}), (3, [2])]
    (tmp_path / "c.yaml").write_text("x: 0.1\n", encoding="utf-8")
    assert read_yaml(tmp_path / "c.yaml") == {"x": 0.1}
    (tmp_path / "bom.csv").write_text("\ufeffa,b\n", encoding="utf-8")
    assert read_text(tmp_path / "bom.csv", encoding="utf-8-sig") == "a,b\n"


def test_yaml_that_would_build_python_objects_is_refused(tmp_path):
    (tmp_path / "evil.yaml").write_text("x: !!python/object/apply:os.system ['true']\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML in"):
        read_yaml(tmp_path / "evil.yaml")
    with pytest.raises(TypeError, match="is not a SafeLoader"):
        read_yaml(tmp_path / "evil.yaml", loader=yaml.UnsafeLoader)


DEEP = "[" * 200_000 + "]" * 200_000  # issue 22, section 3: a RecursionError traceback on its main


def test_json_and_yaml_nested_too_deep_are_one_line_errors(tmp_path):
    (tmp_path / "deep.json").write_text(DEEP, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"deep\.json: frozen prediction nests arrays or objects too deep"):
        read_json(tmp_path / "deep.json", what="frozen prediction")
    (tmp_path / "deep.jsonl").write_text('{"a": 1}\n' + DEEP + "\n", encoding="utf-8")
    with pytest.raises(RecordsError, match=r"deep\.jsonl:2: a JSON line nesting too deep"):
        read_json_lines(tmp_path / "deep.jsonl", RecordsError)
    (tmp_path / "deep.yaml").write_text(DEEP, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"invalid YAML in .*deep\.yaml: YAML file nests too deep"):
        read_yaml(tmp_path / "deep.yaml")


def test_a_deep_manifest_and_a_deep_frozen_prediction_are_one_line_through_their_loaders(tmp_path):
    from cube.records.store import read_manifest
    from cube.tokenizers.audit import read_prediction

    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "MANIFEST.json").write_text(DEEP, encoding="utf-8")
    with pytest.raises(RecordsError, match="manifest nests arrays or objects too deep"):
        read_manifest(tmp_path / "store")
    (tmp_path / "frozen.json").write_text(DEEP, encoding="utf-8")
    with pytest.raises(ConfigError, match="frozen prediction nests arrays or objects too deep"):
        read_prediction(tmp_path / "frozen.json")


# --- issue 32 §3: only regular files, bounded, and never through a link out of a given folder ----


def test_issue32_a_fifo_a_device_and_a_file_past_the_bound_are_one_line_each(tmp_path):
    import os

    from cube.files import read_bytes

    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)  # no writer: the old read_text waited for one for ever
    with pytest.raises(RecordsError, match=r"results\.json: the manifest is not a regular file \(a FIFO"):
        read_json(fifo, RecordsError, "manifest")
    with pytest.raises(ConfigError, match=r"^/dev/zero: the frozen prediction is not a regular file"):
        read_json("/dev/zero", ConfigError, "frozen prediction")  # under a memory limit: MemoryError before
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(2048)  # sparse: no disk used
    with pytest.raises(ConfigError, match=r"the config is 2,048 bytes, more than the 1,024 cube reads"):
        read_bytes(big, ConfigError, "config", max_bytes=1024)
    assert len(read_bytes(big, ConfigError, "config", max_bytes=2048)) == 2048


def test_issue32_a_link_out_of_the_given_folder_is_refused(tmp_path):
    import os

    (tmp_path / "outside.txt").write_text("x", encoding="utf-8")
    folder = tmp_path / "given"
    folder.mkdir()
    (folder / "inside.txt").write_text("y", encoding="utf-8")
    os.symlink(tmp_path / "outside.txt", folder / "link.txt")
    os.symlink(folder / "inside.txt", folder / "ok.txt")
    assert read_text(folder / "ok.txt", within=folder) == "y"  # a link inside the folder is fine
    with pytest.raises(ConfigError, match=r"link\.txt: the file leads to .*outside\.txt, outside .*given"):
        read_text(folder / "link.txt", within=folder)


def test_issue32_loaders_under_a_memory_limit_refuse_dev_zero_in_one_line(tmp_path):
    """MANIFEST.json, an OpenCompass config and `confirm --prediction` as /dev/zero gave MemoryError
    under a memory limit (and grew without one): run in a child with a 1 GiB address-space limit."""
    import os
    import subprocess
    import sys

    from cube.config import REPO_ROOT

    store = tmp_path / "store"
    store.mkdir()
    os.symlink("/dev/zero", store / "MANIFEST.json")
    child = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from cube.cli import main\n"
        "from cube.errors import CubeError\n"
        "from cube.importers.opencompass.config import read_config\n"
        "try:\n    read_config(__import__('pathlib').Path('/dev/zero'))\nexcept CubeError as exc:\n    print(exc)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for argv in (["rescore", str(store)],
                 ["confirm", str(REPO_ROOT / "data" / "records"), "--prediction", "/dev/zero"]):
        done = subprocess.run([sys.executable, "-c", child, *argv], capture_output=True, text=True, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=300)
        assert done.stdout.startswith("/dev/zero: the OpenCompass config is not a regular file"), done.stdout
        err = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(err) == 1 and "is not a regular file" in err[0], done.stderr
