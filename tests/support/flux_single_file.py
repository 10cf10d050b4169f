"""A FLUX.1 (or Chroma) transformer's diffusers state dict written back in Black Forest Labs' layout (``flux1-dev.safetensors``:
``double_blocks.0.img_attn.qkv``, ``single_blocks.0.linear1``...), the single files ComfyUI, sd-scripts and
musubi-tuner users hold, optionally behind ComfyUI's ``model.diffusion_model.`` prefix. diffusers ships only the
forward direction (``convert_flux_transformer_checkpoint_to_diffusers``); this is it read backwards: q/k/v (and the
single blocks' ``proj_mlp``) fused by concatenation, ``norm_out.linear``'s halves swapped back. The tests check that
diffusers' converter takes the result back to the same tensors."""

from __future__ import annotations

from pathlib import Path

import torch

#: diffusers name -> BFL name of the unfused tensors outside the blocks
TOP = {
    "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
    "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
    "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "context_embedder": "txt_in",
    "x_embedder": "img_in",
    "proj_out": "final_layer.linear",
}
#: per double block: diffusers name -> BFL name (unfused)
DOUBLE = {
    "norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin", "attn.to_out.0": "img_attn.proj",
    "attn.to_add_out": "txt_attn.proj", "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2",
}
NORMS = {"attn.norm_q": "img_attn.norm.query_norm", "attn.norm_k": "img_attn.norm.key_norm",
         "attn.norm_added_q": "txt_attn.norm.query_norm", "attn.norm_added_k": "txt_attn.norm.key_norm"}


def bfl_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` (a ``FluxTransformer2DModel``'s, or a ``ChromaTransformer2DModel``'s, whose blocks have no
    modulation Linear: those names are then absent on both sides) under BFL's names, q/k/v fused."""
    out: dict[str, torch.Tensor] = {}
    for ours, theirs in TOP.items():
        for kind in ("weight", "bias"):
            if f"{ours}.{kind}" in state:
                out[f"{theirs}.{kind}"] = state[f"{ours}.{kind}"]
    if "norm_out.linear.weight" in state:
        scale, shift = state["norm_out.linear.weight"].chunk(2), state["norm_out.linear.bias"].chunk(2)
        out["final_layer.adaLN_modulation.1.weight"] = torch.cat([scale[1], scale[0]])
        out["final_layer.adaLN_modulation.1.bias"] = torch.cat([shift[1], shift[0]])
    doubles = {int(k.split(".")[1]) for k in state if k.startswith("transformer_blocks.")}
    singles = {int(k.split(".")[1]) for k in state if k.startswith("single_transformer_blocks.")}
    for i in sorted(doubles):
        ours, theirs = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        for a, b in DOUBLE.items():
            for kind in ("weight", "bias"):
                if f"{ours}{a}.{kind}" in state:
                    out[f"{theirs}{b}.{kind}"] = state[f"{ours}{a}.{kind}"]
        for a, b in NORMS.items():
            out[f"{theirs}{b}.scale"] = state[f"{ours}{a}.weight"]
        for stream, names in (("img", ("to_q", "to_k", "to_v")), ("txt", ("add_q_proj", "add_k_proj", "add_v_proj"))):
            for kind in ("weight", "bias"):
                out[f"{theirs}{stream}_attn.qkv.{kind}"] = torch.cat([state[f"{ours}attn.{n}.{kind}"] for n in names])
    for i in sorted(singles):
        ours, theirs = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        for kind in ("weight", "bias"):
            parts = [state[f"{ours}attn.{n}.{kind}"] for n in ("to_q", "to_k", "to_v")] + [state[f"{ours}proj_mlp.{kind}"]]
            out[f"{theirs}linear1.{kind}"] = torch.cat(parts)
            out[f"{theirs}linear2.{kind}"] = state[f"{ours}proj_out.{kind}"]
            if f"{ours}norm.linear.{kind}" in state:
                out[f"{theirs}modulation.lin.{kind}"] = state[f"{ours}norm.linear.{kind}"]
        out[f"{theirs}norm.query_norm.scale"] = state[f"{ours}attn.norm_q.weight"]
        out[f"{theirs}norm.key_norm.scale"] = state[f"{ours}attn.norm_k.weight"]
    return out


def write_bfl_flux_file(transformer_folder: Path, out: Path, prefix: str = "") -> Path:
    """The transformer folder's weights as one safetensors file in BFL's layout (``prefix``:
    ``"model.diffusion_model."`` for ComfyUI's checkpoints); returns ``out``."""
    from safetensors.torch import load_file, save_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(Path(transformer_folder).glob("*.safetensors")):
        state.update(load_file(str(file)))
    save_file({prefix + k: v.contiguous() for k, v in original_state_dict(state).items()}, str(out))
    return out


def original_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """:func:`bfl_state_dict`, and a Chroma transformer's modulation network under lodestones' names
    (``distilled_guidance_layer.layers.N.in_layer``, ``norms.N.scale``; diffusers'
    ``convert_chroma_transformer_checkpoint_to_diffusers`` read backwards)."""
    out = bfl_state_dict(state)
    for key, value in state.items():
        if key.startswith("distilled_guidance_layer."):
            renamed = key.replace(".linear_1.", ".in_layer.").replace(".linear_2.", ".out_layer.")
            out[renamed[: -len(".weight")] + ".scale" if ".norms." in key else renamed] = value
    return out
