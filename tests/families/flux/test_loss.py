"""FLUX.1's loss, written out by hand from diffusers' train_dreambooth_lora_flux.py with the pipeline's dynamic shift:
the packed noisy latents, sigma as the timestep, CLIP's pooled embedding, the guidance the option names (none for a
model without the embedding), the zero caption ids and the image ids, the weighted MSE against ``eps - x0``."""

from __future__ import annotations


import pytest
import torch
from diffusers import FluxPipeline

from helpers import Recorder
from packed_flow import hand_computed_loss
from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.flux.state import FluxRun
from dit_lora.registry import get_family

SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
             "shift": 3.0, "use_dynamic_shifting": True}



def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"latents": torch.randn(3, 4, 6, 8, generator=gen), "prompt_embeds": torch.randn(3, 10, 12, generator=gen),
            "pooled_prompt_embeds": torch.randn(3, 5, generator=gen)}


def _cfg(**values):
    return TrainConfig.for_family("flux", pretrained_model_name_or_path="m", **values)


@pytest.mark.parametrize("scheme, shift", [("none", None), ("logit_normal", None), ("none", 3.0)])
def test_loss_is_the_hand_computed_flow_matching_loss(scheme, shift):
    batch, denoiser = _batch(), Recorder()
    comps = Components(model=None, scheduler=None, state=FluxRun(scheduler_config=SCHEDULER))
    cfg = _cfg(weighting_scheme=scheme, flux_shift=shift)
    loss = get_family("flux").loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), cfg)
    expected, sigmas, packed = hand_computed_loss(batch["latents"], scheme, shift, 5)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    (call,) = denoiser.calls
    torch.testing.assert_close(call["hidden_states"], packed)
    torch.testing.assert_close(call["timestep"], sigmas)  # the transformer multiplies by 1000 itself
    assert torch.equal(call["guidance"], torch.full((3,), 1.0))  # --flux_train_guidance's default
    assert torch.equal(call["pooled_projections"], batch["pooled_prompt_embeds"])
    assert torch.equal(call["img_ids"], FluxPipeline._prepare_latent_image_ids(3, 3, 4, "cpu", torch.float32))
    assert torch.equal(call["txt_ids"], torch.zeros(10, 3))


def test_guidance_is_the_option_and_none_without_the_embedding():
    batch, dev, other = _batch(), Recorder(), Recorder()
    loss = get_family("flux").loss
    loss.compute_loss(Components(model=None, scheduler=None, state=FluxRun(scheduler_config=SCHEDULER)), dev, batch,
                      torch.Generator().manual_seed(0), _cfg(flux_train_guidance=3.5))
    no_embedding = FluxRun(scheduler_config=SCHEDULER, guidance_embeds=False)
    loss.compute_loss(Components(model=None, scheduler=None, state=no_embedding), other, batch,
                      torch.Generator().manual_seed(0), _cfg())
    assert torch.equal(dev.calls[0]["guidance"], torch.full((3,), 3.5)) and other.calls[0]["guidance"] is None
    assert torch.equal(dev.calls[0]["hidden_states"], other.calls[0]["hidden_states"])
