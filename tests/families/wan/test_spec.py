"""families/wan/spec.py: both Wan families fill a FamilySpec of small components (image-to-video subclasses what
it changes); what a run decides is its typed WanRun."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from dit_lora.contract import capabilities as caps
from dit_lora.contract.spec import FamilySpec
from dit_lora.families.wan.spec import TASKS, wan_spec
from dit_lora.registry import get_family, get_spec

#: WanFamily's capabilities (DiffusionFamily's Encoders and Captions, and its own), and FrameRate, which the old
#: class never declared but the registry's spec of it filled (it has model_fps)
OLD = {caps.Encoders, caps.Captions, caps.Demo, caps.ModelDefaults, caps.RunNotes, caps.Precision, caps.RunSetup,
       caps.VideoFrames, caps.Samples, caps.MemoryPlan, caps.ModelCard, caps.AdapterExtras, caps.Exports,
       caps.FusedKernels, caps.Trainables}


@pytest.mark.parametrize("name", ["wan", "wan_i2v"])
def test_the_registry_serves_wans_own_spec(name):
    spec = get_spec(name)
    assert isinstance(spec, FamilySpec) and spec.name == name and isinstance(get_family(name), FamilySpec)
    assert spec.video_frames is TASKS[name] and spec.frame_rate is TASKS[name]
    assert spec.info.pipeline_class_name == TASKS[name].pipeline_class_name
    assert spec.info.default_lora_layers == ("to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2")
    assert spec.info.gradient_checkpointing_default and spec.info.text_encoder_label == "UMT5-XXL"
    assert spec.info.repeated_block_classes == ("WanTransformerBlock",)
    assert spec.info.card_tags[0] == {"wan": "text-to-video", "wan_i2v": "image-to-video"}[name]


@pytest.mark.parametrize("name", ["wan", "wan_i2v"])
def test_it_fills_the_capabilities_the_old_class_declared(name):
    spec = wan_spec(name)
    assert set(spec.capabilities) == OLD | {caps.FrameRate}
    assert spec.fitting is None and spec.image_buckets is None and spec.video_qa is None


@pytest.mark.parametrize("name", ["wan", "wan_i2v"])
def test_components_are_small_and_share_the_encoders(name):
    spec = wan_spec(name)
    for field in ("model", "data", "loss", "adapter", "encoders", "samples", "plan", "kernels", "exports", "card",
                  "defaults", "notes", "setup", "trainables", "precision", "demo", "adapter_extras", "video_frames"):
        part = getattr(spec, field)
        methods = [n for n, v in inspect.getmembers(type(part), inspect.isfunction) if not n.startswith("__")]
        assert len(methods) < 20, (type(part).__name__, methods)
    assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
    assert spec.plan.loss is spec.loss and spec.model.task is spec.encoders.task is spec.card.task is TASKS[name]


def test_image_to_video_subclasses_what_it_changes():
    t2v, i2v = wan_spec("wan"), wan_spec("wan_i2v")
    for field in ("model", "encoders", "loss", "plan", "samples", "adapter", "card"):
        assert isinstance(getattr(i2v, field), type(getattr(t2v, field))), field
    assert type(t2v.setup).__name__ == "DiffusionSetup" and type(i2v.setup).__name__ == "WanI2VSetup"


def test_no_component_keeps_run_state_in_extras():
    import dit_lora.families.wan as package

    for module in Path(package.__file__).parent.glob("*.py"):
        text = module.read_text().replace("adapter_extras", "").replace("AdapterExtras", "")
        assert "extras" not in text.replace("save_beside_adapter", ""), module.name


@pytest.mark.parametrize("variant,options,lists", [
    ("2.1-t2v", {}, 1),
    ("2.2-t2v-a14b", {"wan_expert": "both"}, 1),  # the idle expert offloaded: the plan builds the one on the device
    ("2.2-t2v-a14b", {"wan_expert": "both", "offload_inactive_expert": False}, 2),  # WanExperts: high's and low's
])
def test_the_block_lists_name_the_tiny_models_blocks(wan_model, variant, options, lists):
    """``--blocks_to_swap`` swaps ``blocks`` of one transformer, or ``high.blocks`` and ``low.blocks`` of the A14B
    experts (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    assert_block_lists("wan", wan_model(variant), lists=lists, **options)
