"""Krea 2's validation samples: the in-memory transformer's images (cached caption states and masks, the empty
negative's for real CFG, the VAE decoding in fp32) equal the stock Krea2Pipeline's for the same prompt."""

from __future__ import annotations

import torch


def _pixels(image) -> torch.Tensor:
    return torch.tensor(list(image.getdata()), dtype=torch.float32)


def test_in_memory_samples_are_the_pipelines(tiny_krea2):
    from diffusers import Krea2Pipeline

    from dit_lora.config import TrainConfig
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("krea2")
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="no",
                                 resolution=64, max_sequence_length=16, validation_inference_steps=2,
                                 num_validation_images=2, validation_guidance_scale=4.5)
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    cond = spec.encoders.encode_prompts(comps, ["a red circle"], with_negative=True)
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = Krea2Pipeline.from_pretrained(tiny_krea2, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2 and ours[0].size == (64, 64)
    for a, b in zip(ours, theirs):
        assert (_pixels(a) - _pixels(b)).abs().max() <= 2  # the same images up to the last bit of the uint8 rounding


def test_the_reloaded_pipeline_decodes_in_fp32_as_trained(tiny_krea2, tmp_path):
    """The run's reload (the kit's adapter) takes the Qwen-Image VAE in fp32 beside a bf16 transformer, as the
    in-memory samples decode; the card's snippet loads it so too."""
    from safetensors.torch import save_file

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    spec = get_spec("krea2")
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), mixed_precision="bf16")
    out = tmp_path / "out"
    out.mkdir()
    key = "transformer.transformer_blocks.0.attn.to_q"
    save_file({f"{key}.lora_A.weight": torch.zeros(4, 32), f"{key}.lora_B.weight": torch.zeros(32, 4)},
              str(out / "pytorch_lora_weights.safetensors"))
    pipe = spec.adapter.load_pipeline_with_adapter(cfg, out, torch.device("cpu"))
    assert pipe.vae.dtype == torch.float32 and pipe.transformer.dtype == torch.bfloat16
    assert 'vae = AutoencoderKLQwenImage.from_pretrained(base, subfolder="vae", torch_dtype=torch.float32)' in (
        spec.card.usage_snippet(cfg, "./out"))
