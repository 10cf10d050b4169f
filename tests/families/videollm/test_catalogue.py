"""families/videollm/catalogue.py: the published LLaVA-NeXT-Video and Qwen2.5-VL checkpoints, by content.

(tests/catalogue/test_catalogue.py checks every family's entries against the libraries; these are the video LLMs'.)
"""

from __future__ import annotations

import pytest

from dit_lora.catalogue.entry import lookup
from dit_lora.families.videollm.spec import ARCHITECTURES
from dit_lora.families.videollm.catalogue import ENTRIES


def read_from(configs):
    return lambda sub, name: configs.get(f"{sub}/{name}" if sub else name)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.hub_id)
def test_each_entry_is_its_architectures_and_matches_itself(entry):
    config = entry.configs["config.json"]
    assert entry.family in ARCHITECTURES
    assert config["model_type"] == entry.family  # llava_next_video / qwen2_5_vl
    assert entry.matches(read_from(entry.configs))
    # the text length is the language model's context, wherever transformers keeps it
    assert entry.text_length == lookup(config, "max_position_embeddings")
    assert entry.defaults["lora_alpha"] == 2 * entry.defaults["rank"]
    assert entry.trained_text() == "-"  # a video LLM has no trained resolution


def test_the_architectures_do_not_match_each_other():
    llava = next(e for e in ENTRIES if e.family == "llava_next_video")
    qwen = next(e for e in ENTRIES if e.family == "qwen2_5_vl")
    assert not llava.matches(read_from(qwen.configs)) and not qwen.matches(read_from(llava.configs))
    assert len({e.hub_id for e in ENTRIES}) == len(ENTRIES)


def test_depth_is_the_language_model_layer_count():
    seven_b = next(e for e in ENTRIES if e.hub_id == "llava-hf/LLaVA-NeXT-Video-7B-hf")
    config = {**seven_b.configs["config.json"]}
    config["text_config"] = {**config["text_config"], "num_hidden_layers": 2}
    assert seven_b.depth_differences(read_from({"config.json": config})) == [
        "text_config.num_hidden_layers 2 (published: 32)"]
