"""families/diffusion/composite.py: what every old-style diffusion family inherits (on-the-fly encoding, releasing the
encoders, the VAE between validations, PNG samples, the planner's batches), on a toy family that encodes by pooling."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from diffusion_stand_ins import PoolingEncoding, Vae
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import Captions, Encoders, ImageBuckets
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.prepare import ImageMedia
from dit_lora.families.diffusion import DiffusionFamily


class Pooling(PoolingEncoding, DiffusionFamily):
    """Latents are 8x average-pooled pixels; a caption's embedding is its length."""

    name = "pooling"

    def validate_config(self, cfg):
        pass

    def load_components(self, cfg, device):
        return Components(model=torch.nn.Linear(1, 1), encoders={"vae": Vae(), "text_encoder": "t5"})

    def plan_conditioning(self, comps, cfg, batch_size):
        return {"prompt_embeds": torch.empty(batch_size, 1)}

    def compute_loss(self, comps, model, batch, generator, cfg):
        return batch["latents"].mean()

    def save_adapter(self, output_dir, lora_state, lora_config):
        raise NotImplementedError

    def load_pipeline_with_adapter(self, cfg, adapter_dir, device):
        raise NotImplementedError


def test_declares_encoders_and_captions_and_images_by_default():
    family = Pooling()
    assert Pooling.capabilities == (Encoders, Captions)
    assert family.caption_source == "captions" and family.requires_captions
    assert isinstance(family.data_handler(TrainConfig(resolution=16)), ImageMedia)
    assert family.depth_key == ("transformer/config.json", "num_layers")


def test_prepare_batch_moves_cached_batches_and_encodes_raw_ones():
    family, comps = Pooling(), Components(model=torch.nn.Linear(1, 1))
    cached = {"latents": torch.ones(2, 4, 2, 2), "sample_index": torch.tensor([0, 1])}
    assert family.prepare_batch(comps, cached, "cpu", cached=True)["latents"] is cached["latents"]
    raw = {"pixel_values": torch.ones(2, 3, 16, 16), "caption": ["a", "abc"], "sample_index": torch.tensor([4, 5])}
    out = family.prepare_batch(comps, raw, "cpu", cached=False)
    assert out["latents"].shape == (2, 3, 2, 2) and out["prompt_embeds"].flatten().tolist() == [1.0, 3.0]
    assert out["sample_index"].tolist() == [4, 5] and "pixel_values" not in out


def test_release_encoders_keeps_only_the_vae_when_validation_decodes():
    family = Pooling()
    comps = family.load_components(None, "cpu")
    vae = comps.encoders["vae"]
    family.release_encoders(comps, keep_for_validation=True)
    assert comps.encoders == {"vae": vae}
    family.release_encoders(comps, keep_for_validation=False)
    assert comps.encoders == {}


def test_vae_on_returns_the_vae_home_even_after_an_error():
    family = Pooling()
    comps = family.load_components(None, "cpu")
    with pytest.raises(RuntimeError, match="decode failed"):
        with family.vae_on(comps, torch.device("cuda")) as vae:
            assert vae.device.type == "cuda"
            raise RuntimeError("decode failed")
    assert [d.type for d in comps.encoders["vae"].moves] == ["cpu", "cuda", "cpu"]


def test_defaults_validation_inputs_samples_and_hooks(tmp_path):
    family = Pooling()
    cfg = TrainConfig(resolution=16, validation_prompt="a cat", train_batch_size=2, train_backbone=["norm"])
    assert family.validation_inputs(None, cfg)["prompt_embeds"].flatten().tolist() == [5.0, 0.0]  # with the negative
    path = family.save_sample(Image.new("RGB", (4, 4), (255, 0, 0)), tmp_path / "step_10", cfg)
    assert path == tmp_path / "step_10.png" and Image.open(path).getpixel((0, 0)) == (255, 0, 0)
    assert family.start_notes(cfg) == family.precision_notes(cfg) == family.extra_trainable(cfg) == []
    assert family.backbone_patterns(cfg) == ["norm"] and family.quantize_skip_modules(cfg) == []


def test_plan_batches_run_the_familys_own_encoder_per_bucket():
    family = Pooling()
    cfg = TrainConfig(resolution=32, train_batch_size=3)
    assert family.pixel_batches(cfg) == [("32 x 32 px", (3, 3, 32, 32))]
    ((bucket, batch),) = family.plan_batches(cfg, None)
    assert bucket == "32 x 32 px" and batch["latents"].shape == (3, 3, 4, 4) and batch["prompt_embeds"].shape == (3, 1)


class BucketedPooling(Pooling):
    """Pooling whose images take aspect-ratio buckets in steps of 8."""

    capabilities = DiffusionFamily.capabilities + (ImageBuckets,)

    def bucket_stride(self, cfg):
        return 8

    def square_only(self, cfg):
        return None


def test_the_plan_traces_the_largest_image_bucket():
    """auto: the --resolution square, which no bucket exceeds in pixels (tokens); a fixed size: that size."""
    from dit_lora.data.aspect import run_buckets

    family = BucketedPooling()
    cfg = TrainConfig(resolution=32, train_batch_size=2)
    assert max(h * w for h, w in run_buckets("auto", 32, 8)) == 32 * 32
    assert family.pixel_batches(cfg) == [("32 x 32 px", (2, 3, 32, 32))]
    cfg = dataclasses.replace(cfg, aspect_buckets="48x24")  # larger than the square: the plan takes it
    assert family.pixel_batches(cfg) == [("48 x 24 px", (2, 3, 24, 48))]
    ((_, batch),) = family.plan_batches(cfg, None)
    assert batch["latents"].shape == (2, 3, 3, 6)
    cfg = dataclasses.replace(cfg, aspect_buckets="50x24")
    with pytest.raises(UserError, match="--aspect_buckets 48x24"):
        family.pixel_batches(cfg)
