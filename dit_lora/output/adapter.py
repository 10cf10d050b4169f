"""Writing the trained adapter (finite-checked, atomic) and loading it back into a pipeline."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..errors import UserError

from .names import ADAPTER_FILE, BACKBONE_FILE


class NonFiniteWeightsError(RuntimeError):
    """Raised instead of writing a file that would contain NaN or Inf."""


def assert_finite(tensors: dict[str, torch.Tensor], what: str) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the first non-finite tensors."""
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise NonFiniteWeightsError(
            f"{what}: {len(bad)} tensor(s) contain NaN/Inf (e.g. {', '.join(bad[:3])}); nothing was written."
        )


def _plain_name(name: str) -> str:
    # PEFT moves a targeted layer's own weights under `.base_layer`; store the name the plain model uses.
    return name.replace(".base_layer.", ".")


def write_adapter(family, output_dir: Path, lora_state: dict, lora_config: dict, backbone: dict,
                  backbone_patterns: list[str]) -> list[Path]:
    """Save adapter (and backbone) into ``output_dir`` atomically; every tensor is checked finite first."""
    assert_finite(lora_state, "LoRA adapter")
    assert_finite(backbone, "backbone weights")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-adapter-", dir=output_dir))
    written = []
    try:
        family.save_adapter(staging, lora_state, lora_config)
        if backbone:
            save_file(
                {_plain_name(k): v for k, v in backbone.items()}, str(staging / BACKBONE_FILE),
                metadata={"dit_lora_backbone_patterns": json.dumps(backbone_patterns), "format": "pt"},
            )
        for f in sorted(staging.iterdir()):
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(f, output_dir / f.name)
            written.append(output_dir / f.name)
        if not backbone and (output_dir / BACKBONE_FILE).exists():
            (output_dir / BACKBONE_FILE).unlink()  # a stale backbone from an overwritten run would mislead loaders
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written


def load_adapter(pipe, output_dir: str | Path, adapter_name: str | None = None):
    """Load a dit-lora output folder into ``pipe``: the LoRA via ``load_lora_weights``, plus backbone weights.

    With no backbone training, this is exactly ``pipe.load_lora_weights(output_dir)``.
    """
    output_dir = Path(output_dir)
    if not (output_dir / ADAPTER_FILE).is_file():
        raise UserError(f"No {ADAPTER_FILE} in `{output_dir}`. Point load_adapter at a finished dit-lora output_dir.")
    pipe.load_lora_weights(str(output_dir), weight_name=ADAPTER_FILE, adapter_name=adapter_name, use_safetensors=True)
    backbone_file = output_dir / BACKBONE_FILE
    if backbone_file.is_file():
        state = load_file(str(backbone_file))
        assert_finite(state, str(backbone_file))
        model = pipe.transformer
        params = {_plain_name(n): p for n, p in model.named_parameters()}
        missing = [k for k in state if k not in params]
        if missing:
            raise UserError(
                f"{backbone_file} has weights the pipeline's transformer lacks (e.g. {missing[0]}); it was trained "
                "on a different base model."
            )
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].dtype))
    return pipe


def adapter_metadata(path: str | Path) -> dict:
    """The safetensors metadata of an adapter file (rank/alpha as diffusers stores them)."""
    with safe_open(str(path), framework="pt") as fh:
        return dict(fh.metadata() or {})
