"""Lumina 2's encoders: captions encoded as Lumina2Pipeline.encode_prompt encodes them (the system prompt and
``<Prompt Start>`` before each, the second-to-last hidden state, the mask), the empty caption (the negative, the
caption-dropout entry) as the pipeline's bare negative without the system prompt, a changed system prompt used and
part of the cache's identity, and the caption-length report counting the prefix."""

from __future__ import annotations

import torch


def test_captions_are_encoded_as_the_pipeline_encodes_them(tiny_lumina2):
    from diffusers import Lumina2Pipeline

    from helpers import text_encoding

    from dit_lora.registry import get_spec

    captions = ["a red circle on a blue background", "two green squares"]
    for system in (None, "Draw flat icons."):
        comps, _ = text_encoding("lumina2", tiny_lumina2, max_sequence_length=48, system_prompt=system)
        got = get_spec("lumina2").encoders.encode_prompts(comps, captions, with_negative=True)
        pipe = Lumina2Pipeline.from_pretrained(tiny_lumina2, torch_dtype=torch.float32)
        embeds, mask, negative, negative_mask = pipe.encode_prompt(captions, negative_prompt="",
                                                                   max_sequence_length=48, system_prompt=system)
        assert got["prompt_embeds"].shape == (2, 48, 48)
        torch.testing.assert_close(got["prompt_embeds"], embeds)
        torch.testing.assert_close(got["negative_prompt_embeds"], negative)
        assert torch.equal(got["prompt_attention_mask"], mask)
        assert torch.equal(got["negative_prompt_attention_mask"], negative_mask)
        # the system prompt counts in the length; the negative is "" alone (<bos>), without it
        prefix = (system or pipe.system_prompt) + " <Prompt Start> "
        assert mask.sum(1).tolist() == [len(pipe.tokenizer(prefix + c).input_ids) for c in captions]
        assert negative_mask.sum(1).tolist() == [1, 1]
        # ... and the same counts on the host, which the RoPE embedder is given in training
        assert got["prompt_lengths"].tolist() == mask.sum(1).tolist() and got["prompt_lengths"].device.type == "cpu"
        assert got["negative_prompt_lengths"].tolist() == [1, 1]


def test_the_system_prompt_is_in_the_text_settings_and_the_cache_identity():
    from dit_lora.config import TrainConfig
    from dit_lora.families.lumina2.encoders import PROMPT_START, default_system_prompt
    from dit_lora.registry import get_spec

    encoders = get_spec("lumina2").encoders
    plain = TrainConfig.for_family("lumina2", pretrained_model_name_or_path="Alpha-VLLM/Lumina-Image-2.0")
    own = TrainConfig.for_family("lumina2", pretrained_model_name_or_path="Alpha-VLLM/Lumina-Image-2.0",
                                 system_prompt="Draw flat icons.")
    text = encoders.text_settings(plain)
    assert text.max_sequence_length == 256 and text.prefix == default_system_prompt() + PROMPT_START
    assert default_system_prompt().startswith("You are an assistant designed to generate superior images")
    assert encoders.text_settings(own).prefix == "Draw flat icons." + PROMPT_START
    assert text.instruction is None  # no instruction: the prefix is counted, nothing is taken off the length
    assert encoders.cache_identity(plain)["system_prompt"] != encoders.cache_identity(own)["system_prompt"]


def test_the_caption_report_counts_the_system_prompt(tiny_lumina2):
    from transformers import AutoTokenizer

    from dit_lora.config import TrainConfig
    from dit_lora.data.captions import token_counter_for_model
    from dit_lora.registry import get_spec

    cfg = TrainConfig.for_family("lumina2", pretrained_model_name_or_path=str(tiny_lumina2), max_sequence_length=40)
    counter, note = token_counter_for_model(cfg, get_spec("lumina2"))
    assert note is None and counter.exact and counter.limit == 40  # the pipeline keeps all 40 tokens
    tokenizer = AutoTokenizer.from_pretrained(tiny_lumina2, subfolder="tokenizer")
    alone = len(tokenizer("a red circle").input_ids)
    assert counter.count(["a red circle"])[0] > alone + 20  # the system prompt's tokens counted with it


def test_the_empty_caption_is_the_pipelines_bare_negative(tiny_lumina2):
    """--caption_dropout_probability's entry (the empty caption, encoded alone or beside others) is what
    Lumina2Pipeline samples classifier-free guidance against: "" without the system prompt."""
    from diffusers import Lumina2Pipeline

    from helpers import text_encoding

    from dit_lora.registry import get_spec

    comps, _ = text_encoding("lumina2", tiny_lumina2, max_sequence_length=48)
    encoders = get_spec("lumina2").encoders
    alone = encoders.encode_prompts(comps, [""])
    mixed = encoders.encode_prompts(comps, ["a red circle", ""])
    pipe = Lumina2Pipeline.from_pretrained(tiny_lumina2, torch_dtype=torch.float32)
    _, _, negative, negative_mask = pipe.encode_prompt(["a red circle"], negative_prompt="", max_sequence_length=48)
    for got, row in ((alone, 0), (mixed, 1)):
        torch.testing.assert_close(got["prompt_embeds"][row], negative[0])
        assert torch.equal(got["prompt_attention_mask"][row], negative_mask[0]) and got["prompt_lengths"][row] == 1
