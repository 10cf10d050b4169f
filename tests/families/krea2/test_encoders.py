"""Krea 2's encoders: captions as Krea2Pipeline.encode_prompt encodes them (the tapped layers' states stacked per
token, the boolean mask of the real tokens), the empty negative's beside them; images into the latents the pipeline
decodes (``(z - mean) / std``, undone by its ``latents / (1 / std) + mean``)."""

from __future__ import annotations

import torch


def test_captions_and_images_are_encoded_as_the_pipeline_reads_them(tiny_krea2):
    from diffusers import Krea2Pipeline

    from helpers import text_encoding

    from dit_lora.registry import get_spec

    captions = ["a red circle on a blue background", "two green squares"]
    comps, _ = text_encoding("krea2", tiny_krea2, max_sequence_length=64)
    encoders = get_spec("krea2").encoders
    got = encoders.encode_prompts(comps, captions, with_negative=True)
    pipe = Krea2Pipeline.from_pretrained(tiny_krea2, torch_dtype=torch.float32)
    embeds, mask = pipe.encode_prompt(captions, max_sequence_length=64)
    negative, negative_mask = pipe.encode_prompt(["", ""], max_sequence_length=64)
    assert got["prompt_embeds"].shape == (2, 64, 3, 24) and got["prompt_embeds_mask"].dtype == torch.bool
    torch.testing.assert_close(got["prompt_embeds"], embeds)
    torch.testing.assert_close(got["negative_prompt_embeds"], negative)
    assert torch.equal(got["prompt_embeds_mask"], mask) and torch.equal(got["negative_prompt_embeds_mask"], negative_mask)
    assert not bool(mask.all())  # padded in the middle of the template: some tokens are masked
    pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
    latents = encoders.encode_images(comps, pixels)
    vae = pipe.vae
    std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    decoded_input = latents[:, :, None] / std + torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    posterior = vae.encode(pixels[:, :, None]).latent_dist.mode()
    torch.testing.assert_close(decoded_input, posterior, rtol=1e-5, atol=1e-5)


def test_the_cache_identity_without_components_is_the_runs(tiny_krea2):
    """``dit-lora check`` (no components) names the cache namespace a run names: the taps come from the folder."""
    from helpers import text_encoding

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    comps, _ = text_encoding("krea2", tiny_krea2)
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="no")
    encoders = get_spec("krea2").encoders
    assert encoders.cache_identity(cfg) == encoders.cache_identity(cfg, comps)
    assert encoders.cache_identity(cfg)["layers"] == [1, 2, 3]


def test_the_caption_length_report_counts_the_template_close_the_pipeline_keeps_room_for(tiny_krea2):
    """The pipeline tokenizes the caption to the length minus its chat template's closing tokens (appended after the
    padding): the text settings count them with each caption, and they are the pipeline's own suffix."""
    from diffusers import Krea2Pipeline

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    settings = get_spec("krea2").encoders.text_settings(TrainConfig.for_family("krea2", max_sequence_length=64))
    pipe = Krea2Pipeline(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=None)
    assert settings.max_sequence_length == 64 and settings.prefix == pipe.prompt_template_encode_suffix
    assert pipe.prompt_template_encode_num_suffix_tokens == 5  # its close: <|im_end|> \n <|im_start|> assistant \n
