"""catalogue/text_encoders.py: the Gemma-2 2B config Sana's and SANA-Video's entries ship is written once, and every
entry of both families carries it (and its tokenizer files) as published."""

from __future__ import annotations

from dit_lora.catalogue import entries
from dit_lora.catalogue.text_encoders import GEMMA2_2B, GEMMA_TOKENIZER_FILES, QWEN2_5_VL_TOKEN_IDS
from helpers import ROOT


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


def test_the_qwen2_5_vl_token_ids_are_written_once_for_qwen_image_and_the_video_llms():
    qwen_image = entries("qwenimage")
    qwen_vl = entries("qwen2_5_vl")
    assert qwen_image and len(qwen_vl) == 4
    for entry in qwen_image:
        encoder = entry.configs["text_encoder/config.json"]
        assert {k: encoder[k] for k in QWEN2_5_VL_TOKEN_IDS} == QWEN2_5_VL_TOKEN_IDS, entry.hub_id
    for entry in qwen_vl:
        config = entry.configs["config.json"]
        assert {k: config[k] for k in QWEN2_5_VL_TOKEN_IDS} == QWEN2_5_VL_TOKEN_IDS, entry.hub_id
    for family, uses in (("qwenimage", 1), ("videollm", 4)):  # the ids live in text_encoders.json only
        text = (ROOT / "dit_lora" / "families" / family / "catalogue.json").read_text()
        assert text.count('"$part": "qwen2_5_vl_token_ids"') == uses, family
