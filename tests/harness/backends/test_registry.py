"""``cube.harness.backends.open_backend``: one registry for the engines ``cube run`` offers."""

import pytest

from cube.errors import ConfigError
from cube.harness.backends import BACKENDS, ScoreRequest, open_backend


def test_an_unknown_backend_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown backend 'tgi'; known: hf, vllm"):
        open_backend("tgi", "smollm2-135m-instruct")


def test_the_hf_entry_opens_a_real_demo_model_that_scores():
    backend = open_backend("hf", "smollm2-135m-instruct", dtype="float32")
    assert type(backend).__name__ == "HFBackend" and BACKENDS["hf"].endswith(":HFBackend")
    (options,) = backend.score([ScoreRequest("The capital of France is", (" Paris", " banana"))], batch_size=1)
    assert options[0].total > options[1].total


def test_cube_run_offers_exactly_the_registered_backends(capsys):
    from cube.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--model", "smollm2-135m-instruct", "--backend", "tgi", "--out", "x"])
    assert "choose from 'hf', 'vllm'" in capsys.readouterr().err
