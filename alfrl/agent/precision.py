"""Which precision is fast on this machine. bfloat16 autocast pays only where the hardware computes in
bfloat16: a GPU, or an x86 CPU with AVX512_BF16 or AMX (recent Xeons, AMD Zen 4 and later). On other
CPUs (AVX2-only x86, most laptops) PyTorch emulates it, and it costs far more than it saves: on a
2-core AVX2 AMD EPYC, a forward pass of the small model over 512 tokens took 5.7x as long under bfloat16
autocast as in float32, and a forward and backward pass 26x (``python benchmarks/bf16_speed.py``,
``data/results/bf16_speed_avx2.log``).

So the ``cpu`` training preset turns its two bfloat16 options (the update's autocast, ``bf16``, and the
rollouts' prompt reads, ``prefill_dtype``) on only where :func:`native_bf16_cpu` says the CPU has them,
and asking for them elsewhere prints a note that names the cost and the flags that turn them off.

Taught in notebook 05 (what an update costs).
"""

from __future__ import annotations

import warnings
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (Linux ``/proc/cpuinfo``) of native bfloat16 arithmetic."""


OFF_SWITCH = {"--bf16": "--no-bf16", "--prefill-dtype bfloat16": "--prefill-dtype none"}
"""The flag that turns each bfloat16 option off."""


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags, from ``cpuinfo`` (Linux); an empty set where there is no such file."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, arm
            return set(value.split())
    return set()


def native_bf16_cpu(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes in bfloat16 natively (AVX512_BF16 or AMX). False where it cannot be
    told (macOS, Windows): float32 is the safe choice there."""
    return bool(cpu_flags(cpuinfo) & set(BF16_FLAGS))


def slow_bf16_note(device_type: str, what: list[str], cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """A note when bfloat16 autocast (``what``: the flags that asked for it) will be emulated: on a CPU
    without AVX512_BF16 or AMX. None where it is native, or on a GPU."""
    if device_type != "cpu" or not what or native_bf16_cpu(cpuinfo):
        return None
    off = " and ".join(OFF_SWITCH.get(flag, flag) for flag in what)
    verb = "asks" if len(what) == 1 else "ask"
    return (f"{' and '.join(what)} {verb} for bfloat16 autocast, but this CPU has no native bfloat16 "
            f"({' or '.join(BF16_FLAGS)}): PyTorch emulates it, measured 5.7x slower forward and 26x slower "
            f"forward+backward than float32 on an AVX2 CPU (benchmarks/bf16_speed.py). For float32 pass {off} "
            "(the cpu training preset leaves them off on such CPUs)")


def warn_if_slow_bf16(device_type: str, what: list[str]) -> None:
    """Warn (once per call site) when :func:`slow_bf16_note` has a note."""
    note = slow_bf16_note(device_type, what)
    if note:
        warnings.warn(note, stacklevel=3)
