"""FLUX.1 from one file in Black Forest Labs' layout (``flux1-dev.safetensors``): diffusers' converter takes it back to
the folder's tensors. Its converter hard-codes FLUX.1's width (``inner_dim = 3072``), so only a real-width transformer
converts: one double and one single block of it, random bf16 tensors of the meta model's shapes. The run that trains
from such a file is tests/e2e/test_flux.py's real-layout test."""

from __future__ import annotations

import torch

from flux_single_file import bfl_state_dict


def test_the_bfl_layout_converts_back_to_the_folders_tensors():
    from diffusers import FluxTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

    from dit_lora.catalogue import by_hub_id

    config = {**by_hub_id("black-forest-labs/FLUX.1-dev").configs["transformer/config.json"], "num_layers": 1,
              "num_single_layers": 1}
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in FluxTransformer2DModel.from_config(config).state_dict().items()}
    g = torch.Generator().manual_seed(0)
    state = {k: torch.randn(shape, generator=g).to(torch.bfloat16) for k, shape in shapes.items()}
    back = convert_flux_transformer_checkpoint_to_diffusers(dict(bfl_state_dict(state)))
    assert back.keys() == state.keys()
    assert all(torch.equal(back[k], state[k]) for k in state)
