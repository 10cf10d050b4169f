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

Each file is renamed into place (atomic); :func:`ema_view` presents the EMA set under the adapter's own names, for
loaders that read a run folder (the final samples).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dit_lora.contract.spec import FamilySpec
from dit_lora.output.adapter import write_adapter

EMA_SUFFIX = "_ema"
EMA_FOLDER = "ema"


def ema_name(name: str) -> str:
    """``pytorch_lora_weights.safetensors`` -> ``pytorch_lora_weights_ema.safetensors``."""
    path = Path(name)
    return f"{path.stem}{EMA_SUFFIX}{path.suffix}"


def write_ema_adapter(
    spec: FamilySpec,
    output_dir: Path,
    lora_state: dict,
    lora_config: dict,
    backbone: dict,
    backbone_patterns: list[str],
    *,
    comps=None,
    cfg=None,
) -> list[Path]:
    """Write the EMA adapter (see the module docstring); returns the files written."""
    output_dir = Path(output_dir)
    staging = Path(tempfile.mkdtemp(prefix=".tmp-ema-adapter-", dir=output_dir))
    try:
        write_adapter(spec, staging, lora_state, lora_config, backbone, backbone_patterns, comps=comps, cfg=cfg)
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
        return [target for _, target in targets]
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ema_files(output_dir: Path, names: list[str]) -> list[Path]:
    """Where the EMA versions of the adapter files ``names`` would be (``<name>_ema.safetensors`` beside them, or
    ``ema/<name>``); the caller keeps those that exist (the Hub push's list of files)."""
    output_dir = Path(output_dir)
    beside = [output_dir / ema_name(n) for n in names if n.endswith(".safetensors")]
    return beside + [output_dir / EMA_FOLDER / n for n in names]


def remove_stale_ema(output_dir: Path, names: list[str]) -> list[Path]:
    """Remove the EMA versions of the adapter files ``names`` that an earlier run left in ``output_dir`` (a run
    without --use_ema that replaces it: its adapter must not be pushed or loaded beside another run's EMA); returns
    what was removed. Only those names: a user's other files, and an ``ema/`` folder holding anything else, stay."""
    removed = [path for path in ema_files(output_dir, names) if path.is_file()]
    for path in removed:
        path.unlink()
    folder = Path(output_dir) / EMA_FOLDER
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return removed


@contextlib.contextmanager
def ema_view(output_dir: Path) -> Iterator[Path]:
    """A folder holding the EMA adapter under the trained adapter's names (``ema/`` itself, or hard links of the
    ``*_ema.safetensors`` files in a temporary folder inside ``output_dir``), for loaders that read a run folder."""
    output_dir = Path(output_dir)
    if (output_dir / EMA_FOLDER).is_dir():
        yield output_dir / EMA_FOLDER
        return
    view = Path(tempfile.mkdtemp(prefix=".tmp-ema-view-", dir=output_dir))
    try:
        for path in output_dir.glob(f"*{EMA_SUFFIX}.safetensors"):
            target = view / (path.name[: -len(f"{EMA_SUFFIX}.safetensors")] + ".safetensors")
            try:
                os.link(path, target)
            except OSError:  # a file system without hard links
                shutil.copyfile(path, target)
        yield view
    finally:
        shutil.rmtree(view, ignore_errors=True)


__all__ = ["EMA_FOLDER", "EMA_SUFFIX", "ema_files", "ema_name", "ema_view", "remove_stale_ema", "write_ema_adapter"]
