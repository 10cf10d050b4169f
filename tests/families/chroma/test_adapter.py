"""Chroma's model card: its rows (the shift, the caption length, the boolean mask) and a snippet that encodes the
prompt first and passes its masks as booleans, at the trained caption length."""

from __future__ import annotations


def test_the_card_says_the_mask_and_the_snippet_passes_boolean_masks():
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    card = get_spec("chroma").card
    cfg = TrainConfig.for_family("chroma", pretrained_model_name_or_path="lodestones/Chroma1-HD", max_sequence_length=128)
    rows = card.card_settings(cfg)
    assert rows["chroma_shift"] == "the scheduler's" and rows["max_sequence_length"] == 128
    assert rows["attention_mask"].startswith("boolean")
    code = card.usage_snippet(cfg, "./out")
    assert "ChromaPipeline" in code and "load_lora_weights" in code and "max_sequence_length=128" in code
    assert "prompt_attention_mask=mask.bool()" in code and "negative_prompt_attention_mask=negative_mask.bool()" in code
    assert card.base_model_license(cfg.model) == "apache-2.0"
