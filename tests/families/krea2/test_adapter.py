"""Krea 2's model card: its rows (the shift, the caption length, no guidance embedding, ComfyUI not checked) and a
snippet of Krea2Pipeline at the trained caption length."""

from __future__ import annotations


def test_the_card_says_what_training_fed_and_where_it_was_not_checked():
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    card = get_spec("krea2").card
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path="krea/Krea-2-Raw", max_sequence_length=256)
    rows = card.card_settings(cfg)
    assert rows["krea2_shift"] == "the scheduler's" and rows["max_sequence_length"] == 256
    assert rows["guidance"].startswith("none fed in training") and "no Krea 2 model" in rows["comfyui"]
    code = card.usage_snippet(cfg, "./out")
    assert "Krea2Pipeline" in code and "load_lora_weights" in code and "max_sequence_length=256" in code
    assert card.base_model_license(cfg.model) == "other"
