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


def test_the_architectures_are_the_packages_names_in_its_order():
    """One architecture per registered name, in MODEL_CLASSES' order, each its class's own."""
    assert list(spec_module.ARCHITECTURES) == list(videollm.MODEL_CLASSES)
    for name, architecture in spec_module.ARCHITECTURES.items():
        arch = architecture.spec()
        assert arch.name == name and arch.model_class == videollm.MODEL_CLASSES[name]


@pytest.mark.parametrize("name", list(videollm.MODEL_CLASSES))
def test_videollm_spec_shares_one_architecture_among_its_components(name):
    spec = spec_module.videollm_spec(name)
    arch = spec.model.arch
    assert type(arch) is type(spec_module.architecture_spec(name)) and arch.name == name
    assert spec.info.pipeline_class_name == arch.model_class
    # every component that needs the architecture gets the same one
    assert all(getattr(spec, field).arch is arch
               for field in ("loss", "adapter", "video_qa", "plan", "card", "setup", "trainables", "precision"))


def test_an_unknown_name_is_an_error_naming_the_known_ones_not_a_silent_demo(tmp_path):
    for call in (lambda: spec_module.architecture_spec("videochat_flash"),
                 lambda: spec_module.build_demo_model("videochat_flash", tmp_path / "m")):
        with pytest.raises(KeyError, match="videochat_flash.*llava_next_video, qwen2_5_vl, internvl"):
            call()
    assert not (tmp_path / "m").exists()  # nothing was built in its place


def test_the_demo_component_builds_its_architectures_model(monkeypatch, tmp_path):
    built = []
    monkeypatch.setitem(spec_module.ARCHITECTURES, "qwen2_5_vl",
                        spec_module.ARCHITECTURES["qwen2_5_vl"]._replace(demo=lambda path: built.append(path)))
    spec_module.videollm_spec("qwen2_5_vl").demo.build_model(tmp_path / "m")
    assert built == [tmp_path / "m"]


@pytest.mark.parametrize("name", list(videollm.MODEL_CLASSES))
def test_the_spec_fills_what_the_family_did(name):
    spec = videollm.build_spec(name)
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
    spec = videollm.build_spec("llava_next_video")
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


@pytest.mark.parametrize("name", sorted(videollm.MODEL_CLASSES))
def test_the_block_list_names_the_tiny_models_decoder_layers(name, tmp_path):
    """``--blocks_to_swap`` swaps the language model's decoder layers (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    assert_block_lists(name, spec_module.build_demo_model(name, tmp_path / name))
