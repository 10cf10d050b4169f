"""families/sana/encoders.py: what changes the cached embeddings, and the run's text settings."""

from __future__ import annotations

from sana_configs import sana_cfg

from dit_lora.registry import get_family


def test_cache_identity_names_what_changes_the_embeddings():
    family = get_family("sana")
    base = family.encoders.cache_identity(sana_cfg(max_sequence_length=None))
    assert base["family"] == "sana" and base["max_sequence_length"] == 300
    assert family.encoders.cache_identity(sana_cfg(max_sequence_length=120))["max_sequence_length"] == 120
    assert base["complex_human_instruction"] is True
    assert family.encoders.cache_identity(sana_cfg(max_sequence_length=None, complex_human_instruction=False)) != base


def test_text_settings_say_the_length_and_instruction_without_a_model():
    import inspect

    from diffusers import SanaPipeline

    default = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
    encoders = get_family("sana").encoders
    text = encoders.text_settings(sana_cfg(max_sequence_length=None))
    assert text.max_sequence_length == 300 and text.instruction == tuple(default)
    plain = encoders.text_settings(sana_cfg(max_sequence_length=120, complex_human_instruction=False))
    assert plain.max_sequence_length == 120 and plain.instruction is None


def test_configure_records_them_in_the_runs_state():
    from dit_lora.contract.family import Components

    spec, cfg = get_family("sana"), sana_cfg(max_sequence_length=77)
    comps = Components(model=None)
    spec.setup.configure(comps, cfg)
    assert comps.state.text == spec.encoders.text_settings(cfg)
