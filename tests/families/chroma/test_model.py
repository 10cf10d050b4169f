"""Chroma's model checks and precision: Chroma1-Flash (step-distilled) refused by its Hub id in one paragraph; the
modulation network and the per-token projections kept out of --quantize_base; a size the pipeline cannot take refused."""

from __future__ import annotations

import pytest


def test_chroma1_flash_is_refused_in_one_paragraph(tiny_chroma, tmp_path):
    from dit_lora.config import TrainConfig
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_spec

    model = get_spec("chroma").model
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="lodestones/Chroma1-Flash",
                                 train_data_dir=str(tmp_path))
    with pytest.raises(UserError) as refused:
        model.validate_config(cfg)
    text = str(refused.value)
    assert "Chroma1-Flash" in text and "lodestones/Chroma1-HD" in text and "\n" not in text
    model.validate_config(TrainConfig.for_family("chroma", pretrained_model_name_or_path=str(tiny_chroma),
                                                 train_data_dir=str(tmp_path)))  # the demo passes
    with pytest.raises(UserError, match="divisible by 16"):
        model.validate_config(TrainConfig.for_family("chroma", pretrained_model_name_or_path=str(tiny_chroma),
                                                     train_data_dir=str(tmp_path), resolution=72))


def test_the_modulation_network_stays_out_of_quantization():
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import quantize_skip_modules
    from dit_lora.registry import get_spec

    skipped = quantize_skip_modules(get_spec("chroma"))
    assert "distilled_guidance_layer" in skipped and "x_embedder" in skipped and "context_embedder" in skipped


def test_fp8_scaled_quantizes_every_blocks_projections_and_keeps_the_output_projection():
    """The skip list's ``proj_out`` is the model's output projection: each single block's ``proj_out`` (its largest
    Linear) is quantized with the rest of the blocks."""
    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import quantize_skip_modules
    from dit_lora.families.chroma.demo import build_tiny_chroma_components
    from dit_lora.modeling.quantize import quantized_linears
    from dit_lora.registry import get_spec

    model = build_tiny_chroma_components()["transformer"]
    names = quantized_linears(model, quantize_skip_modules(get_spec("chroma")))
    singles = len(model.single_transformer_blocks)
    assert sum(n.startswith("single_transformer_blocks.") and n.endswith(".proj_out") for n in names) == singles
    assert "proj_out" not in names and not any(n.startswith(("x_embedder", "distilled_guidance_layer")) for n in names)


def test_the_model_builds_its_components_with_a_new_chroma_run():
    """What was loaded (or planned on the meta device), with a new ChromaRun recording the checkpoint each time (no
    guidance embedding: its config has no such key)."""
    from types import SimpleNamespace

    from dit_lora.families.chroma.model import PARTS, ChromaModel
    from dit_lora.families.chroma.spec import INFO
    from dit_lora.families.chroma.state import ChromaRun
    from dit_lora.kit.loader import LoadedParts

    transformer = SimpleNamespace(config=SimpleNamespace())
    loaded = LoadedParts(transformers={"transformer": transformer}, vae=None, scheduler_config={"shift": 3.0})
    model = ChromaModel(INFO, PARTS)
    comps = model.build_components(None, loaded, None)
    assert type(comps.state) is ChromaRun and comps.state.guidance_embeds is False and comps.model is transformer
    assert model.build_components(None, loaded, None).state is not comps.state  # a new one each time
