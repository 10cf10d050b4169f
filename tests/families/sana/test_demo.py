"""families/sana/demo.py: the tiny random Sana pipeline the demo and the tests train (offline).

The shapes data set is tested in tests/data/synthetic/test_shapes.py."""

from __future__ import annotations

import json
import inspect
from pathlib import Path

import pytest
from offline import no_network
import torch

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.families.sana.demo import (
    TINY_SANA_CONFIGS,
    build_tiny_sana_components,
    build_tiny_sana_pipeline,
    build_tiny_tokenizer,
    get_tiny_sana_config,
)

LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


@pytest.fixture(scope="module", autouse=True)
def _offline():
    yield from no_network()


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("assets") / "tiny-sana"
    rng_before = torch.get_rng_state()
    assert build_tiny_sana_pipeline(path, size="tiny", seed=0) == path
    # The build seeds its own forked RNG: the caller's global stream must be untouched.
    assert torch.equal(torch.get_rng_state(), rng_before)
    return path


@pytest.fixture(scope="module")
def pipe(tiny_path):
    from diffusers import SanaPipeline

    pipe = SanaPipeline.from_pretrained(tiny_path, torch_dtype=torch.bfloat16)
    pipe.vae.to(torch.float32)  # like real Sana usage: DC-AE decodes in fp32
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _safetensors_dtypes(path: Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {str(f.get_slice(k).get_dtype()) for k in f.keys()}


def test_layout_and_stored_dtypes(tiny_path):
    index = json.loads((tiny_path / "model_index.json").read_text())
    assert index["_class_name"] == "SanaPipeline"
    assert index["transformer"] == ["diffusers", "SanaTransformer2DModel"]
    assert index["vae"] == ["diffusers", "AutoencoderDC"]
    assert index["text_encoder"] == ["transformers", "Gemma2Model"]
    assert index["scheduler"] == ["diffusers", "FlowMatchEulerDiscreteScheduler"]
    assert index["tokenizer"][1] in ("GemmaTokenizer", "GemmaTokenizerFast")
    # bf16 transformer/text encoder and fp32 VAE, as in the real *_BF16_diffusers repos.
    assert _safetensors_dtypes(tiny_path / "transformer/diffusion_pytorch_model.safetensors") == {"BF16"}
    assert _safetensors_dtypes(tiny_path / "text_encoder/model.safetensors") == {"BF16"}
    # (I64: BatchNorm's num_batches_tracked in the decoder, as in the real DC-AE.)
    assert _safetensors_dtypes(tiny_path / "vae/diffusion_pytorch_model.safetensors") <= {"F32", "I64"}
    assert not list(tiny_path.rglob("*.bin"))
    marker = json.loads((tiny_path / "dit_lora_tiny.json").read_text())
    assert marker["size"] == "tiny" and marker["seed"] == 0


def test_components_reload_with_expected_dtypes(tiny_path):
    from diffusers import AutoencoderDC, FlowMatchEulerDiscreteScheduler, SanaTransformer2DModel
    from transformers import AutoModel, AutoTokenizer, Gemma2Model

    transformer = SanaTransformer2DModel.from_pretrained(tiny_path, subfolder="transformer", torch_dtype=torch.bfloat16)
    vae = AutoencoderDC.from_pretrained(tiny_path, subfolder="vae", torch_dtype=torch.float32)
    text_encoder = AutoModel.from_pretrained(tiny_path, subfolder="text_encoder", dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path, subfolder="tokenizer")
    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(tiny_path, subfolder="scheduler")

    assert transformer.dtype == torch.bfloat16 and text_encoder.dtype == torch.bfloat16
    assert vae.dtype == torch.float32
    assert isinstance(text_encoder, Gemma2Model)
    assert scheduler.config.shift == 3.0 and scheduler.config.num_train_timesteps == 1000
    # The pieces fit together: caption width, latent channels, vocabulary.
    assert text_encoder.config.hidden_size == transformer.config.caption_channels
    assert vae.config.latent_channels == transformer.config.in_channels
    assert text_encoder.config.vocab_size >= len(tokenizer)
    assert 0.05 < vae.config.scaling_factor < 20
    assert 2 ** (len(vae.config.encoder_block_out_channels) - 1) == 8


def test_transformer_has_real_sana_lora_targets(pipe):
    transformer = pipe.transformer
    # getattr(base_layer): a PEFT-wrapped layer still counts (test order independence).
    modules = {n: getattr(m, "base_layer", m) for n, m in transformer.named_modules()}
    linear = {n for n, m in modules.items() if isinstance(m, torch.nn.Linear)}
    conv = {n for n, m in modules.items() if isinstance(m, torch.nn.Conv2d)}
    for block in range(transformer.config.num_layers):
        for attn in ("attn1", "attn2"):
            for target in LORA_TARGETS:
                assert f"transformer_blocks.{block}.{attn}.{target}" in linear
        for ff in ("conv_inverted", "conv_depth", "conv_point"):
            assert f"transformer_blocks.{block}.ff.{ff}" in conv
    assert {"caption_projection.linear_1", "caption_projection.linear_2", "time_embed.linear", "proj_out"} <= linear


def _forward(transformer, latents, text, timestep):
    with torch.no_grad():
        out = transformer(latents, encoder_hidden_states=text, timestep=timestep, return_dict=False)[0]
    return out.float()


def test_forward_is_finite_input_dependent_and_lora_sensitive(pipe):
    from peft import LoraConfig

    transformer = pipe.transformer
    cfg = transformer.config
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, cfg.in_channels, 8, 8, generator=gen).to(torch.bfloat16)
    text = torch.randn(2, 12, cfg.caption_channels, generator=gen).to(torch.bfloat16)
    timestep = torch.tensor([500.0, 500.0])

    out = _forward(transformer, latents, text, timestep)
    assert out.shape == (2, cfg.out_channels, 8, 8)
    assert torch.isfinite(out).all() and out.std() > 1e-2
    assert (out[0] - out[1]).abs().mean() > 1e-3  # different samples, different outputs
    assert (_forward(transformer, latents * 0.5, text, timestep) - out).abs().mean() > 1e-3
    assert (_forward(transformer, latents, -text, timestep) - out).abs().mean() > 1e-3
    assert (_forward(transformer, latents, text, timestep * 0 + 100) - out).abs().mean() > 1e-3

    transformer.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=LORA_TARGETS), adapter_name="probe")
    try:
        # Standard init (lora_B = 0) is a no-op; a non-zero lora_B must change the output.
        assert torch.equal(_forward(transformer, latents, text, timestep), out)
        with torch.no_grad():
            for name, module in transformer.named_modules():
                if name.endswith("lora_B.probe"):
                    module.weight.normal_(std=0.1, generator=gen)
        assert (_forward(transformer, latents, text, timestep) - out).abs().mean() > 1e-3
    finally:
        transformer.delete_adapters("probe")
    assert torch.equal(_forward(transformer, latents, text, timestep), out)


def test_tokenizer_pads_right_with_bos_and_round_trips(tiny_path, pipe):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_path, subfolder="tokenizer")
    fresh = build_tiny_tokenizer()
    tokenizer.padding_side = "right"  # what SanaPipeline sets before encoding
    enc = tokenizer(
        [SHAPES_VALIDATION_PROMPT, "a red circle"],
        padding="max_length",
        max_length=24,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    ids, mask = enc.input_ids, enc.attention_mask
    assert ids.shape == (2, 24)
    assert (ids[:, 0] == tokenizer.bos_token_id).all()
    n = int(mask[1].sum())
    assert mask[1, :n].all() and not mask[1, n:].any()  # right padding
    assert (ids[1, n:] == tokenizer.pad_token_id).all()
    assert tokenizer.decode(ids[0], skip_special_tokens=True) == SHAPES_VALIDATION_PROMPT
    # Demo words are whole tokens; unseen text still encodes without <unk> (byte fallback).
    assert len(tokenizer("a red circle", add_special_tokens=False).input_ids) == 3
    chi = "\n".join(inspect.signature(type(pipe).__call__).parameters["complex_human_instruction"].default)
    odd = chi + " Zebra-42 ünïcode ☃"
    chi_ids = tokenizer(odd).input_ids
    assert tokenizer.unk_token_id not in chi_ids
    assert tokenizer.decode(chi_ids, skip_special_tokens=True) == odd
    # The reloaded tokenizer is the one that was built (transformers 5 rebuilds it on load).
    assert chi_ids == fresh(odd).input_ids
    assert pipe.text_encoder.config.vocab_size >= len(tokenizer)


def test_pipeline_generates_64px_image(pipe):
    from PIL import Image

    # Defaults: complex_human_instruction on, resolution binning on (512 px bin, resized).
    image = pipe(
        "a red circle on a blue background",
        height=64,
        width=64,
        num_inference_steps=2,
        output_type="pil",
        generator=torch.Generator().manual_seed(0),
    ).images[0]
    assert isinstance(image, Image.Image) and image.size == (64, 64)
    lo, hi = zip(*image.getextrema())
    assert max(hi) - min(lo) > 10  # not a constant image
    fast = pipe("a red circle", height=64, width=64, num_inference_steps=2, use_resolution_binning=False)
    assert fast.images[0].size == (64, 64)


def test_build_is_idempotent_and_deterministic(tiny_path):
    files = sorted(p for p in tiny_path.rglob("*") if p.is_file())
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert build_tiny_sana_pipeline(tiny_path, size="tiny", seed=0) == tiny_path
    assert sorted(p for p in tiny_path.rglob("*") if p.is_file()) == files
    assert [p.stat().st_mtime_ns for p in files] == mtimes
    assert not list(tiny_path.parent.glob(".tiny-sana.tmp-*"))

    # Same seed -> same weights as on disk.
    from safetensors.torch import load_file

    fresh = build_tiny_sana_components("tiny", seed=0)["transformer"].state_dict()
    stored = load_file(tiny_path / "transformer/diffusion_pytorch_model.safetensors")
    assert stored.keys() == fresh.keys()
    assert all(torch.equal(stored[k], fresh[k]) for k in stored)


def test_small_config_is_constructible():
    # Built on the meta device: validates the configs without allocating or timing anything.
    from diffusers import AutoencoderDC, SanaTransformer2DModel
    from transformers import Gemma2Config, Gemma2Model

    for size in TINY_SANA_CONFIGS:
        cfg = get_tiny_sana_config(size)
        assert cfg["scheduler"]["shift"] == 3.0
        assert cfg["text_encoder"]["hidden_size"] == cfg["transformer"]["caption_channels"]
        with torch.device("meta"):
            SanaTransformer2DModel(**cfg["transformer"])
            AutoencoderDC(**cfg["vae"])
            Gemma2Model(Gemma2Config(vocab_size=1024, **cfg["text_encoder"]))
    with pytest.raises(ValueError):
        get_tiny_sana_config("huge")
