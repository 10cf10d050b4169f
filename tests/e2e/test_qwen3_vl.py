"""Qwen3-VL LoRA end to end on the tiny offline model: a fault drill, the vision tower (DeepStack mergers included)
trained by the option, the adapter reloaded by dit-lora's loader and by PEFT into the stock
``Qwen3VLForConditionalGeneration`` (the trained model's logits); the 2B repo's layout trains from its folder with no
--family. A resume from the middle is tests/conformance's (the demo, its projector) and test_internvl.py's (with the
vision tower trained)."""

from __future__ import annotations

import pytest

from videollm_e2e import (assets_fixture, check_card_prompts_as_trained, check_configs_matched,
                          check_drill_reload_resume, check_layout_trains, video_prompts)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

assets = assets_fixture("demo_qwen3_vl:build_tiny_qwen3_vl", "tiny-qwen3-vl")


def _tower_deepstack_and_merger_saved(out, extras) -> None:
    assert any(k.startswith("model.visual.blocks.") for k in extras)
    assert any(k.startswith("model.visual.deepstack_merger_list.") for k in extras)
    assert any(k.startswith("model.visual.merger.") for k in extras)


@pytest.mark.slow
def test_drill_tower_reload_into_the_stock_model_and_the_card(assets, tmp_path):
    """The drill run (the demo's tiny model; its steps sync in the vision tower, so the sync audit's card check never
    runs it) and its model card, whose ``answer_video`` builds the clip's frames, rate and timed prompt as training."""
    with video_prompts("qwen3_vl") as trained:
        check_drill_reload_resume(assets, tmp_path, "qwen3_vl", "Qwen3VLForConditionalGeneration", tower=True,
                                  timed=True, check_outputs=_tower_deepstack_and_merger_saved, resume=False)
    check_card_prompts_as_trained(tmp_path / "out", assets, tmp_path, "qwen3_vl", trained)


@pytest.mark.slow
def test_the_2b_layout_is_found_from_its_folder_and_trains(tmp_path):
    """The Qwen3-VL-2B repo's layout at its widths and vocabulary (one language-model layer, one ViT block carrying
    the DeepStack merger), no --family (``dit-lora train``): the folder's configs match the catalogue's entry and
    one step trains the language model's LoRA, the prompt timed by the clip's own rate. No memory plan (the plans
    of these checkpoints are the guide's table)."""
    from qwen3_vl_layout import qwen3_vl_folder
    from transformers import AutoTokenizer

    hub_id = "Qwen/Qwen3-VL-2B-Instruct"
    model = qwen3_vl_folder(tmp_path / "models", hub_id)
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert tokenizer.convert_tokens_to_ids(["<|vision_start|>", "<|video_pad|>"]) == [151652, 151656]
    check_layout_trains(tmp_path, model, "qwen3_vl", hub_id, num_frames=2,
                        differences=("except text_config.num_hidden_layers 1 (published: 28)",),
                        targeted=lambda t: t.startswith("model.language_model."))


def test_the_larger_layouts_are_matched_by_their_configs(tmp_path):
    """The 4B, 8B and 32B configs as their folders hold them (one layer) are matched to their own entries by
    content, with the layer count the one difference."""
    hub_ids = {size: f"Qwen/Qwen3-VL-{size}-Instruct" for size in ("4B", "8B", "32B")}
    check_configs_matched(tmp_path, "qwen3_vl", hub_ids)
