"""families/zimage/encoders.py: caption embeddings exactly as ZImagePipeline.encode_prompt computes them (chat
template, second-to-last hidden state, each caption its own length), padded with host lengths; FLUX.1-VAE
latents shifted and scaled as diffusers' trainer does; the cache identity."""

from __future__ import annotations

import torch
from diffusers import ZImagePipeline
from zimage_layout import zimage_cfg

from dit_lora.contract.capabilities import PromptText, TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.zimage.encoders import padded, unpadded
from dit_lora.families.zimage.state import ZImageRun
from dit_lora.registry import get_family

CAPTIONS = ["a red circle on a blue background", "a small green star"]


def _comps(tiny, length=64):
    return Components(model=None, encoders={"text_encoder": tiny["text_encoder"], "tokenizer": tiny["tokenizer"],
                                            "vae": tiny["vae"]},
                      state=ZImageRun(text=TextSettings(max_sequence_length=length)))


def test_prompts_are_the_pipelines_embeddings(tiny):
    spec = get_family("zimage")
    out = spec.encoders.encode_prompts(_comps(tiny), CAPTIONS, with_negative=True)
    pipe = ZImagePipeline(**tiny)
    reference, negative = pipe.encode_prompt(list(CAPTIONS), device="cpu", max_sequence_length=64)
    assert out["prompt_embeds"].shape == (2, 64, 48) and out["prompt_lengths"].device.type == "cpu"
    assert out["prompt_lengths"].tolist() == [r.shape[0] for r in reference]
    for row, embed in enumerate(unpadded(out["prompt_embeds"], out["prompt_lengths"].tolist())):
        assert torch.equal(embed, reference[row])
        assert not out["prompt_embeds"][row, embed.shape[0]:].any()  # zero past the caption
    for row, embed in enumerate(unpadded(out["negative_prompt_embeds"], out["negative_prompt_lengths"].tolist())):
        assert torch.equal(embed, negative[row])


def test_the_pipelines_embeddings_by_hand(tiny):
    """What encode_prompt does, written out: Qwen3's chat template with thinking on, the second-to-last hidden
    state, the caption's own tokens."""
    tokenizer, encoder = tiny["tokenizer"], tiny["text_encoder"]
    text = tokenizer.apply_chat_template([{"role": "user", "content": CAPTIONS[1]}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)
    assert text == f"<|im_start|>user\n{CAPTIONS[1]}<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        hidden = encoder(input_ids=ids, output_hidden_states=True).hidden_states[-2][0]
    out = get_family("zimage").encoders.encode_prompts(_comps(tiny), [CAPTIONS[1]])
    n = int(out["prompt_lengths"][0])
    assert n == ids.shape[1]
    torch.testing.assert_close(out["prompt_embeds"][0, :n], hidden, rtol=1e-5, atol=1e-5)


def test_images_are_the_shifted_scaled_posterior_mode(tiny):
    vae = tiny["vae"]
    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    latents = get_family("zimage").encoders.encode_images(_comps(tiny), pixels)
    with torch.no_grad():
        mode = vae.encode(pixels).latent_dist.mode()
    expected = (mode - vae.config.shift_factor) * vae.config.scaling_factor
    assert latents.dtype == torch.float32 and latents.shape == (1, 4, 16, 16)
    torch.testing.assert_close(latents, expected)


def test_padding_round_trip_and_text_settings():
    embeds = [torch.ones(2, 3), torch.full((4, 3), 2.0)]
    out = padded(embeds, 5)
    assert out["prompt_embeds"].shape == (2, 5, 3) and out["prompt_lengths"].tolist() == [2, 4]
    assert [torch.equal(a, b) for a, b in zip(unpadded(out["prompt_embeds"], [2, 4]), embeds)] == [True, True]
    encoders = get_family("zimage").encoders
    assert isinstance(encoders, PromptText)
    assert encoders.text_settings(zimage_cfg()).max_sequence_length == 512
    assert encoders.text_settings(zimage_cfg(max_sequence_length=128)).max_sequence_length == 128


def test_cache_identity_names_what_changes_the_embeddings():
    encoders = get_family("zimage").encoders
    one = encoders.cache_identity(zimage_cfg())
    assert one["family"] == "zimage" and one["max_sequence_length"] == 512
    assert encoders.cache_identity(zimage_cfg(max_sequence_length=128)) != one
