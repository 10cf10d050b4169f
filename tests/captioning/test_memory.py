"""What captioning takes on the device, before loading: the weights as the family loads them (quantized or not),
the key/value cache as generate keeps it, and a 7B captioner's answer for a 16 GB card."""

from __future__ import annotations

import pytest
import torch

from dit_lora.captioning.captioner import captioner_config, load_captioner
from dit_lora.captioning.memory import GIB_16, caption_memory, kv_cache_bytes
from dit_lora.families.videollm.spec import build_demo_model
from dit_lora.plan.fake import module_bytes


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_demo_model("qwen2_5_vl", tmp_path_factory.mktemp("memory") / "tiny")


@pytest.mark.parametrize("quantize_base", [None, "nf4"])
def test_the_weights_are_what_the_family_loads(tiny, quantize_base):
    cfg = captioner_config(str(tiny), family=None, quantize_base=quantize_base, mixed_precision="no", num_frames=4)
    planned = caption_memory(cfg, batch_size=1, max_new_tokens=8).weights
    loaded = load_captioner(cfg, torch.device("cpu"), None, 8).model
    # bitsandbytes keeps each 4-bit weight's absmax (one fp32 a block of 64) beside the parameter, in its quant_state
    states = [p.quant_state for p in loaded.parameters() if getattr(p, "quant_state", None) is not None]
    assert bool(states) == bool(quantize_base)
    assert planned == module_bytes(loaded) + sum(s.absmax.numel() * s.absmax.element_size() for s in states)


def test_the_key_value_cache_is_what_generate_keeps(tiny):
    cfg = captioner_config(str(tiny), family=None, quantize_base=None, mixed_precision="no", num_frames=4)
    captioner = load_captioner(cfg, torch.device("cpu"), None, 5)
    model = captioner.model
    ids = torch.ones(2, 11, dtype=torch.long)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                         min_new_tokens=5, return_dict_in_generate=True, pad_token_id=0)
    cache = out.past_key_values
    kept = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    # generate keeps every position but the last new token's (it is sampled, never fed back)
    assert kv_cache_bytes(model.config, 11 + 5 - 1, 2, torch.float32) == kept


def test_a_7b_captioner_fits_a_16_gb_card_in_4_bits_and_not_in_bf16():
    """Qwen2.5-VL-7B from the catalogue's copy of its config (nothing downloaded), 8 frames of a 720p clip."""
    nf4 = caption_memory(captioner_config("Qwen/Qwen2.5-VL-7B-Instruct", family="qwen2_5_vl", quantize_base="nf4",
                                          mixed_precision="bf16", num_frames=8), batch_size=1, max_new_tokens=200)
    bf16 = caption_memory(captioner_config("Qwen/Qwen2.5-VL-7B-Instruct", family="qwen2_5_vl", quantize_base=None,
                                           mixed_precision="bf16", num_frames=8), batch_size=1, max_new_tokens=200)
    assert 14e9 < bf16.weights < 18e9 and bf16.total > GIB_16  # 8.3 B parameters in bf16
    assert nf4.total < GIB_16 and nf4.weights < bf16.weights / 2
    assert nf4.video_tokens > 500  # the family's own count for 8 frames of 720p, not a guess
