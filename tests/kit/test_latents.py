"""kit/latents.py: the latents a family's cache keeps (fp32, the posterior's mode, shifted and scaled
or normalised per channel) and what names the model in the cache's identity."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from dit_lora.config.schema import ModelOptions
from dit_lora.kit.latents import model_identity, normalised_clip_latents, scaled_latents


class Vae(torch.nn.Module):
    """A VAE's stand-in whose posterior mode is its input times 2 (and remembers the layout it was given)."""

    def __init__(self, **config) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(**config)

    @property
    def dtype(self):
        return self.weight.dtype

    @property
    def device(self):
        return self.weight.device

    def encode(self, x):
        self.seen = x
        return SimpleNamespace(latent_dist=SimpleNamespace(mode=lambda: x * 2))


def test_scaled_latents_shift_then_scale_in_fp32():
    pixels = torch.ones(1, 3, 2, 2, dtype=torch.float64)
    out = scaled_latents(Vae(shift_factor=0.5, scaling_factor=3.0), pixels)
    assert out.dtype == torch.float32 and torch.equal(out, torch.full((1, 3, 2, 2), 4.5))
    assert torch.equal(scaled_latents(Vae(shift_factor=None, scaling_factor=3.0), pixels), torch.full((1, 3, 2, 2), 6.0))


def test_clip_latents_are_normalised_per_channel_in_the_vae_layout():
    vae = Vae()
    clip = torch.ones(1, 4, 3, 2, 2)  # (B, F, 3, H, W)
    mean, std = torch.tensor([0.0, 1.0, 2.0]).view(1, -1, 1, 1, 1), torch.full((1, 3, 1, 1, 1), 2.0)
    out = normalised_clip_latents(vae, clip, mean, std)["latents"]
    assert vae.seen.shape == (1, 3, 4, 2, 2) and out.shape == (1, 3, 4, 2, 2)
    assert out[0, :, 0, 0, 0].tolist() == [1.0, 0.5, 0.0]


def test_the_model_identity_names_the_model_its_stamp_revision_and_variant(tmp_path):
    model = ModelOptions(pretrained_model_name_or_path=str(tmp_path), revision="r", variant="fp16")
    one = model_identity(SimpleNamespace(model=model), "model_index_mtime")
    assert list(one) == ["model", "model_index_mtime", "revision", "variant"]
    assert one["model"] == os.path.abspath(tmp_path) and (one["revision"], one["variant"]) == ("r", "fp16")
    hub = ModelOptions(pretrained_model_name_or_path="org/model", revision=None, variant=None)
    assert model_identity(SimpleNamespace(model=hub))["model"] == "org/model"


def test_a_diffusion_familys_images_encode_through_its_vae_by_default():
    """``DiffusionEncoders.encode_images`` is :func:`scaled_latents` of ``comps.encoders["vae"]`` unless a family
    encodes otherwise (DiT and Z-Image state nothing)."""
    from dit_lora.contract.family import Components
    from dit_lora.kit.components import DiffusionEncoders

    class Encoders(DiffusionEncoders):
        def cache_identity(self, cfg, comps=None):
            return {}

        def encode_prompts(self, comps, captions, *, with_negative=False):
            return {}

    comps = Components(model=None, encoders={"vae": Vae(shift_factor=0.5, scaling_factor=3.0)})
    assert torch.equal(Encoders().encode_images(comps, torch.ones(1, 3, 2, 2)), torch.full((1, 3, 2, 2), 4.5))
