"""Single-file transformers (``--transformer_file``) and a file given where a model folder is expected.

ComfyUI and musubi-tuner users hold a model as one ``.safetensors`` file per component (``wan2.1_t2v_1.3B_bf16
.safetensors``: the original Wan key names, sometimes behind ComfyUI's ``model.diffusion_model.`` prefix). dit-lora
trains from a diffusers folder; ``--transformer_file`` takes the transformer from such a file instead (diffusers'
``from_single_file``, configured by the folder's ``transformer/config.json``), everything else from the folder.
What a file is, is read from its safetensors header alone (key names; never a tensor).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from .errors import UserError

#: the prefix ComfyUI's repackaged checkpoints put before every transformer key
COMFY_PREFIX = "model.diffusion_model."
#: how the diffusers folder a single file needs is written in the refusals below
FOLDER_HINT = ("the model's diffusers folder (with model_index.json; e.g. `hf download Wan-AI/Wan2.1-T2V-1.3B-Diffusers`"
               " for Wan 2.1 T2V 1.3B)")
_WAN_ORIGINAL = re.compile(r"^blocks\.\d+\.(self_attn|cross_attn)\.[qkvo]\.")
_LORA = re.compile(r"(^lora_(unet|te\d?|transformer)_|\.lora_(A|B|down|up)\.|\.alpha$|^diffusion_model\..*lora)")


def header_keys(path: str | os.PathLike) -> list[str]:
    """The tensor names in a safetensors file's header (never a tensor); a file that is not one is refused."""
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            if not 0 < size < 256 * 2**20:
                raise ValueError(f"header length {size}")
            header = json.loads(fh.read(size))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise UserError(f"`{path}` is not a readable safetensors file ({type(err).__name__}: {err}). dit-lora reads "
                        "weights from .safetensors files only; check the file (a download cut short is smaller "
                        "than the size its page lists).") from None
    return [k for k in header if k != "__metadata__"]


def describe_keys(keys: list[str]) -> str:
    """What a safetensors file holds, judged by its key names: a LoRA, a full single-file checkpoint, a Wan
    transformer (original, ComfyUI or diffusers names), or a transformer in some other layout."""
    if any(_LORA.search(k) for k in keys):
        return "a LoRA adapter (ComfyUI/kohya `lora_unet_...` or PEFT `lora_A`/`lora_B` key names), not a base model"
    if any(k.startswith(("first_stage_model.", "vae.", "cond_stage_model.", "conditioner.", "text_encoders."))
           for k in keys):
        return "a full single-file checkpoint (transformer plus VAE and/or text encoder weights in one file)"
    prefixed = bool(keys) and all(k.startswith(COMFY_PREFIX) for k in keys)
    bare = [k[len(COMFY_PREFIX):] if prefixed else k for k in keys]
    layout = "ComfyUI's layout (original Wan key names behind `model.diffusion_model.`)" if prefixed else \
        "the original Wan layout (`blocks.0.self_attn.q.weight`)"
    if any(_WAN_ORIGINAL.match(k) for k in bare):
        return f"a single-file Wan transformer in {layout}"
    if any(k.startswith("condition_embedder.") for k in bare) and any(".attn1.to_q." in k for k in bare):
        return "a Wan transformer's weights with diffusers key names (one file of a diffusers transformer/ folder)"
    return f"a single-file model ({len(keys)} tensors, e.g. `{bare[0] if bare else '-'}`)"


def check_model_path(cfg) -> None:
    """Refuse a file given as --pretrained_model_name_or_path in one paragraph: what the file is and what to pass."""
    path = cfg.pretrained_model_name_or_path
    if not path or not os.path.isfile(path):
        return
    what = describe_keys(header_keys(path)) if path.endswith(".safetensors") else \
        "not a safetensors file (dit-lora reads weights from .safetensors files only)"
    if what.startswith("a LoRA"):
        todo = ("A LoRA is applied on top of its base model: pass the base model's diffusers folder or Hub id as "
                "--pretrained_model_name_or_path (to continue training this LoRA, that is not supported yet).")
    elif what.startswith("a full single-file"):
        todo = (f"dit-lora does not split an all-in-one checkpoint: pass {FOLDER_HINT} as --pretrained_model_name_or_"
                "path, and the transformer alone, if you have it as one file, as --transformer_file.")
    else:
        todo = (f"Pass {FOLDER_HINT} as --pretrained_model_name_or_path (it gives the VAE, text encoder, scheduler and "
                f"the transformer's config) and this file as --transformer_file {path}.")
    raise UserError(f"--pretrained_model_name_or_path `{path}` is a file, not a model folder or Hub id: it is {what}. "
                    f"{todo}")


def check_transformer_file(cfg, read: Callable[[str, str], dict | None]) -> None:
    """Every refusal of --transformer_file, before anything is built: a missing or non-safetensors file, a LoRA or
    all-in-one checkpoint, a model whose transformer class diffusers cannot load from one file, a two-expert model.

    ``read``: the model's small-config reader (:func:`dit_lora.catalogue.defaults.config_reader`).
    """
    file = cfg.transformer_file
    if not file:
        return
    if not os.path.isfile(file):
        raise UserError(f"--transformer_file `{file}` does not exist or is not a file. Give the path of the "
                        "transformer's .safetensors file.")
    if not file.endswith(".safetensors"):
        raise UserError(f"--transformer_file `{file}` is not a .safetensors file. dit-lora loads weights from "
                        "safetensors only, because reading a pickle (.pt, .ckpt, .bin) can run code; use the "
                        ".safetensors release of the file.")
    what = describe_keys(header_keys(file))
    if what.startswith(("a LoRA", "a full single-file")):
        raise UserError(f"--transformer_file `{file}` is {what}; it must hold the transformer alone. Use the "
                        "transformer's own file (ComfyUI's `diffusion_models/` folder holds them).")
    model = cfg.pretrained_model_name_or_path
    config = read("transformer", "config.json")
    if config is None:
        raise UserError(f"--transformer_file needs the transformer's config from --pretrained_model_name_or_path, "
                        f"but `{model}` has no readable transformer/config.json. Pass {FOLDER_HINT}.")
    cls = config.get("_class_name", "?")
    loadable = single_file_classes()
    if cls not in loadable:
        raise UserError(
            f"--transformer_file: `{model}`'s transformer is a {cls}, which diffusers cannot load from a single file "
            f"(its from_single_file covers {', '.join(sorted(c for c in loadable if 'Transformer' in c))}). Train "
            f"from the diffusers folder instead: pass it (or its Hub id, e.g. via `hf download <id>`) as "
            "--pretrained_model_name_or_path and drop --transformer_file.")
    if (read("", "model_index.json") or {}).get("transformer_2") not in (None, [None, None]):
        raise UserError(f"--transformer_file: `{model}` has two transformers (transformer/ and transformer_2/, the "
                        "Wan 2.2 A14B experts); replacing one from a single file is not supported yet. Train from "
                        "the diffusers folder and drop --transformer_file.")


def single_file_classes() -> frozenset[str]:
    """The model classes diffusers' ``from_single_file`` loads (its ``SINGLE_FILE_LOADABLE_CLASSES``)."""
    from diffusers.loaders.single_file_model import SINGLE_FILE_LOADABLE_CLASSES

    return frozenset(SINGLE_FILE_LOADABLE_CLASSES)


def load_transformer(cls, cfg, subfolder: str = "transformer", **kwargs: Any):
    """``cls`` from the pipeline folder's ``subfolder`` (``from_pretrained(path, subfolder=..., **kwargs)``), or,
    with --transformer_file, from that single file configured by the folder's ``subfolder/config.json``.

    The single file's parameters get the dtypes ``from_pretrained`` gives them: ``torch_dtype``, except the
    class's ``_keep_in_fp32_modules`` in fp32 (diffusers' ``from_single_file`` keeps those only for fp16).
    """
    path = cfg.pretrained_model_name_or_path
    if not cfg.transformer_file or subfolder != "transformer":
        return cls.from_pretrained(path, subfolder=subfolder, **kwargs)
    dtype = kwargs.get("torch_dtype", kwargs.get("dtype"))  # whichever keyword quiet.dtype_kwarg chose
    quantized = kwargs.get("quantization_config") is not None
    passed = ("quantization_config", "torch_dtype", "dtype") if quantized else ()  # unquantized: stored dtype, cast below
    model = cls.from_single_file(cfg.transformer_file, config=path, subfolder=subfolder, revision=cfg.revision,
                                 **{k: v for k, v in kwargs.items() if k in passed})
    if dtype is not None and not quantized:
        _cast_like_from_pretrained(model, dtype)
    return model


def _cast_like_from_pretrained(model, dtype) -> None:
    """Each floating parameter and buffer of ``model`` in ``dtype``, or fp32 inside ``_keep_in_fp32_modules``."""
    import torch

    keep = tuple(model._keep_in_fp32_modules or ())
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point():
            target = torch.float32 if any(m in name for m in keep) else dtype
            if tensor.dtype != target:
                tensor.data = tensor.data.to(target)


def transformer_file_record(cfg) -> dict[str, Any] | None:
    """What the model card and summary record of --transformer_file: its base name and size in bytes (never the
    path: it may name the user's folders; no hash: reading a 28 GB file again costs minutes); None without one."""
    file = cfg.transformer_file
    if not file:
        return None
    return {"name": Path(file).name, "bytes": os.path.getsize(file)}
