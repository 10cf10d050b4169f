"""Qwen3-VL MoE LoRA end to end on the tiny offline model (4 experts, 2 per token): one run is the fault drill, the
adapter reloaded by dit-lora's loader and by PEFT into the stock ``Qwen3VLMoeForConditionalGeneration`` (the trained
model's logits, the router and experts untouched; its resume from the middle is tests/conformance's); the 30B-A3B repo's layout (one layer, 8 of its 128 experts) is found from its folder with no --family and
trains one step."""

from __future__ import annotations

import json

import pytest

from videollm_e2e import (assets_fixture, check_card_prompts_as_trained, check_drill_reload_resume,
                          check_layout_trains, video_prompts)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

assets = assets_fixture("demo_qwen3_vl_moe:build_tiny_qwen3_vl_moe", "tiny-qwen3-vl-moe")


def _attention_lora_and_merger_saved(out, extras) -> None:
    targets = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    assert targets and all(".self_attn." in t for t in targets)  # attention only: no router, no expert
    assert extras and all(k.startswith("model.visual.merger.") for k in extras)


@pytest.mark.slow
def test_drill_reload_into_the_stock_model_and_the_card(assets, tmp_path):
    """The drill run and its model card (as the dense model's: the card's clip built as training built it)."""
    with video_prompts("qwen3_vl_moe") as trained:
        check_drill_reload_resume(assets, tmp_path, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", tower=False,
                                  timed=True, check_outputs=_attention_lora_and_merger_saved, resume=False)
    check_card_prompts_as_trained(tmp_path / "out", assets, tmp_path, "qwen3_vl_moe", trained)


@pytest.mark.slow
def test_the_30b_a3b_layout_is_found_from_its_folder_and_trains(tmp_path):
    """The Qwen3-VL-30B-A3B repo's layout at its widths and vocabulary (one language-model layer with 8 of its 128
    experts at the published size, one ViT block), no --family (``dit-lora train``): the folder's config matches the
    catalogue's entry with the layer and expert counts the differences, and one step trains the attention's LoRA."""
    from qwen3_vl_layout import qwen3_vl_folder

    hub_id = "Qwen/Qwen3-VL-30B-A3B-Instruct"
    model = qwen3_vl_folder(tmp_path / "models", hub_id, experts=8)
    differences = ("text_config.num_hidden_layers 1 (published: 48)", "num_experts 8 (published: 128)")
    check_layout_trains(tmp_path, model, "qwen3_vl_moe", hub_id, num_frames=2, differences=differences,
                        targeted=lambda t: ".self_attn." in t)
