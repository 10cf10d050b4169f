"""Resumable, rank-sharded batch order and the datasets the training loop reads.

The order of an epoch is a pure function of (seed, epoch), flips are a pure function of
(seed, epoch, index), and the position inside an epoch is two integers: so a run killed and
resumed from a checkpoint sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors.torch import load_file

from ..errors import UserError
from .transforms import crop_seed, flip_decision, preprocess_image


class EpochBatches:
    """Batches of (sample index, flip) for one rank; every rank yields the same number of batches."""

    def __init__(self, num_samples: int, batch_size: int, *, seed: int, rank: int, world_size: int, random_flip: bool):
        self.per_rank = num_samples // world_size
        if self.per_rank == 0:
            raise UserError(
                f"The dataset has {num_samples} usable samples but {world_size} processes need at least one each. "
                "Add data or launch fewer processes (accelerate launch --num_processes)."
            )
        self.num_samples, self.batch_size = num_samples, batch_size
        self.seed, self.rank, self.world_size, self.random_flip = seed, rank, world_size, random_flip

    def __len__(self) -> int:
        return math.ceil(self.per_rank / self.batch_size)

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[tuple[int, bool]]]:
        """The batches of ``epoch`` from batch index ``start`` on."""
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        order = torch.randperm(self.num_samples, generator=gen)[self.rank :: self.world_size][: self.per_rank].tolist()
        for b in range(start, len(self)):
            chunk = order[b * self.batch_size : (b + 1) * self.batch_size]
            yield [(i, self.random_flip and flip_decision(self.seed, epoch, i)) for i in chunk]


class _ListSampler:
    """Feeds precomputed batches to a DataLoader (which then handles workers and prefetch)."""

    def __init__(self, batches: list[list[tuple[int, bool]]]):
        self._batches = batches

    def __iter__(self):
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


class CachedLatentDataset(torch.utils.data.Dataset):
    """Reads one cache file per sample: latents (and flipped latents) plus its own caption's embeddings."""

    def __init__(self, files: list[Path]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, item: tuple[int, bool]) -> dict[str, Any]:
        index, flip = item
        tensors = load_file(str(self.files[index]))
        out = {k: v for k, v in tensors.items() if not k.startswith("latents")}
        out["latents"] = tensors["latents_flipped" if flip else "latents"]
        out["sample_index"] = index
        return out


class RawImageDataset(torch.utils.data.Dataset):
    """Decodes and preprocesses images on the fly (used with --cache_latents false)."""

    def __init__(self, samples: list, resolution: int, center_crop: bool, seed: int):
        self.samples, self.resolution, self.center_crop, self.seed = samples, resolution, center_crop, seed

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: tuple[int, bool]) -> dict[str, Any]:
        index, flip = item
        sample = self.samples[index]
        pixels = preprocess_image(
            sample.open_image(), self.resolution, center_crop=self.center_crop, flip=flip,
            crop_rng_seed=crop_seed(self.seed, sample.key),
        )
        return {"pixel_values": pixels, "caption": sample.caption, "sample_index": index}


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors, keep strings as lists."""
    out: dict[str, Any] = {}
    for key in items[0]:
        values = [it[key] for it in items]
        out[key] = torch.stack(values) if isinstance(values[0], torch.Tensor) else values
    return out


def epoch_loader(dataset, order: EpochBatches, epoch: int, start: int, num_workers: int):
    """A DataLoader over ``epoch`` starting at batch ``start``."""
    # DataLoader draws a worker base seed from its generator (default: the global RNG) whenever an
    # iterator starts; a private generator keeps the global stream (LoRA dropout) resume-exact.
    worker_seed = torch.Generator().manual_seed(order.seed * 7919 + epoch)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=_ListSampler(list(order.batches(epoch, start))),
        collate_fn=collate,
        num_workers=num_workers,
        persistent_workers=False,
        generator=worker_seed,
    )
