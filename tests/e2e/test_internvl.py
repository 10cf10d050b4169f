"""InternVL3.5 LoRA end to end on the tiny offline model: a fault drill, the vision tower trained by the option, the
adapter reloaded by dit-lora's loader and by PEFT into the stock ``InternVLForConditionalGeneration`` (the trained
model's logits), and a resume from the middle that ends on the same adapter bit for bit."""

from __future__ import annotations

import pytest

from videollm_e2e import assets_fixture, check_configs_matched, check_drill_reload_resume, check_layout_trains

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

assets = assets_fixture("demo_internvl:build_tiny_internvl", "tiny-internvl")


def _tower_and_projector_saved(out, extras) -> None:
    assert any(k.startswith("model.vision_tower.") for k in extras)
    assert any(k.startswith("model.multi_modal_projector.") for k in extras)


@pytest.mark.slow
def test_drill_tower_reload_into_the_stock_model_and_exact_resume(assets, tmp_path):
    check_drill_reload_resume(assets, tmp_path, "internvl", "InternVLForConditionalGeneration", tower=True,
                              timed=False, check_outputs=_tower_and_projector_saved)


@pytest.mark.slow
def test_the_1b_hf_layout_is_found_from_its_folder_and_trains(tmp_path):
    """The -HF repo's layout at the 1B's widths and vocabulary (one language-model layer, one ViT layer), no
    --family (``dit-lora train``): the folder's configs match the catalogue's entry, whose defaults are taken
    (max_sequence_length 8192 among them), and one step trains the language model's LoRA. One frame (256 image
    tokens at 1024 wide with a 151936-token head in fp32 on a CPU) and no memory plan (its trace at these widths is
    seconds; the plans of these checkpoints are the guide's table, a folder's plan at the start of a run the demo's
    no-host-sync audit). Reloading into the stock class is the tiny model's test above."""
    from internvl_layout import internvl_folder
    from transformers import AutoTokenizer

    hub_id = "OpenGVLab/InternVL3_5-1B-HF"
    model = internvl_folder(tmp_path / "models", hub_id)
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert tokenizer.convert_tokens_to_ids(["<img>", "</img>", "<IMG_CONTEXT>"]) == [151669, 151670, 151671]
    summary = check_layout_trains(tmp_path, model, "internvl", hub_id, num_frames=1,
                                  differences=("except text_config.num_hidden_layers 1 (published: 28)",),
                                  targeted=lambda t: t.startswith("model.language_model."))
    assert summary["defaults"]["applied"]["max_sequence_length"] == 8192


def test_the_larger_hf_layouts_are_matched_by_their_configs(tmp_path):
    """The 2B, 4B and 8B configs as their folders hold them (one layer) are matched to their own entries by content,
    with the layer count the one difference (the full file set and a run: the 1B test's; their plans: the guide's
    table)."""
    hub_ids = {size: f"OpenGVLab/InternVL3_5-{size}-HF" for size in ("2B", "4B", "8B")}
    check_configs_matched(tmp_path, "internvl", hub_ids)
