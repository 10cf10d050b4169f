"""From a config to a dataset the loop can iterate: list, check, inspect and (optionally) cache samples.

Images, clips and video question-answer samples go through the same flow; what differs (how samples
are listed, screened, decoded and grouped into batches) sits in the
:class:`~dit_lora.data.prepared_data.MediaHandler` the family returns from ``data_handler(cfg)``: :class:`~dit_lora.data.image_media.ImageMedia` for images,
:class:`~dit_lora.data.video_prepare.VideoMedia` for clips, :class:`~dit_lora.families.videollm.media.VideoQAMedia`
for video LLMs. ``check-data`` asks the same handler, so it screens exactly as training does.

The stages: list and screen the samples, leave out the captions a pipeline refuses, report them, then return them
raw or cache them (:mod:`.prepare_cache`); what the stages yield is :mod:`.prepared_data`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.core.progress import say
from dit_lora.data import batches as batch_lib
from dit_lora.data import caption_dropout, held_out
from dit_lora.data.caption_files import refuse_unreadable_captions
from dit_lora.data.captions import (
    caption_lines,
    refused_captions,
    token_counter_for_model,
    token_counter_from_components,
)
from dit_lora.data.data_sets import SetsMedia, sets_media
from dit_lora.data.kohya import copy_of
from dit_lora.output.names import QUARANTINE_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig
from dit_lora.data.prepare_cache import cached_data
from dit_lora.data.prepared_data import LeftOut, PreparedData, write_quarantine


def report_captions(samples: list, cfg: TrainConfig, spec: FamilySpec, log: Callable[[str], Any]) -> dict[str, int]:
    """check-data's lines on duplicate rows and captions the text length cuts (the model's tokenizer when
    --pretrained_model_name_or_path is given, else a character estimate, said so); returns ``{sample key: tokens}``
    of the captions a run would leave out (a pipeline that refuses them: Ideogram 4)."""
    counter, note = token_counter_for_model(cfg, spec)
    for line in caption_lines(samples, counter):
        log(line)
    if note and counter is not None:
        log(note)
    return refused_captions(samples, counter)


def report_lines(media, samples: list, comps) -> list[str]:
    """The lines, said once at the start, on what training silently changes about the usable ``samples``:
    duplicate rows and captions beyond the text length (images, clips), or conversations whose last rounds are
    cut (video LLMs, which fit them themselves: ``media.cut_rounds_line``, reading multi-round clips again)."""
    if hasattr(media, "cut_rounds_line"):
        line = media.cut_rounds_line(samples)
        return [line] if line else []
    if samples and hasattr(samples[0], "caption"):
        return caption_lines(samples, token_counter_from_components(comps))
    return []


def _log(accelerator, msg: str) -> None:
    if accelerator.is_main_process:
        say(msg)  # above the caching bar, if one is drawn


def _source(data: DataOptions) -> str:
    """The run's data source, as a paragraph names it (``--train_data_dir `data```)."""
    if data.dataset_config:
        return f"--dataset_config `{data.dataset_config}`"
    return (
        f"--train_data_dir `{data.train_data_dir}`" if data.train_data_dir else f"--dataset_name `{data.dataset_name}`"
    )


def _screened_samples(cfg: TrainConfig, media, accelerator, log) -> tuple[list, list, LeftOut]:
    """Stage 1: list and screen the samples and choose the held-out ones; returns (training, held out, left out).

    On a refusal (too many bad samples, no held-out sample) the list of left-out samples is written first."""
    samples = media.list_samples()
    # every caption file that is not UTF-8 in one paragraph (check-data shows each as a row instead)
    refuse_unreadable_captions(samples, _source(cfg.data))
    total = len(set(copy_of(samples)))
    counted = "training samples" if total == len(samples) else "training files (their repeats are not counted)"
    left_out = LeftOut(
        total, counted, Path(cfg.training.output_dir) / QUARANTINE_FILE, cfg.data.max_bad_samples_fraction
    )
    try:
        samples = media.screen(samples, log=log, quarantine=left_out.entries)
        left_out.stop_if_too_many()
        # prior preservation's class images are never held out (they come last, after the training samples)
        reg = [s for s in samples if isinstance(media, SetsMedia) and media.is_reg(s)]
        samples = [s for s in samples if not (isinstance(media, SetsMedia) and media.is_reg(s))]
        # the validation loss's samples: out of the training samples, or from their own folder (every rank alike)
        samples, held = held_out.choose(media, samples, cfg, log=log, quarantine=left_out.entries)
        samples += reg
    except UserError:
        write_quarantine(cfg.training.output_dir, accelerator, left_out.entries)
        raise
    return samples, held, left_out


def _without_refused_captions(samples: list, held: list, left_out: LeftOut, comps, cfg, accelerator, log):
    """Stage 1b: the samples whose captions a family's pipeline refuses (longer than the run's caption length,
    ``TextSettings.refused``: Ideogram 4) left out as bad samples are, named in ``quarantine.json`` with their token
    counts and counted against ``--max_bad_samples_fraction`` (every process alike); returns (training, held out)."""
    counter = token_counter_from_components(comps) if samples else None
    refused = refused_captions(samples + held, counter)
    if counter is None or not refused:
        return samples, held
    for key, tokens in refused.items():
        reason = f"caption of {tokens} tokens, over the caption length {counter.length} (the pipeline refuses it)"
        left_out.entries.append({"key": key, "reason": reason})
    log(
        f"long captions: {len(refused)} sample(s) left out, their captions longer than the caption length, which the "
        "pipeline refuses rather than cut (each named in quarantine.json; shorten them, or raise "
        "--max_sequence_length)"
    )
    try:
        left_out.stop_if_too_many()
    except UserError:
        write_quarantine(cfg.training.output_dir, accelerator, left_out.entries)
        raise
    return [s for s in samples if s.key not in refused], [s for s in held if s.key not in refused]


def prepare_data(cfg: TrainConfig, spec: FamilySpec, comps, accelerator, media=None) -> PreparedData:
    """Load, check and (optionally) cache the dataset the family's :class:`~dit_lora.data.prepared_data.MediaHandler` describes.

    Samples that cannot be used are left out and listed in ``PreparedData.quarantine`` and in
    ``output_dir/quarantine.json`` (always written; ``[]`` when nothing was left out): unreadable
    images or clips, truncated clips, clips too short for every frame bucket, empty captions,
    non-finite pixels, encodings that stay non-finite when recomputed, and cached entries that are
    unreadable or non-finite and stay so after one recompute. All of them together count against
    ``--max_bad_samples_fraction``; above it a ``UserError`` names them.

    Clips are cached one per encode call, each under its content id plus its (frames, height,
    width) bucket; with several buckets ``PreparedData.groups`` holds each clip's bucket index.

    The stages: screen the samples (:func:`_screened_samples`), report and inspect them, then either return
    them raw or cache them (:func:`~dit_lora.data.prepare_cache.cached_data`).
    """
    log = lambda m: _log(accelerator, m)  # noqa: E731
    # a family may hand in its own, bound to comps
    media = media if media is not None else sets_media(cfg, spec) or spec.data.data_handler(cfg, spec)
    samples, held, left_out = _screened_samples(cfg, media, accelerator, log)
    samples, held = _without_refused_captions(samples, held, left_out, comps, cfg, accelerator, log)
    if accelerator.is_main_process:  # only the main process logs them: the other ranks need not compute them
        for line in report_lines(media, samples + held, comps) + fallback.sample_notes(
            spec, cfg.training, cfg.family_options, samples + held
        ):
            log(line)
    fallback.inspect_samples(spec, comps, cfg, samples + held)  # e.g. DiT's label map must know every class
    if cfg.data.caption_dropout_probability > 0:
        log(caption_dropout.start_line(cfg.data.caption_dropout_probability))
    if cfg.data.cache_latents and media.cacheable:
        return _paired(
            cached_data(
                cfg.data, cfg.training.output_dir, spec, media, comps, samples, held, left_out, accelerator, log
            )
        )
    write_quarantine(cfg.training.output_dir, accelerator, left_out.entries)
    world = accelerator.num_processes
    return _paired(
        PreparedData(
            media.raw_dataset(samples),
            media.collate,
            samples,
            False,
            left_out.entries,
            groups=media.groups(samples, world_size=world, log=log),
            held_out=PreparedData(media.raw_dataset(held), media.collate, held, False) if held else None,
            sets=media.mix(samples) if isinstance(media, SetsMedia) else None,
        )
    )


def _paired(data: PreparedData) -> PreparedData:
    """``data`` whose micro-batches carry their class images apart (prior preservation:
    :class:`~dit_lora.data.batches.PriorCollate`), or ``data`` as it is."""
    start = data.sets.prior_start if data.sets is not None else None
    if start is None:
        if data.sets is not None and any(data.sets.reg):
            raise UserError(
                "No class image of prior preservation could be encoded (each is named with its reason in "
                "quarantine.json): check the class images, or train without --with_prior_preservation / `is_reg`."
            )
        return data
    return dataclasses.replace(data, collate=batch_lib.PriorCollate(data.collate, start))
