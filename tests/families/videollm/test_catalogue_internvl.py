"""families/videollm/catalogue_internvl.py: the InternVL3.5 -HF entries build transformers' model config, say 256
tokens a frame, tie embeddings where Qwen3 does, and are told apart by their sizes, not their names."""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as ALL
from dit_lora.families.videollm.catalogue_internvl import ENTRIES
from dit_lora.families.videollm.internvl import InternVLSpec
from videollm_tiny import each_entry, entry_configs, others_matching


@each_entry(ENTRIES)
def test_each_entry_is_a_transformers_internvl_config(entry):
    config, _, _ = entry_configs(entry, "InternVLConfig")
    assert config.text_config.model_type == "qwen3" and config.image_token_id == 151671
    assert InternVLSpec.tokens_per_frame(config) == 256 == config.image_seq_length
    assert config.text_config.tie_word_embeddings == (not entry.hub_id.endswith("8B-HF"))  # Qwen3-8B unties them
    assert entry in ALL and entry.defaults["max_sequence_length"] > 8 * 256  # 8 frames fit with their question
    assert others_matching(entry) == []  # no other checkpoint (InternVL or not) has this config
