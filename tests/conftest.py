"""Shared fixtures: the real offline tokenizers (fetched from the registries as CI does) and the
real benchmark folder. Small synthetic fixtures live next to the tests that use them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from cube.models_config import tokenizer_families


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch (and what it starts: vLLM, lm-eval) gets its share
    of the cores: two workers with two threads each on two cores are oversubscribed, and OpenMP
    pools that wait on each other then run slower than one thread each."""
    import os
    import sys

    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = str(max(1, cores // int(workers)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    if "torch" in sys.modules:  # imported before this hook: the variables came too late for it
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def benchmarks_root() -> Path:
    """The folder that holds ``cmmlu/``, found as cube itself finds it: ``$CUBE_BENCHMARKS``, the
    data home (where ``make test`` fetches it on a clone without the shared copy), the shared copy."""
    from cube.protocol.items import find_benchmark_root, missing_benchmark_message

    root = find_benchmark_root("cmmlu")
    if root is None:
        pytest.fail(f"real benchmark data: {missing_benchmark_message('cmmlu')}")
    return root.parent


@pytest.fixture(scope="session")
def cmmlu_items(benchmarks_root) -> Callable[..., list]:
    """``load_cmmlu`` on the real folder, each split read (and hash-checked) once a session.

    A full read takes about half a second and a dozen modules need one. The call returns a fresh
    list, in load_cmmlu's order (split, then subject, then file order), so a test that sorts or
    trims its list changes no other test's; the items themselves are frozen.
    """
    from cube.protocol.items import load_cmmlu

    read: dict[str, tuple] = {}

    def items(splits: Sequence[str] = ("test",)) -> list:
        for split in splits:
            if split not in read:
                read[split] = tuple(load_cmmlu(benchmarks_root / "cmmlu", splits=(split,)))
        return [item for split in splits for item in read[split]]

    return items


@pytest.fixture(scope="session")
def cmmlu_leak_index(cmmlu_items):
    """The leakage index of CMMLU's dev and test splits at the default thresholds, built once a
    session (seconds each time). Read-only: a test that needs other thresholds builds its own."""
    from cube.records.leakage import build_index

    return build_index(cmmlu_items(("dev", "test")))


@pytest.fixture(scope="session")
def family_sources() -> dict[str, dict]:
    return {name: family.offline.as_dict() for name, family in tokenizer_families().items() if family.offline}


@pytest.fixture(scope="session")
def real_tokenizers(family_sources):
    """Every family with an offline source, resolved through cube's own verified fetch."""
    from cube.tokenizers.sources import resolve_tokenizer

    return {name: resolve_tokenizer(src["spec"], src["sha256"]) for name, src in family_sources.items()}


@pytest.fixture(scope="session")
def qwen3_tokenizer(family_sources):
    from cube.tokenizers.sources import resolve_tokenizer

    src = family_sources["qwen3"]
    return resolve_tokenizer(src["spec"], src["sha256"])


@pytest.fixture(scope="session")
def tiny_qwen3(qwen3_tokenizer):
    """A tiny random-weight Qwen3 with the REAL Qwen3 vocabulary: runs in CI in seconds.

    Random but peaked (large init) so greedy argmax never hinges on float noise. Four heads of
    32: vLLM's CPU attention needs head_dim >= 32.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1234)
    config = transformers.Qwen3Config(
        vocab_size=qwen3_tokenizer.get_vocab_size(), hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=4096, tie_word_embeddings=True, initializer_range=0.2,
        eos_token_id=qwen3_tokenizer.token_to_id("<|im_end|>"),
    )
    return transformers.Qwen3ForCausalLM(config).to(torch.float32).eval()


@pytest.fixture()
def full_disk(tmp_path) -> Path:
    """A real, nearly full file system: a 256 KiB tmpfs mounted on a temp folder, so that a write
    fails with ENOSPC as on a full disk (no patched ``open``). Skipped where mounting is not allowed
    (it needs root, or CAP_SYS_ADMIN)."""
    import subprocess

    mount = tmp_path / "full-disk"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip() or proc.returncode})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture(scope="session")
def unique_short_option(cmmlu_items):
    """(item uid, option) of an option of 5-8 normalised characters, all CJK, that no other option
    of CMMLU's dev and test splits shares: issue 32 §4's plant, which the metadata rule let through
    (it counted options of 12+ characters only). Picked at test time; never written anywhere."""
    from collections import Counter

    from cube.records.leakage import normalize_for_match

    items = cmmlu_items(("dev", "test"))
    counts = Counter(normalize_for_match(o)[0] for i in items for o in i.options)
    for item in items:
        for option in item.options:
            norm = normalize_for_match(option)[0]
            if 5 <= len(norm) <= 8 and counts[norm] == 1 and all("\u4e00" <= c <= "\u9fff" for c in norm) \
                    and option.strip() == norm:
                return item.uid, option.strip()
    pytest.fail("no unique 5-8 character option in CMMLU")
