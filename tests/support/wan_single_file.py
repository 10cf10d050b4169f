"""A Wan transformer's diffusers state dict written back under the original Wan key names (``blocks.0.self_attn.q``),
the layout of the single files ComfyUI and musubi-tuner users hold, optionally behind ComfyUI's
``model.diffusion_model.`` prefix. diffusers ships only the forward direction (``convert_wan_transformer_to_diffusers``
in ``diffusers/loaders/single_file_utils.py``); this is its rename table read backwards, and the tests check that
diffusers' converter takes the result back to the same keys and tensors."""

from __future__ import annotations

from pathlib import Path

import torch

#: diffusers name part -> original Wan name part, applied in this order (the longer, more specific parts first;
#: the blocks' norm2/norm3 are swapped between the two layouts, so they go through a placeholder)
TO_ORIGINAL = (
    ("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
    ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
    ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
    ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
    ("condition_embedder.time_proj", "time_projection.1"),
    ("attn2", "cross_attn"),
    ("attn1", "self_attn"),
    (".to_out.0.", ".o."),
    (".to_q.", ".q."),
    (".to_k.", ".k."),
    (".to_v.", ".v."),
    ("ffn.net.0.proj", "ffn.0"),
    ("ffn.net.2", "ffn.2"),
    ("norm2", "norm__placeholder"),
    ("norm3", "norm2"),
    ("norm__placeholder", "norm3"),
)


def original_key(key: str) -> str:
    """The original Wan name of one diffusers ``WanTransformer3DModel`` (text-to-video) key."""
    if key == "scale_shift_table":
        return "head.modulation"
    if key.startswith("proj_out."):
        return "head.head." + key[len("proj_out."):]
    for old, new in TO_ORIGINAL:
        key = key.replace(old, new)
    return key.replace("scale_shift_table", "modulation")


def write_original_wan_file(transformer_folder: Path, out: Path, prefix: str = "") -> Path:
    """The transformer folder's weights as one safetensors file in the original layout (``prefix``:
    ``"model.diffusion_model."`` for ComfyUI's repackaged files); returns ``out``."""
    from safetensors.torch import load_file, save_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(Path(transformer_folder).glob("*.safetensors")):
        state.update(load_file(str(file)))
    save_file({prefix + original_key(k): v.contiguous() for k, v in state.items()}, str(out))
    return out
