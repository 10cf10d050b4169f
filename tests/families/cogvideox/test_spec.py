"""families/cogvideox/spec.py: the two CogVideoX specs (cogvideox, cogvideox_i2v) and their components together:
checks, loss, 1.5 padding, RoPE, I2V conditioning, saving.

The specs' components are exercised directly on tiny offline pipelines (no training loop), here in one module so the
five tiny pipelines are built once; each component module's own file tests what needs no pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dit_lora.core.errors import UserError

CASES = [("t2v", "1.0-2b"), ("t2v", "1.0-5b"), ("t2v", "1.5"), ("i2v", "1.0-5b"), ("i2v", "1.5")]
ids = lambda c: "-".join(c)  # noqa: E731


def _metadata(path) -> dict:
    """An adapter file's safetensors metadata (rank/alpha as diffusers stores them)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return dict(fh.metadata() or {})


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny models are far faster on one intra-op thread (and immune to a busy second core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[tuple[str, str], Path]:
    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    root = tmp_path_factory.mktemp("cogvideox-models")
    return {c: build_tiny_cogvideox_pipeline(root / ids(c), task=c[0], version=c[1]) for c in CASES}


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "squares", n=2, num_frames=9, seed=0)


def _cfg(model: Path, **kw):
    from dit_lora.config import TrainConfig

    values = dict(family="cogvideox", pretrained_model_name_or_path=str(model), train_data_dir="unused",
                  mixed_precision="no", max_num_frames=9, height=64, width=64, enable_tiling=False,
                  rank=4, lora_alpha=8, seed=0, validation_inference_steps=2, num_validation_images=1)
    values.update(kw)
    return TrainConfig.for_family(**values)


def _family(task: str):
    from dit_lora.registry import get_family

    return get_family("cogvideox_i2v" if task == "i2v" else "cogvideox")


def _setup(models, case, lora: bool = True, **kw):
    """(family, cfg, comps, batch) for ``case``: components loaded, two clips encoded, LoRA injected."""
    from dit_lora.contract.spec import configure
    from dit_lora.modeling.trainables import add_lora

    family = _family(case[0])
    cfg = _cfg(models[case], family=family.name, **kw)
    family.model.validate_config(cfg)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    configure(family, comps, cfg)
    pixels = torch.rand(2, 9, 3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    batch = {**family.encoders.encode_images(comps, pixels),
             **family.encoders.encode_prompts(comps, ["a red square moving left to right", "a blue square"])}
    batch["pixels"] = pixels
    if lora:
        add_lora(comps.model, rank=cfg.lora.rank, alpha=cfg.effective_lora_alpha, dropout=0.0,
                 targets=family.info.default_lora_layers, seed=0)
    return family, cfg, comps, batch


class _Capture:
    """Records the kwargs of every forward call of ``module``."""

    def __init__(self, module):
        self.calls: list[dict] = []
        self.handle = module.register_forward_pre_hook(lambda m, a, k: self.calls.append(dict(k)), with_kwargs=True)

    def close(self):
        self.handle.remove()


def test_registered_with_the_contract():
    from dit_lora.data.video_prepare import VideoMedia
    from dit_lora.registry import available, recipe_script
    from dit_lora.setup.family_inference import family_for_pipeline

    assert {"cogvideox", "cogvideox_i2v"} <= set(available())
    t2v, i2v = _family("t2v"), _family("i2v")
    for family, kind, pipeline in ((t2v, "text-to-video", "CogVideoXPipeline"),
                                   (i2v, "image-to-video", "CogVideoXImageToVideoPipeline")):
        assert isinstance(family.data.data_handler(_cfg(Path("unused")), family), VideoMedia) and family.info.gradient_checkpointing_default
        assert recipe_script(family.name) == "recipes/cogvideox_lora.py" and family.info.pipeline_class_name == pipeline
        assert kind in family.info.card_tags and "cogvideox" in family.info.card_tags
        assert family.info.default_lora_layers == ("to_q", "to_k", "to_v", "to_out.0")

    class CogVideoXImageToVideoPipeline:  # what family_for_pipeline matches on (class names in the MRO)
        pass

    assert family_for_pipeline(CogVideoXImageToVideoPipeline()).name == "cogvideox_i2v"


def test_loss_matches_a_hand_computed_example(models):
    """Known alphas, a constant v prediction: x_t, x0_hat and 1/(1 - a_t) computed here by hand."""
    family, cfg, comps, batch = _setup(models, ("t2v", "1.0-5b"), lora=False)
    scheduler = comps.scheduler
    scheduler.alphas_cumprod = torch.linspace(0.999, 0.001, 1000)  # add_noise/get_velocity read this

    class ConstantV(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = {}

        def forward(self, hidden_states, timestep, **kw):
            self.seen = {"x_t": hidden_states.clone(), "t": timestep.clone(), **kw}
            return (torch.full_like(hidden_states, 0.25),)

    x0 = torch.arange(2 * 3 * 4 * 8 * 8, dtype=torch.float32).reshape(2, 3, 4, 8, 8) / 1000.0 - 0.7
    denoiser = ConstantV()
    for cap in (None, 5.0):
        generator = torch.Generator().manual_seed(123)
        loss = family.loss.compute_loss(comps, denoiser, {"latents": x0, "prompt_embeds": batch["prompt_embeds"]},
                                   generator, _cfg(models[("t2v", "1.0-5b")], loss_weight_cap=cap))
        # The RNG protocol on the CPU: timesteps first, then the noise, from the run's generator.
        replay = torch.Generator().manual_seed(123)
        t = torch.randint(0, 1000, (2,), generator=replay)
        eps = torch.randn(x0.shape, generator=replay)
        assert torch.equal(denoiser.seen["t"], t)
        expected = []
        for b in range(2):
            a = float(torch.linspace(0.999, 0.001, 1000)[t[b]])
            x_t = a ** 0.5 * x0[b] + (1 - a) ** 0.5 * eps[b]
            torch.testing.assert_close(denoiser.seen["x_t"][b], x_t)
            x0_hat = a ** 0.5 * x_t - (1 - a) ** 0.5 * 0.25
            weight = 1.0 / (1.0 - a) if cap is None else min(cap, 1.0 / (1.0 - a))
            expected.append(weight * ((x0_hat - x0[b]) ** 2).mean())
        torch.testing.assert_close(loss, torch.stack(expected).mean())
        assert denoiser.seen["ofs"] is None and denoiser.seen["image_rotary_emb"] is not None


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_compute_loss_reaches_lora_and_pads_15(models, case):
    from diffusers import CogVideoXImageToVideoPipeline

    no_noise = {"first_frame_noise": False} if case[0] == "i2v" else {}  # an image-to-video option
    family, cfg, comps, batch = _setup(models, case, **no_noise)
    denoiser = comps.model
    assert batch["latents"].shape == (2, 3, 4, 8, 8) and batch["latents"].dtype == torch.float32
    capture = _Capture(denoiser)
    loss = family.loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(0), cfg)
    capture.close()
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    lora_b = [p for n, p in denoiser.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora_b)
    assert all(not p.requires_grad for n, p in denoiser.named_parameters() if "lora_" not in n)

    seen = capture.calls[0]
    hidden = seen["hidden_states"]
    frames = 4 if case[1] == "1.5" else 3  # 1.5: 3 latent frames padded to a multiple of patch_size_t 2
    channels = 8 if case[0] == "i2v" else 4
    assert hidden.shape == (2, frames, channels, 8, 8)
    assert (seen["image_rotary_emb"] is None) == (case[1] == "1.0-2b")
    if case == ("i2v", "1.5"):
        torch.testing.assert_close(seen["ofs"], torch.tensor([2.0]))  # as the pipeline: shape (1,)
    else:
        assert seen["ofs"] is None
    if case[0] == "i2v":
        # The conditioning half equals what the pipeline's prepare_latents builds for the padded frame count
        # (its VAE encode made deterministic: the posterior mean, as cached for training).
        pipe = CogVideoXImageToVideoPipeline.from_pretrained(models[case])
        encode = pipe.vae.encode
        pipe.vae.encode = lambda x: type("Out", (), {"latents": encode(x).latent_dist.mode()})()
        pixel_frames = 9 + (4 if case[1] == "1.5" else 0)  # __call__ adds additional_frames * 4
        _, image_latents = pipe.prepare_latents(batch["pixels"][:, 0], 2, 4, pixel_frames, 64, 64, torch.float32,
                                                torch.device("cpu"), torch.Generator().manual_seed(0))
        assert image_latents.shape == (2, frames, 4, 8, 8)
        torch.testing.assert_close(hidden[:, :, 4:], image_latents, rtol=1e-5, atol=1e-5)
        assert hidden[:, 1:, 4:].abs().sum() == 0
    # x_t: the (for 1.5: first-frame-padded) latents noised with the replayed timesteps and noise.
    replay = torch.Generator().manual_seed(0)
    t = torch.randint(0, 1000, (2,), generator=replay)
    x0 = batch["latents"]
    if case[1] == "1.5":
        x0 = torch.cat([x0[:, :1], x0], dim=1)
    eps = torch.randn(x0.shape, generator=replay)
    a = comps.scheduler.alphas_cumprod.float()[t].view(2, 1, 1, 1, 1)
    torch.testing.assert_close(hidden[:, :, :4], a.sqrt() * x0 + (1 - a).sqrt() * eps)


def test_i2v_noise_augmentation_and_dropout(models):
    family, cfg, comps, batch = _setup(models, ("i2v", "1.0-5b"), lora=False)
    noisy = torch.zeros(2, 3, 4, 8, 8)
    clean = family.loss.model_input(noisy, batch, torch.Generator().manual_seed(0), _cfg(models[("i2v", "1.0-5b")],
                               family="cogvideox_i2v", first_frame_noise=False))
    augmented = family.loss.model_input(noisy, batch, torch.Generator().manual_seed(0), cfg)
    delta = (augmented - clean)[:, 0, 4:]
    assert 0 < delta.std() < 0.3  # sigma = exp(N(-3, 0.5)) ~ 0.05
    assert augmented[:, 1:, 4:].abs().sum() == 0
    dropped = family.loss.model_input(noisy, batch, torch.Generator().manual_seed(0),
                                 _cfg(models[("i2v", "1.0-5b")], family="cogvideox_i2v",
                                      noised_image_dropout=0.999999))
    assert dropped[:, :, 4:].abs().sum() == 0


@pytest.mark.parametrize("case", [("t2v", "1.0-5b"), ("t2v", "1.5"), ("i2v", "1.5")], ids=ids)
def test_training_rope_equals_the_pipelines(models, case):
    import diffusers

    from PIL import Image

    family, cfg, comps, batch = _setup(models, case, lora=False)
    capture = _Capture(comps.model)
    family.loss.compute_loss(comps, comps.model, batch, torch.Generator().manual_seed(0), cfg)
    capture.close()
    trained = capture.calls[0]["image_rotary_emb"]
    pipe = getattr(diffusers, family.info.pipeline_class_name).from_pretrained(models[case])
    pipe.set_progress_bar_config(disable=True)
    capture = _Capture(pipe.transformer)
    extra = {"image": Image.new("RGB", (64, 64))} if case[0] == "i2v" else {}
    pipe(prompt="a square", num_frames=9, height=64, width=64, num_inference_steps=1, guidance_scale=1.0,
         output_type="latent", **extra)
    capture.close()
    inference = capture.calls[0]["image_rotary_emb"]
    tokens = (4 // 2 if case[1] == "1.5" else 3) * (8 // 2) ** 2  # latent frames / patch_size_t x patches
    assert trained[0].shape == inference[0].shape and trained[0].shape[0] == tokens
    for a, b in zip(trained, inference):
        assert torch.equal(a, b)
    assert len(comps.state.rotary_cache) == 1  # cached per geometry


@pytest.mark.parametrize("case", [("t2v", "1.0-5b"), ("i2v", "1.5")], ids=ids)
def test_saved_adapter_reloads_at_trained_strength(models, case, tmp_path):
    import diffusers
    from safetensors.torch import load_file, save_file

    from dit_lora.api import load_adapter
    from dit_lora.output.adapter import write_adapter
    from dit_lora.modeling.trainables import split_trainable_state

    family, cfg, comps, batch = _setup(models, case, rank=4, lora_alpha=12)
    model = comps.model
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:  # an adapter that changes the output (lora_B starts at zero)
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    lora_state, _ = split_trainable_state(model, [])
    written = write_adapter(family, tmp_path, lora_state, model.peft_config["default"].to_dict(), {}, [])
    assert [p.name for p in written] == ["pytorch_lora_weights.safetensors"]
    # The scale 12 / 4 is folded into lora_B; the metadata says alpha = rank, as a consumer without it assumes.
    assert json.loads(_metadata(written[0])["lora_adapter_metadata"])["transformer.lora_alpha"] == 4
    blind = tmp_path / "no-metadata"  # what a loader that reads no alpha sees: the tensors alone
    blind.mkdir()
    save_file(load_file(str(written[0])), str(blind / written[0].name))

    channels = 8 if case[0] == "i2v" else 4
    inputs = dict(hidden_states=torch.randn(1, 4 if case[1] == "1.5" else 3, channels, 8, 8,
                                            generator=torch.Generator().manual_seed(5)),
                  encoder_hidden_states=batch["prompt_embeds"][:1], timestep=torch.tensor([500]),
                  image_rotary_emb=family.loss.rotary_embeddings(comps, 8, 8, 4 if case[1] == "1.5" else 3, "cpu"),
                  ofs=torch.tensor([2.0]) if case == ("i2v", "1.5") else None, return_dict=False)
    model.eval()
    with torch.no_grad():
        expected = model(**inputs)[0]
    for loader in ("load_adapter", "load_lora_weights", "load_lora_weights without metadata"):
        pipe = getattr(diffusers, family.info.pipeline_class_name).from_pretrained(models[case])
        if loader == "load_adapter":
            load_adapter(pipe, tmp_path)
        else:
            pipe.load_lora_weights(str(blind if "without" in loader else tmp_path))
        layer = pipe.transformer.transformer_blocks[0].attn1.to_q
        assert layer.r[next(iter(layer.r))] == 4 and next(iter(layer.scaling.values())) == 1.0
        with torch.no_grad():
            got = pipe.transformer(**inputs)[0]
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    base = getattr(diffusers, family.info.pipeline_class_name).from_pretrained(models[case])
    with torch.no_grad():
        assert not torch.allclose(base.transformer(**inputs)[0], expected, atol=1e-4)  # the adapter matters


@pytest.mark.parametrize("case", [("t2v", "1.0-2b"), ("i2v", "1.5")], ids=ids)
def test_validation_videos_in_memory_and_from_the_reloaded_adapter(models, clips, case, tmp_path):
    import av

    from dit_lora.data.video import load_video_samples
    from dit_lora.kit.components import release_encoders
    from dit_lora.modeling.trainables import split_trainable_state

    family, cfg, comps, batch = _setup(models, case, validation_prompt="a red square", num_validation_images=2)
    cond = family.encoders.encode_prompts(comps, [cfg.validation.validation_prompt], with_negative=True)
    family.setup.inspect_samples(comps, cfg, load_video_samples(clips))
    if case[0] == "i2v":
        image = comps.state.validation_image  # per-run state: in the components, not on the spec
        assert image.size == (64, 64) and image.getpixel((2, 2))[0] < 60  # the clip's dark background
    release_encoders(comps, keep_for_validation=True)
    assert set(comps.encoders) == {"vae"} and comps.encoders["vae"].device.type == "cpu"
    videos = family.samples.generate(comps, comps.model, cond, cfg, seed=0)
    assert len(videos) == 2 and all(len(v) == 9 and v[0].size == (64, 64) for v in videos)

    lora_state, _ = split_trainable_state(comps.model, [])
    family.adapter.save_adapter(tmp_path, lora_state, comps.model.peft_config["default"].to_dict())
    pipe = family.adapter.load_pipeline_with_adapter(cfg, tmp_path, torch.device("cpu"))
    assert pipe.transformer.peft_config  # the adapter is loaded
    reloaded = family.samples.generate_with_pipeline(pipe, cfg.validation.validation_prompt, cfg, 0, 1, comps=comps)
    assert len(reloaded) == 1 and len(reloaded[0]) == 9

    path = family.samples.save_sample(reloaded[0], tmp_path / "samples" / "final_0", cfg)
    assert path.name == "final_0.mp4"
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
        assert stream.average_rate == (16 if case[1] == "1.5" else 8)
    assert len(frames) == 9 and frames[0].shape == (64, 64, 3)


def test_write_video_round_trip(tmp_path):
    import av
    import numpy as np
    from PIL import Image

    from dit_lora.output.video import write_video

    frames = [Image.fromarray(np.full((48, 80, 3), 20 * i, dtype=np.uint8)) for i in range(7)]
    path = write_video(frames, tmp_path / "v.mp4", fps=8)
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])]
    assert len(decoded) == 7 and decoded[3].shape == (48, 80, 3)
    assert abs(int(decoded[3].mean()) - 60) <= 3
    with pytest.raises(ValueError, match="even"):
        write_video([np.zeros((9, 8, 3), np.uint8)], tmp_path / "odd.mp4")


def test_bad_configs_are_user_errors(models, tmp_path):
    i2v, t2v = models[("i2v", "1.0-5b")], models[("t2v", "1.0-5b")]
    cases = [
        (dict(pretrained_model_name_or_path=str(i2v)), "cogvideox", r"image-to-video.*--family cogvideox_i2v"),
        (dict(pretrained_model_name_or_path=str(t2v)), "cogvideox_i2v", r"text-to-video.*--family cogvideox "),
        (dict(height=72), "cogvideox", r"--height 72 is not a multiple of 16.*Use 64 or 80"),
        (dict(width=40), "cogvideox", r"--width 40 .*Use 32 or 48"),
        (dict(max_num_frames=10), "cogvideox", r"--max_num_frames 10 .*4k\+1.*9 or 13"),
        (dict(frame_buckets="9x64x60"), "cogvideox", r"--frame_buckets .*width 60"),
        (dict(max_sequence_length=120), "cogvideox", r"--max_sequence_length 120 .*226.*transformer/config.json"),
        (dict(pretrained_model_name_or_path=str(i2v), height=128), "cogvideox_i2v",
         r"learned position embedding.*--height/--width asks for 128x64.*--height 64 --width 64"),
        (dict(pretrained_model_name_or_path=str(i2v), frame_buckets="9x64x64,9x32x32"), "cogvideox_i2v",
         r"--frame_buckets asks for 32x32"),
        (dict(pretrained_model_name_or_path=str(models[("i2v", "1.5")]), validation_image=str(tmp_path / "no.png")),
         "cogvideox_i2v", r"--validation_image .*does not exist"),
        (dict(pretrained_model_name_or_path=str(tmp_path / "missing")), "cogvideox", r"does not exist"),
    ]
    for overrides, family_name, pattern in cases:
        cfg = _cfg(overrides.pop("pretrained_model_name_or_path", t2v), family=family_name, **overrides)
        with pytest.raises(UserError, match=pattern):
            _family("i2v" if family_name == "cogvideox_i2v" else "t2v").model.validate_config(cfg)
    # 1.5 takes any 4k+1 (latents padded like the pipeline); 1.0 takes 9 at any multiple of 16.
    _family("t2v").model.validate_config(_cfg(models[("t2v", "1.5")], max_num_frames=9))
    assert _family("t2v").video_frames.video_buckets(_cfg(t2v, frame_buckets="9x64x64,5x32x48")) == [(9, 64, 64), (5, 32, 48)]
    # Without --frame_buckets: the trained size first, then automatic aspect buckets of at most its area.
    auto = _family("t2v").video_frames.video_buckets(_cfg(t2v, max_num_frames=None, height=None, width=None))
    assert auto[0] == (9, 64, 64) and len(auto) > 1 and all(f == 9 and h * w <= 64 * 64 for f, h, w in auto)


def test_precision_notes(models, tmp_path):
    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    i2v = models[("i2v", "1.0-5b")]
    notes = _family("i2v").notes.precision_notes(_cfg(i2v, family="cogvideox_i2v", max_num_frames=5))
    assert len(notes) == 1 and "learned position table for 9 frames" in notes[0] and "sin-cos" in notes[0]
    assert _family("i2v").notes.precision_notes(_cfg(i2v, family="cogvideox_i2v")) == []
    fp16 = build_tiny_cogvideox_pipeline(tmp_path / "fp16", version="1.0-2b", dtype=torch.float16)
    notes = _family("t2v").notes.precision_notes(_cfg(fp16))
    assert len(notes) == 1 and "fp16" in notes[0] and "bf16" in notes[0]


def test_tiled_encode_size_mismatch_is_named(models):
    family = _family("t2v")
    cfg = _cfg(models[("t2v", "1.0-5b")], enable_tiling=True)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    # The tiny VAE's tiles are 64 px (stride 53, no multiple of 8): 128 px frames get tiled and miscounted.
    assert family.encoders.encode_images(comps, torch.zeros(1, 9, 3, 64, 64))["latents"].shape[-2:] == (8, 8)
    with pytest.raises(UserError, match="--enable_tiling false"):
        family.encoders.encode_images(comps, torch.zeros(1, 9, 3, 128, 128))


def test_snippet_card_license_and_identity(models, tmp_path):
    from PIL import Image

    t2v, i2v = _family("t2v"), _family("i2v")
    cfg = _cfg(models[("t2v", "1.0-5b")], validation_prompt='a "quoted" square', enable_tiling=True)
    Image.new("RGB", (64, 64)).save(tmp_path / "frame.png")
    i2v_cfg = _cfg(models[("i2v", "1.5")], family="cogvideox_i2v", validation_image=str(tmp_path / "frame.png"),
                   enable_tiling=True)
    i2v.model.validate_config(i2v_cfg)
    for family, c in ((t2v, cfg), (i2v, i2v_cfg)):
        code = family.card.usage_snippet(c, "me/my-lora")
        compile(code, "snippet", "exec")
        assert "load_lora_weights(\"me/my-lora\")" in code and "enable_tiling()" in code
        assert "export_to_video(" not in code and "av.open(\"sample.mp4\", \"w\")" in code and "torch.bfloat16" in code
    i2v_code = i2v.card.usage_snippet(i2v_cfg, "x")
    assert 'load_image("card_input.png")' in i2v_code and "rate=16" in i2v_code  # the run's frame (output.report)
    assert "image=image," in i2v_code and "prompt=" in i2v_code  # the I2V pipeline's first argument is the image
    assert "enable_tiling" not in t2v.card.usage_snippet(_cfg(models[("t2v", "1.0-5b")]), "x")  # as trained (tiny VAE)
    settings = t2v.card.card_settings(cfg)
    assert settings["resolution"].startswith("9x64x64") and "RoPE" in settings["model"]
    assert "first_frame_noise" in i2v.card.card_settings(i2v_cfg)
    license_of = lambda name: t2v.card.base_model_license(_cfg(models[("t2v", "1.0-5b")]).__class__(  # noqa: E731
        family="cogvideox", pretrained_model_name_or_path=name, train_data_dir="x").model)
    assert license_of("THUDM/CogVideoX-2b") == "apache-2.0"
    assert license_of("THUDM/CogVideoX-5b-I2V") == "other" and license_of("zai-org/CogVideoX1.5-5B") == "other"
    assert license_of(str(models[("t2v", "1.0-5b")])) is None
    a, b = t2v.encoders.cache_identity(cfg), t2v.encoders.cache_identity(_cfg(models[("t2v", "1.0-5b")], enable_tiling=False))
    assert a != b and a["max_sequence_length"] == 226 and i2v.encoders.cache_identity(i2v_cfg)["cogvideox_variant"] == "i2v"


def test_prepare_demo_builds_model_and_clips(tmp_path):
    from dit_lora.data.video import load_video_samples

    family = _family("i2v")
    cfg = _cfg(tmp_path / "model", family="cogvideox_i2v", demo=True, demo_cogvideox_version="1.5",
               train_data_dir=str(tmp_path / "clips"), demo_num_images=3, max_num_frames=13)
    family.demo.prepare_demo(cfg)
    family.model.validate_config(cfg)
    samples = load_video_samples(tmp_path / "clips")
    assert len(samples) == 3 and samples[0].probe().num_frames == 13 and samples[0].caption.startswith("a ")
    family.demo.prepare_demo(cfg)  # idempotent
    with pytest.raises(UserError, match="1.0-2b"):
        family.demo.prepare_demo(_cfg(tmp_path / "m2", family="cogvideox_i2v", demo_cogvideox_version="1.0-2b"))


# ---- the size each checkpoint was trained at --------------------------------------------------------------------
def _hub_layout(root: Path, name: str) -> Path:
    """The release's model_index.json, transformer and VAE configs exactly as the catalogue records them (no
    weights needed: the size is decided, and refused, before any weights load)."""
    from dit_lora.catalogue import by_hub_id

    folder = root / name
    for file, config in by_hub_id(f"THUDM/{name}").configs.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(json.dumps(config))
    return folder


def _size_cfg(folder: Path, **kw):
    family = "cogvideox_i2v" if folder.name.endswith("I2V") else "cogvideox"
    return _cfg(folder, family=family, **{"max_num_frames": None, "height": None, "width": None, **kw})


@pytest.mark.parametrize("name, size", [
    ("CogVideoX-2b", (49, 480, 720)), ("CogVideoX-5b", (49, 480, 720)), ("CogVideoX-5b-I2V", (49, 480, 720)),
    ("CogVideoX1.5-5B", (81, 768, 1360)), ("CogVideoX1.5-5B-I2V", (81, 768, 1360)),
])
def test_default_size_is_the_documented_trained_size(tmp_path, name, size):
    """1.5 stores sample_height/width 300 (2400 px); the default must be THUDM's 768x1360x81, and say why."""
    folder = _hub_layout(tmp_path, name)
    family = _family("i2v" if name.endswith("I2V") else "t2v")
    cfg = _size_cfg(folder)
    family.model.validate_config(cfg)
    buckets = family.video_frames.video_buckets(cfg)
    assert buckets[0] == size
    # A learned position table (5B I2V) runs only at its trained size: one bucket; the others get aspect buckets.
    assert (len(buckets) == 1) == (name == "CogVideoX-5b-I2V")
    (note,) = family.notes.start_notes(cfg)
    frames, height, width = size
    assert f"video size: {frames}x{height}x{width}" in note and "the size the checkpoint was trained at" in note
    assert "\n" not in note
    assert ("other automatic aspect buckets" in note) == (name != "CogVideoX-5b-I2V")
    assert ("2400 px" in note) == ("1.5" in name) and f"the published config of THUDM/{name}" in note
    assert family.video_frames.model_info(cfg.model).fps == (16 if "1.5" in name else 8)


def test_size_far_from_the_trained_one_is_refused_unless_forced(tmp_path, models):
    from dit_lora.families.cogvideox.info import model_info

    v15 = _hub_layout(tmp_path, "CogVideoX1.5-5B")
    family = _family("t2v")
    info = model_info(_size_cfg(v15).model)
    assert info.latent_tokens(81, 768, 1360) == 11 * 48 * 85  # 21 latent frames padded to 22, in pairs
    # What diffusers' own default (sample size x 8) would train at: 5.5x the tokens.
    with pytest.raises(UserError, match=r"--height/--width asks for 81x2400x2400 .*5\.51x the 44,880 of 81x768x1360"
                                        r".*--height 768 --width 1360 --max_num_frames 81.*--allow_untrained_resolution"):
        family.model.validate_config(_size_cfg(v15, height=2400, width=2400))
    forced = _size_cfg(v15, height=2400, width=2400, allow_untrained_resolution=True)
    family.model.validate_config(forced)
    assert family.video_frames.video_buckets(forced)[0] == (81, 2400, 2400)
    assert "allowed by --allow_untrained_resolution" in family.notes.start_notes(forced)[0]
    # User sizes within range win; unset dimensions come from the trained size.
    within = _size_cfg(v15, height=480, width=848)
    family.model.validate_config(within)
    assert family.video_frames.video_buckets(within)[0] == (81, 480, 848)
    assert "from --height/--width, the rest the trained size; the checkpoint was trained at 81x768x1360" in (
        family.notes.start_notes(within)[0])
    # Too small: a 1.0 checkpoint asked for the tiny demo size; buckets are checked one by one.
    v10 = _hub_layout(tmp_path, "CogVideoX-5b")
    with pytest.raises(UserError, match=r"--height/--width/--max_num_frames asks for 9x64x64 .*: 48 latent tokens per clip, 0.00274x"):
        family.model.validate_config(_size_cfg(v10, height=64, width=64, max_num_frames=9))
    with pytest.raises(UserError, match=r"--frame_buckets asks for 49x1280x1920"):
        family.model.validate_config(_size_cfg(v10, frame_buckets="49x480x720,49x1280x1920"))
    # The tiny demo models are judged against their own recorded size (9x64x64), not a real checkpoint's.
    tiny = models[("t2v", "1.5")]
    family.model.validate_config(_cfg(tiny))
    assert "9x64x64" in family.notes.start_notes(_cfg(tiny))[0] and "not a catalogued" in family.notes.start_notes(_cfg(tiny))[0]
    with pytest.raises(UserError, match="--allow_untrained_resolution"):
        family.model.validate_config(_cfg(tiny, height=256, width=256))


@pytest.mark.parametrize("hub_id, size", [("THUDM/CogVideoX1.5-5B", (81, 768, 1360)), ("THUDM/CogVideoX-5b", (49, 480, 720))])
def test_an_undownloaded_catalogued_id_gets_its_trained_size(hub_id, size, tmp_path, monkeypatch):
    """`dit-lora plan THUDM/CogVideoX1.5-5B` with nothing downloaded plans 81 x 768 x 1360, not 1.0's size."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family

    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path=hub_id)
    assert get_family("cogvideox").video_frames.video_buckets(cfg)[0] == size


def test_automatic_buckets_stay_within_what_each_version_runs(tmp_path, models):
    """1.0's sin-cos (2B) and RoPE (5B) take any size, so clips of other shapes get aspect buckets of at most the
    default's tokens (what the trained-size check and the memory plan judge); 1.5's RoPE slices a table of its sample
    size, so no automatic bucket goes beyond it, and a --frame_buckets entry beyond it is one paragraph."""
    from dit_lora.data.frames import choose_bucket, clip_cropped_share
    from dit_lora.families.cogvideox.info import model_info

    family = _family("t2v")
    v10 = _size_cfg(_hub_layout(tmp_path, "CogVideoX-2b"))
    buckets = family.video_frames.video_buckets(v10)
    info = model_info(v10.model)
    portrait = choose_bucket(49, 1280, 720, buckets)  # a 9:16 clip: a portrait bucket, little cropped
    assert buckets[0] == (49, 480, 720) and portrait[1] > portrait[2] and clip_cropped_share(1280, 720, portrait) < 0.05
    assert max(info.latent_tokens(*b) for b in buckets) == info.latent_tokens(49, 480, 720)
    assert family.plan.pixel_batches(v10) == [("49 x 480 x 720", (v10.training.train_batch_size, 49, 3, 480, 720))]
    family.model.validate_config(v10)  # every automatic bucket within the trained-size check's range
    v15 = _size_cfg(_hub_layout(tmp_path, "CogVideoX1.5-5B"))
    assert all(h <= 2400 and w <= 2400 for _, h, w in family.video_frames.video_buckets(v15))
    tiny15 = _cfg(models[("t2v", "1.5")])  # its table: 64 x 64 px
    assert all(h <= 64 and w <= 64 for _, h, w in family.video_frames.video_buckets(tiny15))
    with pytest.raises(UserError, match=r"--frame_buckets asks for 9x32x128 .*covers at most 64x64 px"):
        family.model.validate_config(_cfg(models[("t2v", "1.5")], frame_buckets="9x64x64,9x32x128"))


# ---- the specs themselves ---------------------------------------------------------------------------------------
def test_the_registry_serves_each_tasks_own_spec():
    from dit_lora.contract.spec import FamilySpec
    from dit_lora.families.cogvideox.spec import INFO
    from dit_lora.registry import get_spec

    for name in ("cogvideox", "cogvideox_i2v"):
        spec = get_spec(name)
        assert isinstance(spec, FamilySpec) and spec.name == name and spec.info == INFO[name]
        assert isinstance(_family("i2v" if name.endswith("i2v") else "t2v"), FamilySpec)
    assert INFO["cogvideox"].text_encoder_label == "T5-XXL" and INFO["cogvideox_i2v"].gradient_checkpointing_default


def test_it_fills_the_capabilities_the_old_class_declared():
    """CogVideoXFamily's twelve declared capabilities, and FrameRate (which the old spec took from its model_fps)."""
    from dit_lora.contract import capabilities as caps
    from dit_lora.families.cogvideox.spec import cogvideox_spec

    for name in ("cogvideox", "cogvideox_i2v"):
        spec = cogvideox_spec(name)
        assert set(spec.capabilities) == {
            caps.Encoders, caps.Captions, caps.Demo, caps.ModelDefaults, caps.RunNotes, caps.Precision,
            caps.RunSetup, caps.VideoFrames, caps.Samples, caps.MemoryPlan, caps.ModelCard, caps.FusedKernels,
            caps.FrameRate}
        assert spec.trainables is None and spec.image_buckets is None and spec.exports is None
        assert spec.video_frames is spec.frame_rate


def test_components_are_small_and_share_the_encoders_and_the_sizes():
    import inspect

    from dit_lora.families.cogvideox.spec import cogvideox_spec

    for name in ("cogvideox", "cogvideox_i2v"):
        spec = cogvideox_spec(name)
        for field in ("model", "data", "loss", "adapter", "encoders", "samples", "plan", "card", "notes", "setup",
                      "precision", "demo", "defaults", "video_frames", "kernels"):
            part = getattr(spec, field)
            methods = [n for n, v in inspect.getmembers(type(part), inspect.isfunction) if not n.startswith("__")]
            assert len(methods) < 20, (type(part).__name__, methods)
        assert spec.loss.encoders is spec.encoders and spec.samples.encoders is spec.encoders
        assert spec.plan.loss is spec.loss and spec.model.video is spec.video_frames is spec.card.video
        assert spec.model.task == spec.encoders.task == ("i2v" if name == "cogvideox_i2v" else "t2v")


def test_no_component_keeps_run_state_in_extras():
    import dit_lora.families.cogvideox as package

    for module in Path(package.__file__).parent.glob("*.py"):
        assert "extras" not in module.read_text(), module.name


def test_the_block_list_names_the_tiny_models_blocks(tiny_cogvideox):
    """``--blocks_to_swap`` swaps ``transformer_blocks`` (``FamilyInfo.block_lists``)."""
    from block_lists import assert_block_lists

    assert_block_lists("cogvideox", tiny_cogvideox)
