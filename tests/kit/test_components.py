"""kit/components.py: the component bases a diffusion family fills its spec with, on a toy family
whose encoders pool pixels and measure captions."""

from __future__ import annotations

import dataclasses
import json
import os
from types import SimpleNamespace

import pytest
import torch
from diffusion_stand_ins import PoolingEncoding, Vae
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.contract import capabilities as caps
from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo, FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.data.image_media import ImageMedia
from dit_lora.kit import components as base
from dit_lora.kit.loader import DiffusionModel


class PoolingEncoders(PoolingEncoding, base.DiffusionEncoders):
    """The toy's encoders as the spec's component."""


class PoolingModel(DiffusionModel):
    def validate_config(self, cfg):
        pass

    def build_components(self, cfg, loaded, device):
        raise NotImplementedError

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
    def bucket_stride(self, model):
        return 8

    def square_only(self):
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
    assert spec.model.lora_targets(None, cfg.lora) == ["to_q"]
    assert spec.model.lora_targets(None, dataclasses.replace(cfg, lora_layers=("proj",)).lora) == ["proj"]
    assert spec.notes.start_notes(cfg) == [] == spec.notes.precision_notes(cfg) == spec.precision.quantize_skip_modules()
    assert spec.precision.expected_dtypes(None, cfg.weight_dtype) == {"model": cfg.weight_dtype}
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


@pytest.mark.parametrize("in_a_cycle", [False, True])
def test_a_cached_run_collects_garbage_only_when_a_released_encoder_outlives_its_release(monkeypatch, in_a_cycle):
    """The encoders' memory goes back to the device either way; the full collection (seconds of CPU in a large
    process) runs only when refcounting could not free an encoder (a reference cycle holds it), and frees it then."""
    import gc
    import weakref

    from accelerate.utils import memory

    collections, emptied = [], []
    monkeypatch.setattr(memory, "clear_device_cache", lambda garbage_collection=False: (
        collections.append(garbage_collection), gc.collect() if garbage_collection else None, emptied.append(True)))
    monkeypatch.setattr(base, "prepare_data", lambda cfg, spec, comps, accelerator: "data")
    text_encoder = torch.nn.Linear(1, 1)
    if in_a_cycle:
        text_encoder.me = [text_encoder]  # a cycle: refcounting alone never frees it
    comps = Components(model=None, encoders={"vae": Vae(), "text_encoder": text_encoder, "tokenizer": "tok"})
    gone, vae = weakref.ref(text_encoder), comps.encoders["vae"]
    del text_encoder
    cfg = SimpleNamespace(data=SimpleNamespace(cache_latents=True), validation=SimpleNamespace(validation_prompt="p"))
    gc.disable()  # no automatic collection in between: what frees the encoder is the release itself
    try:
        assert base.prepare_and_release(cfg, None, comps, None) == "data"
    finally:
        gc.enable()
    assert gone() is None and emptied == [True] and comps.encoders == {"vae": vae}  # freed, the cache emptied
    assert collections == [in_a_cycle]  # the kept VAE, alive, asks for no collection


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


def test_samples_sample_with_the_checkpoints_scheduler_else_the_familys_fallback_else_the_training_one():
    from diffusers import DDIMScheduler, DPMSolverMultistepScheduler

    named = Components(model=None, scheduler="training", state=SimpleNamespace(scheduler_config={
        "_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.03}))
    unnamed = Components(model=None, scheduler="training", state=SimpleNamespace(scheduler_config={"beta_end": 0.03}))
    assert PngSamples(None).sampler(unnamed) == "training"
    fallback = type("Fallback", (PngSamples,), {"fallback_sampler": "DDIMScheduler"})(None)
    assert isinstance(fallback.sampler(unnamed), DDIMScheduler) and fallback.sampler(unnamed).config.beta_end == 0.03
    assert isinstance(fallback.sampler(named), DPMSolverMultistepScheduler)
    assert isinstance(fallback.sampler(Components(model=None, scheduler="training")), DDIMScheduler)  # no state


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


# ---- the shared pieces a family states instead of writing (found moving the toy PixArt family onto the kit) ----
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


def test_ddpm_noise_draws_the_noise_then_the_timesteps_and_noises_by_the_schedule():
    """The draw order is fixed (noise, then one uniform timestep per sample), so a resumed run draws the same."""
    scheduler = base.ddpm_schedule({"num_train_timesteps": 50})
    latents = torch.randn(3, 4, 2, 2)
    noise, timesteps, noisy = base.ddpm_noised(scheduler, latents, torch.Generator().manual_seed(9))
    again = torch.Generator().manual_seed(9)
    assert torch.equal(noise, torch.randn(latents.shape, generator=again))
    assert torch.equal(timesteps, torch.randint(0, 50, (3,), generator=again))
    assert torch.equal(noisy, scheduler.add_noise(latents, noise, timesteps))


def test_the_fp32_vae_precision():
    cfg = TrainConfig(mixed_precision="bf16")
    assert base.Fp32VaePrecision().expected_dtypes(None, cfg.weight_dtype) == {
        "model": torch.bfloat16, "text_encoder": torch.bfloat16, "vae": torch.float32}
    assert isinstance(base.Fp32VaePrecision(), caps.Precision)
    # a class-conditional model (DiT) has no text encoder to expect
    assert base.Fp32VaePrecision(text_encoder=False).expected_dtypes(None, cfg.weight_dtype) == {
        "model": torch.bfloat16, "vae": torch.float32}


def test_the_trainables_base_is_the_contracts_fallback_a_family_overrides():
    """``--train_backbone`` as given, no further groups, diffusers' own checkpointing switch: what a spec without
    the component gets (``contract.spec``), so a family (DiT, Wan) writes only what differs."""
    from dit_lora.contract import spec as contract

    trainables = base.DiffusionTrainables()
    assert isinstance(trainables, caps.Trainables)
    cfg = TrainConfig(train_backbone=["norm"])
    bare = FamilySpec.__new__(FamilySpec)
    object.__setattr__(bare, "trainables", None)
    assert trainables.backbone_patterns(cfg.lora, cfg.family_options) == contract.backbone_patterns(bare, cfg.lora, cfg.family_options) == ["norm"]
    assert trainables.extra_trainable(cfg.family_options) == contract.extra_trainable(bare, cfg.family_options) == []
    switched = []
    trainables.enable_gradient_checkpointing(SimpleNamespace(enable_gradient_checkpointing=lambda: switched.append(1)))
    assert switched == [1]


def test_the_shapes_demo_builds_the_model_then_the_data_and_keeps_a_users_folder(tmp_path, capsys):
    built = []
    demo = base.ShapesDemo(lambda cfg: built.append(cfg.model.path), size=16)
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
    base.ShapesDemo(lambda cfg: built.append(cfg.model.path)).prepare_demo(_cfg(tmp_path / "model", train_data_dir=str(mine)))
    assert "already holds data; training on it as it is" in capsys.readouterr().out
    assert sorted(p.name for p in mine.iterdir()) == ["a.png"]


def test_a_class_conditional_shapes_demo_draws_class_folders_at_the_size_its_model_gives(tmp_path):
    """``classes``: one folder per class (DiT's data), at the size a function of the run gives, after the build."""
    from PIL import Image

    from dit_lora.data.synthetic.shapes import SHAPES_CLASS_MARKER

    built = []
    demo = base.ShapesDemo(lambda cfg: built.append(cfg.model.path), size=lambda cfg: 8 * len(built), classes=True)
    cfg = _cfg(tmp_path / "model", train_data_dir=str(tmp_path / "data"), demo_num_images=3, resolution=64)
    demo.prepare_demo(cfg)
    (folder,) = [p for p in (tmp_path / "data").iterdir() if p.is_dir()]  # three seeded draws: one class here
    assert folder.name in ("circle", "square", "triangle") and len(list(folder.iterdir())) == 3
    assert (tmp_path / "data" / SHAPES_CLASS_MARKER).is_file() and not (tmp_path / "data" / "metadata.jsonl").exists()
    assert Image.open(next(folder.iterdir())).size == (8, 8)  # the size the function gave, after the build


def test_the_shapes_demo_refuses_a_size_before_it_builds_or_draws_anything(tmp_path):
    """The family's check first, then the demo's own size range; a refused size leaves no model and no data."""
    from dit_lora.core.errors import UserError

    built, checked = [], []
    demo = base.ShapesDemo(lambda cfg: built.append(cfg.model.path), check=lambda cfg: checked.append(cfg))
    data = tmp_path / "data"
    with pytest.raises(UserError, match="outside what --demo is for"):
        demo.prepare_demo(_cfg(tmp_path / "model", train_data_dir=str(data), resolution=100000))
    assert len(checked) == 1 and built == [] and not data.exists()

    def refuse(cfg):
        raise UserError("--resolution 65 is not divisible by 16")

    with pytest.raises(UserError, match="divisible by 16"):
        base.ShapesDemo(lambda cfg: built.append(cfg.model.path), check=refuse).prepare_demo(_cfg(tmp_path / "m"))
    assert built == []
    # a family without a check of its own: the demo's size range still holds where shapes follow --resolution
    with pytest.raises(UserError, match="outside what --demo is for"):
        base.ShapesDemo(lambda cfg: built.append(cfg.model.path)).prepare_demo(
            _cfg(tmp_path / "n", train_data_dir=str(data), resolution=100000)
        )
    assert built == [] and not data.exists()


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

    def call_kwargs(self, options, cached):
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


class ClassSamples(base.PipelineSamples):
    """A pipeline of other parts and inputs, as DiT's: no text parts, no size, class ids."""

    pipeline = "RecordingPipeline"
    text_parts = ()
    sized = False

    def cached_inputs(self, comps, cond, validation):
        return {"class_labels": [cond["label"]] * validation.num_validation_images}

    def prompt_inputs(self, pipe, prompt, num_images):
        return {"class_labels": [len(prompt)] * num_images}


def test_pipeline_samples_take_a_familys_parts_and_inputs(monkeypatch):
    """A pipeline without text parts or a size (DiT's) states them: built without tokenizer and text encoder, called
    without height and width, on the family's own inputs from the cached conditioning and from the prompt."""
    import diffusers

    monkeypatch.setattr(diffusers, "RecordingPipeline", Pipeline, raising=False)
    cfg = TrainConfig(resolution=32, validation_inference_steps=3, validation_guidance_scale=4.5,
                      num_validation_images=2)
    comps = Components(model=None, encoders={"vae": Vae()}, scheduler="training", state=None)
    samples = ClassSamples(None)
    assert samples.generate(comps, Model(), {"label": 4}, cfg, seed=5) == ["image"]
    pipe = Pipeline.made[-1]
    assert "tokenizer" not in pipe.parts and "text_encoder" not in pipe.parts
    (kwargs, _, _), = pipe.calls
    kwargs.pop("generator")
    assert kwargs == {"num_inference_steps": 3, "guidance_scale": 4.5, "class_labels": [4, 4]}
    reloaded = Pipeline(transformer=Model())
    samples.generate_with_pipeline(reloaded, "cat", cfg, seed=7, num_images=3)
    (kwargs, _, _), = reloaded.calls
    assert kwargs["class_labels"] == [3, 3, 3] and "height" not in kwargs and "prompt" not in kwargs


def test_a_tiny_shapes_demo_calls_the_builder_it_finds_at_build_time_with_the_resolution_rule_first(tmp_path):
    """``ShapesDemo.tiny``: the family's builder looked up on each call (a test's stand-in is used), given the path,
    the variant where one is named and seed 0; ``resolution_rule`` sees ``--resolution`` before anything is built."""
    from types import SimpleNamespace

    from dit_lora.core.errors import UserError

    calls, module = [], SimpleNamespace()
    demo = base.ShapesDemo.tiny(module, "build_tiny", lambda r: calls.append(("rule", r)), variant="kontext")
    module.build_tiny = lambda path, *variants, seed: calls.append((path, variants, seed))  # set after: looked up late
    demo.prepare_demo(_cfg(tmp_path / "model", train_data_dir=str(tmp_path / "data"), resolution=32))
    assert calls == [("rule", 32), (str(tmp_path / "model"), ("kontext",), 0)]

    def refuse(resolution):
        raise UserError(f"--resolution {resolution} is not divisible by 16")

    calls.clear()
    with pytest.raises(UserError, match="33 is not divisible"):
        base.ShapesDemo.tiny(module, "build_tiny", refuse).prepare_demo(_cfg(tmp_path / "m", resolution=33))
    assert calls == []


def test_a_tiny_shapes_demo_takes_a_resolution_rule_or_a_check_not_both():
    with pytest.raises(TypeError, match="not both"):
        base.ShapesDemo.tiny(object(), "build", lambda r: None, check=lambda cfg: None)
