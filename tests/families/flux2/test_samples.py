"""families/flux2/samples.py: the validation sampler and what the pipelines are called with."""

from __future__ import annotations

import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from flux2_configs import flux2_cfg

from dit_lora.contract.family import Components
from dit_lora.families.flux2.demo import SCHEDULER_CONFIG
from dit_lora.kit.sampling import flow_sampler
from dit_lora.families.flux2.samples import Flux2Samples, call_kwargs
from dit_lora.families.flux2.state import Flux2Run
from dit_lora.registry import get_family


def test_the_sampler_is_the_checkpoints_own_with_dynamic_shifting():
    training = FlowMatchEulerDiscreteScheduler()
    sampler = flow_sampler(Components(model=None, scheduler=training,
                                             state=Flux2Run(scheduler_config=SCHEDULER_CONFIG)))
    assert isinstance(sampler, FlowMatchEulerDiscreteScheduler) and sampler.config.use_dynamic_shifting
    assert flow_sampler(Components(model=None, scheduler=training)) is training


def test_call_kwargs_and_the_validation_prompt_encoders():
    cfg = flux2_cfg(validation_inference_steps=4, validation_guidance_scale=1.0, resolution=128)
    assert call_kwargs(cfg.validation, 2) == {"guidance_scale": 1.0, "num_images_per_prompt": 2}  # size, steps: square_images
    spec = get_family("flux2")
    assert isinstance(spec.samples, Flux2Samples) and spec.samples.encoders is spec.encoders


def test_decode_takes_both_pipelines_latent_outputs_to_the_same_image():
    """dev's packed, normalised tokens and klein's unpatchified, denormalised latents decode alike (fp32 VAE)."""
    import numpy as np
    from diffusers import AutoencoderKLFlux2, Flux2Pipeline

    from dit_lora.families.flux2.demo import tiny_configs
    from dit_lora.families.flux2.encoders import normalise_latents
    from dit_lora.families.flux2.loss import pack
    from dit_lora.families.flux2.samples import decode

    torch.manual_seed(0)
    vae = AutoencoderKLFlux2(**tiny_configs("dev")["vae"]).eval()
    vae.bn.running_mean.uniform_(-0.5, 0.5)
    vae.bn.running_var.uniform_(0.5, 2.0)
    pipe = Flux2Pipeline(scheduler=None, vae=vae, text_encoder=None, tokenizer=None, transformer=None)
    raw = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        packed = pack(normalise_latents(vae, raw))
        dev, klein = decode(pipe, vae, packed, 64, 64)[0], decode(pipe, vae, raw, 64, 64)[0]
    assert dev.size == (64, 64)
    assert np.abs(np.asarray(dev, dtype=int) - np.asarray(klein, dtype=int)).max() <= 1
