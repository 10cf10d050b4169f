"""The conditioning image of image-to-video validation (Wan, CogVideoX and SANA-Video image-to-video) and of an
edit model's validation (Qwen-Image Edit): the ``--validation_image`` check, the image loaded or kept, and the copy
the model card's snippet loads (:func:`keep_card_input`, :func:`card_input_source`)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from PIL import Image, ImageOps

from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_bytes_atomic
from dit_lora.data.video import VideoDecodeError, decode_clip
from dit_lora.output.names import CARD_INPUT_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def check_validation_image(cfg: TrainConfig, unset: str) -> None:
    """Refuse a ``--validation_image`` that is not a file, in one paragraph saying what leaving it unset does
    (``unset``: "condition validation videos on ...")."""
    image = getattr(cfg.family_options, "validation_image", None)
    if image and not os.path.isfile(image):
        raise UserError(
            f"--validation_image `{image}` does not exist. Give an image file, or leave it unset to {unset}."
        )


def refuse_stills(samples: list, alternative: str) -> None:
    """Image-to-video refuses images (a one-frame clip has no frame after the conditioning one to learn), in one
    paragraph naming how many, one of them, and ``alternative`` (the text-to-video family that trains them)."""
    stills = [s for s in samples if getattr(s, "bucket", None) and s.bucket[0] == 1]
    if stills:
        raise UserError(
            f"{len(stills)} training sample(s) are images, e.g. `{stills[0].key}`: image-to-video learns the "
            "frames that follow the conditioning first frame, and a one-frame clip has none. Remove the images "
            f"from the data, or train them with {alternative}."
        )


def load_conditioning_image(source: str | None, samples: list | None, height: int, width: int):
    """The conditioning image of image-to-video validation, as a PIL image of ``width`` x ``height``.

    ``source`` (``--validation_image``) is cover-resized and centre-cropped as training frames are; without it the
    first frame of the first training clip (``samples[0]``) is taken. Either failure is one paragraph.
    """
    if source:
        try:
            with Image.open(source) as im:
                image = im.convert("RGB")
        except (OSError, ValueError) as err:
            raise UserError(f"--validation_image `{source}` cannot be read as an image ({err}).")
        return ImageOps.fit(image, (width, height), Image.Resampling.BICUBIC)
    if not samples:
        raise UserError("Image-to-video validation needs a conditioning image: set --validation_image.")
    try:
        frame = decode_clip(samples[0].path, 1, height, width)[0]
    except VideoDecodeError as err:
        raise UserError(f"Cannot take the validation image from `{samples[0].key}` ({err}); set --validation_image.")
    array = ((frame.permute(1, 2, 0) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    return Image.fromarray(array)


def keep_card_input(cfg: TrainConfig, image: Image.Image | str) -> None:
    """Write the run's conditioning input (a PIL image, or an image file's path) beside the adapter as
    :data:`~dit_lora.output.names.CARD_INPUT_FILE`, a PNG, by the main process: the card's snippet loads it there (or
    from the Hub repo it is pushed to), so it runs as printed wherever it is run."""
    from accelerate import PartialState

    out = Path(cfg.training.output_dir)
    if not out.is_dir() or not PartialState().is_main_process:  # a run made its folder before the data stage
        return
    if isinstance(image, str):
        with Image.open(image) as opened:
            image = ImageOps.exif_transpose(opened).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    write_bytes_atomic(out / CARD_INPUT_FILE, buffer.getvalue())


def card_input_source() -> str:
    """The snippet's name of the image it conditions on (:func:`keep_card_input`), quoted; the card writer puts it
    where the card loads the adapter from (``output.report``)."""
    return json.dumps(CARD_INPUT_FILE)


def inspect_clips(task, cfg: TrainConfig, state, samples: list, text_to_video: str) -> None:
    """A video family's ``inspect_samples``: image-to-video (``task.task == "i2v"``) refuses images
    (:func:`refuse_stills`, naming ``text_to_video``, the family that trains them) and keeps the first clip's first
    frame (or ``--validation_image``) for validation videos (:func:`kept_conditioning_image`); text-to-video nothing."""
    if task.task != "i2v":
        return
    refuse_stills(samples, text_to_video)
    kept_conditioning_image(task, cfg, state, samples)


def kept_conditioning_image(video_frames, cfg: TrainConfig, state, samples: list | None = None):
    """The run's image-to-video validation image (:func:`load_conditioning_image` at the first bucket of
    ``video_frames``), kept in ``state.validation_image`` (the family's typed run state): given ``samples`` (the data
    stage's ``inspect_samples``) it is taken from them; otherwise the kept one is returned, or ``--validation_image``
    loaded (``state`` None: nothing is kept, as for a card written without a run)."""
    image = state.validation_image if state is not None and samples is None else None
    if image is None:
        _, height, width = video_frames.video_buckets(cfg)[0]
        image = load_conditioning_image(cfg.family_options.validation_image, samples, height, width)
        if state is not None:
            state.validation_image = image
        if samples is not None:  # the data stage of a run: the card's first frame too
            keep_card_input(cfg, image)
    return image


def to_pil(frames: torch.Tensor) -> list[Image.Image]:
    """``(B, 3, H, W)`` in [-1, 1] -> PIL images (what a user hands an image-to-video pipeline: Wan's CLIP and
    HunyuanVideo 1.5's SigLIP take them through their processors)."""
    arrays = ((frames.float().permute(0, 2, 3, 1) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).cpu().numpy()
    return [Image.fromarray(a) for a in arrays]
