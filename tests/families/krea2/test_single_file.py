"""Krea 2 from one file in Krea's original layout (``blocks.N.attn.wq``, ``txtfusion.``, ``first``, ``last``, each
block's modulation flattened): diffusers' converter takes it back to the folder's tensors, and a run's
``--transformer_file`` (the kit's ``load_transformer``, behind ComfyUI's prefix too) loads the same transformer as
the folder. Written here by inverting diffusers' rename table on the tiny model's tensors."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

#: diffusers' ``convert_krea2_transformer_checkpoint_to_diffusers`` tables, inverted: diffusers name -> original
PREFIXES = {"img_in.": "first.", "time_embed.linear_1.": "tmlp.0.", "time_embed.linear_2.": "tmlp.2.",
            "time_mod_proj.": "tproj.1.", "txt_in.norm.weight": "txtmlp.0.scale", "txt_in.linear_1.": "txtmlp.1.",
            "txt_in.linear_2.": "txtmlp.3.", "text_fusion.": "txtfusion.", "transformer_blocks.": "blocks.",
            "final_layer.linear.": "last.linear.", "final_layer.norm.weight": "last.norm.scale",
            "final_layer.scale_shift_table": "last.modulation.lin"}
INSIDE = {".attn.to_q.": ".attn.wq.", ".attn.to_k.": ".attn.wk.", ".attn.to_v.": ".attn.wv.",
          ".attn.to_out.0.": ".attn.wo.", ".attn.to_gate.": ".attn.gate.", ".attn.norm_q.weight": ".attn.qknorm.qnorm.scale",
          ".attn.norm_k.weight": ".attn.qknorm.knorm.scale", ".ff.": ".mlp.", ".norm1.weight": ".prenorm.scale",
          ".norm2.weight": ".postnorm.scale", ".scale_shift_table": ".mod.lin"}


def original_layout(state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """The tensors of a Krea2Transformer2DModel under Krea's original names (each block's six modulation vectors
    flattened into one, as the original checkpoint stores them)."""
    out = {}
    for key, value in state.items():
        name = key
        for new, old in PREFIXES.items():
            if name.startswith(new):
                name = old + name[len(new):]
                break
        for new, old in INSIDE.items():
            name = name.replace(new, old)
        if name.startswith("blocks.") and name.endswith(".mod.lin"):
            value = value.reshape(-1)
        out[prefix + name] = value.contiguous()
    return out


@pytest.mark.parametrize("prefix", ["", "model.diffusion_model."])
def test_the_original_layout_loads_as_the_folders_transformer(tiny_krea2, tmp_path, prefix):
    from diffusers import Krea2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    from dit_lora.config import TrainConfig
    from dit_lora.modelfiles.single_file import load_transformer

    folder = Krea2Transformer2DModel.from_pretrained(tiny_krea2, subfolder="transformer")
    state = folder.state_dict()
    original = original_layout(state, prefix)
    assert "txtfusion.projector.weight" in {k[len(prefix):] for k in original}  # diffusers' detection key
    back = convert_krea2_transformer_checkpoint_to_diffusers(dict(original))
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
    file = tmp_path / "krea2.safetensors"
    save_file(original, str(file))
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path=str(tiny_krea2), transformer_file=str(file))
    loaded = load_transformer(Krea2Transformer2DModel, cfg.model, torch_dtype=torch.float32)
    assert all(torch.equal(loaded.state_dict()[k], state[k]) for k in state)
