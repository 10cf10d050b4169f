"""catalogue/text_encoders.py: the Gemma-2 2B config Sana's and SANA-Video's entries ship is written once, and every
entry of both families carries it (and its tokenizer files) as published."""

from __future__ import annotations

from dit_lora.catalogue import entries
from dit_lora.catalogue.text_encoders import GEMMA2_2B, GEMMA_TOKENIZER_FILES


def test_gemma2_2b_is_the_published_config():
    assert GEMMA2_2B["model_type"] == "gemma2" and GEMMA2_2B["architectures"] == ["Gemma2Model"]
    assert (GEMMA2_2B["hidden_size"], GEMMA2_2B["num_hidden_layers"], GEMMA2_2B["vocab_size"]) == (2304, 26, 256000)
    assert "tokenizer.model" in GEMMA_TOKENIZER_FILES


def test_sana_and_sana_video_entries_carry_it():
    found = [e for family in ("sana", "sanavideo") for e in entries(family)]
    assert {e.family for e in found} == {"sana", "sanavideo"}
    for entry in found:
        assert entry.configs["text_encoder/config.json"] == GEMMA2_2B, entry.hub_id
        assert entry.tokenizer_files == GEMMA_TOKENIZER_FILES, entry.hub_id
