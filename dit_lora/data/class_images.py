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
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.contract import spec as fallback
from dit_lora.core.collective import Failure, exchange, main_process_check
from dit_lora.core.engine import decide_engine
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import atomic_write, reporting_disk_full
from dit_lora.core.progress import Progress
from dit_lora.data.sources import folder_image_keys

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, PerformanceOptions, TrainConfig
    from dit_lora.contract.spec import FamilySpec

#: a generated class image's file name
GENERATED = "class_{:05d}.png"
_GENERATED = re.compile(r"class_(\d{5})\.png")
#: what a class batch's number is multiplied by in its seed (batches of neighbouring seeds stay apart)
_BATCH_SEED = 1_000_003


def is_generated(key: str) -> bool:
    """Whether a class folder's sample key (its path in the folder) names an image generated here."""
    return _GENERATED.fullmatch(key) is not None


def users_first(samples: list) -> list:
    """``samples`` of the class folder with the user's own images first (generated ones after them, each group in
    its order): the first --num_class_images are the class images."""
    return sorted(samples, key=lambda s: is_generated(s.key))


def missing(data: DataOptions) -> list[int]:
    """The numbers of the generated class images still to make (none without --with_prior_preservation): the user's
    own images in --class_data_dir count first, then the generated ones present."""
    if not data.with_prior_preservation or not data.class_data_dir:
        return []
    folder = Path(data.class_data_dir)
    own = [k for k in folder_image_keys(str(folder)) if not is_generated(k)] if folder.is_dir() else []
    wanted = data.num_class_images - len(own)
    return [i for i in range(max(0, wanted)) if not (folder / GENERATED.format(i)).exists()]


def check(data: DataOptions, performance: PerformanceOptions, spec: FamilySpec) -> None:
    """Refuse, before anything loads, class images that must be generated and cannot be: no --class_prompt, a video
    family, no sampler, or blocks swapped out of the device (the whole model must be there to sample)."""
    todo = missing(data)
    if not todo:
        return
    why = None
    if not data.class_prompt:
        why = "there is no --class_prompt to make them from"
    elif spec.video_frames is not None:
        why = f"`{spec.name}` trains clips, and dit-lora generates class images only for the image families"
    elif spec.samples is None:
        why = f"`{spec.name}` has no sampler"
    elif performance.blocks_to_swap:
        why = "--blocks_to_swap keeps blocks off the device, and sampling needs the whole model there"
    elif decide_engine().name == "fsdp2":
        why = "under FSDP2 the blocks wait in host memory until they are sharded; generate them in a one-process run"
    if why is not None:
        have = data.num_class_images - len(todo)
        lower = f", or lower --num_class_images to {have}" if have else ""
        raise UserError(
            f"--class_data_dir `{data.class_data_dir}` holds {have} of the --num_class_images "
            f"{data.num_class_images} class images, and the {len(todo)} missing cannot be generated: {why}. Put "
            f"{len(todo)} more class images there{lower}"
            + (", or give --class_prompt." if not data.class_prompt else ".")
        )


def generate(cfg: TrainConfig, spec: FamilySpec, comps: Any, accelerator, log: Callable[[str], Any]) -> None:
    """Make the missing class images (:func:`missing`, decided by the main process) with the run's base model, each
    process its share of the seeded batches; a failure on one stops every process (one paragraph)."""
    todo = main_process_check(accelerator, lambda: missing(cfg.data), what="counting class images", share_result=True)
    if not todo:
        return
    folder = Path(cfg.data.class_data_dir or "")
    size = cfg.data.sample_batch_size
    if accelerator.is_main_process:
        log(
            f"class images: {folder} holds {cfg.data.num_class_images - len(todo)} of --num_class_images "
            f"{cfg.data.num_class_images}; generating {len(todo)} from --class_prompt {cfg.data.class_prompt!r} with "
            f"the base model ({size} per call, seeded by --seed: a stopped run makes only the rest)"
        )
    batches = sorted({i // size for i in todo})[accelerator.process_index :: accelerator.num_processes]
    failure = None
    try:
        _make(cfg, spec, comps, folder, [i for i in todo if i // size in batches], main=accelerator.is_main_process)
    except Exception as err:  # every process hears of it, instead of waiting at the next collective
        failure = err
    failures = exchange(accelerator, Failure.of(failure, accelerator.process_index) if failure is not None else None)
    if failure is not None:
        raise failure
    if failures:
        raise (
            failures[0].error()
            if failures[0].user
            else UserError(
                f"Rank {failures[0].rank} failed generating class images ({failures[0].text}), so this process stops "
                "too. That process's own error, printed with its traceback, says why: fix that and run again."
            )
        )


def _png_writer(image: Any) -> Callable[[Path], None]:
    """What writes ``image`` as a PNG file (into the temporary file :func:`atomic_write` names)."""

    def write(tmp: Path) -> None:
        image.save(tmp, format="PNG")

    return write


def _make(cfg: TrainConfig, spec: FamilySpec, comps: Any, folder: Path, todo: list[int], *, main: bool) -> None:
    samples = fallback.require(spec, "samples", "--num_class_images")
    size = cfg.data.sample_batch_size
    assert cfg.data.class_prompt, "check() refused generating without --class_prompt"
    validation = dataclasses.replace(cfg.validation.one_prompt(cfg.data.class_prompt), num_validation_images=size)
    cond = samples.validation_inputs(comps, validation)
    sampling = dataclasses.replace(cfg, validation=validation)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set(todo)
    with Progress(len(todo), desc="class images", unit="image", enabled=main) as progress:
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
