"""Where a ``--use_ema`` run's EMA adapter lives beside the trained one, and a view of it under the adapter's names.

* An adapter of ``.safetensors`` files only (the diffusers-format families and their ComfyUI files): each file beside
  its trained twin as ``<name>_ema.safetensors`` (:func:`ema_name`).
* An adapter that is a folder (a PEFT config beside its weights, an adapter index, DiT's label map): the whole set in
  ``ema/`` (:data:`EMA_FOLDER`).

:func:`ema_view` presents the EMA set under the adapter's own names, for what reads a run folder (the final
samples, ``dit-lora export``); :func:`has_ema` says whether a finished run wrote one. Paths only: the writing is
:mod:`dit_lora.output.ema_adapter`'s (this module imports no writer, so the export can use it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dit_lora.output.names import ADAPTER_INDEX_FILE

EMA_SUFFIX = "_ema"
EMA_FOLDER = "ema"


def ema_name(name: str) -> str:
    """``pytorch_lora_weights.safetensors`` -> ``pytorch_lora_weights_ema.safetensors``."""
    path = Path(name)
    return f"{path.stem}{EMA_SUFFIX}{path.suffix}"


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
def ema_view(output_dir: Path, names: list[str] | None = None) -> Iterator[Path]:
    """A folder holding the EMA adapter under the trained adapter's names (``ema/`` itself, or hard links of the
    ``*_ema.safetensors`` files in a temporary folder inside ``output_dir``: all of them, or those of the files
    ``names``), for loaders that read a run folder."""
    output_dir = Path(output_dir)
    if (output_dir / EMA_FOLDER).is_dir():
        yield output_dir / EMA_FOLDER
        return
    view = Path(tempfile.mkdtemp(prefix=".tmp-ema-view-", dir=output_dir))
    try:
        for path in output_dir.glob(f"*{EMA_SUFFIX}.safetensors"):
            target = view / (path.name[: -len(f"{EMA_SUFFIX}.safetensors")] + ".safetensors")
            if names is not None and target.name not in names:
                continue
            try:
                os.link(path, target)
            except OSError:  # a file system without hard links
                shutil.copyfile(path, target)
        yield view
    finally:
        shutil.rmtree(view, ignore_errors=True)


def has_ema(output_dir: Path, adapter: str) -> bool:
    """Whether the run in ``output_dir``, whose adapter file is ``adapter``, wrote an EMA adapter (``--use_ema``):
    ``<adapter>_ema.safetensors`` beside it, or ``ema/`` holding the adapter or its index."""
    output_dir = Path(output_dir)
    folder = output_dir / EMA_FOLDER
    return (output_dir / ema_name(adapter)).is_file() or any(
        (folder / n).is_file() for n in (adapter, ADAPTER_INDEX_FILE)
    )


__all__ = ["EMA_FOLDER", "EMA_SUFFIX", "ema_files", "ema_name", "ema_view", "has_ema", "remove_stale_ema"]
