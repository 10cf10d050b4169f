"""The :class:`~dit_lora.data.prepared_data.MediaHandler` of image families (:class:`ImageMedia`): list, screen,
bucket by aspect ratio and decode images, as training and ``check-data`` both do; and the check of a run's image
buckets before anything loads (:func:`check_image_buckets`)."""

from __future__ import annotations

import dataclasses
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import Encoders
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.data import aspect, class_images, masks, preflight
from dit_lora.data import batches as batch_lib
from dit_lora.data.data_sets import sets_media
from dit_lora.data.decode import pixel_budget
from dit_lora.data.sources import RawSample, load_samples
from dit_lora.data.transforms import crop_seed, preprocess_image
from dit_lora.data.validation import validate_samples

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig
from dit_lora.data.prepare import report_captions


class ImageMedia:
    """The :class:`~dit_lora.data.prepared_data.MediaHandler` of image families (``DiffusionData.data_handler``)."""

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
        return fallback.bucket_stride(self.spec, self.cfg.model)

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
    class_images.check(cfg.data, cfg.performance, spec)  # class images that must be generated and cannot be
    media = sets_media(cfg, spec)  # reads the dataset config and refuses a family that cannot train sets
    for config in media.configs if media is not None else [cfg]:
        if spec.image_buckets is not None:
            aspect.run_buckets(
                config.data.aspect_buckets, config.data.resolution, fallback.bucket_stride(spec, config.model)[0]
            )
