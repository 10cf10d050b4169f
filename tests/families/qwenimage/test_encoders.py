"""families/qwenimage/encoders.py: captions through the pipeline's own encode_prompt, padded with their mask; the
VAE's normalised posterior mode; what changes the cache."""

from __future__ import annotations

import torch
from diffusers import QwenImagePipeline

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.qwenimage.encoders import QwenImageEncoders, pad_text
from dit_lora.families.qwenimage.state import QwenImageRun


def test_pad_text_zero_pads_and_masks():
    embeds = torch.ones(2, 3, 4)
    out = pad_text(embeds, None, 5)
    assert out["prompt_embeds"].shape == (2, 5, 4) and out["prompt_embeds"][:, 3:].abs().sum() == 0
    assert out["prompt_embeds_mask"].tolist() == [[1, 1, 1, 0, 0]] * 2


def test_embeddings_are_the_pipelines_and_latents_are_normalised(tiny_qwenimage):
    pipe = QwenImagePipeline.from_pretrained(tiny_qwenimage, torch_dtype=torch.float32)
    comps = Components(model=None, encoders={"vae": pipe.vae, "text_encoder": pipe.text_encoder,
                                             "tokenizer": pipe.tokenizer}, state=QwenImageRun())
    encoders = QwenImageEncoders()
    captions = ["a red circle", "a blue square on a green background"]
    out = encoders.encode_prompts(comps, captions, with_negative=True)
    ref, ref_mask = pipe.encode_prompt(captions, device="cpu", max_sequence_length=512)
    tokens = ref.shape[1]
    torch.testing.assert_close(out["prompt_embeds"][:, :tokens], ref)
    assert torch.equal(out["prompt_embeds_mask"][:, :tokens], ref_mask.long())
    assert out["prompt_embeds"].shape[1] == 512 and out["prompt_embeds_mask"][:, tokens:].sum() == 0
    assert out["negative_prompt_embeds"].shape == (1, 512, ref.shape[2])

    pixels = torch.rand(2, 3, 32, 48) * 2 - 1
    latents = encoders.encode_images(comps, pixels)
    raw = pipe.vae.encode(pixels.unsqueeze(2)).latent_dist.mode()[:, :, 0]
    mean = torch.tensor(pipe.vae.config.latents_mean).view(1, -1, 1, 1)
    std = torch.tensor(pipe.vae.config.latents_std).view(1, -1, 1, 1)
    torch.testing.assert_close(latents, (raw - mean) / std)
    assert latents.shape == (2, pipe.vae.config.z_dim, 4, 6) and latents.dtype == torch.float32


def test_cache_identity_changes_with_the_text_length():
    encoders = QwenImageEncoders()
    a = encoders.cache_identity(TrainConfig.for_family("qwenimage", pretrained_model_name_or_path="Qwen/Qwen-Image"))
    b = encoders.cache_identity(TrainConfig.for_family("qwenimage", pretrained_model_name_or_path="Qwen/Qwen-Image",
                                                       max_sequence_length=256))
    assert a != b and a["max_sequence_length"] == 512
