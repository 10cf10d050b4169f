"""families/sana/spec.py: Sana fills a FamilySpec of small components; what a run decides is its typed SanaRun."""

from __future__ import annotations

import inspect

from dit_lora.contract import capabilities as caps
from dit_lora.contract.spec import FamilySpec
from dit_lora.families.sana.spec import INFO, sana_spec
from dit_lora.registry import get_family, get_spec


def test_the_registry_serves_sanas_own_spec():
    spec = get_spec("sana")
    assert isinstance(spec, FamilySpec) and spec.name == "sana" and spec.info is INFO
    assert isinstance(get_family("sana"), FamilySpec)  # a converted family: get_family builds the spec too
    assert INFO.pipeline_class_name == "SanaPipeline" and INFO.text_encoder_label == "Gemma-2"
    assert INFO.default_lora_layers == ("to_q", "to_k", "to_v", "to_out.0")


def test_it_fills_the_capabilities_the_old_class_declared():
    """The same twelve optional capabilities as SanaFamily declared (what `opt(applies=...)` tags read)."""
    assert set(sana_spec().capabilities) == {
        caps.Encoders, caps.Captions, caps.Demo, caps.ModelDefaults, caps.RunNotes, caps.Precision, caps.RunSetup,
        caps.Samples, caps.MemoryPlan, caps.ModelCard, caps.FusedKernels, caps.ImageBuckets}
    spec = sana_spec()
    assert spec.trainables is None and spec.video_frames is None and spec.exports is None and spec.fitting is None
    assert isinstance(spec.encoders, caps.PromptText)  # data/captions.py reads the text settings from it


def test_components_are_small_and_share_the_encoders():
    spec = sana_spec()
    parts = [getattr(spec, field) for field in ("model", "data", "loss", "adapter", "encoders", "samples", "plan",
                                                "card", "notes", "setup", "precision", "demo", "defaults")]
    for part in parts:
        methods = [n for n, v in inspect.getmembers(type(part), inspect.isfunction) if not n.startswith("__")]
        assert len(methods) < 20, (type(part).__name__, methods)
    assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
    assert spec.plan.loss is spec.loss and spec.plan.buckets is spec.image_buckets


def test_no_component_keeps_run_state_in_extras():
    from pathlib import Path

    import dit_lora.families.sana as package

    for module in Path(package.__file__).parent.glob("*.py"):
        assert "extras" not in module.read_text(), module.name


def test_the_block_list_names_the_tiny_models_blocks(tiny_sana):
    """``--blocks_to_swap`` swaps ``transformer_blocks`` (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    assert_block_lists("sana", tiny_sana)
