"""What a family exporting ``comfyui`` states for the shared ComfyUI tests (its ``comfyui_export()`` and
``comfyui_loader()`` in ``tests/families/<package>/cases.py``; tests/support/family_cases.py).

:class:`ComfyUIExport` is read by tests/output/test_comfyui_types.py (without ComfyUI: every key written is one
ComfyUI's key map has, each exported module carries PEFT's update); :class:`ComfyUILoad` by
tests/output/test_comfyui_types_loader.py (ComfyUI's own loader, where ``DIT_LORA_COMFYUI`` names a checkout).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def diffusers_name(module: str) -> str:
    """A module exported under its diffusers name (``transformer.<module>``)."""
    return f"transformer.{module}"


def no_fused(kind: str) -> int:
    """No Linear layer is read fused into another's module."""
    return 0


@dataclass(frozen=True)
class ComfyUIExport:
    """A family's ComfyUI export, as ComfyUI's source reads it."""

    #: the module names ComfyUI's key map (comfy/lora.py ``model_lora_keys_unet``) has for this model; where in
    #: ComfyUI's source it was read belongs in a comment beside it
    keys: re.Pattern
    #: the family's converter: a saved adapter's state dict -> the ComfyUI file's
    convert: Callable[[dict], dict]
    #: the tiny diffusers transformer whose Linear layers the tests adapt: its class name and config
    transformer: tuple[str, dict[str, Any]]
    #: a diffusers module name -> the module key the export writes its LoKr/LoHa under
    exported_at: Callable[[str], str] = diffusers_name
    #: adapter type -> how many of the transformer's Linear layers ComfyUI reads fused into another's module (so
    #: the export writes that many fewer modules)
    fused: Callable[[str], int] = no_fused
    #: an export whose ``layout.fused(name)`` gives the fused module, position and size of a q/k/v that LoKr/LoHa
    #: export as rows of one ``.diff`` (Lumina 2, HunyuanVideo 1.5); None: every module on its own
    typed_fused: Any = None
    #: True where the run's LoRA file itself loads in ComfyUI (diffusers' names), so a LoRA run writes no ComfyUI file
    lora_file_loads_as_is: bool = False
    #: further checks of the exported module names of one adapter type, ``(kind, modules) -> None``
    check_modules: Callable[[str, set[str]], None] | None = None


@dataclass(frozen=True)
class ComfyUILoad:
    """A family's tiny transformer and ComfyUI's model of the same widths, for ComfyUI's own loader."""

    #: the diffusers class name and its tiny config
    transformer: tuple[str, dict[str, Any]]
    #: ComfyUI's ``supported_models`` class and its ``unet_config`` of the same widths
    model_class: str
    unet_config: dict[str, Any]
    #: the Linear layers adapted (a regular expression over module names); None: every Linear
    targets: str | None = None
    #: diffusers module name -> the ComfyUI module the export names it (None: ``transformer.<name>``)
    comfy_name: Callable[[str], str] | None = None
