"""What the model card says of the adapter type (``--lora_type``): the settings row, which consumers load the file,
and a usage snippet that loads it the way those consumers do (PEFT's own code for LoKr/LoHa, which diffusers'
``load_lora_weights`` does not read)."""

from __future__ import annotations

import json
import re

from dit_lora.config.adapter_types import TYPES

#: the factor of each type's update that carries the folded scale (output/adapter.py fold_lora_scale)
SCALED_FACTOR = {"lora": "lora_B", "dora": "lora_B", "lokr": "lokr_w1 (lokr_w1_a when decomposed)", "loha": "hada_w1_a"}
_PEFT_CLASS = {"lokr": "LoKrConfig", "loha": "LoHaConfig"}
#: a family snippet's one-line diffusers load of the adapter
_DIFFUSERS_LOAD = re.compile(r"^pipe\.load_lora_weights\((?P<where>[^,\n]+)\)\n", re.MULTILINE)


def type_row(lora) -> str:
    """The card's "adapter type" row (``lora``: the run's ``cfg.lora``): the type and its own settings."""
    kind = lora.lora_type
    parts = [f"{TYPES[kind].title} (`--lora_type {kind}`)"]
    if kind == "lokr":
        parts.append(f"factor {'auto (near the square root)' if lora.lokr_factor is None else lora.lokr_factor}")
        parts.append(f"decompose_both {'on' if lora.lokr_decompose_both else 'off'}")
    if kind in ("lokr", "loha"):
        parts += [f"{n} {getattr(lora, n):g}" for n in ("rank_dropout", "module_dropout") if getattr(lora, n)]
        if lora.use_effective_conv2d:
            parts.append("use_effective_conv2d")
    return parts[0] + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def comfyui_clause(exports, kind: str) -> str:
    """What ComfyUI loads of a ``kind`` run of a family whose ``spec.exports`` is ``exports``: the ComfyUI file
    (written by the run, or by ``dit-lora export --format comfyui``) when its converter takes the type, else why not."""
    formats = exports.export_formats() if exports is not None else {}
    if "comfyui" not in formats:
        return "this family has no ComfyUI export"
    declared = getattr(exports, "export_types", None)
    if kind in (tuple(declared("comfyui")) if callable(declared) else ("lora",)):
        return "ComfyUI loads its ComfyUI-named file (`dit-lora export --format comfyui` writes it)"
    if kind == "dora":
        return (
            "not ComfyUI, whose `dora_scale` divides by the base weight's norms where DoRA divides by the adapted "
            "weight's (`dit-lora export --format comfyui` refuses it)"
        )
    return f"ComfyUI's export of this family does not take {TYPES[kind].title}"


def type_note(lora, exports=None) -> str:
    """The card's sentence on who loads the file of this type and what ComfyUI loads of it (``exports``: the family's
    ``spec.exports``); an empty string for plain LoRA: the strength note already names its loaders."""
    kind = lora.lora_type
    if kind == "lora":
        return ""
    return f"\n\n{TYPES[kind].title} adapter: loaded by {TYPES[kind].consumers}; {comfyui_clause(exports, kind)}."


def type_snippet(snippet: str, lora, repo_or_dir: str) -> str:
    """The family's usage snippet made right for the type: for LoKr/LoHa its ``pipe.load_lora_weights(...)`` line
    becomes PEFT's loading (the config class, ``add_adapter``, ``set_peft_model_state_dict``); other types and
    snippets without that line (DiT and the video LLMs already load PEFT's format) unchanged."""
    kind = lora.lora_type
    if TYPES[kind].diffusers_loads:
        return snippet
    where = json.dumps(repo_or_dir)
    local = repo_or_dir.startswith((".", "/")) or repo_or_dir.count("/") != 1
    folder = f"folder = {where}\n" if local else f"folder = snapshot_download({where})\n"
    block = (
        f"# {TYPES[kind].title}: loaded with PEFT (diffusers' load_lora_weights reads LoRA files only)\n"
        + ("" if local else "from huggingface_hub import snapshot_download\n")
        + f"from peft import {_PEFT_CLASS[kind]}\n"
        "from peft.utils import set_peft_model_state_dict\n"
        "from safetensors.torch import load_file\n"
        + folder
        + f"pipe.transformer.add_adapter({_PEFT_CLASS[kind]}.from_pretrained(folder))\n"
        'state = load_file(f"{folder}/adapter_model.safetensors")\n'
        'state = {k.removeprefix("base_model.model."): v for k, v in state.items()}\n'
        "set_peft_model_state_dict(pipe.transformer, state)\n"
    )
    return _DIFFUSERS_LOAD.sub(lambda _: block, snippet, count=1)
