"""kit/tiny.py: a tiny pipeline stated as data (a TinyPipeline) and built into a folder that loads.

Each family's own demo test (tests/families/<name>/test_demo.py) checks its tiny model; this file checks the shared
builder with a description written here, as a new family would write one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dit_lora.kit import tiny

_TRANSFORMER = {
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "in_channels": 4,
    "out_channels": 8,
    "num_layers": 1,
    "sample_size": 4,
    "patch_size": 2,
    "num_embeds_ada_norm": 10,
}
_VAE = {
    "block_out_channels": [8, 8],
    "down_block_types": ["DownEncoderBlock2D"] * 2,
    "up_block_types": ["UpDecoderBlock2D"] * 2,
    "latent_channels": 4,
    "norm_num_groups": 4,
    "layers_per_block": 1,
}


def _description(seed: int = 0, transformer=None, calls: list | None = None, **changes) -> tiny.TinyPipeline:
    """A DiT-shaped tiny pipeline: the smallest diffusers pipeline without a text encoder."""

    def measure(vae) -> None:
        with torch.no_grad():
            latents = vae.encode(tiny.shapes_pixels(16, seed, n=2)).latent_dist.mode()
        vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))

    def after_save(folder: Path, components: dict) -> None:
        if calls is not None:
            calls.append(sorted(components))
        (folder / "apart.json").write_text(json.dumps(components["kept_apart"]))

    values = {
        "pipeline": "diffusers:DiTPipeline",
        "marker": {"kind": "test", "seed": seed, "version": 1},
        "seed": seed,
        "parts": (
            tiny.module("transformer", 1, "diffusers:DiTTransformer2DModel", transformer or _TRANSFORMER),
            tiny.module("vae", 2, "diffusers:AutoencoderKL", _VAE, dtype=torch.bfloat16, then=measure),
        ),
        "scheduler": ("diffusers:DDIMScheduler", {"num_train_timesteps": 100}),
        "processors": lambda components: {"kept_apart": sorted(components)},
        "apart": ("kept_apart",),
        "after_save": after_save,
    }
    return tiny.TinyPipeline(**{**values, **changes})


def _stored_dtypes(folder: Path) -> set[str]:
    header = (folder / "diffusion_pytorch_model.safetensors").read_bytes()
    size = int.from_bytes(header[:8], "little")
    return {v["dtype"] for k, v in json.loads(header[8 : 8 + size]).items() if k != "__metadata__"}


def test_a_description_builds_a_folder_the_pipeline_class_loads(tmp_path):
    """The folder is what save_pretrained writes (each part in its dtype, the VAE measured), the family's files
    after it and the marker last; the pipeline class loads it offline; the caller's RNG state is left alone."""
    from diffusers import DiTPipeline

    calls: list = []
    rng_before = torch.get_rng_state()
    path = tiny.build_pipeline(tmp_path / "m", _description(calls=calls))
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert path == tmp_path / "m"
    assert json.loads((path / tiny.MARKER).read_text()) == {"kind": "test", "seed": 0, "version": 1}
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == "DiTPipeline" and "kept_apart" not in index  # saved by after_save instead
    # the processors saw the built parts and the scheduler; after_save saw every component
    assert json.loads((path / "apart.json").read_text()) == ["scheduler", "transformer", "vae"]
    assert calls == [["kept_apart", "scheduler", "transformer", "vae"]]
    assert _stored_dtypes(path / "vae") == {"BF16"} and _stored_dtypes(path / "transformer") == {"F32"}
    pipe = DiTPipeline.from_pretrained(path, torch_dtype=torch.float32)
    assert pipe.vae.config.scaling_factor != 0.18215  # measured, not diffusers' default
    assert pipe.scheduler.config.num_train_timesteps == 100


def test_a_build_is_idempotent_and_a_changed_description_rebuilds(tmp_path):
    """The same marker leaves every file untouched; another seed (another marker) rebuilds the folder."""
    path = tiny.build_pipeline(tmp_path / "m", _description())
    weights = path / "transformer" / "diffusion_pytorch_model.safetensors"
    stamp, data = weights.stat().st_mtime_ns, weights.read_bytes()
    tiny.build_pipeline(path, _description())
    assert weights.stat().st_mtime_ns == stamp
    tiny.build_pipeline(path, _description(seed=1))
    assert json.loads((path / tiny.MARKER).read_text())["seed"] == 1 and weights.read_bytes() != data


def test_each_part_has_its_own_seed():
    """Changing one part's config changes no other part's weights; the same description builds the same weights."""
    first = tiny.build_components(_description())
    again = tiny.build_components(_description())
    deeper = tiny.build_components(_description(transformer={**_TRANSFORMER, "num_layers": 2}))
    for name in ("transformer", "vae"):
        assert all(
            torch.equal(a, b) for a, b in zip(first[name].state_dict().values(), again[name].state_dict().values())
        )
    assert all(
        torch.equal(a, b) for a, b in zip(first["vae"].state_dict().values(), deeper["vae"].state_dict().values())
    )
    assert not first["transformer"].training and not first["vae"].training


def test_a_text_model_covers_the_tokenizer_and_takes_its_ids():
    """``text_model``: the vocabulary rounded up to 64 rows past the tokenizer's length, the named config keywords
    set from the tokenizer's attributes, in eval mode and the part's dtype."""
    from dit_lora.data.synthetic.tokenizers import build_tiny_t5_tokenizer

    t5 = {"d_model": 16, "d_kv": 4, "d_ff": 32, "num_layers": 1, "num_heads": 2, "is_encoder_decoder": False}
    ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id", "decoder_start_token_id": "pad_token_id"}
    part = tiny.text_model(3, "transformers:T5EncoderModel", "transformers:T5Config", t5, ids, dtype=torch.bfloat16)
    description = tiny.TinyPipeline(
        pipeline="diffusers:DiTPipeline",
        marker={},
        seed=0,
        parts=(part,),
        scheduler=("diffusers:DDIMScheduler", {}),
        tokenizer=build_tiny_t5_tokenizer,
    )
    components = tiny.build_components(description)
    tokenizer, model = components["tokenizer"], components["text_encoder"]
    assert model.config.vocab_size == tiny.padded_vocab(tokenizer) >= len(tokenizer)
    assert model.config.vocab_size % 64 == 0 and model.config.vocab_size - len(tokenizer) < 64
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.decoder_start_token_id == tokenizer.pad_token_id
    assert model.dtype == torch.bfloat16 and not model.training


def test_the_measurement_helpers():
    """The demo's pictures and clips in [-1, 1] and deterministic; the scaling factor and the per-channel
    statistics to four digits, a zero spread floored at 1e-3."""
    pixels = tiny.shapes_pixels(32, seed=3, n=2)
    assert pixels.shape == (2, 3, 32, 32) and pixels.min() >= -1 and pixels.max() <= 1
    assert torch.equal(pixels, tiny.shapes_pixels(32, seed=3, n=2))
    clips = tiny.moving_square_clips(0, 2, 5, 16, 24)
    assert clips.shape == (2, 3, 5, 16, 24) and clips.min() >= -1 and clips.max() <= 1
    assert not torch.equal(clips[:, :, 0], clips[:, :, -1])  # the square moves
    assert tiny.scaling_factor(torch.tensor([0.0, 2.0, 4.0, 6.0])) == pytest.approx(1 / 2.582, rel=1e-3)
    latents = torch.stack([torch.full((2, 3), 5.0), torch.arange(6.0).view(2, 3)], dim=1)  # [n=2, C=2, 3]
    mean, std = tiny.channel_statistics(latents)
    assert mean == [5.0, 2.5] and std == [0.001, float(f"{torch.arange(6.0).std().item():.4g}")]


def test_rewrite_json_changes_a_file_in_place(tmp_path):
    """The after-save edit of a saved config (DiT's legacy class name, Qwen-Image Edit's pipeline class)."""
    file = tmp_path / "model_index.json"
    file.write_text(json.dumps({"b": 1, "a": 2}))
    tiny.rewrite_json(file, lambda data: data.update(c=3))
    assert file.read_text() == '{\n  "b": 1,\n  "a": 2,\n  "c": 3\n}\n'
    tiny.rewrite_json(file, lambda data: data.pop("c"), sort_keys=True)
    assert file.read_text() == '{\n  "a": 2,\n  "b": 1\n}\n'


def test_resolve_names_a_class_lazily():
    """``"module:Attribute"`` strings keep a family's demo.py free of diffusers and transformers until a build."""
    from diffusers import DDIMScheduler

    assert tiny.resolve("diffusers:DDIMScheduler") is DDIMScheduler


def test_a_tiny_vaes_scaling_factor_is_measured_on_shapes_whatever_its_output():
    """:func:`tiny.measured_scaling`: an AutoencoderKL's posterior mode (DiT) or a DC-AE's latent (Sana), on the
    shapes of the given size and seed, registered as the VAE's ``scaling_factor``."""
    from types import SimpleNamespace

    class Vae:
        def __init__(self, dc_ae: bool) -> None:
            self.dc_ae, self.config = dc_ae, {}

        def encode(self, pixels):
            self.seen = pixels
            latents = pixels * 3
            return SimpleNamespace(latent=latents) if self.dc_ae else SimpleNamespace(
                latent_dist=SimpleNamespace(mode=lambda: latents))

        def register_to_config(self, **values):
            self.config.update(values)

    expected = tiny.scaling_factor(tiny.shapes_pixels(16, 2) * 3)
    for dc_ae in (False, True):
        vae = Vae(dc_ae)
        tiny.measured_scaling(16, 2)(vae)
        assert torch.equal(vae.seen, tiny.shapes_pixels(16, 2)) and vae.config == {"scaling_factor": expected}


def test_the_clip_tokenizer_is_the_same_in_every_process():
    """Two fresh processes build the same CLIP tokenizer (``tokenizers``' trainer, with an end-of-word suffix, numbered
    its symbols and broke merge ties differently per process: the same seed then trained another FLUX.1 adapter);
    every word of its texts is one token, an unseen word and punctuation still encode without ``<unk>``."""
    import subprocess
    import sys

    code = ("import json; from dit_lora.kit.tiny import clip_tokenizer; "
            "t = clip_tokenizer(('a red circle on a blue background', 'two green squares'), 50); "
            "print(json.dumps([t.get_vocab(), t('A red circle, Zebra!').input_ids], sort_keys=True))")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1]
    from dit_lora.kit.tiny import clip_tokenizer

    tokenizer = clip_tokenizer(("a red circle on a blue background", "two green squares"), 50)
    assert tokenizer.tokenize("a blue background") == ["a</w>", "blue</w>", "background</w>"]
    ids = tokenizer("A red circle, Zebra!").input_ids
    assert tokenizer.unk_token_id not in ids[1:-1] and ids[-1] == tokenizer.eos_token_id and len(ids) > 6


def test_builders_build_a_familys_default_variant_or_the_named_one(tmp_path):
    """``tiny.builders``: the components and the folder of ``describe(variant, seed)``, the default variant when none
    is named; a family of one variant describes from the seed alone."""
    asked: list = []

    def describe(variant, seed):
        asked.append((variant, seed))
        return _description(seed=seed)

    components, pipeline = tiny.builders(describe, "base")
    assert set(components()) >= {"transformer", "vae", "scheduler"} and asked == [("base", 0)]
    assert pipeline(tmp_path / "m", "other", seed=3) == tmp_path / "m" and asked[-1] == ("other", 3)
    assert json.loads((tmp_path / "m" / tiny.MARKER).read_text())["seed"] == 3
    single, _ = tiny.builders(lambda seed: asked.append(("single", seed)) or _description(seed=seed))
    single(2)
    assert asked[-1] == ("single", 2)


def test_described_marks_the_family_variant_seed_and_version_and_takes_the_flow_scheduler():
    """``tiny.described``: the marker names the family (the demo file's package), the variant where there are
    several, the seed and the file's version; the scheduler is flow matching, configured from the variant."""
    from dit_lora.families.chroma.demo import DEMO

    config = DEMO.read().variant("hd")
    description = tiny.described(DEMO, "ChromaPipeline", 5, config, ("variant", "hd"), parts=())
    assert description.pipeline == "diffusers:ChromaPipeline" and description.seed == 5
    assert description.marker == {"kind": "chroma", "variant": "hd", "seed": 5, "version": DEMO.read().version}
    assert description.scheduler == ("diffusers:FlowMatchEulerDiscreteScheduler", config["scheduler"])
    assert tiny.described(DEMO, "ChromaPipeline", 0, config, parts=()).marker == {
        "kind": "chroma", "seed": 0, "version": DEMO.read().version}
