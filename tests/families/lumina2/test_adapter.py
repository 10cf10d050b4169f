"""Lumina 2's model card: its rows (the density, the system prompt, the caption length) and a snippet that passes a
changed system prompt and caption length to the pipeline, and nothing when they are the pipeline's own."""

from __future__ import annotations


def test_the_card_passes_what_training_changed():
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    card = get_spec("lumina2").card
    plain = TrainConfig.for_family("lumina2", pretrained_model_name_or_path="Alpha-VLLM/Lumina-Image-2.0")
    code = card.usage_snippet(plain, "./out")
    assert "Lumina2Pipeline" in code and "load_lora_weights" in code
    assert "system_prompt" not in code and "max_sequence_length" not in code
    rows = card.card_settings(plain)
    assert rows == {"weighting_scheme": "logit_normal", "system_prompt": "Lumina2Pipeline's own", "max_sequence_length": 256}
    assert card.base_model_license(plain.model) == "apache-2.0"
    own = TrainConfig.for_family("lumina2", pretrained_model_name_or_path="Alpha-VLLM/Lumina-Image-2.0",
                                 system_prompt='Draw "flat" icons.', max_sequence_length=128)
    code = card.usage_snippet(own, "./out")
    assert 'system_prompt="Draw \\"flat\\" icons.",' in code and "max_sequence_length=128" in code
