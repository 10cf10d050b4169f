"""Chroma from one file in lodestones' layout (``Chroma1-HD.safetensors``: BFL's block names, no per-block modulation,
``distilled_guidance_layer.layers.N.in_layer``): diffusers' converter takes it back to the folder's tensors. One double
and one single block at the real width (its converter, like FLUX.1's, assumes 3072), random bf16 tensors of the meta
model's shapes. The run that trains from such a file is tests/e2e/test_chroma.py's real-layout test."""

from __future__ import annotations

import torch

from flux_single_file import original_state_dict


def test_the_original_layout_converts_back_to_the_folders_tensors():
    from diffusers import ChromaTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_chroma_transformer_checkpoint_to_diffusers

    from dit_lora.catalogue import by_hub_id

    config = {**by_hub_id("lodestones/Chroma1-HD").configs["transformer/config.json"], "num_layers": 1,
              "num_single_layers": 1}
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in ChromaTransformer2DModel.from_config(config).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(shape, generator=g).to(torch.bfloat16) for k, shape in shapes.items()}
    back = convert_chroma_transformer_checkpoint_to_diffusers(dict(original_state_dict(state)))
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)
