"""families/videollm/spec.py: one FamilySpec per architecture, filled with small components that share it, its
per-run decisions in a typed state (no ``comps.extras``). Training end to end: tests/e2e/test_videollm.py."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from dit_lora.config import TrainConfig
from dit_lora.contract import capabilities as caps
from dit_lora.contract.spec import COMPONENTS, FamilySpec
from dit_lora.families import videollm
from dit_lora.families.videollm import spec as spec_module
from dit_lora.output.names import PEFT_ADAPTER_FILE

PACKAGE = Path(videollm.__file__).parent


@pytest.mark.parametrize("name", list(videollm.ARCHITECTURES))
def test_the_spec_fills_what_the_family_did(name):
    spec = videollm.make(name)
    assert isinstance(spec, FamilySpec)
    # the capabilities the family class declared, now as components
    assert set(spec.capabilities) == {caps.Demo, caps.ModelDefaults, caps.Precision, caps.RunSetup, caps.Trainables,
                                      caps.Samples, caps.MemoryPlan, caps.ModelCard, caps.VideoQA}
    assert spec.frame_rate is None and spec.encoders is None and spec.kernels is None and spec.exports is None
    info = spec.info
    assert (info.library_name, info.pipeline_tag, info.adapter_weight_name) == (
        "peft", "video-text-to-text", PEFT_ADAPTER_FILE)
    assert info.gradient_checkpointing_default and info.compile_dynamic and info.text_encoder_label is None
    assert info.card_tags == ("video-text-to-text", "videochat") and info.pipeline_class_name == spec.model.arch.model_class
    assert spec.adapter_extras is None  # write_adapter names the base model of a PEFT-format adapter


def test_each_component_is_small():
    spec = videollm.make("llava_next_video")
    for field in COMPONENTS:
        component = getattr(spec, field)
        if component is not None:
            public = [n for n, v in inspect.getmembers(type(component), callable) if not n.startswith("_")]
            assert len(public) < 20, (field, public)


def test_no_module_of_the_family_uses_extras():
    """What a run decides is the typed VideoLLMState in comps.state, not string keys."""
    users = [p.name for p in PACKAGE.glob("*.py") if "extras[" in p.read_text() or "extras.get" in p.read_text()]
    assert users == []


def test_the_demo_builds_the_model_and_the_clips(monkeypatch, tmp_path):
    from dit_lora.families.videollm import demo_clips

    built, made = [], []
    monkeypatch.setattr(demo_clips, "make_qa_dataset", lambda root, **kw: made.append((root, kw)))
    demo = spec_module.VideoLLMDemo(built.append)
    cfg = TrainConfig.for_family(family="qwen2_5_vl", pretrained_model_name_or_path=str(tmp_path / "m"),
                                 train_data_dir=str(tmp_path / "qa" / "chat.jsonl"), num_frames=4)
    demo.prepare_demo(cfg)
    assert built == [str(tmp_path / "m")]
    ((root, kw),) = made
    assert root == tmp_path / "qa" and kw["layout"] == "chat" and kw["num_frames"] == 4
    # no --train_data_dir: the model is built and no clips are drawn, as the diffusion demos do (was a TypeError)
    demo.prepare_demo(TrainConfig.for_family(family="qwen2_5_vl", pretrained_model_name_or_path=str(tmp_path / "n")))
    assert built[-1] == str(tmp_path / "n") and len(made) == 1


@pytest.mark.parametrize("name", sorted(videollm.ARCHITECTURES))
def test_the_block_list_names_the_tiny_models_decoder_layers(name, tmp_path):
    """``--blocks_to_swap`` swaps the language model's decoder layers (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    from dit_lora.registry import resolve

    build = resolve(videollm.ARCHITECTURES[name].demo)
    assert_block_lists(name, build(tmp_path / name))
