"""families/diffusion.py: what every diffusion family inherits (on-the-fly encoding, releasing the encoders, the VAE
between validations, PNG samples, the planner's batches), on a toy family that encodes by pooling."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from PIL import Image

from dit_lora.config import TrainConfig
from dit_lora.data.prepare import ImageMedia
from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.contract.capabilities import Captions, Encoders, ImageBuckets
from dit_lora.families.diffusion import DiffusionFamily


class Vae(torch.nn.Linear):
    """A stand-in VAE that says where it is (``.device``, as diffusers models do) and remembers each move."""

    def __init__(self):
        super().__init__(1, 1)
        self.moves = [torch.device("cpu")]

    @property
    def device(self):
        return self.moves[-1]

    def to(self, device):
        self.moves.append(torch.device(device))
        return self


class Pooling(DiffusionFamily):
    """Latents are 8x average-pooled pixels; a caption's embedding is its length."""

    name = "pooling"

    def validate_config(self, cfg):
        pass

    def load_components(self, cfg, device):
        return Components(model=torch.nn.Linear(1, 1), encoders={"vae": Vae(), "text_encoder": "t5"})

    def cache_identity(self, cfg, comps=None):
        return {"resolution": cfg.resolution}

    def encode_images(self, comps, pixel_values):
        return torch.nn.functional.avg_pool2d(pixel_values, 8)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        lengths = [len(c) for c in captions] + ([0] if with_negative else [])
        return {"prompt_embeds": torch.tensor(lengths, dtype=torch.float32)[:, None]}

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


def test_load_conditioning_image_fits_a_file_or_takes_the_first_frame(tmp_path):
    """--validation_image is cover-resized to the bucket; without it the first clip's first frame is used; a bad
    file and no samples are one paragraph each."""
    from types import SimpleNamespace

    import pytest
    from PIL import Image

    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.core.errors import UserError
    from dit_lora.families.diffusion import load_conditioning_image

    Image.new("RGB", (100, 40), (200, 10, 10)).save(tmp_path / "wide.png")
    image = load_conditioning_image(str(tmp_path / "wide.png"), None, 32, 48)
    assert image.size == (48, 32) and image.getpixel((24, 16))[0] > 150
    clips = make_moving_square_dataset(tmp_path / "clips", n=1, num_frames=5, size=32)
    sample = SimpleNamespace(path=next(clips.glob("*.mp4")), key="clip")
    assert load_conditioning_image(None, [sample], 32, 32).size == (32, 32)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="cannot be read as an image"):
        load_conditioning_image(str(tmp_path / "bad.png"), None, 32, 32)
    with pytest.raises(UserError, match="set --validation_image"):
        load_conditioning_image(None, [], 32, 32)


def test_run_conditioning_image_is_taken_once_and_kept(tmp_path):
    """With samples (the data stage) it is taken from them and kept; later calls return the kept image, not a new
    load of --validation_image."""
    from types import SimpleNamespace

    from PIL import Image

    from dit_lora.contract.family import Components
    from dit_lora.families.diffusion import run_conditioning_image

    Image.new("RGB", (40, 40), (0, 200, 0)).save(tmp_path / "green.png")
    family = SimpleNamespace(video_buckets=lambda cfg: [(5, 32, 32)])
    cfg = SimpleNamespace(family_options=SimpleNamespace(validation_image=str(tmp_path / "green.png")))
    comps = Components(model=None)
    first = run_conditioning_image(family, cfg, comps, samples=[])
    assert comps.extras["validation_image"] is first and first.size == (32, 32)
    (tmp_path / "green.png").unlink()  # a reload would now fail: the kept image is returned
    assert run_conditioning_image(family, cfg, comps) is first


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
