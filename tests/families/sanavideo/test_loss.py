"""families/sanavideo/loss.py against a hand computation and the pipelines' own pieces: the timestep drawn from
NVlabs' density on the shift-3 table that diffusers' FlowMatchEulerDiscreteScheduler builds, the noisy input its
``scale_noise`` makes, the target eps - x0; image-to-video's clean first frame, its timestep-0 tokens as
SanaImageToVideoPipeline builds them, and its absence from the loss."""

from __future__ import annotations

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling
from sanavideo_layout import sanavideo_cfg

from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.loss import SanaVideoLoss, first_frame_timesteps
from dit_lora.families.sanavideo.state import SanaVideoRun
from dit_lora.modeling.flow_matching import flow_tables


class Recorder(torch.nn.Module):
    """A stand-in transformer: records its inputs and predicts ``2 * hidden_states`` (patch (1, 2, 2))."""

    config = type("C", (), {"patch_size": (1, 2, 2)})()

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask, timestep, return_dict):
        self.seen = {"hidden_states": hidden_states, "timestep": timestep}
        return (2 * hidden_states,)


def _comps(model) -> Components:
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return Components(model=model, scheduler=scheduler, encoders={},
                      state=SanaVideoRun(flow_tables=flow_tables(scheduler, "cpu"), flow_shift=3.0))


def _batch():
    gen = torch.Generator().manual_seed(3)
    return {"latents": torch.randn(2, 16, 3, 4, 4, generator=gen), "prompt_embeds": torch.randn(2, 5, 8),
            "prompt_attention_mask": torch.ones(2, 5)}


def test_text_to_video_loss_is_the_hand_computed_flow_matching_loss():
    cfg, model, batch = sanavideo_cfg(), Recorder(), _batch()
    loss = SanaVideoLoss(None).compute_loss(_comps(model), model, batch, torch.Generator().manual_seed(7), cfg)

    gen = torch.Generator().manual_seed(7)  # the same order of draws: noise, then u
    x0 = batch["latents"]
    noise = torch.randn(x0.shape, generator=gen)
    u = compute_density_for_timestep_sampling("logit_normal", 2, logit_mean=0.0, logit_std=1.0, generator=gen)
    index = (u * 1000).long()
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)  # NVlabs' training shift, diffusers' table
    t = scheduler.timesteps[index]
    noisy = scheduler.scale_noise(x0, t, noise)  # the scheduler's own interpolation
    sigma = scheduler.sigmas[index].view(-1, 1, 1, 1, 1)
    torch.testing.assert_close(noisy, (1 - sigma) * x0 + sigma * noise)
    torch.testing.assert_close(model.seen["hidden_states"], noisy)
    torch.testing.assert_close(model.seen["timestep"], t)
    torch.testing.assert_close(loss, ((2 * noisy - (noise - x0)) ** 2).mean())
    assert cfg.family_options.weighting_scheme == "logit_normal" and cfg.family_options.flow_shift is None


def test_image_to_video_keeps_the_first_frame_clean_at_timestep_zero_and_out_of_the_loss():
    cfg, model, batch = sanavideo_cfg("sanavideo_i2v"), Recorder(), _batch()
    loss_fn = SanaVideoLoss(None, image_to_video=True)
    loss = loss_fn.compute_loss(_comps(model), model, batch, torch.Generator().manual_seed(7), cfg)
    x0, hidden, timestep = batch["latents"], model.seen["hidden_states"], model.seen["timestep"]
    assert torch.equal(hidden[:, :, :1], x0[:, :, :1]) and not torch.equal(hidden[:, :, 1:], x0[:, :, 1:])
    # SanaImageToVideoPipeline: a (B, 1, F', h/2, w/2) mask, 1 on frame 0; t.expand(mask.shape) * (1 - mask)
    assert timestep.shape == (2, 1, 3, 2, 2) and timestep[:, :, 0].abs().sum() == 0
    assert (timestep[:, :, 1:] > 0).all() and timestep[0, 0, 1].unique().numel() == 1
    gen = torch.Generator().manual_seed(7)
    noise = torch.randn(x0.shape, generator=gen)
    target = noise - x0
    torch.testing.assert_close(loss, ((2 * hidden - target)[:, :, 1:] ** 2).mean())


def test_first_frame_timesteps_follow_the_patch_grid():
    out = first_frame_timesteps(torch.tensor([5.0, 9.0]), torch.zeros(2, 16, 4, 8, 6), (1, 2, 2))
    assert out.shape == (2, 1, 4, 4, 3) and out[:, :, 0].eq(0).all() and out[1, :, 1:].eq(9).all()
