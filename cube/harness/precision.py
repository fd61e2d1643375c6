"""``--dtype auto``: bf16 only where the hardware makes it the faster choice.

Why this is not a constant: this project's machines have changed under it. CPUs with AMX (or
AVX512-BF16) run bf16 matmuls 3-5x faster than fp32; an AVX2-only CPU emulates bf16 and runs it
about 3.5x *slower*. A default of bf16 was right on one and wrong on the other, and nothing said
so. So the choice reads the CPU's flags, confirms a native unit with a short matmul probe (a flag
can be present where the kernel library does not use it), and is logged with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cube.errors import ConfigError

DTYPES = ("auto", "bfloat16", "float32")
# CPU flags (as /proc/cpuinfo spells them) of native bf16 matrix units.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # "bfloat16" or "float32"
    reason: str


def cpu_flags(path: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The first processor's flags; empty where the file is absent (not Linux)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def matmul_speedup(seconds: float = 0.5, size: int = 1024) -> float:
    """fp32 time / bf16 time of a square matmul, each timed for about ``seconds``: >1 means bf16 wins."""
    import torch

    def rate(dtype) -> float:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        a @ b  # warm-up (kernel selection, allocation)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            n += 1
        return n / (time.perf_counter() - start)

    return rate(torch.bfloat16) / rate(torch.float32)


def check_device(device: str) -> str:
    """``device`` if this machine's torch can place a model on it, else a one-line ConfigError.

    Checked before any item or model loads: ``--device bogus`` raised torch's RuntimeError and
    ``--device cuda`` on a CPU build an AssertionError, each a traceback after the model was read.
    """
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(f"--device {device!r} is not a device torch knows (cpu, cuda, cuda:N, mps)") from None
    if parsed.type == "cpu":
        return device
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ConfigError(f"--device {device}: no CUDA device is usable (torch {torch.__version__}, {build}); "
                              "use --device cpu")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"--device {device}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
        return device
    if parsed.type == "mps" and torch.backends.mps.is_available():
        return device
    raise ConfigError(f"--device {device}: {parsed.type} is not usable here; use --device cpu or cuda")


def choose_dtype(requested: str, device: str = "cpu", flags: frozenset[str] | None = None,
                 probe: Callable[[], float] = matmul_speedup) -> DtypeChoice:
    """The dtype to run in, and why: ``requested`` unless it is ``auto``."""
    if requested not in DTYPES:
        raise ConfigError(f"--dtype {requested!r}: use one of {', '.join(DTYPES)}")
    if requested != "auto":
        return DtypeChoice(requested, "requested")
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return DtypeChoice("bfloat16", f"auto: {device} supports bf16")
        return DtypeChoice("float32", f"auto: {device} has no bf16 support")
    flags = cpu_flags() if flags is None else flags
    native = [f for f in NATIVE_BF16_FLAGS if f in flags]
    if not native:
        return DtypeChoice("float32", "auto: the CPU has no native bf16 matrix unit "
                                      f"(none of {', '.join(NATIVE_BF16_FLAGS)} in its flags)")
    speedup = probe()
    if speedup > 1.0:
        return DtypeChoice("bfloat16", f"auto: the CPU has {native[0]} and a matmul probe ran bf16 "
                                       f"{speedup:.1f}x as fast as fp32")
    return DtypeChoice("float32", f"auto: the CPU has {native[0]}, but a matmul probe ran bf16 at "
                                  f"{speedup:.2f}x the speed of fp32")


__all__ = ["DTYPES", "DtypeChoice", "check_device", "choose_dtype", "cpu_flags", "matmul_speedup"]
