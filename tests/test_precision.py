"""alfrl.agent.precision: the CPU's bfloat16 flags, the cpu preset's precision by hardware, the note on emulated
bfloat16. (The speed itself is measured by benchmarks/bf16_speed.py, not asserted.)"""

from __future__ import annotations

import warnings

import pytest

from alfrl.agent import precision
from alfrl.agent.precision import cpu_flags, native_bf16_cpu, slow_bf16_note
from alfrl.training.train_config import PRESETS, TrainConfig, check_config, cpu_preset, preset

X86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma {extra}\nbogomips\t: 4890\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd {extra}\n"


@pytest.mark.parametrize("text,native", [(X86.format(extra=""), False),
                                         (X86.format(extra="avx512f avx512_bf16"), True),
                                         (X86.format(extra="amx_tile amx_bf16"), True),
                                         (ARM.format(extra="bf16"), False)])
def test_native_bfloat16_from_the_cpu_flags(tmp_path, text, native):
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert "fpu" in cpu_flags(path) or "fp" in cpu_flags(path)
    assert native_bf16_cpu(path) is native
    note = slow_bf16_note("cpu", ["--bf16"], path)
    assert (note is None) is native
    if note:
        assert "--bf16 asks for bfloat16 autocast" in note and "pass --no-bf16 (" in note  # sft has no prefill
        both = slow_bf16_note("cpu", ["--bf16", "--prefill-dtype bfloat16"], path)
        assert "pass --no-bf16 and --prefill-dtype none" in both


def test_no_cpuinfo_means_float32(tmp_path):
    assert cpu_flags(tmp_path / "missing") == set() and not native_bf16_cpu(tmp_path / "missing")


def test_no_note_on_a_gpu_or_when_nothing_asks_for_bfloat16(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(X86.format(extra=""))
    assert slow_bf16_note("cuda", ["--bf16"], path) is None and slow_bf16_note("cpu", [], path) is None


def test_the_cpu_preset_uses_bfloat16_only_where_it_is_native():
    fast, slow = cpu_preset(True), cpu_preset(False)
    assert (fast["bf16"], fast["prefill_dtype"]) == (True, "bfloat16")
    assert (slow["bf16"], slow["prefill_dtype"]) == (False, None)
    assert {k: v for k, v in fast.items() if k not in ("bf16", "prefill_dtype")} == \
        {k: v for k, v in slow.items() if k not in ("bf16", "prefill_dtype")}
    assert PRESETS["cpu"] == cpu_preset(native_bf16_cpu())  # this machine's


def test_none_on_the_command_line_turns_prefill_autocast_off():
    assert TrainConfig(prefill_dtype="none").prefill_dtype is None
    assert TrainConfig(prefill_dtype="None", sample_dtype="none").rollout(1).prefill_dtype is None
    assert TrainConfig(prefill_dtype="bfloat16").prefill_dtype == "bfloat16"


def test_check_config_notes_emulated_bfloat16(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16_cpu", lambda *a, **k: False)
    with pytest.warns(UserWarning, match="--bf16 and --prefill-dtype bfloat16 ask for bfloat16 autocast"):
        check_config(preset("cpu", bf16=True, prefill_dtype="bfloat16", device="cpu"))
    monkeypatch.setattr(precision, "native_bf16_cpu", lambda *a, **k: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_config(preset("cpu", bf16=True, prefill_dtype="bfloat16", device="cpu"))
