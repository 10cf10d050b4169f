"""From a config to a dataset the loop can iterate: list, check, inspect and (optionally) cache samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from . import batches as batch_lib
from .cache import build_cache, cache_files, cache_namespace, default_cache_root
from .sources import RawSample, load_samples, validate_samples


@dataclass
class PreparedData:
    """What the loop trains on.

    ``dataset[i]`` belongs to ``samples[i]``; every batch carries ``sample_index`` (a list of ints into
    ``samples``) so a bad step can be traced back to files. ``quarantine`` lists the samples left out,
    each as ``{"key": ..., "reason": ...}``.
    """

    dataset: torch.utils.data.Dataset
    samples: list[RawSample]
    cached: bool
    quarantine: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)


def _log(accelerator, msg: str) -> None:
    if accelerator.is_main_process:
        print(msg, flush=True)


def prepare_data(cfg, family, comps, accelerator) -> PreparedData:
    """Load, check and (optionally) cache the dataset."""
    log = lambda m: _log(accelerator, m)  # noqa: E731
    samples = load_samples(
        train_data_dir=cfg.train_data_dir, dataset_name=cfg.dataset_name, dataset_config_name=cfg.dataset_config_name,
        image_column=cfg.image_column, caption_column=cfg.caption_column, max_train_samples=cfg.max_train_samples,
    )
    samples = validate_samples(samples, max_bad_samples_fraction=cfg.max_bad_samples_fraction, log=log)
    family.inspect_samples(comps, cfg, samples)
    if not cfg.cache_latents:
        return PreparedData(batch_lib.RawImageDataset(samples, cfg.resolution, cfg.center_crop, cfg.seed), samples, False)
    identity = {**family.cache_identity(cfg), "resolution": cfg.resolution, "center_crop": cfg.center_crop,
                "random_flip": cfg.random_flip, "crop_seed": None if cfg.center_crop else cfg.seed}
    namespace = cache_namespace(identity)
    root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()
    files = cache_files(root, namespace, samples)
    missing = [i for i, f in enumerate(files) if not f.exists()]
    log(f"latent cache {root / namespace}: {len(files) - len(missing)}/{len(files)} samples already cached")
    accelerator.wait_for_everyone()  # all ranks agree on `missing` before anyone writes
    build_cache(
        samples, files, missing[accelerator.process_index :: accelerator.num_processes],
        encode_images=lambda px: family.encode_images(comps, px),
        encode_prompts=lambda caps: family.encode_prompts(comps, caps), resolution=cfg.resolution,
        center_crop=cfg.center_crop, random_flip=cfg.random_flip, seed=cfg.seed, batch_size=cfg.train_batch_size,
        rank=accelerator.process_index, log=print,
    )
    accelerator.wait_for_everyone()
    keep = [i for i, f in enumerate(files) if f.exists()]
    quarantine = [{"key": samples[i].key, "reason": "encoded latents or embeddings are not finite"}
                  for i in range(len(files)) if not files[i].exists()]
    if quarantine:
        log(f"{len(quarantine)} sample(s) could not be encoded finitely and are left out")
    if not keep:
        raise UserError("No sample could be encoded; check the images and captions in your dataset.")
    return PreparedData(batch_lib.CachedLatentDataset([files[i] for i in keep]), [samples[i] for i in keep], True,
                        quarantine)


def batch_to_device(batch: dict, device, family, comps, cached: bool) -> dict:
    """Move a collated batch to ``device``; encode on the fly when the cache is off."""
    if cached:
        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    out = family.encode_prompts(comps, batch["caption"])
    out["latents"] = family.encode_images(comps, batch["pixel_values"].to(device))
    out["sample_index"] = batch["sample_index"]
    return out
