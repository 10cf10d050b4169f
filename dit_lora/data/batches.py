"""Resumable, rank-sharded batch order and the datasets the training loop reads.

The order of an epoch is a pure function of (seed, epoch), flips are a pure function of
(seed, epoch, index), and the position inside an epoch is two integers: so a run killed and
resumed from a checkpoint sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from dit_lora.core.errors import UserError
from dit_lora.data.caption_dropout import drop_caption
from dit_lora.data.masks import PIXEL_KEY, sample_mask
from dit_lora.data.text_padding import pad_ragged, ragged_keys
from dit_lora.data.transforms import crop_seed, flip_decision, preprocess_image
from dit_lora.data.video import FrameStart, decode_clip

#: a batch item: (sample index, flip), or (sample index, flip, drop caption) with caption dropout on
BatchItem = tuple[int, bool] | tuple[int, bool, bool]


class EpochBatches:
    """Batches of (sample index, flip) for one rank; every rank yields the same number of batches.

    With ``caption_dropout`` > 0 each item is (sample index, flip, drop caption) (:func:`unpack_item` reads both).

    ``groups`` (optional, one group id per sample, e.g. a clip's frame bucket) keeps every batch
    within one group, since samples of different shapes cannot be stacked. Per epoch each group is
    shuffled and cut into global batches of ``batch_size * world_size`` samples (a remainder too
    small to give every rank a sample is left out that epoch); the global batches of all groups
    are shuffled together and rank ``r`` takes ``[r::world_size]`` of each, so all ranks work on
    the same group at every step. Without groups (or with a single one) the order is the plain
    rank-strided permutation, unchanged.

    ``sets`` and ``set_weights`` (a dataset config's: each sample's set, and the probability that a batch comes from
    each set) draw the epoch's global batches by weight instead: the epoch keeps its number of batches, each drawn
    from a set chosen with its probability, a set's batches taken in a shuffled order that starts again, newly
    shuffled, when it runs out. The groups must not mix sets (:class:`~dit_lora.data.data_sets.SetsMedia`'s do not).
    Every draw comes from the epoch's generator, so the order stays a pure function of (seed, epoch).
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        seed: int,
        rank: int,
        world_size: int,
        random_flip: bool,
        groups: list[int] | None = None,
        caption_dropout: float = 0.0,
        sets: Sequence[int] | None = None,
        set_weights: Sequence[float] | None = None,
        set_names: Sequence[str] | None = None,
    ):
        if groups is not None and len(groups) != num_samples:
            raise ValueError(f"groups has {len(groups)} entries for {num_samples} samples")
        self.num_samples, self.batch_size = num_samples, batch_size
        self.seed, self.rank, self.world_size, self.random_flip = seed, rank, world_size, random_flip
        self.caption_dropout = caption_dropout  # > 0: items carry a third entry, drop the caption (drop_caption)
        # One group is no grouping: keep the plain order (and its resume behaviour) bit for bit.
        self.groups = list(groups) if groups is not None and len(set(groups)) > 1 else None
        self.per_rank = num_samples // world_size
        self.sets: list[int] | None = list(sets) if sets and set_weights else None
        self.set_weights: list[float] | None = list(set_weights) if sets and set_weights else None
        if self.sets is not None and self.groups is None and len(set(self.sets)) > 1:
            raise ValueError("weighted sets need groups that keep them apart")
        if self.groups is None:
            if self.per_rank == 0:
                raise UserError(
                    f"The dataset has {num_samples} usable samples but {world_size} processes need at least one "
                    "each. Add data or launch fewer processes (dit-lora launch --num_processes)."
                )
            return
        members: dict[int, list[int]] = {}
        for index, group in enumerate(self.groups):
            members.setdefault(group, []).append(index)
        self._members = [members[g] for g in sorted(members)]
        span = batch_size * world_size
        self._num_batches = sum(len(m) // span + (len(m) % span >= world_size) for m in self._members)
        if self._num_batches == 0:
            sizes = ", ".join(str(len(m)) for m in self._members)
            raise UserError(
                f"No bucket has enough samples for {world_size} processes (samples per bucket: {sizes}); a batch "
                "never mixes buckets, so every process needs at least one sample of the same bucket. Add data, "
                "use fewer buckets (--frame_buckets; for images --aspect_buckets square) or launch fewer processes "
                "(dit-lora launch --num_processes)."
            )
        if self.sets is not None:
            self._check_sets(span, list(set_names or []))

    def _check_sets(self, span: int, names: list[str]) -> None:
        """Every set with a weight holds at least one batch (a set with none could never be drawn)."""
        assert self.sets is not None and self.set_weights is not None
        batches, samples = [0] * len(self.set_weights), [0] * len(self.set_weights)
        for members in self._members:
            samples[self.sets[members[0]]] += len(members)
            batches[self.sets[members[0]]] += len(members) // span + (len(members) % span >= self.world_size)
        empty = [k for k, n in enumerate(batches) if n == 0 and self.set_weights[k] > 0]
        if empty:
            named = ", ".join(f"`{names[k]}`" if k < len(names) else f"{k + 1}" for k in empty)
            counts = ", ".join(str(samples[k]) for k in empty)
            raise UserError(
                f"Data set(s) {named} of the dataset config have a weight but give no batch: their usable samples "
                f"({counts}) fill no bucket with one sample for each of the {self.world_size} process(es), and a "
                "batch never mixes sets or buckets. Add data to them, use fewer buckets, launch fewer processes, or "
                "remove the set."
            )

    @property
    def largest_batch(self) -> int:
        """The most samples one process's micro-batch holds: ``batch_size``, or fewer when the data is smaller than a
        batch on every process (per process, and per group when grouped): the batch that actually trains."""
        if self.groups is None:
            return min(self.batch_size, self.per_rank)
        span = self.batch_size * self.world_size
        kept = [min(len(m), span) for m in self._members if len(m) >= self.world_size]  # others: never a batch
        return min(self.batch_size, max(-(-n // self.world_size) for n in kept))

    def trained_batch(self, flag: int, log: Callable[[str], Any]) -> int:
        """:attr:`largest_batch`, with one line through ``log`` when the data makes it smaller than
        ``--train_batch_size`` (``flag``): the log, the summary and the card then say the batch that trained."""
        batch = self.largest_batch
        if batch < flag:
            samples, world = self.num_samples, self.world_size
            per = f" ({samples // world} per process, {world} processes)" if world > 1 else ""
            log(
                f"--train_batch_size {flag}: the data has {samples} usable sample(s){per}, so each micro-batch holds "
                f"at most {batch}: training at batch {batch} (the summary and the model card say {batch}; "
                f"--scale_lr scales by it). Pass --train_batch_size {batch} to say so, or add data."
            )
        return batch

    def __len__(self) -> int:
        if self.groups is None:
            return math.ceil(self.per_rank / self.batch_size)
        return self._num_batches

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[BatchItem]]:
        """The batches of ``epoch`` from batch index ``start`` on."""
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        if self.groups is None:
            order = torch.randperm(self.num_samples, generator=gen)[self.rank :: self.world_size][: self.per_rank]
            chunks = [order[b * self.batch_size : (b + 1) * self.batch_size].tolist() for b in range(len(self))]
        else:
            chunks = self._grouped(gen)
        for chunk in chunks[start:]:
            flips = [(i, self.random_flip and flip_decision(self.seed, epoch, i)) for i in chunk]
            items: list[BatchItem] = list(flips)
            if self.caption_dropout > 0:  # without it the items stay (index, flip), as recorded before it existed
                items = [(i, flip, drop_caption(self.seed, epoch, i, self.caption_dropout)) for i, flip in flips]
            yield items

    def _grouped(self, gen: torch.Generator) -> list[list[int]]:
        span = self.batch_size * self.world_size
        global_batches: list[list[int]] = []
        for members in self._members:  # sorted by group id: the draw order is fixed
            shuffled = [members[j] for j in torch.randperm(len(members), generator=gen).tolist()]
            for b in range(0, len(shuffled), span):
                batch = shuffled[b : b + span]
                if len(batch) >= self.world_size:
                    global_batches.append(batch)
        if self.set_weights is not None:
            order = self._weighted(global_batches, gen)
        else:
            order = torch.randperm(len(global_batches), generator=gen).tolist()
        return [global_batches[g][self.rank :: self.world_size] for g in order]

    def _weighted(self, global_batches: list[list[int]], gen: torch.Generator) -> list[int]:
        """As many global batches as the epoch holds, each from a set drawn by its weight (see the class)."""
        assert self.sets is not None and self.set_weights is not None
        of_set: list[list[int]] = [[] for _ in self.set_weights]
        for g, batch in enumerate(global_batches):
            of_set[self.sets[batch[0]]].append(g)
        weights = torch.tensor(self.set_weights, dtype=torch.float64)
        drawn = torch.multinomial(weights, len(global_batches), replacement=True, generator=gen).tolist()
        queues: list[list[int]] = [[] for _ in of_set]
        order = []
        for k in drawn:
            if not queues[k]:  # a set's batches, shuffled anew each time they run out
                queues[k] = [of_set[k][j] for j in torch.randperm(len(of_set[k]), generator=gen).tolist()]
            order.append(queues[k].pop())
        return order


#: the batch key of a micro-batch's class images (prior preservation), collated apart by :class:`PriorCollate`
PRIOR = "prior"
#: what the class images' order adds to the run's seed, so that it is not the instance order's shuffle
_PRIOR_SEED = 7_777_777


class PairedBatches:
    """The batch order of a run with class images (prior preservation, diffusers' DreamBooth): every batch of the
    instance ``order`` followed by a batch of class images (indices ``offset`` on: they come after the training
    samples), which :class:`PriorCollate` collates apart. The class batches run through their own seeded order
    (``prior``: an :class:`EpochBatches` of the class images, every rank alike), one per instance batch, so the
    pairing is a pure function of (seed, epoch, position) and a resumed run draws the same pairs. Reads as the
    instance order does everywhere else (length, largest batch, seed)."""

    def __init__(self, order: EpochBatches, prior: EpochBatches, offset: int) -> None:
        self.order, self.prior, self.offset = order, prior, offset
        self._epochs: dict[int, list[list[BatchItem]]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.order, name)

    def __len__(self) -> int:
        return len(self.order)

    def batches(self, epoch: int, start: int = 0) -> Iterator[list[BatchItem]]:
        """The instance batches of ``epoch`` from ``start`` on, each with its class images after it."""
        for position, items in enumerate(self.order.batches(epoch, start), start):
            yield items + [self._shifted(item) for item in self.class_batch(epoch, position)]

    def class_batch(self, epoch: int, position: int) -> list[BatchItem]:
        """The class images paired with batch ``position`` of ``epoch``: the next of the class order's batches,
        counting every instance batch before it (the class order's epochs run on as they run out)."""
        count = epoch * len(self.order) + position
        class_epoch, index = divmod(count, len(self.prior))
        if class_epoch not in self._epochs:
            self._epochs = {class_epoch: list(self.prior.batches(class_epoch))}  # one class epoch at a time
        return self._epochs[class_epoch][index]

    def _shifted(self, item: BatchItem) -> BatchItem:
        index, flip = item[0], item[1]
        return (index + self.offset, flip)


def paired_order(order: EpochBatches, class_groups: list[int] | None, count: int, offset: int) -> PairedBatches:
    """``order`` paired with class batches of the ``count`` class images (``class_groups``: their buckets) at
    ``order``'s batch size, ranks and flips, seeded apart from it."""
    try:
        prior = EpochBatches(
            count,
            order.batch_size,
            seed=order.seed + _PRIOR_SEED,
            rank=order.rank,
            world_size=order.world_size,
            random_flip=order.random_flip,
            groups=class_groups,
        )
    except UserError:
        raise UserError(
            f"The {count} usable class image(s) of prior preservation give no batch of class images for each of the "
            f"{order.world_size} process(es) (a batch never mixes buckets). Add class images (--num_class_images), "
            "use fewer buckets, or launch fewer processes."
        ) from None
    return PairedBatches(order, prior, offset)


class PriorCollate:
    """A paired micro-batch collated as two: the instance items (index below ``start``) as the run's batch, the
    class images' under :data:`PRIOR` (each by ``collate``)."""

    def __init__(self, collate: Callable[[list[dict[str, Any]]], dict[str, Any]], start: int) -> None:
        self.collate, self.start = collate, start

    def __call__(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        own = [it for it in items if int(it["sample_index"]) < self.start]
        prior = [it for it in items if int(it["sample_index"]) >= self.start]
        batch = self.collate(own)
        if prior:
            batch[PRIOR] = self.collate(prior)
        return batch


class _ListSampler:
    """Feeds precomputed batches to a DataLoader (which then handles workers and prefetch)."""

    def __init__(self, batches: list[list[BatchItem]]):
        self._batches = batches

    def __iter__(self):
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


_FLIPPED = "_flipped"


def unpack_item(item: tuple) -> tuple[int, bool, bool]:
    """A batch item as (index, flip, drop caption): :class:`EpochBatches` adds the third entry only with caption
    dropout on."""
    return int(item[0]), bool(item[1]), len(item) > 2 and bool(item[2])


class CachedLatentDataset(torch.utils.data.Dataset):
    """Reads one cache file per sample: latents (and flipped latents) plus its own caption's embeddings.

    Flipped items get every cached ``X_flipped`` in place of ``X`` (``latents``, and e.g. a video
    family's ``image_latents``); unflipped items drop the ``_flipped`` entries. An item whose caption is dropped gets
    every tensor of the ``empty_prompt`` entry (the empty caption's embeddings and masks) in place of its own.
    """

    def __init__(self, files: list[Path], empty_prompt: Path | None = None):
        self.files, self.empty_prompt = files, empty_prompt
        self._empty: dict[str, torch.Tensor] | None = None  # read once per process (each worker its copy)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, item: BatchItem) -> dict[str, Any]:
        index, flip, drop = unpack_item(item)
        tensors = load_file(str(self.files[index]))
        out: dict[str, Any] = {k: v for k, v in tensors.items() if not k.endswith(_FLIPPED)}
        if flip:
            if "latents" + _FLIPPED not in tensors:
                raise KeyError(f"cache entry {self.files[index]} has no flipped latents")
            out.update({k[: -len(_FLIPPED)]: v for k, v in tensors.items() if k.endswith(_FLIPPED)})
        if drop:
            out.update(self._empty_caption())
        out["sample_index"] = index
        return out

    def _empty_caption(self) -> dict[str, torch.Tensor]:
        if self.empty_prompt is None:
            raise KeyError("a caption is dropped but the dataset has no empty-caption entry")
        if self._empty is None:
            self._empty = load_file(str(self.empty_prompt))
        return dict(self._empty)


class RawImageDataset(torch.utils.data.Dataset):
    """Decodes and preprocesses images on the fly (used with --cache_latents false), within ``max_pixels``
    and reduced when much larger than their size (:func:`~dit_lora.data.decode.load_rgb`): each image to its bucket
    (``sample.bucket``, (height, width)), else to the ``resolution`` square. ``masked`` (``--masked_loss``): each item
    also holds its mask prepared as its image (``mask_pixels``, ``(1, H, W)``: :func:`~dit_lora.data.masks.sample_mask`),
    which the family's ``prepare_batch`` averages to the latent grid."""

    def __init__(
        self,
        samples: list,
        resolution: int,
        center_crop: bool,
        seed: int,
        max_pixels: int | None = None,
        masked: bool = False,
    ):
        self.samples, self.resolution, self.center_crop, self.seed = samples, resolution, center_crop, seed
        self.max_pixels, self.masked = max_pixels, masked

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: BatchItem) -> dict[str, Any]:
        index, flip, drop = unpack_item(item)
        sample = self.samples[index]
        size = sample.bucket or (self.resolution, self.resolution)
        image = sample.open_image(resolution=size, max_pixels=self.max_pixels)
        seed = crop_seed(self.seed, sample.key)
        pixels = preprocess_image(image, size, center_crop=self.center_crop, flip=flip, crop_rng_seed=seed)
        out = {"pixel_values": pixels, "caption": "" if drop else sample.caption, "sample_index": index}
        if self.masked:
            out[PIXEL_KEY] = sample_mask(
                sample,
                image.size,
                size,
                center_crop=self.center_crop,
                flip=flip,
                crop_rng_seed=seed,
                max_pixels=self.max_pixels,
            )
        return out


#: a raw clip batch's frame rates (per clip, 0: an image or a rate the container does not give), as the cached
#: batches of a family that records them carry them (LTX-2 places its tokens in time by it)
CLIP_FPS = "clip_fps"


class RawVideoDataset(torch.utils.data.Dataset):
    """Decodes clips on the fly to their bucket (used with --cache_latents false for video families); an image
    among them is a one-frame clip, decoded within ``max_pixels`` (:func:`~dit_lora.data.video.decode_clip`). Each
    item also carries its clip's frame rate (:data:`CLIP_FPS`)."""

    def __init__(self, samples: list, frame_sampling: FrameStart, max_pixels: int | None = None):
        self.samples, self.frame_sampling, self.max_pixels = samples, frame_sampling, max_pixels

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: BatchItem) -> dict[str, Any]:
        index, flip, drop = unpack_item(item)
        sample = self.samples[index]
        frames, height, width = sample.bucket
        pixels = decode_clip(sample.path, frames, height, width, start=self.frame_sampling, max_pixels=self.max_pixels)
        if flip:
            pixels = pixels.flip(-1)
        fps = torch.tensor(float(getattr(sample, "source_fps", 0.0) or 0.0))
        return {"pixel_values": pixels, "caption": "" if drop else sample.caption, "sample_index": index, CLIP_FPS: fps}


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors (a ragged one's rows zero-padded to the batch's longest:
    :func:`~dit_lora.data.text_padding.pad_ragged`), keep strings as lists."""
    out: dict[str, Any] = {}
    ragged = set(ragged_keys(items[0]))
    for key in items[0]:
        values = [it[key] for it in items]
        if key in ragged:
            out[key] = pad_ragged(values)
        else:
            out[key] = torch.stack(values) if isinstance(values[0], torch.Tensor) else values
    return out


#: a run's batch order: the plain one, or paired with class images
BatchOrder = EpochBatches | PairedBatches


def epoch_loader(dataset, collate_fn, order: BatchOrder, epoch: int, start: int, num_workers: int):
    """A DataLoader over ``epoch`` starting at batch ``start``, batched by ``collate_fn`` (``PreparedData.collate``)."""
    # DataLoader draws a worker base seed from its generator (default: the global RNG) whenever an
    # iterator starts; a private generator keeps the global stream (LoRA dropout) resume-exact.
    worker_seed = torch.Generator().manual_seed(order.seed * 7919 + epoch)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=_ListSampler(list(order.batches(epoch, start))),
        collate_fn=collate_fn,
        num_workers=num_workers,
        persistent_workers=False,
        generator=worker_seed,
    )
