"""families/wan/i2v.py on tiny offline pipelines: the cached image condition and CLIP embedding are what
``WanImageToVideoPipeline`` computes at inference from a PIL image of the clip's first frame, the loss feeds them to
the transformer as the pipeline does, and TI2V's image mode may take its condition from the clip's own latents.

References (diffusers 0.42.1, ``pipelines/wan/pipeline_wan_i2v.py``): ``__call__`` (``video_processor.preprocess``
of the image, ``prepare_latents``, ``latent_model_input = torch.cat([latents, condition], dim=1)``,
``encoder_hidden_states_image=image_embeds``), ``prepare_latents`` (mask: 1 for the first frame repeated over the
4 frames of the first latent frame, 0 after; the condition is the first frame followed by black frames through the
VAE, ``(z - latents_mean) / latents_std``) and ``encode_image`` (the CLIP's ``hidden_states[-2]``).
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from dit_lora.families.wan.demo import TINY_WAN_GEOMETRY

FRAMES, HEIGHT, WIDTH = (TINY_WAN_GEOMETRY[k] for k in ("num_frames", "height", "width"))
PROMPTS = ["a red square moving left to right", "blue"]
I2V = ["2.1-i2v", "2.2-i2v-a14b"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models are far faster on one intra-op thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _pil(frame: torch.Tensor) -> Image.Image:
    """``(3, H, W)`` in [-1, 1] on the uint8 grid -> the PIL image a user would hand the pipeline."""
    u8 = ((frame + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return Image.fromarray(u8.permute(1, 2, 0).numpy())


def _at_inference(path, image: Image.Image) -> dict:
    """The first transformer call's inputs of a one-step ``WanImageToVideoPipeline`` generation from ``image``."""
    from diffusers import WanImageToVideoPipeline

    pipe = WanImageToVideoPipeline.from_pretrained(path, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    seen: list[dict] = []
    hook = pipe.transformer.register_forward_pre_hook(lambda m, a, kw: seen.append(dict(kw)), with_kwargs=True)
    try:
        pipe(image=image, prompt=PROMPTS[0], height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=1,
             guidance_scale=1.0, output_type="latent")
    finally:
        hook.remove()
    return {"seen": seen[0], "pipe": pipe}


@pytest.mark.parametrize("variant", I2V)
def test_cached_condition_and_image_embedding_are_the_pipeline_s_at_inference(wan_load, wan_model, wan_kit, variant):
    family, _, comps = wan_load(variant, family="wan_i2v")
    pixels = wan_kit.clips(batch=2)
    out = family.encoders.encode_images(comps, pixels)
    latent_frames, c = (FRAMES - 1) // 4 + 1, comps.encoders["vae"].config.z_dim
    assert out["condition"].shape == (2, 4 + c, latent_frames, 8, 8) and out["condition"].dtype == torch.float32
    for i in range(2):
        image = _pil(pixels[i, 0])
        run = _at_inference(wan_model(variant), image)
        hidden = run["seen"]["hidden_states"]
        assert hidden.shape[1] == 2 * c + 4  # 36 channels: noise, mask, image latents
        inference = hidden[:, c:]
        assert torch.equal(out["condition"][i:i + 1, :4], inference[:, :4])  # the mask channels, exactly
        # the image latents: the frame went through uint8 and back (exact here: the clips are on the uint8 grid)
        torch.testing.assert_close(out["condition"][i:i + 1, 4:], inference[:, 4:], rtol=1e-4, atol=1e-4)
        if variant == "2.1-i2v":
            embeds = run["seen"]["encoder_hidden_states_image"]
            torch.testing.assert_close(out["image_embeds"][i:i + 1], embeds, rtol=1e-5, atol=1e-5)
            with torch.no_grad():
                direct = run["pipe"].encode_image(image, torch.device("cpu"))
            torch.testing.assert_close(out["image_embeds"][i:i + 1], direct, rtol=1e-5, atol=1e-5)
        else:  # Wan 2.2 I2V-A14B has no image encoder (image_dim None): nothing cached, nothing fed
            assert "image_embeds" not in out and run["seen"].get("encoder_hidden_states_image") is None
    assert not torch.allclose(out["condition"][0, 4:], out["condition"][1, 4:])  # one condition per sample


@pytest.mark.parametrize("variant", I2V)
def test_condition_by_hand_mask_then_first_frame_and_black_frames(wan_load, wan_kit, variant):
    family, _, comps = wan_load(variant, family="wan_i2v")
    pixels = wan_kit.clips(batch=2)
    condition = family.encoders.encode_images(comps, pixels)["condition"]
    mask = torch.zeros(2, 4, (FRAMES - 1) // 4 + 1, 8, 8)
    mask[:, :, 0] = 1.0  # the first latent frame holds the 4 (first-frame-repeated) mask frames
    assert torch.equal(condition[:, :4], mask)
    vae = comps.encoders["vae"]
    video = torch.cat([pixels[:, :1], torch.zeros_like(pixels[:, 1:])], dim=1).permute(0, 2, 1, 3, 4)
    with torch.no_grad():
        z = vae.encode(video).latent_dist.mode()
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    torch.testing.assert_close(condition[:, 4:], (z - mean) / std, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", I2V)
def test_the_transformer_gets_noisy_latents_then_the_condition_and_the_image_embedding(wan_load, wan_kit, variant):
    options = {"wan_expert": "high"} if "a14b" in variant else {}
    family, cfg, comps = wan_load(variant, family="wan_i2v", **options)
    batch = {**family.encoders.encode_images(comps, wan_kit.clips()), **family.encoders.encode_prompts(comps, PROMPTS)}
    model = wan_kit.Recorder(16, inner=comps.model)
    loss = family.loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(3), cfg)
    (call,) = model.calls
    x0 = batch["latents"]
    replay = torch.Generator().manual_seed(3)
    eps = torch.randn(x0.shape, generator=replay)
    first, end = comps.state.index_ranges[family.loss.step_expert(comps, batch) or "all"]
    idx = first + (torch.rand(2, generator=replay) * (end - first)).long()
    sigma = comps.state.flow_tables[0][idx].view(-1, 1, 1, 1, 1)
    hidden = call["hidden_states"]
    assert hidden.shape == (2, 36, *x0.shape[2:])
    torch.testing.assert_close(hidden[:, :16], (1 - sigma) * x0 + sigma * eps, rtol=1e-5, atol=1e-5)
    assert torch.equal(hidden[:, 16:], batch["condition"])
    if variant == "2.1-i2v":
        assert call["encoder_hidden_states_image"] is batch["image_embeds"]
    else:
        assert call.get("encoder_hidden_states_image") is None
    torch.testing.assert_close(loss, ((call["output"] - (eps - x0)) ** 2).mean(), rtol=1e-5, atol=1e-6)


def test_ti2v_first_latent_frame_is_the_encoding_of_the_first_frame_alone(wan_load, wan_kit):
    """The Wan VAE is causal in time: a clip's first latent frame depends on its first frame only, so TI2V's image
    mode (wan_i2v on TI2V-5B) conditions on the clip's own first latent frame and caches nothing else."""
    family, _, comps = wan_load("2.2-ti2v", family="wan_i2v")
    assert comps.state.image_probability == 1.0  # wan_i2v's default on TI2V-5B
    pixels = wan_kit.clips(batch=2)
    out = family.encoders.encode_images(comps, pixels)
    assert set(out) == {"latents"}
    alone = family.encoders.encode_images(comps, pixels[:, :1])["latents"]
    assert alone.shape[2] == 1
    torch.testing.assert_close(out["latents"][:, :, :1], alone, rtol=1e-4, atol=1e-4)
    other = pixels.clone()
    other[:, 1:] = -other[:, 1:]  # later frames change: the first latent frame does not, the others do
    changed = family.encoders.encode_images(comps, other)["latents"]
    torch.testing.assert_close(changed[:, :, :1], out["latents"][:, :, :1], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(changed[:, :, 1:], out["latents"][:, :, 1:], atol=1e-3)


@pytest.mark.parametrize("variant,options", [("2.1-i2v", {}), ("2.2-i2v-a14b", {"wan_expert": "both"})])
def test_image_to_video_loss_makes_no_host_sync(wan_load, wan_kit, variant, options):
    from dit_lora.training.sync_audit import SyncAudit

    family, cfg, comps = wan_load(variant, family="wan_i2v", **options)
    batch = {**family.encoders.encode_images(comps, wan_kit.clips()), **family.encoders.encode_prompts(comps, PROMPTS)}
    audit = SyncAudit(torch.device("cpu"), enabled=True)
    for step in (1, 2):
        with audit.step():
            loss = family.loss.compute_loss(comps, comps.model, {**batch, "step": step},
                                       torch.Generator().manual_seed(0), cfg)
    assert audit.steps == 2 and not audit.passed and torch.isfinite(loss)
