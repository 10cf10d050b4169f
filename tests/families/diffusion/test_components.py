"""families/diffusion/components.py: the component bases a diffusion family fills its spec with, on a toy family
whose encoders pool pixels and measure captions."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from diffusion_stand_ins import PoolingEncoding, Vae
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.contract import capabilities as caps
from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.data.prepare import ImageMedia
from dit_lora.families.diffusion import components as base


class PoolingEncoders(PoolingEncoding, base.DiffusionEncoders):
    """The toy's encoders as the spec's component."""


class PoolingModel(base.DiffusionModel):
    def validate_config(self, cfg):
        pass

    def load_components(self, cfg, device):
        return Components(model=torch.nn.Linear(1, 1), encoders={"vae": Vae(), "text_encoder": "t5"})


class MeanLoss(base.DiffusionLoss):
    def compute_loss(self, comps, model, batch, generator, cfg):
        return batch["latents"].mean()


class PoolingPlan(base.DiffusionPlan):
    def plan_components(self, cfg, read, depth=None):
        return Components(model=None)

    def plan_conditioning(self, comps, cfg, batch_size):
        return {"prompt_embeds": torch.empty(batch_size, 1)}


class Buckets:
    def bucket_stride(self, cfg):
        return 8

    def square_only(self, cfg):
        return None


class Adapter:
    def save_adapter(self, output_dir, lora_state, lora_config):
        raise NotImplementedError

    def load_pipeline_with_adapter(self, cfg, adapter_dir, device):
        raise NotImplementedError


INFO = FamilyInfo(pipeline_class_name="PoolingPipeline", default_lora_layers=("to_q",))


def pooling_spec(buckets=None) -> FamilySpec:
    """The toy family's spec, built from the bases as a converted family builds its own."""
    encoders = PoolingEncoders()
    loss = MeanLoss(encoders)
    return FamilySpec(name="pooling", info=INFO, model=PoolingModel(INFO), data=base.DiffusionData(), loss=loss,
                      adapter=Adapter(), encoders=encoders, captions=base.DiffusionCaptions(), image_buckets=buckets,
                      plan=PoolingPlan(encoders, loss, buckets), notes=base.DiffusionNotes(),
                      precision=base.DiffusionPrecision(), setup=base.DiffusionSetup())


def test_the_bases_fill_a_spec_each_against_its_protocol():
    spec = pooling_spec()
    assert isinstance(spec.encoders, caps.Encoders) and isinstance(spec.captions, caps.Captions)
    assert (spec.captions.caption_source, spec.captions.requires_captions) == ("captions", True)
    assert isinstance(spec.data.data_handler(TrainConfig(resolution=32), spec), ImageMedia)
    cfg = TrainConfig(resolution=32)
    assert spec.model.lora_targets(None, cfg) == ["to_q"]
    assert spec.model.lora_targets(None, dataclasses.replace(cfg, lora_layers=("proj",))) == ["proj"]
    assert spec.notes.start_notes(cfg) == [] == spec.notes.precision_notes(cfg) == spec.precision.quantize_skip_modules(cfg)
    assert spec.precision.expected_dtypes(None, cfg) == {"model": cfg.weight_dtype}
    assert spec.setup.configure(None, cfg) is None and spec.setup.inspect_samples(None, cfg, []) is None


def test_prepare_batch_moves_cached_batches_and_encodes_raw_ones():
    spec = pooling_spec()
    cached = spec.loss.prepare_batch(None, {"latents": torch.ones(1, 3, 2, 2), "sample_index": [0]}, "cpu", True)
    assert torch.equal(cached["latents"], torch.ones(1, 3, 2, 2)) and cached["sample_index"] == [0]
    raw = {"caption": ["ab", "abcd"], "pixel_values": torch.ones(2, 3, 16, 16), "sample_index": [4, 5]}
    out = spec.loss.prepare_batch(None, raw, "cpu", False)
    assert out["latents"].shape == (2, 3, 2, 2) and out["prompt_embeds"].flatten().tolist() == [2.0, 4.0]
    assert out["sample_index"] == [4, 5]


def test_release_encoders_keeps_only_the_vae_when_validation_decodes():
    comps = Components(model=None, encoders={"vae": Vae(), "text_encoder": "t5", "tokenizer": "tok"})
    base.release_encoders(comps, keep_for_validation=True)
    assert list(comps.encoders) == ["vae"] and comps.encoders["vae"].moves[-1] == torch.device("cpu")
    base.release_encoders(comps, keep_for_validation=False)
    assert comps.encoders == {}


def test_vae_on_returns_the_vae_home_even_after_an_error():
    vae = Vae()
    comps = Components(model=None, encoders={"vae": vae})
    with pytest.raises(RuntimeError), base.vae_on(comps, torch.device("meta")) as moved:
        assert moved is vae and vae.device == torch.device("meta")
        raise RuntimeError("decode failed")
    assert vae.device == torch.device("cpu")


class PngSamples(base.DiffusionSamples):
    def generate(self, comps, model, cond, cfg, seed):
        return []

    def generate_with_pipeline(self, pipe, prompt, cfg, seed, num_images, comps=None):
        return []


def test_samples_encode_the_prompt_with_its_negative_and_write_pngs(tmp_path):
    samples = PngSamples(PoolingEncoders())
    cond = samples.validation_inputs(None, TrainConfig(validation_prompt="abc").validation)
    assert cond["prompt_embeds"].flatten().tolist() == [3.0, 0.0]
    path = samples.save_sample(Image.new("RGB", (4, 4)), tmp_path / "final_0", None)
    assert path == tmp_path / "final_0.png" and Image.open(path).size == (4, 4)


def test_the_plan_traces_the_largest_bucket_through_the_familys_encoder_and_loss():
    spec = pooling_spec(Buckets())
    cfg = TrainConfig(resolution=32, train_batch_size=2)
    assert spec.plan.pixel_batches(cfg) == [("32 x 32 px", (2, 3, 32, 32))]
    wide = dataclasses.replace(cfg, aspect_buckets="48x24")
    ((bucket, batch),) = spec.plan.plan_batches(wide, None)
    assert bucket == "48 x 24 px" and batch["latents"].shape == (2, 3, 3, 6) and batch["prompt_embeds"].shape == (2, 1)
    comps = Components(model=None)
    assert spec.plan.plan_loss(comps, {"latents": torch.full((1,), 2.0)}, None, cfg) == 2.0
    square = pooling_spec()  # no buckets: squares only, a fixed size is refused
    assert square.plan.pixel_batches(cfg) == [("32 x 32 px", (2, 3, 32, 32))]
    with pytest.raises(UserError, match="takes only square images"):
        square.plan.pixel_batches(wide)


def test_the_plan_traces_the_largest_image_bucket():
    """auto: the --resolution square, which no bucket exceeds in pixels (tokens); a fixed size: that size (moved
    from the old composite's tests)."""
    from dit_lora.data.aspect import run_buckets

    spec = pooling_spec(Buckets())
    assert spec.plan.depth_key == ("transformer/config.json", "num_layers")
    cfg = TrainConfig(resolution=32, train_batch_size=2)
    assert max(h * w for h, w in run_buckets("auto", 32, 8)) == 32 * 32
    assert spec.plan.pixel_batches(cfg) == [("32 x 32 px", (2, 3, 32, 32))]
    cfg = dataclasses.replace(cfg, aspect_buckets="48x24")  # larger than the square: the plan takes it
    assert spec.plan.pixel_batches(cfg) == [("48 x 24 px", (2, 3, 24, 48))]
    cfg = dataclasses.replace(cfg, aspect_buckets="50x24")
    with pytest.raises(UserError, match="--aspect_buckets 48x24"):
        spec.plan.pixel_batches(cfg)
