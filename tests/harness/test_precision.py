"""``--dtype auto``: the choice follows the CPU's native bf16 units and a probe, and says why."""

from __future__ import annotations

import pytest

from cube.errors import ConfigError
from cube.harness.precision import NATIVE_BF16_FLAGS, choose_dtype, cpu_flags, matmul_speedup

AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"


def never_probe() -> float:
    raise AssertionError("no probe where the CPU has no native bf16 unit")


def test_flags_are_read_from_cpuinfo(tmp_path):
    (tmp_path / "avx2").write_text(AVX2_ONLY)
    (tmp_path / "amx").write_text(AMX)
    assert cpu_flags(tmp_path / "avx2") == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert {"amx_bf16", "avx512_bf16"} <= cpu_flags(tmp_path / "amx")
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_an_avx2_only_cpu_gets_fp32_without_a_probe(tmp_path):
    (tmp_path / "c").write_text(AVX2_ONLY)
    choice = choose_dtype("auto", "cpu", flags=cpu_flags(tmp_path / "c"), probe=never_probe)
    assert choice.dtype == "float32" and "no native bf16" in choice.reason


@pytest.mark.parametrize("speedup, dtype", [(3.4, "bfloat16"), (0.8, "float32"), (1.3, "float32")])
def test_a_native_unit_is_confirmed_by_the_probe(tmp_path, speedup, dtype):
    (tmp_path / "c").write_text(AMX)
    choice = choose_dtype("auto", "cpu", flags=cpu_flags(tmp_path / "c"), probe=lambda: speedup)
    assert choice.dtype == dtype and "amx_bf16" in choice.reason and f"{speedup:.1f}" in choice.reason


def test_an_explicit_dtype_is_kept_and_a_bad_one_named():
    assert choose_dtype("bfloat16", probe=never_probe).dtype == "bfloat16"
    assert choose_dtype("float32", probe=never_probe).reason == "requested"
    with pytest.raises(ConfigError, match="'half'"):
        choose_dtype("half")


def test_this_machine_is_judged_by_its_own_flags():
    """Whatever CPU runs the tests: fp32 unless it has a native unit the probe confirms."""
    flags = cpu_flags()
    choice = choose_dtype("auto")
    if not any(f in flags for f in NATIVE_BF16_FLAGS):
        assert choice.dtype == "float32"
    speedup = matmul_speedup(rounds=2, size=128, reps=1)
    assert speedup > 0


def test_a_ratio_near_one_is_no_evidence_for_bf16(tmp_path):
    """Issue 36 §3: a wall-clock probe read 0.99x once and 2.0x the next on a busy machine, and the
    dtype flipped between a run and its resume. bf16 now needs a clear win (a native unit: 3-5x)."""
    from cube.harness.precision import BF16_MARGIN

    (tmp_path / "c").write_text(AMX)
    flags = cpu_flags(tmp_path / "c")
    assert choose_dtype("auto", flags=flags, probe=lambda: BF16_MARGIN).dtype == "bfloat16"
    below = choose_dtype("auto", flags=flags, probe=lambda: BF16_MARGIN - 0.01)
    assert below.dtype == "float32" and f"needs {BF16_MARGIN}x" in below.reason


def test_auto_on_a_store_takes_its_recorded_dtype_and_runs_no_probe(tmp_path):
    (tmp_path / "c").write_text(AMX)
    for recorded in ("float32", "bfloat16"):
        choice = choose_dtype("auto", flags=cpu_flags(tmp_path / "c"), probe=never_probe, recorded=recorded)
        assert choice.dtype == recorded and f"resuming a store whose records are {recorded}" in choice.reason
    # an explicit --dtype is what the user asked for: the resume check then names the difference
    assert choose_dtype("bfloat16", recorded="float32", probe=never_probe).dtype == "bfloat16"


def test_cube_run_logs_the_chosen_dtype_and_why():
    from cube.cli import build_parser
    from cube.commands.run import build_spec

    args = build_parser().parse_args(["run", "--model", "smollm2-135m-instruct", "--sample", "67", "--out", "x"])
    settings = build_spec(args).settings
    assert args.dtype == "auto" and settings.dtype in ("bfloat16", "float32") and settings.dtype_reason.startswith("auto:")


def test_a_device_torch_cannot_use_is_one_line_before_anything_loads():
    """Issue 22, section 3: --device bogus raised torch's RuntimeError, and --device cuda on a CPU
    build an AssertionError, each as a traceback."""
    import torch

    from cube.errors import ConfigError
    from cube.harness.precision import check_device

    assert check_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match=r"^--device 'bogus' is not a device torch knows"):
        check_device("bogus")
    if torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA device"):
            check_device(f"cuda:{torch.cuda.device_count()}")
    else:
        with pytest.raises(ConfigError, match=r"^--device cuda: no CUDA device is usable .*use --device cpu$"):
            check_device("cuda")


@pytest.mark.parametrize("argv, needle", [
    (["--device", "bogus"], "--device 'bogus' is not a device torch knows"),
    (["--seed", "-1"], "--seed -1 must be at least 0"),
    (["--device", "cuda:99"], "--device cuda:99: "),  # no CUDA on a CPU build; too few devices on a GPU one
])
def test_cube_run_refuses_a_bad_device_or_seed_in_one_line(tmp_path, argv, needle):
    import subprocess
    import sys

    from cube.config import REPO_ROOT

    proc = subprocess.run([sys.executable, "-m", "cube", "run", "--model", "smollm2-135m-instruct", "--subjects",
                           "anatomy", "--sample", "1", "--out", str(tmp_path / "out"), *argv],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cube: error: ") and needle in last, last
    assert not (tmp_path / "out").exists()
