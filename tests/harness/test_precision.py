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


@pytest.mark.parametrize("speedup, dtype", [(3.4, "bfloat16"), (0.8, "float32")])
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
    speedup = matmul_speedup(seconds=0.05, size=128)
    assert speedup > 0


def test_cube_run_logs_the_chosen_dtype_and_why():
    from cube.cli import build_parser
    from cube.commands.run import build_spec

    args = build_parser().parse_args(["run", "--model", "smollm2-135m-instruct", "--sample", "67", "--out", "x"])
    extra = build_spec(args).extra
    assert args.dtype == "auto" and extra["dtype"] in ("bfloat16", "float32") and extra["dtype_reason"].startswith("auto:")
