"""The kit's shared pieces a family states instead of writing (found by moving the toy PixArt family onto the kit):
the cache identity's model keys, an AutoencoderKL's posterior latents, the DDPM schedule of a checkpoint's betas, the
fp32-VAE precision, the shapes demo, the latent grid (buckets, defaults, the resolution check) and the samples through
the family's pipeline."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
import torch
from diffusion_stand_ins import Vae

from dit_lora.config import TrainConfig
from dit_lora.contract import capabilities as caps
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.diffusion import components as base
from dit_lora.families.diffusion.builder import LatentGrid


def _cfg(path, **values) -> TrainConfig:
    return TrainConfig.for_family("sana", pretrained_model_name_or_path=str(path), **values)


def test_the_cache_identitys_model_keys(tmp_path):
    """A local folder by its absolute path, a Hub id as written; the stamp of the folders that encode."""
    (tmp_path / "model_index.json").write_text("{}")
    cfg = _cfg(os.path.relpath(tmp_path), revision="r1")
    identity = base.model_identity(cfg, "toy")
    assert identity["family"] == "toy" and identity["model"] == str(tmp_path) and identity["revision"] == "r1"
    assert list(identity) == ["family", "model", "model_stamp", "revision", "variant"]
    assert base.model_identity(_cfg("me/model"), "toy", ("vae",))["model"] == "me/model"


def test_posterior_latents_are_the_shifted_scaled_mean_in_fp32():
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    vae = AutoencoderKL(block_out_channels=[8], down_block_types=["DownEncoderBlock2D"], latent_channels=4,
                        up_block_types=["UpDecoderBlock2D"], norm_num_groups=4, layers_per_block=1).eval()
    vae.register_to_config(scaling_factor=2.0, shift_factor=0.5)
    pixels = torch.rand(1, 3, 8, 8) * 2 - 1
    with torch.no_grad():
        mean = vae.encode(pixels).latent_dist.mode()
    out = base.posterior_latents(vae, pixels.half())  # encoded in fp32 whatever the batch's dtype
    assert out.dtype == torch.float32 and torch.allclose(out, (mean - 0.5) * 2.0, atol=1e-3)
    assert not out.requires_grad


def test_the_ddpm_schedule_takes_the_checkpoints_betas_and_predicts_epsilon():
    scheduler = base.ddpm_schedule({"_class_name": "DPMSolverMultistepScheduler", "num_train_timesteps": 100,
                                    "beta_start": 0.001, "beta_end": 0.01, "beta_schedule": "linear",
                                    "trained_betas": None, "prediction_type": "v_prediction"})
    assert type(scheduler).__name__ == "DDPMScheduler" and scheduler.config.prediction_type == "epsilon"
    assert scheduler.config.num_train_timesteps == 100 and scheduler.config.beta_end == 0.01


def test_the_fp32_vae_precision():
    cfg = TrainConfig(mixed_precision="bf16")
    assert base.Fp32VaePrecision().expected_dtypes(None, cfg) == {
        "model": torch.bfloat16, "text_encoder": torch.bfloat16, "vae": torch.float32}
    assert isinstance(base.Fp32VaePrecision(), caps.Precision)


def test_the_shapes_demo_builds_the_model_then_the_data_and_keeps_a_users_folder(tmp_path, capsys):
    built = []
    demo = base.ShapesDemo(built.append, size=16)
    assert isinstance(demo, caps.Demo)
    cfg = _cfg(tmp_path / "model", train_data_dir=str(tmp_path / "data"), demo_num_images=2, resolution=64)
    demo.prepare_demo(cfg)
    assert built == [str(tmp_path / "model")]
    lines = (tmp_path / "data" / "metadata.jsonl").read_text().splitlines()
    assert len(lines) == 2 and (tmp_path / "data" / json.loads(lines[0])["file_name"]).is_file()
    from PIL import Image

    assert Image.open(tmp_path / "data" / json.loads(lines[0])["file_name"]).size == (16, 16)  # the given size
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.png").write_bytes(b"not ours")
    base.ShapesDemo(built.append).prepare_demo(_cfg(tmp_path / "model", train_data_dir=str(mine)))
    assert "already holds data; training on it as it is" in capsys.readouterr().out
    assert sorted(p.name for p in mine.iterdir()) == ["a.png"]


def _model(path, vae_blocks: int, patch: int, sample: int | None = 4):
    for sub, config in (("vae", {"block_out_channels": [8] * vae_blocks}),
                        ("transformer", {"patch_size": patch, **({"sample_size": sample} if sample else {})})):
        (path / sub).mkdir(parents=True)
        (path / sub / "config.json").write_text(json.dumps(config))
    (path / "model_index.json").write_text("{}")
    return path


def test_the_latent_grid_reads_the_stride_and_the_native_size_from_the_configs(tmp_path):
    grid = LatentGrid()
    assert isinstance(grid, caps.ImageBuckets) and isinstance(grid, caps.ModelDefaults)
    cfg = _cfg(_model(tmp_path / "m", vae_blocks=4, patch=2), resolution=40)
    assert grid.bucket_stride(cfg) == 16 and grid.square_only(cfg) is None
    assert grid.generic_defaults(cfg) == {"resolution": (32, "transformer sample_size 4 x the VAE's 8x")}
    assert grid.generic_defaults(_cfg(_model(tmp_path / "n", 2, 1, sample=None))) == {}
    assert LatentGrid(default_stride=8).bucket_stride(TrainConfig()) == 8  # no model
    with pytest.raises(UserError, match=r"--resolution 40 is not a multiple of 16 .* Use 32\."):
        grid.check_resolution(cfg)
    grid.check_resolution(_cfg(cfg.pretrained_model_name_or_path, resolution=64))


class Model(torch.nn.Linear):
    """A model that says its dtype, as diffusers models do."""

    def __init__(self, dtype=torch.float32):
        super().__init__(1, 1, dtype=dtype)

    @property
    def dtype(self):
        return self.weight.dtype

    @property
    def device(self):
        return self.weight.device


class Pipeline:
    """A diffusers pipeline stand-in that records how it was built and called."""

    made: list = []

    def __init__(self, **parts):
        self.parts, self.calls = parts, []
        self.transformer = parts.get("transformer") or Model()
        self.vae = SimpleNamespace(dtype=torch.float32)
        Pipeline.made.append(self)

    def set_progress_bar_config(self, **kwargs):
        self.bar = kwargs

    def __call__(self, **kwargs):
        self.calls.append((kwargs, torch.is_grad_enabled(), torch.is_autocast_enabled("cpu")))
        return SimpleNamespace(images=["image"])


class Samples(base.PipelineSamples):
    pipeline = "RecordingPipeline"

    def call_kwargs(self, cfg, cached):
        return {"cached": cached}


def test_pipeline_samples_call_the_familys_pipeline_at_the_runs_settings(monkeypatch):
    """The in-memory model in the family's pipeline (no text encoders, the VAE moved in and back, the checkpoint's
    sampler, the cached embeddings) and the reloaded pipeline, both at the run's settings with the family's
    arguments, seeded, without gradients."""
    import diffusers

    monkeypatch.setattr(diffusers, "RecordingPipeline", Pipeline, raising=False)
    cfg = TrainConfig(resolution=32, validation_inference_steps=3, validation_guidance_scale=4.5,
                      num_validation_images=2)
    vae = Vae()
    sampler_config = dict(diffusers.DDPMScheduler().config, _class_name="DDIMScheduler")
    comps = Components(model=None, encoders={"vae": vae}, state=SimpleNamespace(scheduler_config=sampler_config))
    samples = Samples(None)
    model = Model()
    assert samples.generate(comps, model, {"prompt_embeds": "e"}, cfg, seed=5) == ["image"]
    pipe = Pipeline.made[-1]
    assert pipe.parts["transformer"] is model and pipe.parts["vae"] is vae and pipe.parts["text_encoder"] is None
    assert type(pipe.parts["scheduler"]).__name__ == "DDIMScheduler" and pipe.bar == {"disable": True}
    (kwargs, grad, autocast), = pipe.calls
    assert not grad and not autocast and kwargs.pop("generator").initial_seed() == 5
    assert kwargs == {"height": 32, "width": 32, "num_inference_steps": 3, "guidance_scale": 4.5,
                      "num_images_per_prompt": 2, "prompt_embeds": "e", "cached": True}
    assert vae.device == torch.device("cpu")
    reloaded = Pipeline(transformer=Model(torch.bfloat16))
    assert samples.generate_with_pipeline(reloaded, "a cat", cfg, seed=7, num_images=1) == ["image"]
    (kwargs, grad, autocast), = reloaded.calls
    assert not grad and autocast  # the bf16 transformer beside the fp32 VAE
    assert kwargs["prompt"] == "a cat" and kwargs["num_images_per_prompt"] == 1 and kwargs["cached"] is False
    assert Samples(None).sampler(Components(model=None, scheduler="training")) == "training"  # no config
