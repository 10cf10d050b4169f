"""families/sanavideo/encoders.py: the cached latents are what the pipelines normalise (image-to-video's condition
is the clip's own first latent frame, by the Wan VAE's causality), captions are what the pipeline feeds the
transformer, the cache identity follows the text settings, and image-to-video refuses still images."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from sanavideo_layout import HUB_ID, sanavideo_cfg

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.sanavideo.encoders import SanaVideoEncoders, SanaVideoSetup
from dit_lora.families.sanavideo.spec import TASKS
from dit_lora.families.sanavideo.state import SanaVideoRun


def _comps(tiny) -> Components:
    vae = tiny["vae"]
    state = SanaVideoRun(latents_mean=torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1),
                         latents_std=torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1))
    encoders = {k: tiny[k] for k in ("vae", "text_encoder", "tokenizer")}
    return Components(model=tiny["transformer"], scheduler=None, encoders=encoders, state=state)


def test_first_latent_frame_is_the_image_to_video_pipelines_condition(tiny):
    from diffusers import SanaImageToVideoPipeline

    comps = _comps(tiny)
    clip = torch.rand(1, 9, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    latents = SanaVideoEncoders(TASKS["sanavideo"]).encode_images(comps, clip)["latents"]
    assert latents.shape == (1, 16, 3, 8, 8) and latents.dtype == torch.float32
    pipe = SanaImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=tiny["vae"], transformer=None,
                                    scheduler=None)
    with torch.no_grad():  # the pipeline's own encode + normalisation of the first frame, put into frame 0
        prepared = pipe.prepare_latents(clip[:, 0], 1, 16, 64, 64, 9, torch.float32, "cpu", None,
                                        latents=torch.zeros(1, 16, 3, 8, 8))
    torch.testing.assert_close(latents[:, :, :1], prepared[:, :, :1], rtol=1e-4, atol=1e-4)
    assert latents.std() > 0.1  # normalised, not zeros


def test_captions_are_the_pipelines_embeddings_with_its_instruction(tiny):
    from diffusers import SanaVideoPipeline

    comps = _comps(tiny)
    encoders = SanaVideoEncoders(TASKS["sanavideo"])
    cfg = sanavideo_cfg()
    comps.state.text = encoders.text_settings(cfg)
    default = inspect.signature(SanaVideoPipeline.__call__).parameters["complex_human_instruction"].default
    assert comps.state.text.instruction == tuple(default) and comps.state.text.max_sequence_length == 300
    out = encoders.encode_prompts(comps, ["a red square moving left to right"], with_negative=True)
    pipe = SanaVideoPipeline(tokenizer=tiny["tokenizer"], text_encoder=tiny["text_encoder"], vae=None,
                             transformer=None, scheduler=None)
    with torch.no_grad():
        embeds, mask, neg, _ = pipe.encode_prompt(["a red square moving left to right"], True, device="cpu",
                                                  complex_human_instruction=list(default))
    assert torch.equal(out["prompt_embeds"], embeds) and torch.equal(out["prompt_attention_mask"], mask)
    assert torch.equal(out["negative_prompt_embeds"], neg)
    plain = SanaVideoEncoders(TASKS["sanavideo"]).text_settings(sanavideo_cfg(complex_human_instruction=False))
    assert plain.instruction is None


def test_max_sequence_length_is_the_caption_length_everywhere_a_run_uses_one(tiny):
    """--max_sequence_length reaches the text settings, the embeddings (the pipeline's own at that length), the cache
    identity, the plan, the card (rows and snippet) and the reloaded pipeline's call; unset, it is 300 (no snippet
    argument). It was accepted and recorded, but the captions stayed 300 tokens."""
    from diffusers import SanaVideoPipeline

    from dit_lora.families.sanavideo.adapter import SanaVideoCard
    from dit_lora.families.sanavideo.samples import SanaVideoSamples

    encoders, task = SanaVideoEncoders(TASKS["sanavideo"]), TASKS["sanavideo"]
    short, default = sanavideo_cfg(max_sequence_length=24), sanavideo_cfg()
    comps = _comps(tiny)
    comps.state.text = encoders.text_settings(short)
    assert comps.state.text.max_sequence_length == 24
    caption = ["a red square moving left to right " * 8]  # longer than 24 tokens: the length decides the cut
    out = encoders.encode_prompts(comps, caption)
    pipe = SanaVideoPipeline(tokenizer=tiny["tokenizer"], text_encoder=tiny["text_encoder"], vae=None,
                             transformer=None, scheduler=None)
    instruction = list(comps.state.text.instruction)
    with torch.no_grad():
        embeds, mask, _, _ = pipe.encode_prompt(caption, False, device="cpu", max_sequence_length=24,
                                                complex_human_instruction=instruction)
    assert out["prompt_embeds"].shape[1] == 24 and torch.equal(out["prompt_embeds"], embeds)
    assert torch.equal(out["prompt_attention_mask"], mask)
    assert encoders.cache_identity(short) != encoders.cache_identity(default)
    card = SanaVideoCard(task)
    assert card.card_settings(short)["max_sequence_length"] == 24
    assert card.card_settings(default)["max_sequence_length"] == 300
    snippet = "".join(card.snippet(short, "me/adapter").call_args)
    assert "max_sequence_length=24," in snippet
    assert "max_sequence_length" not in "".join(card.snippet(default, "me/adapter").call_args)
    samples = SanaVideoSamples(task, encoders)
    assert samples.reloaded_kwargs(None, short, 1, None)["max_sequence_length"] == 24
    # the plan counts the embeddings of that length (by Hub id alone: the catalogue's configs, on the meta device)
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.registry import get_family

    planned = sanavideo_cfg(pretrained_model_name_or_path=HUB_ID, max_sequence_length=24)
    plan_comps = get_family("sanavideo").plan.plan_components(planned, config_reader(planned.model), 1)
    assert plan_comps.state.text.max_sequence_length == 24


def test_cache_identity_follows_the_text_settings_and_is_shared_by_both_tasks():
    t2v, i2v = SanaVideoEncoders(TASKS["sanavideo"]), SanaVideoEncoders(TASKS["sanavideo_i2v"])
    a = t2v.cache_identity(sanavideo_cfg())
    assert a == i2v.cache_identity(sanavideo_cfg("sanavideo_i2v"))  # the same latents and embeddings
    assert a != t2v.cache_identity(sanavideo_cfg(complex_human_instruction=False))


def test_image_to_video_refuses_still_images_and_keeps_the_validation_image(tmp_path, monkeypatch):
    from PIL import Image

    image = tmp_path / "first.png"
    Image.new("RGB", (80, 40), (200, 10, 10)).save(image)
    task = TASKS["sanavideo_i2v"]
    setup = SanaVideoSetup(SanaVideoEncoders(task), task)
    comps = Components(model=None, scheduler=None, encoders={}, state=SanaVideoRun())
    cfg = sanavideo_cfg("sanavideo_i2v", validation_image=str(image), max_num_frames=9, height=64, width=64)
    monkeypatch.setattr(type(task), "video_buckets", lambda self, cfg: [(9, 64, 64)])  # no model folder to read
    with pytest.raises(UserError, match="are images, e.g. `still.png`.*--family sanavideo"):
        setup.inspect_samples(comps, cfg, [SimpleNamespace(bucket=(1, 64, 64), key="still.png")])
    setup.inspect_samples(comps, cfg, [SimpleNamespace(bucket=(9, 64, 64), key="clip.mp4")])
    assert comps.state.validation_image.size == (64, 64)
    SanaVideoSetup(None, TASKS["sanavideo"]).inspect_samples(comps, cfg, [SimpleNamespace(bucket=(1, 64, 64))])
