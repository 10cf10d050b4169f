"""families/videollm/catalogue_qwen3_vl.py: the Qwen3-VL entries build transformers' model config with DeepStack on
the tower's blocks, tie embeddings where Qwen3 does, and are told apart by their sizes, not their names."""

from __future__ import annotations

from dit_lora.families.videollm.catalogue import ENTRIES as ALL
from dit_lora.families.videollm.catalogue_qwen3_vl import ENTRIES
from videollm_tiny import each_entry, entry_configs, others_matching


@each_entry(ENTRIES)
def test_each_entry_is_a_transformers_qwen3_vl_config(entry):
    config, vision, text = entry_configs(entry, "Qwen3VLConfig")
    assert vision.model_type == "qwen3_vl_vision" and text.model_type == "qwen3_vl_text"  # old spelling mapped
    assert config.video_token_id == 151656 and vision.patch_size == 16 and vision.out_hidden_size == text.hidden_size
    assert len(vision.deepstack_visual_indexes) == 3 and max(vision.deepstack_visual_indexes) < vision.depth
    assert text.rope_parameters["mrope_section"] == [24, 20, 20] and text.rope_parameters["mrope_interleaved"]
    small = entry.hub_id.split("-")[2] in ("2B", "4B")  # (not endswith: "32B" ends with "2B")
    assert config.tie_word_embeddings == small  # Qwen3-1.7B/4B tie, 8B/32B do not
    assert entry in ALL
    assert others_matching(entry) == []  # no other checkpoint (Qwen3-VL or not) has this config
