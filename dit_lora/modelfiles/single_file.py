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
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError

#: the prefix ComfyUI's repackaged checkpoints put before every transformer key
COMFY_PREFIX = "model.diffusion_model."
#: how the diffusers folder a single file needs is written in the refusals below
FOLDER_HINT = (
    "the model's diffusers folder (with model_index.json; e.g. `hf download Wan-AI/Wan2.1-T2V-1.3B-Diffusers`"
    " for Wan 2.1 T2V 1.3B)"
)
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
        raise UserError(
            f"`{path}` is not a readable safetensors file ({type(err).__name__}: {err}). dit-lora reads "
            "weights from .safetensors files only; check the file (a download cut short is smaller "
            "than the size its page lists)."
        ) from None
    return [k for k in header if k != "__metadata__"]


def describe_keys(keys: list[str]) -> str:
    """What a safetensors file holds, judged by its key names: a LoRA, a full single-file checkpoint, a Wan
    transformer (original, ComfyUI or diffusers names), or a transformer in some other layout."""
    if any(_LORA.search(k) for k in keys):
        return "a LoRA adapter (ComfyUI/kohya `lora_unet_...` or PEFT `lora_A`/`lora_B` key names), not a base model"
    if any(
        k.startswith(("first_stage_model.", "vae.", "cond_stage_model.", "conditioner.", "text_encoders."))
        for k in keys
    ):
        return "a full single-file checkpoint (transformer plus VAE and/or text encoder weights in one file)"
    prefixed = bool(keys) and all(k.startswith(COMFY_PREFIX) for k in keys)
    bare = [k[len(COMFY_PREFIX) :] if prefixed else k for k in keys]
    layout = (
        "ComfyUI's layout (original Wan key names behind `model.diffusion_model.`)"
        if prefixed
        else "the original Wan layout (`blocks.0.self_attn.q.weight`)"
    )
    if any(_WAN_ORIGINAL.match(k) for k in bare):
        return f"a single-file Wan transformer in {layout}"
    if any(k.startswith("condition_embedder.") for k in bare) and any(".attn1.to_q." in k for k in bare):
        return "a Wan transformer's weights with diffusers key names (one file of a diffusers transformer/ folder)"
    return f"a single-file model ({len(keys)} tensors, e.g. `{bare[0] if bare else '-'}`)"


def check_model_path(model: ModelOptions) -> None:
    """Refuse a file given as --pretrained_model_name_or_path (``model``: the run's ``cfg.model``) in one paragraph:
    what the file is and what to pass."""
    path = model.pretrained_model_name_or_path
    if not path or not os.path.isfile(path):
        return
    what = (
        describe_keys(header_keys(path))
        if path.endswith(".safetensors")
        else "not a safetensors file (dit-lora reads weights from .safetensors files only)"
    )
    if what.startswith("a LoRA"):
        todo = (
            "A LoRA is applied on top of its base model: pass the base model's diffusers folder or Hub id as "
            "--pretrained_model_name_or_path (to continue training this LoRA, that is not supported yet)."
        )
    elif what.startswith("a full single-file"):
        todo = (
            f"dit-lora does not split an all-in-one checkpoint: pass {FOLDER_HINT} as --pretrained_model_name_or_"
            "path, and the transformer alone, if you have it as one file, as --transformer_file."
        )
    else:
        todo = (
            f"Pass {FOLDER_HINT} as --pretrained_model_name_or_path (it gives the VAE, text encoder, scheduler and "
            f"the transformer's config) and this file as --transformer_file {path}."
        )
    raise UserError(
        f"--pretrained_model_name_or_path `{path}` is a file, not a model folder or Hub id: it is {what}. {todo}"
    )


def check_transformer_file(model: ModelOptions, read: Callable[[str, str], dict | None]) -> None:
    """Every refusal of --transformer_file, before anything is built: a missing or non-safetensors file, a LoRA or
    all-in-one checkpoint, a model whose transformer class diffusers cannot load from one file, a two-expert model.

    ``model``: the run's ``cfg.model``; ``read``: the model's small-config reader
    (:func:`dit_lora.catalogue.defaults.config_reader`).
    """
    file = model.transformer_file
    if not file:
        return
    if not os.path.isfile(file):
        raise UserError(
            f"--transformer_file `{file}` does not exist or is not a file. Give the path of the "
            "transformer's .safetensors file."
        )
    if not file.endswith(".safetensors"):
        raise UserError(
            f"--transformer_file `{file}` is not a .safetensors file. dit-lora loads weights from "
            "safetensors only, because reading a pickle (.pt, .ckpt, .bin) can run code; use the "
            ".safetensors release of the file."
        )
    what = describe_keys(header_keys(file))
    if what.startswith(("a LoRA", "a full single-file")):
        raise UserError(
            f"--transformer_file `{file}` is {what}; it must hold the transformer alone. Use the "
            "transformer's own file (ComfyUI's `diffusion_models/` folder holds them)."
        )
    folder = model.pretrained_model_name_or_path
    config = read("transformer", "config.json")
    if config is None:
        raise UserError(
            f"--transformer_file needs the transformer's config from --pretrained_model_name_or_path, "
            f"but `{folder}` has no readable transformer/config.json. Pass {FOLDER_HINT}."
        )
    cls = config.get("_class_name", "?")
    loadable = single_file_classes()
    if cls not in loadable:
        raise UserError(
            f"--transformer_file: `{folder}`'s transformer is a {cls}, which diffusers cannot load from a single file "
            f"(its from_single_file covers {', '.join(sorted(c for c in loadable if 'Transformer' in c))}). Train "
            f"from the diffusers folder instead: pass it (or its Hub id, e.g. via `hf download <id>`) as "
            "--pretrained_model_name_or_path and drop --transformer_file."
        )
    if (read("", "model_index.json") or {}).get("transformer_2") not in (None, [None, None]):
        raise UserError(
            f"--transformer_file: `{folder}` has two transformers (transformer/ and transformer_2/, the "
            "Wan 2.2 A14B experts); replacing one from a single file is not supported yet. Train from "
            "the diffusers folder and drop --transformer_file."
        )


def single_file_classes() -> frozenset[str]:
    """The model classes diffusers' ``from_single_file`` loads (its ``SINGLE_FILE_LOADABLE_CLASSES``)."""
    from diffusers.loaders.single_file_model import SINGLE_FILE_LOADABLE_CLASSES

    return frozenset(SINGLE_FILE_LOADABLE_CLASSES)


def load_transformer(cls, model: ModelOptions, subfolder: str = "transformer", **kwargs: Any):
    """``cls`` from the pipeline folder's ``subfolder`` (``from_pretrained(path, subfolder=..., **kwargs)``), or,
    with --transformer_file, from that single file configured by the folder's ``subfolder/config.json``
    (``model``: the run's ``cfg.model``).

    The single file's parameters get the dtypes ``from_pretrained`` gives them: ``torch_dtype``, except the
    class's ``_keep_in_fp32_modules`` in fp32 (diffusers' ``from_single_file`` keeps those only for fp16).
    """
    path = model.pretrained_model_name_or_path
    if not model.transformer_file or subfolder != "transformer":
        return cls.from_pretrained(path, subfolder=subfolder, **kwargs)
    dtype = kwargs.get("torch_dtype", kwargs.get("dtype"))  # whichever keyword quiet.dtype_kwarg chose
    quantized = kwargs.get("quantization_config") is not None
    passed = (
        ("quantization_config", "torch_dtype", "dtype") if quantized else ()
    )  # unquantized: stored dtype, cast below
    try:
        loaded = cls.from_single_file(
            without_comfyui_prefix(model.transformer_file),
            config=path,
            subfolder=subfolder,
            revision=model.revision,
            **{k: v for k, v in kwargs.items() if k in passed},
        )
    except Exception as err:
        message = file_load_message(cls, model, subfolder, err)
        if message is None:
            raise
        raise UserError(message) from None
    if dtype is not None and not quantized:
        _cast_like_from_pretrained(loaded, dtype)
    return loaded


def without_comfyui_prefix(path: str | os.PathLike) -> str | dict:
    """What ``from_single_file`` is given for the file at ``path``: the path, or, when every key has ComfyUI's prefix
    (its repackaged checkpoints), the tensors without it. diffusers' converters strip that prefix themselves, but
    0.42.1's Lumina 2 converter (``convert_lumina2_to_diffusers``) re-keys the checkpoint and then looks the old keys
    up, so a prefixed Lumina 2 file fails with a KeyError there."""
    keys = header_keys(path)
    if not keys or not all(k.startswith(COMFY_PREFIX) for k in keys):
        return str(path)
    from safetensors.torch import load_file

    return {k[len(COMFY_PREFIX) :]: v for k, v in load_file(str(path)).items()}


_SHAPE = re.compile(r"(\S+) expected shape (torch\.Size\(\[[^\]]*\]\)), but got (torch\.Size\(\[[^\]]*\]\))")


def file_load_message(cls, model: ModelOptions, subfolder: str, err: BaseException) -> str | None:
    """The paragraph for ``from_single_file`` failing on --transformer_file (``err``): tensors of other shapes
    (another model or size), a truncated or unreadable file, missing tensors (a few named); None when the failure is
    not the file's (out of memory, a bug), which then raises as it is."""
    import torch

    if (
        isinstance(err, torch.OutOfMemoryError)
        or not isinstance(err, (OSError, ValueError, RuntimeError, KeyError))
        and type(err).__name__ != "SingleFileComponentError"
    ):
        return None
    file, folder = model.transformer_file, model.pretrained_model_name_or_path
    assert file is not None  # called only when a --transformer_file load failed
    head = (
        f"--transformer_file `{file}` does not load as the {cls.__name__} of `{folder}` (its {subfolder}/config.json)"
    )
    fix = (
        f"Pass the transformer file of the model and size `{folder}` is, or, to train the file's model, its own "
        "diffusers folder as --pretrained_model_name_or_path."
    )
    shape = _SHAPE.search(str(err))
    if shape:
        name, expected, got = shape.groups()
        return (
            f"{head}: its tensor for `{name}` is {_size(got)} where the model has {_size(expected)}, so the "
            f"file is another model or another size of it (e.g. 14B weights with a 1.3B folder). {fix}"
        )
    cut = _truncated(file)
    if cut is not None or isinstance(err, OSError):
        what = (
            f"it is {cut[0]} bytes, its header describes {cut[1]}: the file is truncated (a download cut short)"
            if cut
            else f"it could not be read ({type(err).__name__}: {err}): the file is damaged or truncated"
        )
        return f"{head}: {what}. Download it again and compare its size with the one its page lists."
    missing, total = _missing_tensors(cls, model, subfolder)
    if missing and len(missing) == total:
        return (
            f"{head}: it holds none of the model's {total} tensors (its own are named like "
            f"`{next(iter(header_keys(file)), '-')}`), so it is another model's transformer. {fix}"
        )
    if missing:
        shown = ", ".join(f"`{k}`" for k in missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        return (
            f"{head}: it lacks {len(missing)} of the model's tensors ({shown}), so it is a partial file or "
            f"another model's. {fix}"
        )
    return f"{head} ({type(err).__name__}: {str(err).strip()[:300]}). {fix}"


def _size(text: str) -> str:
    """``torch.Size([32, 32])`` as ``32x32``."""
    return "x".join(re.findall(r"\d+", text)) or text


def _truncated(file: str) -> tuple[int, int] | None:
    """(bytes on disk, bytes the safetensors header describes) when the file is shorter than its header says."""
    with open(file, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    expected, actual = 8 + size + end, os.path.getsize(file)
    return (actual, expected) if actual < expected else None


def _missing_tensors(cls, model: ModelOptions, subfolder: str) -> tuple[list[str], int]:
    """The model's parameter names the file lacks once diffusers renamed its keys (read from the header: meta
    tensors of the listed shapes through the class's own key converter; nothing is loaded), sorted; and how many
    tensors the model has."""
    import torch
    from accelerate import init_empty_weights
    from diffusers.loaders.single_file_model import SINGLE_FILE_LOADABLE_CLASSES

    file = model.transformer_file
    assert file is not None  # called only when a --transformer_file load failed
    with open(file, "rb") as fh:
        header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    checkpoint = {k: torch.empty(v["shape"], device="meta") for k, v in header.items() if k != "__metadata__"}
    config = cls.load_config(model.pretrained_model_name_or_path, subfolder=subfolder, revision=model.revision)
    with init_empty_weights():
        expected = set(cls.from_config(config).state_dict())
    if expected != set(checkpoint):  # diffusers' rule (_should_convert_state_dict_to_diffusers): its converter
        # renames the file's keys as the load did
        # diffusers annotates the table's entries as object; each is a dict of loader functions
        convert = cast(dict[str, Any], SINGLE_FILE_LOADABLE_CLASSES[cls.__name__])["checkpoint_mapping_fn"]
        try:
            checkpoint = convert(config=config, checkpoint=checkpoint)
        except (KeyError, ValueError, RuntimeError):
            return [], len(expected)  # keys the converter cannot read: the caller gives the load's own error
    return sorted(expected - set(checkpoint)), len(expected)


def _cast_like_from_pretrained(model, dtype) -> None:
    """Each floating parameter and buffer of ``model`` in ``dtype``, or fp32 inside ``_keep_in_fp32_modules``."""
    import torch

    keep = tuple(model._keep_in_fp32_modules or ())
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point():
            target = torch.float32 if any(m in name for m in keep) else dtype
            if tensor.dtype != target:
                tensor.data = tensor.data.to(target)


def transformer_file_record(model: ModelOptions) -> dict[str, Any] | None:
    """What the model card and summary record of --transformer_file (``model``: the run's ``cfg.model``): its base
    name and size in bytes (never the path: it may name the user's folders; no hash: reading a 28 GB file again
    costs minutes); None without one."""
    file = model.transformer_file
    if not file:
        return None
    return {"name": Path(file).name, "bytes": os.path.getsize(file)}
