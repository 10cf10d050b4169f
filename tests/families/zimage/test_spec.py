"""families/zimage/spec.py: Z-Image fills a FamilySpec of small components; its block list and LoRA targets."""

from __future__ import annotations

from dit_lora.contract import capabilities as caps
from dit_lora.families.zimage.spec import INFO, zimage_spec
from dit_lora.registry import get_spec


def test_the_registry_serves_the_spec():
    spec = get_spec("zimage")
    assert spec.name == "zimage" and spec.info is INFO
    assert INFO.pipeline_class_name == "ZImagePipeline" and INFO.text_encoder_label == "Qwen3"
    assert INFO.default_lora_layers == ("to_q", "to_k", "to_v", "to_out.0") and INFO.block_lists == ("layers",)
    assert INFO.gradient_checkpointing_default


def test_components_share_the_encoders():
    spec = zimage_spec()
    assert {caps.Encoders, caps.Samples, caps.MemoryPlan, caps.ImageBuckets, caps.Demo} <= set(spec.capabilities)
    assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
    assert spec.plan.loss is spec.loss and spec.plan.buckets is spec.image_buckets


def test_the_block_list_is_the_30_main_layers_of_the_published_model(tmp_path):
    """What --blocks_to_swap swaps and FSDP2 shards one by one: the main layers (the published 30), alike."""
    import json

    from block_lists import assert_block_lists

    from dit_lora.catalogue import by_hub_id

    for file, config in by_hub_id("Tongyi-MAI/Z-Image").configs.items():
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_text(json.dumps(config))
    assert_block_lists("zimage", tmp_path)
