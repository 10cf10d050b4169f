"""kit/text_conditioned.py: the cache identity every text-conditioned family builds from (the model,
its stamp under the family's key, the text dtype, the family's settings, a quantized encoder), and the setup that
records a run's text settings in the family's own run state, and the run's flow tables kept in its state."""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from dit_lora.config.schema import ModelOptions
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import (
    InstructedCaptions,
    LengthCaptions,
    TextSettingsSetup,
    encoder_identity,
    run_tables,
)


def _cfg(path, quantize=False):
    model = ModelOptions(pretrained_model_name_or_path=str(path), revision="r1", variant=None,
                         quantize_text_encoder=quantize)
    return SimpleNamespace(model=model, training=SimpleNamespace(mixed_precision="bf16"))


def test_identity_names_the_model_its_stamp_and_the_family_settings(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    one = encoder_identity(_cfg(tmp_path), "sana", max_sequence_length=300)
    assert list(one) == ["family", "model", "model_index_mtime", "revision", "variant", "text_dtype",
                         "max_sequence_length"]
    assert one["family"] == "sana" and one["model"] == os.path.abspath(tmp_path) and one["text_dtype"] == "bf16"
    assert one["revision"] == "r1" and one["max_sequence_length"] == 300


def test_identity_keeps_the_family_stamp_key_and_marks_a_quantized_encoder(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    one = encoder_identity(_cfg(tmp_path, quantize=True), "qwenimage", stamp_key="model_stamp", latents="mode")
    assert "model_stamp" in one and "model_index_mtime" not in one
    assert list(one)[-2:] == ["latents", "text_encoder_quantized"] and one["text_encoder_quantized"] == "nf4"


def test_identity_keeps_a_hub_id_as_written():
    assert encoder_identity(_cfg("org/not-a-local-model"), "zimage")["model"] == "org/not-a-local-model"


@dataclass
class _Run:
    text: TextSettings | None = None


def _state(comps):
    if comps.state is None:
        comps.state = _Run()
    return comps.state


class _Setup(TextSettingsSetup):
    run_state = staticmethod(_state)


def test_setup_records_the_text_settings_in_the_family_run_state():
    encoders = SimpleNamespace(text_settings=lambda cfg: TextSettings(max_sequence_length=cfg))
    comps = Components(model=None, encoders={})
    _Setup(encoders).configure(comps, 77)
    assert comps.state == _Run(text=TextSettings(max_sequence_length=77))


def test_setup_takes_the_family_run_state_as_an_argument():
    """A family without more to set up gives its run_state to the kit's class instead of subclassing it."""
    encoders = SimpleNamespace(text_settings=lambda cfg: TextSettings(max_sequence_length=cfg))
    comps = Components(model=None, encoders={})
    TextSettingsSetup(encoders, _state).configure(comps, 33)
    assert comps.state == _Run(text=TextSettings(max_sequence_length=33))


@dataclass
class _Tables:
    flow_tables: tuple | None = None


def test_run_tables_are_built_once_and_kept_in_the_state():
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    state = _Tables()
    comps = Components(model=None, encoders={}, scheduler=FlowMatchEulerDiscreteScheduler())
    sigmas, timesteps = run_tables(state, comps, torch.device("cpu"))
    assert state.flow_tables is not None and sigmas.shape == timesteps.shape
    comps.scheduler = None  # a second call must not rebuild them (it would fail without a scheduler)
    assert run_tables(state, comps, torch.device("cpu"))[0] is sigmas


class Captions(InstructedCaptions):
    pipeline, identity_family, stamp_key = "SanaPipeline", "fam", "model_stamp"
    identity_extra = (("latents", "what they are"),)

    def encode_images(self, comps, pixel_values):
        return pixel_values


def test_instructed_captions_say_the_length_instruction_and_identity(tmp_path):
    import inspect

    from diffusers import SanaPipeline

    (tmp_path / "model_index.json").write_text("{}")
    cfg = _cfg(tmp_path)
    cfg.family_options = SimpleNamespace(complex_human_instruction=True)
    text = Captions().text_settings(cfg)
    default = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
    assert text == TextSettings(max_sequence_length=300, instruction=tuple(default))
    identity = Captions().cache_identity(cfg)
    assert list(identity)[-3:] == ["complex_human_instruction", "max_sequence_length", "latents"]
    assert identity["family"] == "fam" and "model_stamp" in identity and identity["latents"] == "what they are"
    cfg.family_options.complex_human_instruction = False
    assert Captions().text_settings(cfg).instruction is None


class Lengths(LengthCaptions):
    caption_length, identity_family, stamp_key = CaptionLength(512), "fam", "model_stamp"
    identity_extra = (("latents", "what they are"),)

    def encode_images(self, comps, pixel_values):
        return pixel_values

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return {}


def test_length_captions_say_the_length_and_identity(tmp_path):
    (tmp_path / "model_index.json").write_text("{}")
    cfg = _cfg(tmp_path)
    cfg.data = SimpleNamespace(max_sequence_length=None)
    assert Lengths().text_settings(cfg) == TextSettings(max_sequence_length=512)
    cfg.data.max_sequence_length = 77
    assert Lengths().text_settings(cfg) == TextSettings(max_sequence_length=77)
    identity = Lengths().cache_identity(cfg)
    assert list(identity)[-2:] == ["max_sequence_length", "latents"] and identity["max_sequence_length"] == 77
    assert identity["family"] == "fam" and "model_stamp" in identity and identity["latents"] == "what they are"


def test_captions_that_state_no_identity_family_are_refused_by_name(tmp_path):
    """Two families without a name would share their caches' identity: a class that states none fails at once."""
    (tmp_path / "model_index.json").write_text("{}")
    cfg = _cfg(tmp_path)
    cfg.data = SimpleNamespace(max_sequence_length=None)

    class Nameless(Lengths):
        identity_family = ""

    with pytest.raises(TypeError, match="Nameless states no identity_family"):
        Nameless().cache_identity(cfg)


def test_length_captions_encode_at_the_recorded_length():
    """Before the setup records the run's text settings (components built by hand): the pipeline's default."""
    comps = Components(model=None, encoders={})
    assert Lengths().recorded_length(comps) == 512
    comps.state = _Run(text=TextSettings(max_sequence_length=64))
    assert Lengths().recorded_length(comps) == 64
