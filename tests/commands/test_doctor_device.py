"""`dit_lora.commands.doctor_device`: what this machine runs (the device and bf16, fused kernels, the quantized
base, --compile), each a report line, a CPU's wrong nf4 rounding a warning."""

from __future__ import annotations

from dit_lora.commands import doctor_device
from dit_lora.commands.doctor_versions import OK, WARN


def test_a_cpu_that_rounds_nf4_wrongly_is_a_warning(monkeypatch):
    import torch

    from dit_lora.modeling import quantize

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: "bitsandbytes X rounds 4-bit weights wrongly")
    check = doctor_device.quantize_check()
    assert check.status == WARN and "--quantize_base nf4: bitsandbytes X rounds" in check.message
    monkeypatch.setattr(quantize, "cpu_nf4_problem", lambda: None)
    assert doctor_device.quantize_check().status == OK


def test_a_cpu_is_reported_as_for_smoke_tests_with_its_bf16_autocast(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device, bf16 = doctor_device.device_checks()
    assert (device.name, device.value, device.status) == ("device", "CPU (no CUDA device)", OK)
    assert "smoke tests only" in device.message
    assert bf16.name == "bf16" and (bf16.value, bf16.status) == ("CPU autocast works", OK)


def test_the_kernels_and_compile_lines_name_what_this_machine_uses(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fused = doctor_device.fused_kernels_check()
    assert fused.name == "fused kernels" and "attention auto -> " in fused.value and fused.status == OK
    compiled = doctor_device.compile_check()
    assert compiled.name == "compile" and compiled.value.endswith("on cpu") and compiled.status == OK
