"""families/videollm/catalogue_common.py: one video-LLM entry shape with LLaMA-Factory's defaults (copied per entry,
so one entry's edit never reaches another) and their source."""

from __future__ import annotations

from dit_lora.families.videollm.catalogue_common import (
    LLAMA_FACTORY_DEFAULTS,
    LLAMA_FACTORY_SOURCE,
    video_llm_checkpoint,
)


def _entry(**extra):
    return video_llm_checkpoint(hub_id="org/VLM-1B", family="qwen3_vl", title="VLM (1B)",
                                identity={"model_type": "qwen3_vl"}, depth={"text_config.num_hidden_layers": 2},
                                config={"model_type": "qwen3_vl"}, text_length=4096, tokenizer_files=("vocab.json",),
                                **extra)


def test_an_entry_has_the_shared_shape_and_its_own_copy_of_the_defaults():
    one, two = _entry(), _entry()
    assert one.defaults == LLAMA_FACTORY_DEFAULTS and one.defaults is not LLAMA_FACTORY_DEFAULTS
    one.defaults["rank"] = 64
    assert two.defaults["rank"] == 8 and LLAMA_FACTORY_DEFAULTS["rank"] == 8
    assert one.signature == {"config.json": {"model_type": "qwen3_vl"}} and one.stored_dtype == "bf16"
    assert one.depth == {"config.json": {"text_config.num_hidden_layers": 2}} and one.text_length == 4096
    assert one.sources["defaults"] == LLAMA_FACTORY_SOURCE and one.tokenizer_files == ("vocab.json",)


def test_an_entry_may_bring_its_own_defaults_and_notes():
    entry = _entry(defaults={**LLAMA_FACTORY_DEFAULTS, "max_sequence_length": 8192}, defaults_source="its card",
                   notes="unconfirmed")
    assert entry.defaults["max_sequence_length"] == 8192 and entry.sources["defaults"] == "its card"
    assert entry.notes == "unconfirmed"
