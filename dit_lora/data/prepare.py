"""From a config to a dataset the loop can iterate: list, check, inspect and (optionally) cache samples.

Images, clips and video question-answer samples go through the same flow; what differs (how samples
are listed, screened, decoded and grouped into batches) sits in the :class:`MediaHandler` the family
returns from ``data_handler(cfg)``: :class:`ImageMedia` here,
:class:`~dit_lora.data.video_prepare.VideoMedia` for clips, :class:`~dit_lora.families.videollm.media.VideoQAMedia`
for video LLMs. ``check-data`` asks the same handler, so it screens exactly as training does.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from dit_lora.config.schema import DataOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import Encoders
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.collective import Failure, exchange, main_process_check
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import reporting_disk_full, write_json_atomic
from dit_lora.core.progress import say
from dit_lora.data import aspect, caption_dropout, class_images, held_out, masks, preflight
from dit_lora.data import batches as batch_lib
from dit_lora.data.cache import (
    build_cache,
    cache_files,
    cache_namespace,
    default_cache_root,
    first_per_file,
    for_copies,
    verify_cache_file,
)
from dit_lora.data.caption_files import refuse_unreadable_captions
from dit_lora.data.captions import (
    caption_lines,
    refused_captions,
    token_counter_for_model,
    token_counter_from_components,
)
from dit_lora.data.data_sets import SetMix, SetsMedia, sets_media
from dit_lora.data.decode import pixel_budget
from dit_lora.data.kohya import copy_of
from dit_lora.data.sources import RawSample, load_samples
from dit_lora.data.transforms import crop_seed, preprocess_image
from dit_lora.data.validation import bad_fraction_error, validate_samples
from dit_lora.output.names import QUARANTINE_FILE

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


@dataclass
class PreparedData:
    """What the loop trains on.

    ``dataset[i]`` belongs to ``samples[i]`` (a :class:`RawSample` for images, a
    :class:`~dit_lora.data.video.VideoSample` for clips); ``collate`` turns a list of ``dataset``
    items into a batch (the loop's loader and the recovery's replay both use it); every batch
    carries ``sample_index`` (a list of ints into ``samples``) so a bad step can be traced back to
    files. ``quarantine`` lists the samples left out, each as ``{"key": ..., "reason": ...}``. ``groups`` is None,
    or one group id per sample that a batch must not mix (a clip's frame bucket, when there are several):
    pass it to :class:`~dit_lora.data.batches.EpochBatches`. ``held_out``: the samples of the validation loss
    (:mod:`.held_out`), the same kind of data (read as ``dataset[(i, False)]``, batched by ``collate``), or None.
    """

    dataset: torch.utils.data.Dataset
    collate: Callable[[list[dict[str, Any]]], dict[str, Any]]
    samples: list
    cached: bool
    quarantine: list[dict[str, Any]] = field(default_factory=list)
    groups: list[int] | None = None
    held_out: PreparedData | None = None
    #: the data sets of a dataset config (``--dataset_config``: each sample's set, batch probabilities, loss
    #: factors), or None for one data set
    sets: SetMix | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def cache_entries(self) -> list[Path]:
        """Every cache file a batch may read: the training samples', the held-out ones' and the empty caption's."""
        if not self.cached:
            return []
        held = getattr(self.held_out.dataset, "files", []) if self.held_out is not None else []
        empty = getattr(self.dataset, "empty_prompt", None)
        return [*getattr(self.dataset, "files", []), *held, *([empty] if empty is not None else [])]


class MediaHandler(Protocol):
    """What :func:`prepare_data` and ``check-data`` ask of a family's data (``family.data_handler(cfg)``)."""

    noun: str  #: what one sample is called in messages ("image", "clip")
    cacheable: bool  #: whether samples are encoded once into the latent cache (diffusion) or not (video LLMs)
    encode_batch_size: int  #: samples per encode call while caching (cacheable handlers only)

    def list_samples(self) -> list:
        """Every sample named by the data flags, unread."""

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """The usable samples; each left-out one is appended to ``quarantine`` with its reason."""

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: (per-sample rows, the usable samples, a note or None)."""

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """Everything that changes an encoded sample besides its content (the cache namespace); ``comps``: the
        run's components (what the data stage decided, e.g. DiT's label map), None in ``check-data``."""

    def raw_dataset(self, samples: list) -> torch.utils.data.Dataset:
        """The uncached dataset."""

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """A batch of :meth:`raw_dataset` items (:func:`~dit_lora.data.batches.collate`, or padding of its own)."""

    def groups(self, samples: list, **kwargs: Any) -> list[int] | None:
        """One group id per sample that a batch must not mix (frame buckets), or None."""


class ImageMedia:
    """The :class:`MediaHandler` of image families (``DiffusionData.data_handler``)."""

    noun = "image"
    cacheable = True
    collate = staticmethod(batch_lib.collate)
    #: trains from a dataset config (:mod:`.data_sets`): it reads nothing of the data beyond each set's samples
    data_sets = True

    def __init__(self, cfg: TrainConfig, spec: FamilySpec) -> None:
        self.cfg, self.spec = cfg, spec
        self.encode_batch_size = cfg.training.train_batch_size

    def list_samples(self) -> list[RawSample]:
        cfg = self.cfg
        samples = load_samples(
            train_data_dir=cfg.data.train_data_dir,
            dataset_name=cfg.data.dataset_name,
            dataset_config_name=cfg.data.dataset_config_name,
            image_column=cfg.data.image_column,
            caption_column=cfg.data.caption_column,
            max_train_samples=cfg.data.max_train_samples,
            labels_from_folders=fallback.caption_source(self.spec) == "class_folders",
            caption_extension=cfg.data.caption_extension,
            instance_prompt=cfg.data.instance_prompt,
            dataset_split=cfg.data.dataset_split,
            caption_column_given="caption_column" in (getattr(cfg, "explicit_options", None) or ()),
            exclude_keys=self.excluded_keys(),
            mask_column=cfg.data.mask_column,
            attach_masks=cfg.data.masked_loss,
        )
        return samples

    def excluded_keys(self) -> frozenset[str]:
        """Files of the data folder that are no samples of their own (none here; an edit family's control images)."""
        return frozenset()

    def screen(self, samples: list, *, log, quarantine: list[dict[str, Any]]) -> list:
        """The readable images, each given its bucket (:meth:`bucket_samples`: the bucket table is logged here); with
        ``--masked_loss`` an image without a mask stops the run first (check-data lists it as a BLOCK row)."""
        cfg = self.cfg
        if cfg.data.masked_loss:
            masks.require_masks(
                samples, column=cfg.data.mask_column, folder=cfg.data.train_data_dir, dataset=cfg.data.dataset_name
            )
        usable = validate_samples(
            samples,
            max_bad_samples_fraction=self.cfg.data.max_bad_samples_fraction,
            log=log,
            quarantine=quarantine,
            require_captions=fallback.requires_captions(self.spec),
            raise_on_fraction=False,
            resolution=self.cfg.data.resolution,
            max_pixels=self.max_pixels,
        )
        if self.cfg.data.masked_loss:
            usable = masks.screen_masks(
                usable,
                unmasked_weight=self.cfg.data.unmasked_weight,
                max_pixels=self.max_pixels,
                log=log,
                quarantine=quarantine,
            )
        return self.bucket_samples(usable, log=log)

    def check(self, samples: list, *, log) -> tuple[list, list, str | None]:
        """``check-data``: every image preprocessed to its bucket as training would; (rows, usable samples with their
        buckets, note)."""
        cfg = self.cfg
        if cfg.data.resolution < 1:
            raise UserError(
                f"--resolution is {cfg.data.resolution}; give the training resolution in pixels, e.g. 1024."
            )
        log(f"checking {len(samples)} sample(s) at resolution {cfg.data.resolution} ({self.buckets_text}) ...")
        if self.square_reason:
            log(f"aspect buckets: {self.square_reason}")
        rows = preflight.check_samples(
            samples,
            resolution=cfg.data.resolution,
            center_crop=cfg.data.center_crop,
            seed=cfg.training.seed,
            require_captions=fallback.requires_captions(self.spec),
            max_pixels=self.max_pixels,
            buckets=self.buckets,
            unmasked_weight=cfg.data.unmasked_weight,
        )
        refused = report_captions(samples, cfg, self.spec, log)
        for row in rows:  # what the run leaves out before encoding, a row per caption here
            if row.what == "sample" and row.key in refused:
                row.status = preflight.BLOCK
                over = f"caption of {refused[row.key]} tokens, over --max_sequence_length (the pipeline refuses it)"
                row.problem = "; ".join(filter(None, [over, row.problem]))
        if cfg.data.masked_loss:  # what the run refuses before screening, a row per image here
            without = {s.key for s in samples if not s.has_mask}
            for row in rows:
                if row.what == "sample" and row.key in without:
                    row.status = preflight.BLOCK
                    row.problem = "; ".join(filter(None, [f"no mask (--masked_loss; {masks.LOOKED_FOR})", row.problem]))
        # one row per file (a repeat's copies folded into it): each sample takes its own file's row, never the
        # next in line (zipped, the copies shifted every later sample onto another file's bucket and cache entry)
        of_file = {r.key: r for r in rows if r.what == "sample"}
        bucketed = [
            dataclasses.replace(s, bucket=r.bucket)
            for s in samples
            if (r := of_file.get(s.key)) is not None
            and r.bucket is not None
            and r.status != preflight.BLOCK  # a run quarantines it: never held out, cached
        ]
        return rows, bucketed, None

    @functools.cached_property
    def _stride(self) -> tuple[int | None, str | None]:
        return fallback.bucket_stride(self.spec, self.cfg)

    @functools.cached_property
    def buckets(self) -> list[tuple[int, int]]:
        """The run's ``(height, width)`` buckets (``--aspect_buckets``, :func:`~dit_lora.data.aspect.run_buckets`)."""
        return aspect.run_buckets(self.cfg.data.aspect_buckets, self.cfg.data.resolution, self._stride[0])

    @property
    def square_reason(self) -> str | None:
        """Why images keep the square although ``--aspect_buckets auto`` asks for buckets (the model), or None."""
        return self._stride[1] if aspect.parse_mode(self.cfg.data.aspect_buckets) == aspect.AUTO else None

    @property
    def buckets_text(self) -> str:
        """How the log names the run's buckets: the mode, their number, area and stride."""
        mode, stride = aspect.parse_mode(self.cfg.data.aspect_buckets), self._stride[0]
        if mode == aspect.AUTO and stride is not None:
            return (
                f"{aspect.FLAG} auto: {len(self.buckets)} aspect-ratio buckets of at most {self.cfg.data.resolution}"
                f"x{self.cfg.data.resolution} pixels in steps of {stride}"
            )
        return f"{aspect.FLAG} {self.cfg.data.aspect_buckets}: every image cropped to {aspect.format_size(self.buckets[0])}"

    def bucket_samples(self, samples: list, *, log) -> list:
        """``samples`` each with its bucket (:func:`~dit_lora.data.aspect.sample_bucket`, the header read in threads);
        logs the bucket table and the images the crop cuts by more than :data:`~dit_lora.data.aspect.CROP_WARNING`."""
        if not samples:
            return samples
        choose = functools.partial(aspect.sample_bucket, buckets=self.buckets, max_pixels=self.max_pixels)
        with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="bucket") as pool:
            chosen = list(pool.map(choose, samples))
        if self.square_reason:
            log(f"aspect buckets: {self.square_reason}")
        # Files, not kohya copies: a copy has its file's bucket and crop (repeats are said where folders are listed).
        files = [(s, c) for s, c in zip(samples, chosen) if getattr(s, "repeat", 0) == 0]
        counted = "" if len(files) == len(samples) else ", each file once whatever its repeats"
        log(f"images per bucket ({self.buckets_text}{counted}):")
        for line in aspect.bucket_table([b for _, (b, _) in files]):
            log(line)
        crop = aspect.crop_line([(s.key, share) for s, (_, share) in files])
        if crop:
            log(
                crop + f" (a crop keeps the centre with --center_crop, else a fixed random window; {aspect.FLAG} "
                "auto keeps the least crop)"
            )
        return [dataclasses.replace(s, bucket=b) for s, (b, _) in zip(samples, chosen)]

    @property
    def max_pixels(self) -> int:
        """The pixel budget of an image (``--max_image_pixels``, or its default for ``--resolution`` or a larger
        fixed ``--aspect_buckets`` size)."""
        area = self.cfg.data.resolution * self.cfg.data.resolution
        mode = aspect.parse_mode(self.cfg.data.aspect_buckets)
        size = mode if isinstance(mode, tuple) and mode[0] * mode[1] > area else self.cfg.data.resolution
        return pixel_budget(size, self.cfg.data.max_image_pixels)

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """No ``resolution`` or bucket mode: each entry's name carries its bucket (:meth:`RawSample.cache_key`), so a
        change of either re-encodes only the images whose bucket changed."""
        cfg = self.cfg
        encoders: Encoders = fallback.require(self.spec, "encoders", "The latent cache (--cache_latents)")
        return {
            **encoders.cache_identity(cfg, comps),
            "image_size": "bucket in the key",
            "center_crop": cfg.data.center_crop,
            "random_flip": cfg.data.random_flip,
            "crop_seed": None if cfg.data.center_crop else cfg.training.seed,
            # masked runs cache each mask beside its latents: their own namespace (unmasked caches keep theirs)
            **({"loss_mask": "luminance x alpha, area-averaged to the latent grid"} if cfg.data.masked_loss else {}),
        }

    def size_of(self, sample) -> tuple[int, int]:
        """The ``(height, width)`` a sample is cropped to: its bucket (the ``--resolution`` square before it has one)."""
        return sample.bucket or (self.cfg.data.resolution, self.cfg.data.resolution)

    def pixel_loader(self, samples: list):
        cfg = self.cfg

        def load(i: int) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
            size = self.size_of(samples[i])
            image = samples[i].open_image(resolution=size, max_pixels=self.max_pixels)
            seed = crop_seed(cfg.training.seed, samples[i].key)
            pixels = preprocess_image(image, size, center_crop=cfg.data.center_crop, flip=False, crop_rng_seed=seed)
            if not cfg.data.masked_loss:
                return pixels
            # the mask follows the image as decoded (a much larger image is decoded reduced)
            mask = masks.sample_mask(
                samples[i],
                image.size,
                size,
                center_crop=cfg.data.center_crop,
                flip=False,
                crop_rng_seed=seed,
                max_pixels=self.max_pixels,
            )
            return pixels, mask

        return load

    def raw_dataset(self, samples: list):
        return batch_lib.RawImageDataset(
            samples,
            self.cfg.data.resolution,
            self.cfg.data.center_crop,
            self.cfg.training.seed,
            self.max_pixels,
            masked=self.cfg.data.masked_loss,
        )

    def groups(self, samples: list, **_: Any) -> list[int] | None:
        """Each image's bucket (its index among the run's buckets): a batch never mixes sizes; None for one bucket."""
        index = {b: i for i, b in enumerate(self.buckets)}
        groups = [index[self.size_of(s)] for s in samples]
        return groups if len(set(groups)) > 1 else None


def check_image_buckets(spec: FamilySpec, cfg: TrainConfig) -> None:
    """A bad ``--aspect_buckets`` ends an image family's run before anything loads, in one paragraph (a family
    without ``image_buckets``, e.g. a video one, ignores the flag); so does a dataset config the family cannot
    train, or a set's own bad ``aspect_buckets``."""
    class_images.check(cfg, spec)  # class images that must be generated and cannot be
    media = sets_media(cfg, spec)  # reads the dataset config and refuses a family that cannot train sets
    for config in media.configs if media is not None else [cfg]:
        if spec.image_buckets is not None:
            aspect.run_buckets(
                config.data.aspect_buckets, config.data.resolution, fallback.bucket_stride(spec, config)[0]
            )


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


def cache_root_for(data: DataOptions) -> Path:
    """The latent-cache root (``data``: the run's ``cfg.data``): ``--cache_dir`` or :func:`default_cache_root`."""
    return Path(data.cache_dir) if data.cache_dir else default_cache_root()


def _log(accelerator, msg: str) -> None:
    if accelerator.is_main_process:
        say(msg)  # above the caching bar, if one is drawn


def _gather(accelerator, local: dict[int, str]) -> dict[int, str]:
    """Union of every rank's ``{sample index: reason}``, identical on all ranks (a collective)."""
    if accelerator.num_processes <= 1:
        return dict(local)
    from accelerate.utils import gather_object

    return dict(sorted(gather_object(sorted(local.items()))))


def write_quarantine(output_dir: str | Path, accelerator, quarantine: list[dict[str, Any]]) -> Path:
    """Write ``output_dir/quarantine.json`` (main process, atomic): every left-out sample with its reason."""
    path = Path(output_dir) / QUARANTINE_FILE
    advice = (
        "Nothing has been trained yet: free some space there or choose an --output_dir on a disk with room, "
        "and run the same command again."
    )

    def write() -> None:
        with reporting_disk_full("the list of left-out samples", path, advice=advice):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, quarantine)

    # Every rank learns of the main process's failure (a full disk), instead of waiting at the next collective.
    main_process_check(accelerator, write, what=f"writing {path}")
    return path


def _build_cache_everywhere(accelerator, build: Callable[[], dict[int, str]]) -> dict[int, str]:
    """``build()`` on every rank; when it raises on one (a full cache disk), every rank raises (not a hang at the
    next collective): the same paragraph for a :class:`UserError`, else the failing rank's traceback and a
    paragraph naming that rank on the others."""
    own, result = None, {}
    try:
        result = build()
    except Exception as err:
        own = err
    failures = exchange(accelerator, Failure.of(own, accelerator.process_index) if own is not None else None)
    if own is not None:
        raise own
    if failures:
        first = failures[0]
        raise (
            first.error()
            if first.user
            else UserError(
                f"Rank {first.rank} failed while building the latent cache ({first.text}), so this process stops too. "
                "That process's own error, printed with its traceback, says why: fix that and run again."
            )
        )
    return result


def _drop_bad_cache_entries(files: list[Path], present: list[int], samples: list, accelerator) -> dict[int, str]:
    """Check the existing cache entries (readable, finite), each rank its share; delete the bad ones.

    Returns ``{sample index: problem}`` over all ranks: those entries are recomputed like missing ones.
    Ranks agree on ``present`` before anyone deletes.
    """
    rank, world = accelerator.process_index, accelerator.num_processes
    accelerator.wait_for_everyone()
    invalid_local: dict[int, str] = {}
    first = first_per_file(present, files)  # one check per file: two ranks never check and delete one file
    mine = [i for i in present if first[i] == i][rank::world]
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="verify") as pool:
        problems = list(pool.map(verify_cache_file, [files[i] for i in mine]))
    for i, problem in zip(mine, problems):
        if problem is not None:
            invalid_local[i] = problem
            print(f"cache entry of {samples[i].key} ({files[i].name}): {problem}; recomputing it", flush=True)
            files[i].unlink(missing_ok=True)
    return for_copies(_gather(accelerator, invalid_local), first)


def _sample_encoder(encoders, comps) -> Callable[[list], dict[str, torch.Tensor]] | None:
    """The family's ``encode_samples(comps, samples)`` when its encoders have one (conditioning that reads more of a
    sample than its caption, e.g. an edit model's control images), else None: captions go to ``encode_prompts``."""
    encode = getattr(encoders, "encode_samples", None)
    return None if encode is None else lambda chosen: encode(comps, chosen)


def _source(cfg: TrainConfig) -> str:
    """The run's data source, as a paragraph names it (``--train_data_dir `data```)."""
    if cfg.data.dataset_config:
        return f"--dataset_config `{cfg.data.dataset_config}`"
    return (
        f"--train_data_dir `{cfg.data.train_data_dir}`"
        if cfg.data.train_data_dir
        else f"--dataset_name `{cfg.data.dataset_name}`"
    )


@dataclass
class _LeftOut:
    """The samples left out so far (``entries``, as ``quarantine.json`` lists them) and the limit they count against."""

    total: int  # files: a kohya repeat is screened, quarantined and counted once
    counted: str  # what ``total`` counts, as the refusal names it
    path: Path  # output_dir/quarantine.json
    limit: float  # --max_bad_samples_fraction
    entries: list[dict[str, Any]] = field(default_factory=list)

    def stop_if_too_many(self) -> None:
        """Raise the one-paragraph refusal when the left-out samples are above ``--max_bad_samples_fraction``."""
        error = bad_fraction_error(
            [(q["key"], q["reason"]) for q in self.entries],
            self.total,
            self.limit,
            what=self.counted,
            where=f" Every left-out sample and why: {self.path}.",
        )
        if error is not None:
            raise error


def _screened_samples(cfg: TrainConfig, media, accelerator, log) -> tuple[list, list, _LeftOut]:
    """Stage 1: list and screen the samples and choose the held-out ones; returns (training, held out, left out).

    On a refusal (too many bad samples, no held-out sample) the list of left-out samples is written first."""
    samples = media.list_samples()
    # every caption file that is not UTF-8 in one paragraph (check-data shows each as a row instead)
    refuse_unreadable_captions(samples, _source(cfg))
    total = len(set(copy_of(samples)))
    counted = "training samples" if total == len(samples) else "training files (their repeats are not counted)"
    left_out = _LeftOut(
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


def _without_refused_captions(samples: list, held: list, left_out: _LeftOut, comps, cfg, accelerator, log):
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


def _checked_cache_files(cfg: TrainConfig, media, comps, samples: list, training: int, accelerator, log):
    """Stage 3a: each sample's cache file, its bad existing entries deleted; returns (cache folder, files,
    ``{index: problem}`` of the bad entries, indices still to encode). Indices >= ``training`` are held out."""
    root = cache_root_for(cfg.data)
    if isinstance(media, SetsMedia):  # each set's entries in its own namespace
        folder, files = media.cache_files(root, comps, samples)
    else:
        folder = root / cache_namespace(media.namespace_identity(comps))
        files = cache_files(root, folder.name, samples)
    shared = held_out.shared_line(files[:training], files[training:], samples[training:])
    if shared:
        log(shared)
    present = [i for i, f in enumerate(files) if f.exists()]
    invalid = _drop_bad_cache_entries(files, present, samples, accelerator)
    present_set = set(present) - set(invalid)
    missing = [i for i in range(len(files)) if i not in present_set]
    log(
        f"latent cache {folder}{' (and the other sets beside it)' if isinstance(media, SetsMedia) else ''}: "
        f"{len(present_set)}/{len(files)} samples already cached"
        + (f", {len(invalid)} bad cache entr{'y' if len(invalid) == 1 else 'ies'} to recompute" if invalid else "")
    )
    return folder, files, invalid, missing


def _encode_missing(
    cfg: TrainConfig, media, encoders, comps, samples: list, files: list[Path], missing: list[int], accelerator
):
    """Stage 3b: encode the missing cache entries, each rank its share; returns ``{index: reason}`` of the
    samples that could not be encoded finitely, over all ranks."""
    rank, world = accelerator.process_index, accelerator.num_processes
    accelerator.wait_for_everyone()  # all ranks agree on `missing` before anyone writes
    # One index per cache file before the ranks' shares: copies of one file on two ranks would encode it twice at once
    first = first_per_file(missing, files)
    todo = [i for i in missing if first[i] == i]
    failed_local = _build_cache_everywhere(
        accelerator,
        lambda: build_cache(
            samples,
            files,
            todo[rank::world],
            encode_images=lambda px: encoders.encode_images(comps, px),
            encode_prompts=lambda caps: encoders.encode_prompts(comps, caps),
            load_pixels=media.pixel_loader(samples),
            random_flip=cfg.data.random_flip,
            batch_size=media.encode_batch_size,
            rank=rank,
            log=say,
            what=media.noun,
            world=world,
            encode_samples=_sample_encoder(encoders, comps),
        ),
    )
    failed = for_copies(_gather(accelerator, failed_local), first)
    accelerator.wait_for_everyone()
    return failed


def _list_failures(failed: dict[int, str], invalid: dict[int, str], samples: list, training: int, left_out) -> None:
    """Stage 3c: add the samples that could not be encoded to the left-out list, each file once."""
    origin, listed = copy_of(samples), Counter(copy_of(samples))
    for i, reason in sorted(failed.items()):
        if origin[i] != i:
            continue  # a kohya repeat: its file is quarantined once, with the count
        if i in invalid:
            reason = f"cached entry was bad ({invalid[i]}) and recomputing it failed: {reason}"
        repeats = {"repeats": listed[i]} if listed[i] > 1 else {}
        source = {"source": "held out"} if i >= training else {}
        left_out.entries.append({"key": samples[i].key, "reason": reason, **repeats, **source})


def _cached_data(cfg: TrainConfig, spec, media, comps, samples: list, held: list, left_out: _LeftOut, accelerator, log):
    """Stage 3: cache the training and held-out samples together (each file once) and return the cached data."""
    encoders = fallback.require(spec, "encoders", "The latent cache (--cache_latents)")
    training, samples = len(samples), samples + held  # cached together, each file once: indices >= training held out
    folder, files, invalid, missing = _checked_cache_files(cfg, media, comps, samples, training, accelerator, log)
    failed = _encode_missing(cfg, media, encoders, comps, samples, files, missing, accelerator)
    _list_failures(failed, invalid, samples, training, left_out)
    keep = [i for i in range(len(files)) if i not in failed]
    if failed:
        log(f"{len(failed)} sample(s) could not be encoded finitely and are left out (see {left_out.path})")
    write_quarantine(cfg.training.output_dir, accelerator, left_out.entries)
    left_out.stop_if_too_many()
    held_keep, keep = [i for i in keep if i >= training], [i for i in keep if i < training]
    if not keep:
        raise UserError(f"No sample could be encoded; check the {media.noun}s and captions in your dataset.")
    if held and not held_keep:
        raise UserError(
            f"No held-out {media.noun} of the validation loss could be encoded (see {left_out.path}): check them, or "
            "choose others (--validation_split, --validation_data_dir)."
        )
    kept = [samples[i] for i in keep]
    # Encoded now, while the text encoder is loaded (the family releases it after the data is built).
    empty = caption_dropout.cached_empty_prompt(
        cfg.data.caption_dropout_probability,
        folder,
        lambda caps: encoders.encode_prompts(comps, caps),
        accelerator,
        log,
    )
    held_files, held_samples = [files[i] for i in held_keep], [samples[i] for i in held_keep]
    held_data = PreparedData(batch_lib.CachedLatentDataset(held_files), batch_lib.collate, held_samples, True)
    return PreparedData(
        batch_lib.CachedLatentDataset([files[i] for i in keep], empty),
        batch_lib.collate,
        kept,
        True,
        left_out.entries,
        groups=media.groups(kept, world_size=accelerator.num_processes, log=log),
        held_out=held_data if held_keep else None,
        sets=media.mix(kept) if isinstance(media, SetsMedia) else None,
    )


def prepare_data(cfg: TrainConfig, spec: FamilySpec, comps, accelerator, media=None) -> PreparedData:
    """Load, check and (optionally) cache the dataset the family's :class:`MediaHandler` describes.

    Samples that cannot be used are left out and listed in ``PreparedData.quarantine`` and in
    ``output_dir/quarantine.json`` (always written; ``[]`` when nothing was left out): unreadable
    images or clips, truncated clips, clips too short for every frame bucket, empty captions,
    non-finite pixels, encodings that stay non-finite when recomputed, and cached entries that are
    unreadable or non-finite and stay so after one recompute. All of them together count against
    ``--max_bad_samples_fraction``; above it a ``UserError`` names them.

    Clips are cached one per encode call, each under its content id plus its (frames, height,
    width) bucket; with several buckets ``PreparedData.groups`` holds each clip's bucket index.

    The stages: screen the samples (:func:`_screened_samples`), report and inspect them, then either return
    them raw or cache them (:func:`_cached_data`).
    """
    log = lambda m: _log(accelerator, m)  # noqa: E731
    # a family may hand in its own, bound to comps
    media = media if media is not None else sets_media(cfg, spec) or spec.data.data_handler(cfg, spec)
    samples, held, left_out = _screened_samples(cfg, media, accelerator, log)
    samples, held = _without_refused_captions(samples, held, left_out, comps, cfg, accelerator, log)
    if accelerator.is_main_process:  # only the main process logs them: the other ranks need not compute them
        for line in report_lines(media, samples + held, comps) + fallback.sample_notes(spec, cfg, samples + held):
            log(line)
    fallback.inspect_samples(spec, comps, cfg, samples + held)  # e.g. DiT's label map must know every class
    if cfg.data.caption_dropout_probability > 0:
        log(caption_dropout.start_line(cfg.data.caption_dropout_probability))
    if cfg.data.cache_latents and media.cacheable:
        return _paired(_cached_data(cfg, spec, media, comps, samples, held, left_out, accelerator, log))
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
