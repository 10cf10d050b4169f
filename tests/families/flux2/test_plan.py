"""families/flux2/plan.py: the meta components, the planned units of both block lists, the text conditioning."""

from __future__ import annotations

from dit_lora.catalogue import by_hub_id
from dit_lora.families.flux2.plan import with_units
from dit_lora.registry import get_family
from flux2_configs import flux2_cfg


def test_a_planned_unit_is_one_double_block_and_its_share_of_single_blocks():
    dev = {"num_layers": 8, "num_single_layers": 48}
    assert with_units(dev, 2) == {"num_layers": 2, "num_single_layers": 12} and with_units(dev, None) == dev
    assert with_units({"num_layers": 5, "num_single_layers": 20}, 3)["num_single_layers"] == 12  # klein 4B
    assert with_units({"num_layers": 8, "num_single_layers": 24}, 8)["num_single_layers"] == 24  # klein 9B, whole


def test_plan_components_from_the_published_klein_configs():
    spec = get_family("flux2")
    entry = by_hub_id("black-forest-labs/FLUX.2-klein-base-4B")
    read = lambda sub, name: entry.configs.get(f"{sub}/{name}" if sub else name)  # noqa: E731
    cfg = flux2_cfg(max_sequence_length=64)
    comps = spec.plan.plan_components(cfg, read, depth=2)
    model = comps.model
    assert model.device.type == "meta" and len(model.transformer_blocks) == 2 and len(model.single_transformer_blocks) == 8
    assert comps.state.pipeline_class == "Flux2KleinPipeline" and not comps.state.guidance_embeds
    assert comps.state.out_layers == (9, 18, 27) and comps.encoders["text_encoder"].device.type == "meta"
    cond = spec.plan.plan_conditioning(comps, cfg, 3)
    assert cond["prompt_embeds"].shape == (3, 64, 7680) and cond["prompt_embeds"].dtype == cfg.weight_dtype
