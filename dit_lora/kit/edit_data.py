"""The diffusers family kit's edit data (Qwen-Image-Edit, FLUX.1 Kontext): each sample's control images, named by a
metadata column, checked, and grouped with it.

A row of ``metadata.jsonl`` / ``metadata.csv`` names its target image (``file_name``), its caption (the edit
instruction) and its control image(s), relative to the metadata file's folder as ``file_name`` is: one path or a
JSON list in ``control_image`` / ``control_images`` (this project), ``edit_image`` (DiffSynth-Studio),
``control_path`` or the numbered ``control_path_0``, ``control_path_1`` ... (musubi-tuner's JSONL), or the column
the family's column option names (:class:`ControlFlags`); or, for a row naming none, the same-named image(s) in the
family's folder option (musubi-tuner's ``control_directory``, ai-toolkit's ``control_path``: ``<stem>.png`` or
``<stem>_0.png``, ...). The control paths become the sample's ``conditions`` (hashed into its cache key, so a
changed control image is encoded again); each control image is resized to cover the sample's bucket and cropped as
the target is (musubi-tuner's default, and diffusers' ``train_dreambooth_lora_flux_kontext.py``: controls at the
target's size), so a batch of one bucket stacks. A sample whose control image is missing or unreadable stops the run
in one paragraph naming it and its column. The family's setup (:class:`ControlSetup`) records the run's crop for the
controls and keeps the validation samples' control images.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.data.decode import load_rgb, oriented_size
from dit_lora.data.image_media import ImageMedia
from dit_lora.data.paths import FolderWalk, locate
from dit_lora.data.samples import name_some
from dit_lora.data.sources import METADATA_FILENAMES, json_lines
from dit_lora.data.transforms import crop_seed, preprocess_image
from dit_lora.kit.conditioning import keep_card_input
from dit_lora.kit.text_conditioned import TextSettingsSetup

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

#: the columns read when the family's column option is unset, in this order (the first a metadata file has wins)
CONTROL_COLUMNS = ("control_image", "control_images", "edit_image", "control_path")
#: musubi-tuner's numbered columns (``control_path_0``, ``control_path_1`` ...)
_NUMBERED = re.compile(r"^control_path_(\d+)$")


@dataclasses.dataclass(frozen=True)
class ControlFlags:
    """How a family names its edit data: its column and folder options (their option names) and the model as messages
    name it; ``several``: what to train instead when a sample names more control images than the model takes."""

    column: str
    folder: str
    model: str
    several: str = ""


@dataclasses.dataclass(frozen=True)
class Controls:
    """What one metadata row says about its control images: the absolute paths, the column, or why it is refused."""

    paths: tuple[str, ...]
    column: str
    refused: str | None = None


def _rows(path: Path) -> list[tuple[int, dict]]:
    """``(line, row)`` of a metadata file (its own reader's errors are the listing's: it read the file first)."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        if path.name.endswith(".jsonl"):
            return [
                (n, r) for n, r in json_lines(handle, lambda n, e: f"{path} line {n}: {e.msg}") if isinstance(r, dict)
            ]
        reader = csv.DictReader(handle)
        return [(reader.line_num, row) for row in reader]


def _values(row: dict, column: str | None, columns: tuple[str, ...] = CONTROL_COLUMNS) -> tuple[str, list[str]]:
    """``(column, paths)`` of a row: the named column, else the first of ``columns`` it fills, else musubi-tuner's
    numbered ones."""
    names = [column] if column else [c for c in columns if row.get(c) not in (None, "", [])]
    if not names and not column:
        numbered = sorted((int(m.group(1)), k) for k in row if (m := _NUMBERED.match(k)) and row[k])
        return ("control_path_N", [str(row[k]) for _, k in numbered]) if numbered else ("", [])
    name = names[0] if names else ""
    value = row.get(name)
    if isinstance(value, str) and value.strip().startswith("["):
        value = json.loads(value)  # a CSV cell holding a JSON list
    found = [value] if isinstance(value, str) else list(value or [])
    return name, [str(v) for v in found if str(v).strip()]


def metadata_controls(
    root: str, column: str | None, columns: tuple[str, ...] = CONTROL_COLUMNS
) -> dict[tuple[str, str], Controls]:
    """``{(sample key, caption): Controls}`` from every metadata file under ``root`` (a refused path keeps its
    reason); ``columns``: those read, in order, when ``column`` is unset (an image's by default)."""
    out: dict[tuple[str, str], Controls] = {}
    for dirpath, rel_dir, _, filenames in FolderWalk(root):  # the data folder's own listing: no link followed out
        for name in (m for m in METADATA_FILENAMES if m in filenames):
            shown = f"{rel_dir}/{name}" if rel_dir else name
            for line, row in _rows(Path(dirpath) / name):
                if not isinstance(row.get("file_name"), str):
                    continue
                key = locate(root, row["file_name"], rel_dir=rel_dir).key
                col, values = _values(row, column, columns)
                located = [locate(root, v, rel_dir=rel_dir, field=f"{shown} line {line}: {col}") for v in values]
                refused = next((p.refused for p in located if p.refused), None)
                paths = tuple(p.path for p in located if p.path)
                caption = str(row.get("text") or row.get("caption") or "")
                out.setdefault((key, caption), Controls(paths, col, refused))
                out.setdefault((key, ""), Controls(paths, col, refused))
    return out


def folder_controls(folder: str, key: str, extensions: frozenset[str] | None = None) -> tuple[str, ...]:
    """The control files of the sample ``key`` in ``folder`` (the family's folder option), named as musubi-tuner's
    control_directory and ai-toolkit's control_path name them: ``<stem>.<ext>``, or ``<stem>_<N>.<ext>`` for several
    (in N's order); the key's subfolders apply. ``extensions``: the files taken (images by default). Only files
    inside ``folder`` (``paths.locate``)."""
    from dit_lora.data.sources import IMAGE_EXTENSIONS

    rel_dir, name = os.path.split(key)
    stem = os.path.splitext(name)[0]
    here = os.path.join(folder, rel_dir)
    if not os.path.isdir(here):
        return ()
    single, numbered = [], []
    for entry in sorted(os.listdir(here)):
        base, ext = os.path.splitext(entry)
        if ext.lower() not in (IMAGE_EXTENSIONS if extensions is None else extensions):
            continue
        found = locate(folder, f"{rel_dir}/{entry}" if rel_dir else entry)
        if found.path is None:
            continue
        if base == stem:
            single.append(found.path)
        elif base.startswith(stem + "_") and base[len(stem) + 1 :].isdigit():
            numbered.append((int(base[len(stem) + 1 :]), found.path))
    return tuple(single[:1]) if single else tuple(p for _, p in sorted(numbered))


def metadata_root(cfg: TrainConfig, reads: str, column: str) -> str:
    """``--train_data_dir``, whose metadata names each sample's conditions, or one paragraph (``reads``: who reads
    what, ``column``: the column of the example)."""
    if not cfg.data.train_data_dir:
        raise UserError(
            f"{reads} from a metadata column of --train_data_dir (--dataset_name is not read for them): put the files "
            f"and a metadata.jsonl with `file_name`, `text` and `{column}` in a folder."
        )
    return os.fspath(cfg.data.train_data_dir)


def columns_named(column: str | None, defaults: tuple[str, ...]) -> str:
    """How a refusal names where the conditions were looked for: the family option's column, else every default."""
    return f"`{column}`" if column else "any of " + ", ".join(f"`{c}`" for c in defaults)


def sample_controls(
    found: dict[tuple[str, str], Controls],
    sample,
    folder: str | None,
    flag: str,
    extensions: frozenset[str] | None = None,
) -> Controls | None:
    """The controls of ``sample``: what its metadata row names (``found``, :func:`metadata_controls`), else the
    same-named files of ``folder`` (the family's folder option ``flag``; ``extensions`` as :func:`folder_controls`
    takes them); None when neither names any."""
    controls = found.get((sample.key, sample.caption)) or found.get((sample.key, ""))
    if (controls is None or not controls.paths and controls.refused is None) and folder:
        controls = Controls(folder_controls(folder, sample.key, extensions), flag)
    if controls is None or not controls.paths and controls.refused is None:
        return None
    return controls


def unreadable(path: str) -> str | None:
    """Why the control image at ``path`` cannot be used (missing, not an image, too large), or None."""
    try:
        with Image.open(path) as image:
            image.verify()
        oriented_size(path)
    except FileNotFoundError:
        return "does not exist"
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
        return f"cannot be read as an image ({type(err).__name__}: {' '.join(str(err).split())[:120]})"
    return None


def target_crop(cfg: TrainConfig) -> tuple[bool, int]:
    """How the run crops its targets, ``(center_crop, seed)``: each control image follows (:func:`control_pixels`)."""
    return bool(cfg.data.center_crop), int(cfg.training.seed)


def validation_control_paths(cfg: TrainConfig, samples: list) -> list[str]:
    """The validation samples' control images: ``--validation_image``, else the first training sample's."""
    chosen = cfg.family_options.validation_image
    return [chosen] if chosen else list(samples[0].conditions if samples else [])


class ControlSetup(TextSettingsSetup, ABC):
    """``FamilySpec.setup`` of an edit family: the run's text settings, how targets are cropped (:func:`target_crop`,
    in the run state's ``crop``: the controls are cropped alike), and, when the run validates, the validation
    samples' control images (:func:`validation_control_paths`) kept by the family's :meth:`keep_validation_controls`."""

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """The text settings, and how targets are cropped."""
        super().configure(comps, cfg)
        self.run_state(comps).crop = target_crop(cfg)

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """With validation prompts: :meth:`keep_validation_controls` of the validation control images; the first one
        is the model card's image to edit (:func:`~.conditioning.keep_card_input`)."""
        paths = validation_control_paths(cfg, samples)
        if cfg.validation.validation_prompt:
            self.keep_validation_controls(comps, cfg.data, cfg.validation, paths)
        if paths and unreadable(paths[0]) is None:  # an unreadable one without validation: the card keeps its name
            keep_card_input(cfg, paths[0])

    @abstractmethod
    def keep_validation_controls(
        self, comps: Components, data: DataOptions, validation: ValidationOptions, paths: list[str]
    ) -> None:
        """Keep what the validation samples need of their control images ``paths`` (none: refused, naming
        ``--validation_image``; ``data``, ``validation``: the run's ``cfg.data`` and ``cfg.validation``)."""


def control_pixels(sample, path: str, crop: tuple[bool, int]) -> torch.Tensor:
    """A control image prepared as its sample's target is: cover-resized to the bucket, the same crop window
    (``crop``: the run's ``(center_crop, seed)``), never flipped; ``(3, H, W)`` in [-1, 1]."""
    center, seed = crop
    image = load_rgb(path, resolution=sample.bucket)  # decoded as targets are: EXIF orientation, profile, alpha
    return preprocess_image(
        image, sample.bucket, center_crop=center, flip=False, crop_rng_seed=crop_seed(seed, sample.key)
    )


def fitted_control(path: str, resolution: int) -> torch.Tensor:
    """A validation control image prepared as a centre-cropped target of the ``resolution`` square bucket is (decoded
    as targets are), ``(3, H, W)`` in [-1, 1]; one paragraph when it cannot be read."""
    problem = unreadable(path)
    if problem is not None:
        raise UserError(
            f"The validation control image `{path}` {problem}. Give --validation_image an image file, or leave it "
            "unset to edit the first training sample's control image."
        )
    rgb = load_rgb(path, resolution=(resolution, resolution))
    return preprocess_image(rgb, (resolution, resolution), center_crop=True, flip=False, crop_rng_seed=0)


def to_pil(pixels: torch.Tensor) -> Image.Image:
    """``(3, H, W)`` in [-1, 1] -> an RGB image (what a pipeline is given as the image to edit)."""
    array = ((pixels.float().permute(1, 2, 0) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()
    return Image.fromarray(array)


def kept_area(size: tuple[int, int], bucket: tuple[int, int]) -> float:
    """The share of an image of ``size`` (width, height) left after resizing it to cover ``bucket`` (height, width)
    and cropping the centre to it."""
    ratio, target = size[0] / size[1], bucket[1] / bucket[0]
    return min(ratio, target) / max(ratio, target)


def control_crop_line(samples: list) -> str:
    """The log line that says what becomes of the control images: each is resized to cover its sample's bucket and
    centre-cropped; how many lose more than 10% of their area that way (their aspect ratio is not their target's)."""
    sizes = []
    for sample in samples:
        sizes += [kept_area(oriented_size(path), sample.bucket) for path in sample.conditions]  # headers only
    cut = sum(kept < 0.9 for kept in sizes)
    return (
        f"control images: {len(sizes)} for {len(samples)} samples, each resized to cover its sample's bucket and "
        f"centre-cropped to it; {cut} lose more than 10% of their area (a control of its target's aspect ratio stays "
        "whole)"
    )


class EditMedia(ImageMedia):
    """The image handler of the Edit families: every sample with its control images (``conditions``), a batch of one
    bucket and one control count."""

    data_sets = False  # the validation's control image and the control folders are read from one data folder
    data_sets_refusal = "its control images are read beside the targets of one data folder"

    def __init__(self, cfg: TrainConfig, spec, *, single: bool, flags: ControlFlags) -> None:
        super().__init__(cfg, spec)
        self.single = single  # the pipeline takes exactly one image (QwenImageEditPipeline, FluxKontextPipeline)
        self.flags = flags
        self._controls: dict[tuple[str, str], Controls] | None = None
        self._columns: dict[str, str] = {}  # each listed sample's key -> where its controls were named

    def for_source(self, cfg: TrainConfig) -> EditMedia:
        """This handler reading ``cfg``'s data source (the held-out folder): its control images read anew there."""
        return EditMedia(cfg, self.spec, single=self.single, flags=self.flags)

    def option(self, kind: str) -> str | None:
        """The run's value of the family's ``column`` or ``folder`` option."""
        return getattr(self.cfg.family_options, getattr(self.flags, kind))

    def controls(self) -> dict[tuple[str, str], Controls]:
        """Every metadata row's control images (read once per handler)."""
        if self._controls is None:
            root = metadata_root(self.cfg, f"{self.flags.model} reads each sample's control images", "control_image")
            self._controls = metadata_controls(root, self.option("column"))
        return self._controls

    def excluded_keys(self) -> frozenset[str]:
        """The control images inside the data folder (named by metadata rows, or in the folder option's folder inside
        it): no samples of their own."""
        root = os.path.abspath(os.fspath(self.cfg.data.train_data_dir or "."))
        paths = {p for c in self.controls().values() for p in c.paths}
        folder = self.option("folder")
        if folder:
            paths |= {os.path.join(d, f) for d, _, files in os.walk(os.path.abspath(folder)) for f in files}
        keys = (os.path.relpath(p, root).replace(os.sep, "/") for p in paths)
        return frozenset(k for k in keys if not k.startswith("../"))

    def list_samples(self) -> list:
        """The samples, each with the control images its metadata row names (a paragraph when any has none)."""
        found = self.controls()
        samples = super().list_samples()
        column, folder = self.option("column"), self.option("folder")
        out, missing = [], []
        for sample in samples:
            controls = sample_controls(found, sample, folder, f"--{self.flags.folder}")
            if controls is None:
                missing.append(sample.key)
                continue
            if controls.refused is not None:
                raise UserError(f"The control image of `{sample.key}` is refused: {controls.refused}.")
            self._columns[sample.key] = controls.column
            out.append(dataclasses.replace(sample, conditions=controls.paths))
        if missing:
            named = columns_named(column, CONTROL_COLUMNS)
            raise UserError(
                f"{len(missing)} sample(s) of --train_data_dir have no control image in {named} of their metadata "
                f"row{f' nor in --{self.flags.folder}' if folder else ''}: {name_some(missing)}. An edit model learns "
                'to turn its control image(s) into the target: give each row one, e.g. {"file_name": "after.png", '
                '"text": "make it red", "control_image": "before.png"}'
                f"{'' if self.single else ' (a list for several)'}, relative to the metadata "
                f"file, name the column with --{self.flags.column}, or put same-named images in a folder given as "
                f"--{self.flags.folder}."
            )
        return out

    def screen(self, samples: list, *, log, quarantine: list[dict[str, Any]]) -> list:
        """The targets screened and bucketed as every image is; then every control image checked (one paragraph)."""
        usable = super().screen(samples, log=log, quarantine=quarantine)
        for sample in usable:
            column = self._columns.get(sample.key) or self.option("column") or "control_image"
            if self.single and len(sample.conditions) != 1:
                raise UserError(
                    f"`{sample.key}` names {len(sample.conditions)} control images in `{column}`; {self.flags.model} "
                    f"({self.spec.info.pipeline_class_name}) takes exactly one. Give it one{self.flags.several}."
                )
            for path in sample.conditions:
                problem = unreadable(path)
                if problem is not None:
                    raise UserError(
                        f"The control image `{path}` of sample `{sample.key}` (metadata column `{column}`) {problem}. "
                        "Fix the path in the metadata row (relative to the metadata file's folder) or the file, and "
                        "run again; `dit-lora check-data` lists the samples."
                    )
        if usable:
            log(control_crop_line(usable))
        return usable

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """Every image's, plus how the controls are prepared (resized to the sample's bucket)."""
        return {**super().namespace_identity(comps), "controls": "cover-resized and cropped to the sample's bucket"}

    def groups(self, samples: list, **_: Any) -> list[int] | None:
        """One group per (bucket, number of controls): a batch stacks only samples of one shape."""
        kinds = {k: i for i, k in enumerate(sorted({(self.size_of(s), len(s.conditions)) for s in samples}))}
        groups = [kinds[(self.size_of(s), len(s.conditions))] for s in samples]
        return groups if len(set(groups)) > 1 else None


def refuse_edit_options(cfg: TrainConfig, model: str, *, dropout: str | None = None) -> None:
    """``--dataset_name``, ``--random_flip`` and ``--cache_latents false`` are refused for an edit model in one
    paragraph each (the control images are named in a data folder's metadata; a flipped
    target would face its unflipped control; the control images are encoded into the latent cache only), and caption
    dropout where the model encodes its caption with its control images (``dropout``: why)."""
    if cfg.data.dataset_name:
        raise UserError(
            f"{model} reads each sample's control image from a metadata column of --train_data_dir; --dataset_name "
            f"is not read for them. Save the dataset's images to a folder (targets and controls as files) with a "
            'metadata.jsonl naming them, e.g. {"file_name": "after.png", "text": "make it red", "control_image": '
            '"before.png"}, and pass it as --train_data_dir.'
        )
    why = {
        "--caption_dropout_probability": (dropout is not None and cfg.data.caption_dropout_probability > 0, dropout),
        "--random_flip": (
            cfg.data.random_flip,
            "a flipped target would be trained against its unflipped control image",
        ),
        "--cache_latents false": (
            not cfg.data.cache_latents,
            "the control images are encoded into the latent cache only",
        ),
    }
    for flag, (given, reason) in why.items():
        if given:
            raise UserError(f"{flag} is not supported for {model}: {reason}. Leave it at its default.")
