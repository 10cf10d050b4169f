"""Prior preservation's missing class images, generated with the base model before training, as diffusers'
DreamBooth scripts generate them: when ``--class_data_dir`` holds fewer images than ``--num_class_images``, the
rest are made from ``--class_prompt`` (``--sample_batch_size`` per call of the model) and written there.

Each generated image is ``class_NNNNN.png``, the image ``NNNNN`` of the batch ``NNNNN // --sample_batch_size``,
whose noise is seeded by ``--seed`` and that batch's number: a run killed while generating makes, when started
again, exactly the images still missing (the batches holding one are made again, their present files kept), and a
run with the same seed makes the same images. The user's own images count first and are never touched. Files are
written whole (a temporary file renamed), on the main process, the others waiting.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.contract import spec as fallback
from dit_lora.core.collective import main_process_check
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import atomic_write, reporting_disk_full
from dit_lora.core.progress import Progress
from dit_lora.data.sources import IMAGE_EXTENSIONS

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig
    from dit_lora.contract.spec import FamilySpec

#: a generated class image's file name
GENERATED = "class_{:05d}.png"
_GENERATED = re.compile(r"class_(\d{5})\.png")
#: what a class batch's number is multiplied by in its seed (batches of neighbouring seeds stay apart)
_BATCH_SEED = 1_000_003


def _images(folder: Path) -> list[Path]:
    """The image files under ``folder`` (its sub-folders too), as the listing reads them."""
    found = []
    for dirpath, _, names in os.walk(folder):
        found += [Path(dirpath) / n for n in names if Path(n).suffix.lower() in IMAGE_EXTENSIONS]
    return found


def missing(cfg: TrainConfig) -> list[int]:
    """The numbers of the generated class images still to make (none without --with_prior_preservation): the user's
    own images in --class_data_dir count first, then the generated ones present."""
    data = cfg.data
    if not data.with_prior_preservation or not data.class_data_dir:
        return []
    folder = Path(data.class_data_dir)
    present = _images(folder) if folder.is_dir() else []
    own = [p for p in present if not (p.parent == folder and _GENERATED.fullmatch(p.name))]
    wanted = data.num_class_images - len(own)
    return [i for i in range(max(0, wanted)) if not (folder / GENERATED.format(i)).exists()]


def check(cfg: TrainConfig, spec: FamilySpec) -> None:
    """Refuse, before anything loads, class images that must be generated and cannot be: no --class_prompt, a video
    family, no sampler, or blocks swapped out of the device (the whole model must be there to sample)."""
    todo = missing(cfg)
    if not todo:
        return
    data, why = cfg.data, None
    if not data.class_prompt:
        why = "there is no --class_prompt to make them from"
    elif spec.video_frames is not None:
        why = f"`{spec.name}` trains clips, and dit-lora generates class images only for the image families"
    elif spec.samples is None:
        why = f"`{spec.name}` has no sampler"
    elif cfg.performance.blocks_to_swap:
        why = "--blocks_to_swap keeps blocks off the device, and sampling needs the whole model there"
    if why is not None:
        raise UserError(
            f"--class_data_dir `{data.class_data_dir}` holds {data.num_class_images - len(todo)} of the "
            f"--num_class_images {data.num_class_images} class images, and the {len(todo)} missing cannot be "
            f"generated: {why}. Put {len(todo)} more class images there, or lower --num_class_images to "
            f"{data.num_class_images - len(todo)}" + (", or give --class_prompt." if not data.class_prompt else ".")
        )


def generate(cfg: TrainConfig, spec: FamilySpec, comps: Any, accelerator, log: Callable[[str], Any]) -> None:
    """Make the missing class images (:func:`missing`) with the run's base model, on the main process."""
    todo = missing(cfg)
    if not todo:
        return
    folder = Path(cfg.data.class_data_dir or "")
    size = cfg.data.sample_batch_size
    log(
        f"class images: {folder} holds {cfg.data.num_class_images - len(todo)} of --num_class_images "
        f"{cfg.data.num_class_images}; generating {len(todo)} from --class_prompt {cfg.data.class_prompt!r} with the "
        f"base model ({size} per call, seeded by --seed: a stopped run makes only the rest)"
    )
    main_process_check(accelerator, lambda: _make(cfg, spec, comps, folder, todo), what="generating class images")


def _png_writer(image: Any) -> Callable[[Path], None]:
    """What writes ``image`` as a PNG file (into the temporary file :func:`atomic_write` names)."""

    def write(tmp: Path) -> None:
        image.save(tmp, format="PNG")

    return write


def _make(cfg: TrainConfig, spec: FamilySpec, comps: Any, folder: Path, todo: list[int]) -> None:
    samples = fallback.require(spec, "samples", "--num_class_images")
    size = cfg.data.sample_batch_size
    assert cfg.data.class_prompt, "check() refused generating without --class_prompt"
    validation = dataclasses.replace(cfg.validation.one_prompt(cfg.data.class_prompt), num_validation_images=size)
    cond = samples.validation_inputs(comps, validation)
    sampling = dataclasses.replace(cfg, validation=validation)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set(todo)
    with Progress(len(todo), desc="class images", unit="image") as progress:
        for batch in sorted({i // size for i in todo}):
            images = samples.generate(comps, comps.model, cond, sampling, cfg.training.seed * _BATCH_SEED + batch)
            for offset, image in enumerate(images):
                number = batch * size + offset
                if number not in wanted:
                    continue
                path = folder / GENERATED.format(number)
                with reporting_disk_full("a class image", path, advice="Free some space there and run again."):
                    atomic_write(path, _png_writer(image))
                progress.update()
