"""``--dtype auto``: bf16 only where the hardware makes it the faster choice.

Why this is not a constant: this project's machines have changed under it. CPUs with AMX (or
AVX512-BF16) run bf16 matmuls 3-5x faster than fp32; an AVX2-only CPU emulates bf16 and runs it
about 3.5x *slower*. A default of bf16 was right on one and wrong on the other, and nothing said
so. So the choice reads the CPU's flags, confirms a native unit with a short matmul probe (a flag
can be present where the kernel library does not use it), and is logged with its reason.

Two things keep ``auto`` from changing its mind between a run and its resume (the dtype is part of
a cell's identity, so a flip refused the resume a killed run asked for):

- on a store that already holds the model's records, ``auto`` is the dtype they were written in
  (``recorded_dtype``), said so, and no probe runs;
- the probe times CPU seconds of one thread (``time.thread_time``), fp32 and bf16 interleaved,
  and takes the median of the rounds' ratios: a neighbour's load stretches wall time (a wall-clock
  probe read 0.99x once and 2.0x the next time on a busy machine) but not the CPU time a
  matmul needs, and interleaving cancels what drift is left. bf16 must also win clearly
  (``BF16_MARGIN``): a native unit runs it 3-5x as fast, an emulated one about 0.3x, so a ratio near
  1 is no evidence either way and keeps fp32, the choice that never loses accuracy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cube.errors import ConfigError

DTYPES = ("auto", "bfloat16", "float32")
# What a store's records may carry: a local run's, or a served run's as its server runs it (float16 too)
RECORDED_DTYPES = ("bfloat16", "float16", "float32")
# CPU flags (as /proc/cpuinfo spells them) of native bf16 matrix units.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
# bf16 is chosen only when the probe runs it at least this many times as fast as fp32.
BF16_MARGIN = 1.5


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


def matmul_speedup(rounds: int = 5, size: int = 512, reps: int = 3) -> float:
    """fp32 CPU time / bf16 CPU time of a square matmul on one thread: >1 means bf16 wins.

    The median over ``rounds`` of one fp32 and one bf16 measurement taken back to back, each the
    thread's CPU seconds for ``reps`` matmuls: load from other processes delays the thread but
    does not change the CPU time its work takes (module docstring)."""
    import statistics

    import torch

    def cpu_seconds(a, b) -> float:
        start = time.thread_time()
        for _ in range(reps):
            a @ b
        return time.thread_time() - start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a32, b32 = torch.randn(size, size), torch.randn(size, size)
        a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        a32 @ b32, a16 @ b16  # warm-up (kernel selection, allocation)
        ratios = []
        for _ in range(rounds):
            fp32 = cpu_seconds(a32, b32)
            bf16 = cpu_seconds(a16, b16)
            ratios.append(fp32 / max(bf16, 1e-9))
    finally:
        torch.set_num_threads(threads)
    return statistics.median(ratios)


def recorded_dtype(out: str | Path | None, model: str) -> str | None:
    """The dtype ``model``'s records in the store ``out`` were written in, or None (no store, no
    records of it yet). A store's cells of one model share their dtype (``STORE_FIELDS``)."""
    from cube.records.store import MANIFEST_NAME, read_manifest

    if out is None or not (Path(out) / MANIFEST_NAME).is_file():
        return None
    manifest = read_manifest(out)
    files = manifest.get("files") or {}
    for key, config in sorted((manifest.get("cells") or {}).items()):
        written = any(name.startswith(f"{key}--") for name in files)
        if key.startswith(f"{model}/") and written and config.get("dtype") in RECORDED_DTYPES:
            return config["dtype"]
    return None


def check_device(device: str) -> str:
    """``device`` if this machine's torch can place a model on it, else a one-line ConfigError.

    Checked before any item or model loads: ``--device bogus`` raised torch's RuntimeError and
    ``--device cuda`` on a CPU build an AssertionError, each a traceback after the model was read.
    The CPU is every build's: no torch is imported for it (``cube plan make --dry-run`` plans on a
    machine without torch).
    """
    if device == "cpu":
        return device
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
                 probe: Callable[[], float] = matmul_speedup, recorded: str | None = None) -> DtypeChoice:
    """The dtype to run in, and why: ``requested`` unless it is ``auto``; under ``auto`` the
    ``recorded`` dtype of the store being resumed (``recorded_dtype``) where there is one."""
    if requested not in DTYPES:
        raise ConfigError(f"--dtype {requested!r}: use one of {', '.join(DTYPES)}")
    if requested != "auto":
        return DtypeChoice(requested, "requested")
    if recorded is not None:
        return DtypeChoice(recorded, f"auto: resuming a store whose records are {recorded}, as --dtype {recorded} "
                                     "would; no probe")
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
    if speedup >= BF16_MARGIN:
        return DtypeChoice("bfloat16", f"auto: the CPU has {native[0]} and a matmul probe ran bf16 "
                                       f"{speedup:.1f}x as fast as fp32 (CPU time, one thread)")
    return DtypeChoice("float32", f"auto: the CPU has {native[0]}, but a matmul probe ran bf16 at only "
                                  f"{speedup:.2f}x the speed of fp32 (bf16 needs {BF16_MARGIN}x)")


__all__ = ["BF16_MARGIN", "DTYPES", "DtypeChoice", "check_device", "choose_dtype", "cpu_flags", "matmul_speedup",
           "recorded_dtype"]
