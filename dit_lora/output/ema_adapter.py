"""The EMA adapter of a ``--use_ema`` run, written beside the trained one by the family's own savers.

:func:`write_ema_adapter` runs :func:`~dit_lora.output.adapter.write_adapter` on the EMA weights into a staging
folder (the same strength folding, finite check, family saver, ComfyUI or other extra files and backbone file as the
adapter), then moves what it wrote into the run folder:

* an adapter of ``.safetensors`` files only (the diffusers-format families: Sana, CogVideoX, Z-Image, Qwen-Image,
  FLUX.2 and its ComfyUI file, single-expert Wan and its ComfyUI files): each file beside its trained twin as
  ``<name>_ema.safetensors`` (``pytorch_lora_weights_ema.safetensors``), the same keys, loaded by the same consumers:
  ``pipe.load_lora_weights(folder, weight_name="pytorch_lora_weights_ema.safetensors")``;
* an adapter that is a folder (a PEFT config beside its weights: DiT, the video LLMs; Wan A14B's two files and their
  index; DiT's label map): the whole set in ``ema/``, loaded as the run folder is
  (``PeftModel.from_pretrained(base, folder, subfolder="ema")``, ``dit_lora.load_adapter(pipe, folder / "ema")``).

Each file is renamed into place (atomic). Where the files go, and the view of them under the adapter's own names for
loaders that read a run folder (the final samples, ``dit-lora export``), is :mod:`dit_lora.output.ema_layout`
(re-exported here).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from dit_lora.contract.spec import FamilySpec
from dit_lora.output.adapter import write_adapter, write_named_copies
from dit_lora.output.ema_layout import EMA_FOLDER, EMA_SUFFIX, ema_files, ema_name, ema_view, remove_stale_ema

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def write_ema_adapter(
    spec: FamilySpec,
    output_dir: Path,
    lora_state: dict,
    lora_config: dict,
    backbone: dict,
    backbone_patterns: list[str],
    *,
    comps=None,
    cfg: TrainConfig | None = None,
) -> list[Path]:
    """Write the EMA adapter (see the module docstring); returns the files written."""
    output_dir = Path(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-ema-adapter-", dir=output_dir))
    try:
        write_adapter(
            spec, staging, lora_state, lora_config, backbone, backbone_patterns, comps=comps, cfg=cfg, named=False
        )
        files = sorted(p for p in staging.iterdir() if p.is_file())
        if all(p.suffix == ".safetensors" for p in files):
            targets = [(p, output_dir / ema_name(p.name)) for p in files]
        else:
            folder = output_dir / EMA_FOLDER
            folder.mkdir(exist_ok=True)
            for old in folder.iterdir():  # an earlier run's EMA set: only this run's files remain
                if old.is_file() and old.name not in {p.name for p in files}:
                    old.unlink()
            targets = [(p, folder / p.name) for p in files]
        for source, target in targets:
            os.replace(source, target)  # fsynced by write_adapter; the rename is atomic
        written = [target for _, target in targets]
        if cfg is not None and cfg.training.output_name:  # named after the EMA names: NAME_ema.safetensors
            written += write_named_copies(written[0].parent, written, cfg.training.output_name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["EMA_FOLDER", "EMA_SUFFIX", "ema_files", "ema_name", "ema_view", "remove_stale_ema", "write_ema_adapter"]
