"""``dit-lora export``: a finished run's adapter rewritten for another consumer, by the run's family.

The training run writes the adapter its family's diffusers (or PEFT) loader reads. Some consumers name the model's
weights differently (ComfyUI keeps a model's original checkpoint names), so a family may declare the
:class:`~dit_lora.contract.capabilities.Exports` capability: the formats it can write and a writer for each.
This module is the generic part and names no family:

* :func:`export_run` finds the run's family (``train_summary.json``'s ``family``, or ``--family`` for a folder
  without a summary), checks that the folder is a finished run (its adapter file is there) and that the family
  offers the format, then calls the family's writer.
* :func:`export_target` is what every writer asks before writing a file: the path stays inside the run folder,
  and a file already there is replaced only when an earlier export wrote it (its safetensors metadata carries
  :data:`EXPORT_MARKER`); a user's own file of that name is never overwritten.
* :func:`export_metadata` is the metadata an exported file carries, the marker included.

A ``--use_ema`` run's EMA adapter is exported with the trained one, by the same writer: it runs on
:func:`~dit_lora.output.ema_layout.ema_view` (the EMA set under the adapter's names), and each file it writes is
named as the EMA set names its files (``<export>_ema.safetensors`` beside, or inside ``ema/``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from dit_lora.config.adapter_types import TYPES, type_of_peft_config
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import check_writable, reporting_disk_full
from dit_lora.output.ema_layout import EMA_FOLDER, EMA_SUFFIX, ema_name, ema_view, has_ema
from dit_lora.output.names import (
    ADAPTER_INDEX_FILE,
    CONSUMER_NAMES,
    PEFT_ADAPTER_FILE,
    PEFT_CONFIG_FILE,
    SUMMARY_FILE,
)
from dit_lora.registry import get_spec

#: safetensors metadata key every exported file carries: its value is the format (e.g. "comfyui")
EXPORT_MARKER = "dit_lora_export"
#: metadata key naming the file the export was converted from
EXPORT_SOURCE = "dit_lora_source"


def export_metadata(fmt: str, source: str, **extra: str) -> dict[str, str]:
    """The safetensors metadata of an exported file: the format, the source file, and ``extra`` (all strings)."""
    return {"format": "pt", EXPORT_MARKER: fmt, EXPORT_SOURCE: source, **{k: str(v) for k, v in extra.items()}}


def written_by_export(path: Path) -> bool:
    """Whether ``path`` is a safetensors file an export wrote (its metadata has :data:`EXPORT_MARKER`).

    Only the header is read; anything that is not a readable safetensors file is not ours.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return EXPORT_MARKER in (handle.metadata() or {})
    except Exception:
        return False


def export_target(output_dir: str | Path, name: str) -> Path:
    """The path ``name`` will be written to in ``output_dir``, after refusing what must never be written.

    Refused with one paragraph each: a ``name`` that is not a plain file name or that resolves outside the folder
    (``..``, a symbolic link pointing elsewhere), and an existing file that no dit-lora export wrote (a user's own
    file of that name is left as it is).
    """
    folder = Path(output_dir)
    path = folder / name
    root = folder.resolve()
    if Path(name).name != name or name in ("", ".", "..") or not path.resolve().is_relative_to(root):
        raise UserError(
            f"The export file `{name}` would be written outside the run folder {folder} (it is not a plain file "
            f"name inside it, or {path} is a link to {path.resolve()}). Exports are written only next to the "
            "adapter; remove the link or rename the file the family's export names."
        )
    if path.is_symlink() or (path.exists() and not (path.is_file() and written_by_export(path))):
        raise UserError(
            f"{path} already exists and was not written by `dit-lora export` (its safetensors metadata has no "
            f"`{EXPORT_MARKER}` entry), so it is not replaced. Move or rename that file, then export again."
        )
    return path


def _run_family(folder: Path, family: str | None) -> str:
    """The family that trained the run in ``folder``: ``family`` when given, else its summary's ``family``."""
    summary_file = folder / SUMMARY_FILE
    if family:
        return family
    if not summary_file.is_file():
        raise UserError(
            f"{folder} has no {SUMMARY_FILE}, so the family that trained it is unknown. Pass the --output_dir of a "
            "finished dit-lora run, or name its family with --family (e.g. `dit-lora export DIR --format FORMAT "
            "--family NAME`)."
        )
    try:
        name = json.loads(summary_file.read_text(encoding="utf-8")).get("family")
    except (OSError, ValueError, AttributeError) as err:
        raise UserError(
            f"{summary_file} is not a readable run summary ({type(err).__name__}: {err}). Name the "
            "run's family with --family."
        ) from None
    if not isinstance(name, str) or not name:
        raise UserError(f"{summary_file} names no `family`. Name the run's family with --family.")
    return name


def run_adapter_type(folder: str | Path) -> str:
    """The adapter type (``--lora_type``) a finished run in ``folder`` trained: its ``train_summary.json``'s
    ``config.lora_type``, else its ``adapter_config.json``; ``lora`` when neither says (a run of a dit-lora before
    the types)."""
    folder = Path(folder)
    try:
        kind = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8")).get("config", {}).get("lora_type")
        if kind in TYPES:
            return kind
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return type_of_peft_config(json.loads((folder / PEFT_CONFIG_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        return "lora"


def check_type_exported(family: str, exports, fmt: str, kind: str) -> None:
    """Refuse, in one paragraph, exporting an adapter of type ``kind`` as ``fmt`` when the family's writer does not
    convert that type: a file its consumer could not load (or would load wrongly) is never written.

    The family's :class:`~dit_lora.contract.capabilities.Exports` says which types each format converts with an
    optional ``export_types(fmt) -> tuple[str, ...]``; without it, plain LoRA only (lora_A/lora_B keys)."""
    declared = getattr(exports, "export_types", None)
    converts = tuple(declared(fmt)) if callable(declared) else ("lora",)
    if kind in converts:
        return
    names = ", ".join(TYPES[t].title for t in converts) or "no adapter type"
    raise UserError(
        f"This run trained a {TYPES[kind].title} adapter (--lora_type {kind}), and the `{family}` family's `{fmt}` "
        f"export converts {names} adapters only: its consumer would not load this one, so nothing was written. "
        f"A {TYPES[kind].title} adapter is loaded by {TYPES[kind].consumers}; to export `{fmt}`, train with "
        f"--lora_type {' or '.join(converts) or 'lora'}."
    )


def export_ema(output_dir: Path, adapter: str, write: Callable[[Path], list]) -> list[Path]:
    """The EMA adapter's export, when the run in ``output_dir`` (adapter file ``adapter``) wrote one; returns the
    files written (none without an EMA adapter).

    ``write(folder)`` is the family's writer, run on the EMA set under the adapter's names
    (:func:`~dit_lora.output.ema_layout.ema_view`): the ``ema/`` folder itself, where its files stay, or a temporary
    folder holding the EMA adapter file alone (an earlier export's ``*_ema`` file, or a user's, is not in its way),
    from which each written file moves beside the run's as ``<name>_ema.safetensors`` (after :func:`export_target`
    has cleared every one of them: a user's file of that name is never replaced).
    """
    output_dir = Path(output_dir)
    if not has_ema(output_dir, adapter):
        return []
    with ema_view(output_dir, [adapter]) as view:
        written = [Path(p) for p in write(view)]
        if view == output_dir / EMA_FOLDER:
            return written
        moves = [(path, export_target(output_dir, ema_name(path.name))) for path in written]
        for source, target in moves:
            os.replace(source, target)  # the same file system (the view is inside the run folder): atomic
    return [target for _, target in moves]


def is_ema_file(path: Path) -> bool:
    """Whether ``path`` is one of the EMA adapter's files (``*_ema.safetensors``, or inside ``ema/``)."""
    return Path(path).parent.name == EMA_FOLDER or Path(path).stem.endswith(EMA_SUFFIX)


def export_run(
    output_dir: str | Path, fmt: str, family: str | None = None, log: Callable[[str], object] = print
) -> list[Path]:
    """Write the run's adapter in ``output_dir`` in the format ``fmt`` beside it, and its EMA adapter's when the run
    wrote one (``--use_ema``: :func:`export_ema`); return the files written.

    ``family`` overrides the family read from ``train_summary.json``. Refuses, in one paragraph each, a folder
    that is not a finished run (no adapter file), a family without the
    :class:`~dit_lora.contract.capabilities.Exports` capability or without ``fmt`` (naming the valid formats),
    and a writer returning a path outside the folder. The writers themselves refuse to replace a user's file
    (:func:`export_target`). A LoRA whose ``fmt`` consumer loads the run's file as it is (``info.loads_as_is``) has
    nothing to write: ``log`` says so and which file to give it, and no file is returned.
    """
    folder = Path(output_dir)
    if not folder.is_dir():
        raise UserError(
            f"OUTPUT_DIR {folder} does not exist or is not a directory. Pass the --output_dir of a "
            "finished training run, e.g. `dit-lora export runs/my-lora --format comfyui`."
        )
    check_writable(folder, "OUTPUT_DIR", " The export writes its file beside the run's adapter.")
    spec = get_spec(_run_family(folder, family))
    kind = run_adapter_type(folder)
    name = spec.info.adapter_weight_name if TYPES[kind].diffusers_loads else PEFT_ADAPTER_FILE
    if not (folder / name).is_file() and not (folder / ADAPTER_INDEX_FILE).is_file():  # the index: a run's files
        raise UserError(
            f"{folder} is not a finished run: it has no adapter file {name} (a run writes it "
            "when training ends). Export the --output_dir of a run that finished, or finish this one first."
        )
    exports = spec.exports
    formats = exports.export_formats() if exports is not None else {}
    if fmt not in formats and fmt in spec.info.loads_as_is and kind == "lora":
        log(
            f"nothing to export: {folder / name} loads in {CONSUMER_NAMES.get(fmt, fmt)} as it is (every trained "
            f"layer at the trained strength, checked with its own LoRA loader): copy that file to its loras folder."
        )
        return []
    if exports is not None and fmt in formats:
        check_type_exported(spec.name, exports, fmt, kind)
    if exports is None or fmt not in formats:
        offered = "; ".join(f"`{k}`: {v}" for k, v in sorted(formats.items()))
        raise UserError(
            f"The `{spec.name}` family cannot export `{fmt}` (--format). "
            + (
                f"Its formats: {offered}."
                if offered
                else "It offers no export formats: its adapter file "
                f"{spec.info.adapter_weight_name if TYPES[kind].diffusers_loads else PEFT_ADAPTER_FILE} is already "
                "the format its consumers load "
                f"({TYPES[kind].consumers})."
            )
        )
    with reporting_disk_full(
        f"the {fmt} export",
        folder,
        advice="The run's own files are untouched (each export file is written whole or not "
        "at all). Free some space and export again.",
    ):
        written = [Path(p) for p in exports.export_adapter(folder, fmt)]
        written += export_ema(folder, name, lambda view: exports.export_adapter(view, fmt))
    root = folder.resolve()
    outside = [p for p in written if not p.resolve().is_relative_to(root)]
    if outside:  # the writers check before writing (export_target); this catches one that did not
        raise UserError(
            f"The `{spec.name}` family's `{fmt}` export wrote {outside[0]}, outside the run folder "
            f"{folder}. This is a bug in the family's export; please report it."
        )
    return written
