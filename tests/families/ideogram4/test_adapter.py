"""Ideogram 4's model card: its rows (the density, what the LoRA adapts, autocast off, ComfyUI not checked) and a
snippet of Ideogram4Pipeline with one guidance scale and the trained caption length."""

from __future__ import annotations


def test_the_card_says_what_training_fed_and_where_it_was_not_checked():
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    card = get_spec("ideogram4").card
    cfg = TrainConfig.for_family("ideogram4", pretrained_model_name_or_path="ideogram-ai/ideogram-v4",
                                 max_sequence_length=512, logit_std=1.5)  # fmt: skip
    rows = card.card_settings(cfg)
    assert (
        rows["logit_std"] == 1.5 and rows["max_sequence_length"] == 512 and rows["weighting_scheme"] == "logit_normal"
    )
    assert rows["adapted"].startswith("the conditional transformer only") and "no Ideogram 4 model" in rows["comfyui"]
    code = card.usage_snippet(cfg, "./out")
    assert "Ideogram4Pipeline" in code and "load_lora_weights" in code and "max_sequence_length=512" in code
    assert "guidance_schedule=None" in code and card.base_model_license(cfg.model) == "other"
