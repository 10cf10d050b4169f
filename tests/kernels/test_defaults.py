"""kernels/defaults.py: which implementation each fused op gets under --kernels auto / on / off."""

from __future__ import annotations

import pytest

from dit_lora.kernels import defaults


def test_off_is_always_eager():
    assert defaults.choose_impl("modulate", "cpu", "off") == ("eager", "")
    assert defaults.choose_impl("modulate", "cuda", "off") == ("eager", "")


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="choose one of auto, on, off"):
        defaults.choose_impl("modulate", "cpu", "fast")


def test_on_asks_for_triton_where_it_can_run(monkeypatch):
    monkeypatch.setattr(defaults, "triton_usable", lambda device: (True, ""))
    assert defaults.choose_impl("rmsnorm", "cpu", "on") == ("triton", "")
    monkeypatch.setattr(defaults, "triton_usable", lambda device: (False, "Triton is not installed"))
    impl, note = defaults.choose_impl("rmsnorm", "cpu", "on")
    assert impl == "eager" and note.startswith("Triton is not installed; the fused ops keep")


def test_auto_follows_the_measurements(monkeypatch):
    monkeypatch.setattr(defaults, "triton_usable", lambda device: (True, ""))
    impl, evidence = defaults.choose_impl("modulate", "cuda", "auto")
    assert impl == "triton" and "H100" in evidence  # measured faster on CUDA
    impl, note = defaults.choose_impl("modulate", "cpu", "auto")
    assert impl == "eager" and "no fused op has measured 1.5x faster" in note and "--kernels on" in note
    impl, _ = defaults.choose_impl("layernorm", "cuda", "auto")  # not measured: stays eager
    assert impl == "eager"
    monkeypatch.setattr(defaults, "triton_usable", lambda device: (False, "no Triton"))
    assert defaults.choose_impl("modulate", "cuda", "auto")[0] == "eager"


def test_every_measured_default_names_its_evidence_and_clears_the_bar():
    for device, ops in defaults.MEASURED_DEFAULTS.items():
        for op, (impl, evidence) in ops.items():
            assert impl in ("triton", "compiled") and "benchmarks/" in evidence, (device, op)
