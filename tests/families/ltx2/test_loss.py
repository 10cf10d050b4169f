"""families/ltx2/loss.py: the sigma density is the LTX-2 trainer's, video tokens are packed as the pipeline packs
them, the joint loss is the video MSE plus the weighted audio MSE over the sounding steps, and a clip without sound
(or ``--audio off``) gives the audio stream's LoRA no gradient; in-context, the step gives the transformer what
diffusers' ``LTX2InContextPipeline`` gives it (the clip's tokens, then the reference's at timestep 0 with positions
scaled by the downscale factor) and the reference is out of the loss."""

from __future__ import annotations

import math

import pytest
import torch
from ltx2_configs import ltx2_cfg

from dit_lora.contract.capabilities import TextSettings
from dit_lora.families.ltx2.encoders import REFERENCE
from dit_lora.families.ltx2.loss import LTX2ICLoss, LTX2Loss, pack_video, shifted_logit_normal
from dit_lora.families.ltx2.model import make_components


def test_sigmas_follow_the_trainers_stretched_shifted_logit_normal():
    draws = shifted_logit_normal(200_000, 1024, "cpu", torch.Generator().manual_seed(0))
    assert draws.min() >= 0 and draws.max() <= 1
    mu = 0.95  # at 1,024 tokens; the stretch maps the 0.5th percentile to 0 and the 99.9th to 1
    low, high = (1 / (1 + math.exp(-(mu + z))) for z in (-2.5758, 3.0902))
    normal = torch.sigmoid(torch.randn(200_000, generator=torch.Generator().manual_seed(1)) + mu)
    expected = ((normal - low) / (high - low)).clamp(0, 1)
    assert abs(draws.median() - (0.9 * expected.median() + 0.1 * 0.5)) < 0.02  # nine in ten stretched, one uniform
    longer = shifted_logit_normal(200_000, 4096, "cpu", torch.Generator().manual_seed(0))
    assert longer.mean() > draws.mean()  # more tokens: noisier draws (mean 2.05)
    again = shifted_logit_normal(8, 1024, "cpu", torch.Generator().manual_seed(3))
    assert torch.equal(again, shifted_logit_normal(8, 1024, "cpu", torch.Generator().manual_seed(3)))


def test_video_tokens_are_the_pipelines():
    from diffusers import LTX2Pipeline

    latents = torch.randn(2, 8, 3, 4, 6)
    assert torch.equal(pack_video(latents), LTX2Pipeline._pack_latents(latents, 1, 1))


def _setup(tiny, **values):
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    cfg = ltx2_cfg("x", **values)
    comps = make_components(cfg, tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {}, "cpu")
    comps.state.text = TextSettings(max_sequence_length=16)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "latents": torch.randn(2, 8, 3, 8, 8, generator=gen),
        "prompt_embeds": torch.randn(2, 16, 32, generator=gen),
        "audio_prompt_embeds": torch.randn(2, 16, 32, generator=gen),
        "prompt_attention_mask": torch.ones(2, 16, dtype=torch.long),
        "audio_latents": torch.randn(2, 9, 8, generator=gen),
        "audio_mask": torch.tensor([[1.0] * 9, [0.0] * 9]),
        "fps": 24.0,
    }
    return cfg, comps, batch


def _audio_lora(model):
    from peft import LoraConfig, inject_adapter_in_model

    inject_adapter_in_model(LoraConfig(r=4, lora_alpha=4, target_modules=["audio_attn1.to_q"], init_lora_weights=False),
                            model)
    return [p for n, p in model.named_parameters() if "lora" in n]


def test_a_clip_without_sound_does_not_push_the_audio_stream(tiny):
    """The audio stream's LoRA still reaches the video through the streams' cross-attention, so a silent batch's
    gradient is the video part's alone: the same as with the audio weight at 0; a batch with sound differs."""
    import copy

    _, comps, batch = _setup(tiny)
    model = copy.deepcopy(tiny["transformer"])
    lora = _audio_lora(model)
    silent = {**batch, "audio_mask": torch.zeros(2, 9)}

    def grads(b, weight):
        model.zero_grad()
        cfg = ltx2_cfg("x", audio_loss_weight=weight)
        LTX2Loss(None).compute_loss(comps, model, b, torch.Generator().manual_seed(0), cfg).backward()
        return torch.cat([p.grad.flatten() for p in lora])

    video_part = grads(batch, 0.0)
    assert torch.equal(grads(silent, 1.0), video_part)
    assert not torch.allclose(grads(batch, 1.0), video_part)


@pytest.mark.parametrize("weight", [0.0, 2.5])
def test_the_joint_loss_is_the_video_part_plus_the_weighted_audio_part(tiny, weight):
    cfg, comps, batch = _setup(tiny)
    model, loss = tiny["transformer"], LTX2Loss(None)
    assert cfg.family_options.audio_loss_weight == 1.0
    seed = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    with torch.no_grad():
        video_only = loss.compute_loss(comps, model, {**batch, "audio_mask": torch.zeros(2, 9)}, seed(), cfg)
        one = loss.compute_loss(comps, model, batch, seed(), ltx2_cfg("x", audio_loss_weight=1.0))
        weighted = loss.compute_loss(comps, model, batch, seed(), ltx2_cfg("x", audio_loss_weight=weight))
    torch.testing.assert_close(weighted, video_only + weight * (one - video_only))


def test_audio_off_gives_the_audio_stream_noise_and_no_loss(tiny):
    cfg, comps, batch = _setup(tiny, audio="off")
    batch = {k: v for k, v in batch.items() if not k.startswith("audio_latents") and k != "audio_mask"}
    with torch.no_grad():
        value = LTX2Loss(None).compute_loss(comps, tiny["transformer"], batch, torch.Generator().manual_seed(0), cfg)
    assert torch.isfinite(value) and value.ndim == 0


def test_a_lora_trained_on_a_tone_learns_its_sound(tiny, tmp_path):
    """The audio part of the loss on a clip with a tone (encoded from a real track, as the cache holds it) falls as a
    LoRA on both streams trains on it, measured at fixed noise draws before and after."""
    import copy
    from types import SimpleNamespace

    from audio_clips import write_clip
    from peft import LoraConfig, inject_adapter_in_model

    from dit_lora.families.ltx2.encoders import LTX2Encoders

    cfg, comps, batch = _setup(tiny)
    comps.encoders["tokenizer"] = tiny["tokenizer"]
    clip = write_clip(tmp_path / "tone.mp4", seconds=1.0, fps=24, tone=440.0)
    sample = SimpleNamespace(path=clip, caption="a red square", bucket=(9, 64, 64), source_fps=24.0, is_image=False)
    sound = LTX2Encoders().encode_samples(comps, [sample])
    batch = {**{k: v[:1] for k, v in batch.items() if k != "fps"}, "fps": 24.0,
             "audio_latents": sound["audio_latents"], "audio_mask": sound["audio_mask"]}
    loss = LTX2Loss(None)
    held = range(1000, 1016)

    def audio_part(model):
        with torch.no_grad():
            return sum(float(loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(s), cfg)
                             - loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(s),
                                                 ltx2_cfg("x", audio_loss_weight=0.0))) for s in held)

    def trained(weight):
        model = copy.deepcopy(tiny["transformer"])
        inject_adapter_in_model(LoraConfig(r=8, lora_alpha=8, target_modules=["to_q", "to_k", "to_v", "to_out.0"]),
                                model)
        optimizer = torch.optim.AdamW([p for n, p in model.named_parameters() if "lora" in n], lr=1e-2)
        for step in range(80):
            optimizer.zero_grad()
            run = ltx2_cfg("x", audio_loss_weight=weight)
            loss.compute_loss(comps, model, batch, torch.Generator().manual_seed(step), run).backward()
            optimizer.step()
        return audio_part(model)

    before, joint, video_only = audio_part(tiny["transformer"]), trained(1.0), trained(0.0)
    # it learns the sound: the audio part falls, and only the joint loss makes it fall that far
    assert joint < 0.9 * before and joint < video_only, (before, joint, video_only)


def test_image_to_video_keeps_the_first_frame_clean_at_timestep_zero_and_out_of_the_loss(tiny):
    """``LTX2ImageToVideoPipeline``'s step: the first latent frame's tokens given clean at timestep 0 (the other
    tokens, the audio stream and ``sigma`` at the clip's), and a change of the prediction there changes no loss."""
    cfg, comps, batch = _setup(tiny)
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, **kw):
            calls.append(kw)
            out = kw["hidden_states"].clone()
            out[:, :64] = 1e6  # the conditioning frame's prediction: anything
            return out, torch.zeros_like(kw["audio_hidden_states"])

    loss = LTX2Loss(None, image_to_video=True).compute_loss(comps, Spy(), batch, torch.Generator().manual_seed(0), cfg)
    assert torch.isfinite(loss)
    (kw,) = calls
    video = batch["latents"].flatten(2).transpose(1, 2)
    assert torch.equal(kw["hidden_states"][:, :64], video[:, :64])  # 8 x 8 tokens of frame 0, clean
    assert not torch.equal(kw["hidden_states"][:, 64:], video[:, 64:])
    assert kw["timestep"].shape == (2, 192) and (kw["timestep"][:, :64] == 0).all()
    assert torch.equal(kw["timestep"][:, 64:], kw["sigma"][:, None].expand(2, 128))
    assert kw["audio_timestep"].shape == (2,)


class FirstFrameSpy(torch.nn.Module):
    """Records the transformer's arguments; predicts ``value`` on the first latent frame's 64 tokens, 0 elsewhere."""

    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.calls, self.value = [], value

    def forward(self, **kw):
        self.calls.append(kw)
        out = torch.zeros_like(kw["hidden_states"])
        out[:, :64] = self.value
        return out, torch.zeros_like(kw["audio_hidden_states"])


def test_first_frame_conditioning_gives_the_frame_clean_at_timestep_zero_and_out_of_the_loss(tiny):
    """--first_frame_conditioning_p 1: every step as the image-to-video step (the first frame's tokens clean at
    timestep 0, its prediction out of the loss); 0 (the default) the text-to-video step, unchanged."""
    _, comps, batch = _setup(tiny)
    video = batch["latents"].flatten(2).transpose(1, 2)
    cfg = ltx2_cfg("x", first_frame_conditioning_p=1.0)
    spies = [FirstFrameSpy(value) for value in (0.0, 1e6)]
    losses = [LTX2Loss(None).compute_loss(comps, spy, batch, torch.Generator().manual_seed(0), cfg) for spy in spies]
    assert torch.isfinite(losses[0]) and torch.equal(losses[0], losses[1])  # the frame's prediction teaches nothing
    kw = spies[0].calls[0]
    assert torch.equal(kw["hidden_states"][:, :64], video[:, :64]) and not torch.equal(kw["hidden_states"][:, 64:],
                                                                                          video[:, 64:])
    assert kw["timestep"].shape == (2, 192) and (kw["timestep"][:, :64] == 0).all()
    assert torch.equal(kw["timestep"][:, 64:], kw["sigma"][:, None].expand(2, 128))
    plain = [FirstFrameSpy(value) for value in (0.0, 1e6)]
    off = [LTX2Loss(None).compute_loss(comps, spy, batch, torch.Generator().manual_seed(0), ltx2_cfg("x"))
           for spy in plain]
    assert not torch.equal(off[0], off[1]) and plain[0].calls[0]["timestep"].shape == (2,)  # the frame trains


def test_first_frame_conditioning_takes_the_share_of_steps_it_is_given(tiny):
    """p = 0.5 over 200 steps of one generator: about half conditioned, the same steps for the same seed (the draw
    is the run's generator's, so a resumed run repeats it); one latent frame is never conditioned."""
    _, comps, batch = _setup(tiny)
    cfg = ltx2_cfg("x", first_frame_conditioning_p=0.5)

    def conditioned(seed: int, b=batch) -> list[bool]:
        spy, generator = FirstFrameSpy(), torch.Generator().manual_seed(seed)
        for _ in range(200):
            LTX2Loss(None).compute_loss(comps, spy, b, generator, cfg)
        return [bool((c["timestep"][:, 0] == 0).all()) if c["timestep"].ndim == 2 else False for c in spy.calls]

    first = conditioned(0)
    assert 70 < sum(first) < 130 and first == conditioned(0) and first != conditioned(1)
    one_frame = {**batch, "latents": batch["latents"][:, :, :1]}
    assert not any(conditioned(0, one_frame))


def test_first_frame_conditioning_is_not_an_option_of_image_to_video():
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError

    with pytest.raises(UserError, match=r"--first_frame_conditioning_p is an option of the ltx2 and ltx2_ic families"):
        parse_config(["--family", "ltx2_i2v", "--pretrained_model_name_or_path", "x", "--train_data_dir", "d",
                      "--first_frame_conditioning_p", "0.1"])


def test_the_first_latent_frame_is_the_image_to_video_pipelines_condition(tiny):
    """The video VAE is causal in time: the clip's own first latent frame is what the pipeline encodes from the image."""
    from diffusers import LTX2ImageToVideoPipeline

    from dit_lora.families.ltx2.encoders import LTX2Encoders

    _, comps, _ = _setup(tiny)
    clip = torch.rand(1, 9, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    latents = LTX2Encoders().encode_images(comps, clip)["latents"]
    pipe = LTX2ImageToVideoPipeline(**{k: tiny[k] for k in ("scheduler", "vae", "audio_vae", "text_encoder",
                                                             "tokenizer", "connectors", "transformer", "vocoder")})
    with torch.no_grad():
        packed, mask = pipe.prepare_latents(clip[:, 0], 1, 8, 64, 64, 9, 0.0, torch.float32, "cpu", None)
    torch.testing.assert_close(packed[:, :64], latents.flatten(2).transpose(1, 2)[:, :64], atol=1e-5, rtol=1e-5)
    assert mask[:, :64].eq(1).all() and mask[:, 64:].eq(0).all()


def test_the_clips_frame_rate_is_read_on_the_host_and_never_moved():
    batch = {"latents": torch.zeros(1, 8, 3, 8, 8), "clip_fps": torch.tensor([30.0])}
    out = LTX2Loss(None).prepare_batch(None, dict(batch), "cpu", cached=True)
    assert out["fps"] == 30.0 and "clip_fps" not in out
    unknown = LTX2Loss(None).prepare_batch(None, {**batch, "clip_fps": torch.tensor([0.0])}, "cpu", cached=True)
    assert unknown["fps"] == 24.0  # an image or a container without a rate: the pipeline's


def test_uncached_clips_are_placed_at_their_own_frame_rate(tiny, tmp_path):
    """--cache_latents false (--audio off): the raw batch carries each clip's rate, as a cached one does, and the
    step places the tokens by it, not at the pipeline's 24 fps."""
    from audio_clips import write_clip

    from dit_lora.data.batches import RawVideoDataset, collate
    from dit_lora.data.video import VideoSample

    cfg = ltx2_cfg("x", audio="off", cache_latents=False, max_sequence_length=16)
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(cfg, tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {}, "cpu")
    comps.encoders["tokenizer"] = tiny["tokenizer"]  # an uncached step encodes its captions
    comps.state.text = TextSettings(max_sequence_length=16)
    clip = write_clip(tmp_path / "a.mp4", seconds=2.0, fps=8, tone=None)
    sample = VideoSample(key="a.mp4", caption="a red square", path=str(clip), bucket=(9, 64, 64), source_fps=8.0)
    batch = collate([RawVideoDataset([sample], "first")[(0, False)]])
    from dit_lora.registry import get_spec

    out = get_spec("ltx2").loss.prepare_batch(comps, batch, "cpu", cached=False)
    assert out["fps"] == 8.0 and "clip_fps" not in out and out["latents"].shape[2] == 3


# ---- in-context (IC-LoRA): the step as LTX2InContextPipeline's, the reference out of the loss ----

class Spy(torch.nn.Module):
    """Stands in for the transformer: records each call's arguments and answers zeros (the pipeline's step and the
    loss go on), ``reference_value`` on the tokens after ``target`` (what the loss must never read)."""

    def __init__(self, transformer, target: int = 0, reference_value: float = 0.0) -> None:
        super().__init__()
        self.inner, self.calls, self.target, self.value = transformer, [], target, reference_value
        self.config, self.rope, self.audio_rope = transformer.config, transformer.rope, transformer.audio_rope
        self.dtype, self.device = transformer.dtype, transformer.device

    def cache_context(self, name):
        return self.inner.cache_context(name)

    def forward(self, **kwargs):
        self.calls.append(kwargs)
        video = torch.zeros_like(kwargs["hidden_states"])
        video[:, self.target :] = self.value
        return video, torch.zeros_like(kwargs["audio_hidden_states"])


def _pipeline_call(tiny, factor: int):
    """One denoising step of ``LTX2InContextPipeline`` (no guidance) with a reference clip: the transformer's
    arguments."""
    from diffusers import LTX2InContextPipeline
    from diffusers.pipelines.ltx2.pipeline_ltx2_ic_lora import LTX2ReferenceCondition
    from PIL import Image

    spy = Spy(tiny["transformer"])
    parts = {k: tiny[k] for k in ("vae", "audio_vae", "text_encoder", "tokenizer", "connectors", "vocoder", "scheduler")}
    pipe = LTX2InContextPipeline(transformer=spy, **parts)
    pipe.set_progress_bar_config(disable=True)
    frames = [Image.new("RGB", (64, 64), (40 * i, 90, 200)) for i in range(9)]
    pipe(prompt="a square", reference_conditions=[LTX2ReferenceCondition(frames=frames)],
         reference_downscale_factor=factor, num_frames=9, height=64, width=64, frame_rate=24.0, num_inference_steps=2,
         guidance_scale=1.0, max_sequence_length=64, output_type="latent", generator=torch.manual_seed(0))
    # the conditional half of the call (the pipeline may batch an unconditional one beside it)
    return {k: v[:1] if isinstance(v, torch.Tensor) and v.ndim else v for k, v in spy.calls[0].items()}


def _ic_components(tiny, factor: int = 1):
    cfg = ltx2_cfg("x", family="ltx2_ic", reference_downscale_factor=factor)
    extra = {"audio_vae": tiny["audio_vae"], "connectors": tiny["connectors"]}
    comps = make_components(cfg, tiny["transformer"], tiny["vae"], tiny["text_encoder"], extra, {}, "cpu")
    comps.state.text = TextSettings(max_sequence_length=64)
    comps.state.reference_factor = factor
    return cfg, comps


@pytest.mark.parametrize("factor", [1, 2])
def test_the_step_gives_the_transformer_what_the_in_context_pipeline_gives_it(tiny, factor):
    theirs = _pipeline_call(tiny, factor)
    cfg, comps = _ic_components(tiny, factor)
    side = 8 // factor  # 64 px over the tiny VAE's 8x: 8 x 8 latents a frame, the reference's / factor
    target = 3 * 8 * 8
    reference_tokens = theirs["hidden_states"][:, target:]
    assert reference_tokens.shape[1] == 3 * side * side
    width = reference_tokens.shape[-1]
    batch = {
        "latents": torch.randn(1, width, 3, 8, 8),
        REFERENCE: reference_tokens.reshape(1, 3, side, side, width).permute(0, 4, 1, 2, 3).float(),
        "prompt_embeds": theirs["encoder_hidden_states"],
        "audio_prompt_embeds": theirs["audio_encoder_hidden_states"],
        "prompt_attention_mask": theirs["encoder_attention_mask"],
        "fps": 24.0,
    }
    spy = Spy(tiny["transformer"])
    LTX2ICLoss(None).compute_loss(comps, spy, batch, torch.Generator().manual_seed(0), cfg)
    ours = spy.calls[0]
    assert torch.equal(ours["video_coords"], theirs["video_coords"])  # the clip's positions, then the reference's
    assert torch.equal(ours["hidden_states"][:, target:], reference_tokens.to(ours["hidden_states"].dtype))
    for call in (ours, theirs):  # per token: the clip's sigma, the reference's 0
        steps = call["timestep"]
        assert steps.shape == (1, target + 3 * side * side)
        assert (steps[:, target:] == 0).all() and (steps[:, :target] > 0).all()
        assert steps[:, :target].unique().numel() == 1
    # strength 1: the pipeline leaves the attention unmasked, as the step does
    assert theirs["video_self_attention_mask"] is None and "video_self_attention_mask" not in ours


def test_the_reference_tokens_are_out_of_the_loss(tiny):
    cfg, comps = _ic_components(tiny)
    gen = torch.Generator().manual_seed(0)
    batch = {
        "latents": torch.randn(2, 8, 3, 8, 8, generator=gen),
        REFERENCE: torch.randn(2, 8, 3, 8, 8, generator=gen),
        "prompt_embeds": torch.randn(2, 64, 32, generator=gen),
        "audio_prompt_embeds": torch.randn(2, 64, 32, generator=gen),
        "prompt_attention_mask": torch.ones(2, 64, dtype=torch.long),
        "fps": 24.0,
    }
    losses = [LTX2ICLoss(None).compute_loss(comps, Spy(tiny["transformer"], 192, value), batch,
                                            torch.Generator().manual_seed(1), cfg) for value in (0.0, 1e6)]
    assert torch.isfinite(losses[0]) and torch.equal(losses[0], losses[1])
