"""Ideogram 4's validation samples: the in-memory transformer's images (the cached caption laid out as the
pipeline's ``encode_prompt`` lays it, the unconditional transformer loaded for them) equal the stock
Ideogram4Pipeline's for the same prompt; and the card's snippet is a call the pipeline accepts."""

from __future__ import annotations

import torch


def _pixels(image) -> torch.Tensor:
    return torch.tensor(list(image.getdata()), dtype=torch.float32)


def _cfg(tiny, **values):
    from dit_lora.config import TrainConfig

    return TrainConfig.for_family(
        "ideogram4", pretrained_model_name_or_path=str(tiny), mixed_precision="no", resolution=64,
        validation_inference_steps=3, num_validation_images=2, validation_guidance_scale=3.0, **values,
    )  # fmt: skip


def test_in_memory_samples_are_the_pipelines(tiny_ideogram4):
    from diffusers import Ideogram4Pipeline

    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("ideogram4")
    cfg = _cfg(tiny_ideogram4, validation_prompt="a red circle")
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    assert comps.state.unconditional is not None and not comps.state.unconditional.training
    configure(spec, comps, cfg)
    cond = spec.samples.validation_inputs(comps, cfg.validation)
    ours = spec.samples.generate(comps, comps.model, cond, cfg, seed=3)
    pipe = Ideogram4Pipeline.from_pretrained(tiny_ideogram4, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    theirs = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=3, num_images=2)
    assert len(ours) == len(theirs) == 2 and ours[0].size == (64, 64)
    for a, b in zip(ours, theirs):
        assert (_pixels(a) - _pixels(b)).abs().max() <= 2  # the same images up to the last bit of the uint8 rounding


def test_without_samples_the_unconditional_transformer_is_not_read(tiny_ideogram4):
    from dit_lora.registry import get_spec

    comps = get_spec("ideogram4").model.load_components(_cfg(tiny_ideogram4), torch.device("cpu"))
    assert comps.state.unconditional is None and "unconditional_transformer" not in comps.encoders


def test_the_cards_snippet_runs_on_the_reloaded_pipeline(tiny_ideogram4, tmp_path):
    """The run's reload takes FLUX.2's VAE in fp32 beside the transformers in the run's dtype, and the snippet's
    call (one guidance scale, no schedule) is one the pipeline takes."""
    from safetensors.torch import save_file

    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_spec

    spec = get_spec("ideogram4")
    cfg = TrainConfig.for_family("ideogram4", pretrained_model_name_or_path=str(tiny_ideogram4), mixed_precision="bf16",
                                 resolution=64, validation_inference_steps=2, validation_prompt="a red circle")  # fmt: skip
    out = tmp_path / "out"
    out.mkdir()
    key = "transformer.layers.0.attention.to_q"
    save_file({f"{key}.lora_A.weight": torch.zeros(4, 32), f"{key}.lora_B.weight": torch.zeros(32, 4)},
              str(out / "pytorch_lora_weights.safetensors"))  # fmt: skip
    pipe = spec.adapter.load_pipeline_with_adapter(cfg, out, torch.device("cpu"))
    assert pipe.vae.dtype == torch.float32 and pipe.transformer.dtype == torch.bfloat16
    code = spec.card.usage_snippet(cfg, str(out))
    assert "AutoencoderKLFlux2.from_pretrained(base" in code and "guidance_schedule=None" in code
    pipe.set_progress_bar_config(disable=True)
    images = spec.samples.generate_with_pipeline(pipe, "a red circle", cfg, seed=0, num_images=1)
    assert len(images) == 1 and images[0].size == (64, 64)


def test_no_room_for_the_unconditional_transformer_skips_the_samples_and_training_goes_on(tiny_ideogram4, capsys):
    """Its move to the device runs out of memory (simulated here): one paragraph, no images, the module left home."""
    from dit_lora.contract.spec import configure
    from dit_lora.registry import get_spec

    spec = get_spec("ideogram4")
    cfg = _cfg(tiny_ideogram4, validation_prompt="a red circle")
    comps = spec.model.load_components(cfg, torch.device("cpu"))
    configure(spec, comps, cfg)
    cond = spec.samples.validation_inputs(comps, cfg.validation)
    uncond = comps.state.unconditional

    moves = []

    def full(*args, **kwargs):
        moves.append(args)
        if len(moves) == 1:  # the move to the device; the move home after it succeeds
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 17.50 GiB")
        return uncond

    uncond.to = full
    assert spec.samples.generate(comps, comps.model, cond, cfg, seed=0) == []
    assert len(moves) == 2  # a move that ran out of memory half way is taken home too
    said = capsys.readouterr().out
    assert "validation samples skipped" in said and "Training goes on" in said and "17.50 GiB" in said
