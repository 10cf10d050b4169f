"""FLUX.1's model card: the guidance the embedding was trained with is said, and the snippet passes a non-default
caption length."""

from __future__ import annotations


def test_the_card_says_the_training_guidance_and_the_caption_length():
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    card = get_spec("flux").card
    cfg = TrainConfig.for_family("flux", pretrained_model_name_or_path="black-forest-labs/FLUX.1-dev",
                                 flux_train_guidance=2.5, max_sequence_length=128)
    rows = card.card_settings(cfg)
    assert rows["flux_train_guidance"] == 2.5 and rows["flux_shift"] == "dynamic" and rows["max_sequence_length"] == 128
    code = card.usage_snippet(cfg, "./out")
    assert "FluxPipeline" in code and "max_sequence_length=128" in code and "load_lora_weights" in code
    default = TrainConfig.for_family("flux", pretrained_model_name_or_path="black-forest-labs/FLUX.1-dev")
    assert "max_sequence_length" not in card.usage_snippet(default, "./out")
