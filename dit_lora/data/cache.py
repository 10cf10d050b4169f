"""Disk cache of latents and text embeddings, keyed by content, model and preprocessing.

One safetensors file per sample holds that sample's latents (and flipped latents when
--random_flip) together with its own caption's embeddings, so shuffling can never pair a latent
with another image's caption. Files are written atomically and reused by later runs. Images and
video clips share it: a clip's entry name also carries its (frames, height, width) bucket, and a
family may return several per-sample tensors (e.g. ``image_latents``), each cached under its name.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from dit_lora.core.fileio import reporting_disk_full, save_safetensors_atomic
from dit_lora.core.progress import Progress, say
from dit_lora.data.kohya import copy_of
from dit_lora.data.masks import LATENT_KEY, latent_mask
from dit_lora.data.text_padding import cut_ragged_row


def default_cache_root() -> Path:
    """``$HF_HOME/dit-lora/cache`` or ``~/.cache/dit-lora/cache``."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "dit-lora" / "cache"


def cache_namespace(identity: dict[str, Any]) -> str:
    """Stable short hash of everything besides the sample that shapes the cached tensors."""
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def cache_files(root: Path, namespace: str, samples: list) -> list[Path]:
    """The cache path of every sample (existing or not), named by the sample's ``cache_key()``.

    An image's key is its content id; a clip's adds its bucket (``<content id>:FxHxW``). A kohya repeat
    (:func:`~dit_lora.data.kohya.copy_of`) of the same bucket takes its first copy's name: the file is hashed once.
    """
    folder = Path(root) / namespace
    names: dict[tuple[int, Any], Path] = {}
    out: list[Path] = []
    for sample, first in zip(samples, copy_of(samples)):
        entry = (first, getattr(sample, "bucket", None))
        if entry not in names:
            names[entry] = folder / cache_file_name(namespace, sample.cache_key())
        out.append(names[entry])
    return out


def cache_file_name(namespace: str, content_id: str) -> str:
    """File name of one sample's entry inside its namespace folder."""
    return f"{hashlib.sha256((namespace + content_id).encode()).hexdigest()[:32]}.safetensors"


def inspect_cache_file(path: Path) -> tuple[str | None, dict[str, tuple[int, ...]]]:
    """Read one cache entry: (problem or None, ``{tensor name: shape}``).

    A problem is an unreadable file (truncated, not safetensors), a missing ``latents`` tensor or
    a floating tensor with NaN/Inf. Only safetensors is read: nothing is ever unpickled.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    bad: list[str] = []
    try:
        with safe_open(str(path), framework="pt") as handle:
            for name in sorted(handle.keys()):
                tensor = handle.get_tensor(name)
                shapes[name] = tuple(tensor.shape)
                if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                    kinds = []
                    if torch.isnan(tensor).any():
                        kinds.append("NaN")
                    if torch.isinf(tensor).any():
                        kinds.append("Inf")
                    bad.append(f"{name} has {'/'.join(kinds)}")
    except FileNotFoundError:
        return "cache file is missing", shapes
    except Exception as err:
        text = " ".join(str(err).split())[:200]
        return f"cache file is unreadable ({type(err).__name__}: {text})", shapes
    if bad:
        return "cached tensors are not finite: " + ", ".join(bad), shapes
    if "latents" not in shapes:
        return "cache file has no 'latents' tensor", shapes
    return None, shapes


def verify_cache_file(path: Path) -> str | None:
    """Why the cache entry at ``path`` cannot be used, or None when it is readable and finite."""
    return inspect_cache_file(path)[0]


def _finite(tensors: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())


def as_encoding(encoded: torch.Tensor | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A family's ``encode_images`` result as ``{name: tensor}`` (a bare tensor is ``latents``)."""
    if isinstance(encoded, torch.Tensor):
        return {"latents": encoded}
    if not isinstance(encoded, dict) or "latents" not in encoded:
        got = sorted(encoded) if isinstance(encoded, dict) else type(encoded).__name__
        raise TypeError(f"encode_images must return a latent tensor or a dict with 'latents', got {got}")
    return dict(encoded)


def _load_chunk(
    chunk: list[int],
    samples: list,
    load_pixels: Callable[[int], Any],
    failed: dict[int, str],
    log: Callable[[str], None],
    what: str,
) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
    """The decodable, finite samples of ``chunk``, their pixels and their masks (``load_pixels`` returning
    ``(pixels, mask)``: ``--masked_loss``; else none); the others go into ``failed``."""
    ready: list[int] = []
    pixels: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    for i in chunk:
        mask = None
        try:
            px = load_pixels(i)
            if isinstance(px, tuple):  # --masked_loss: (pixels, mask), the mask prepared as its image
                px, mask = px
        except Exception as err:
            detail = " ".join(str(err).split())[:200]
            failed[i] = f"{what} could not be decoded for caching ({type(err).__name__}: {detail})"
            log(f"skipping {samples[i].key}: {failed[i]}")
            continue
        if not torch.isfinite(px).all():
            failed[i] = "decoded pixels are not finite"
            log(f"skipping {samples[i].key}: {failed[i]}")
            continue
        ready.append(i)
        pixels.append(px)
        if mask is not None:
            masks.append(mask)
    return ready, pixels, masks


def same_bucket_chunks(todo: list[int], samples: list, batch_size: int) -> list[list[int]]:
    """``todo`` cut into encode calls of at most ``batch_size`` samples that share one ``sample.bucket``: images of
    different aspect-ratio buckets (clips of different frame buckets) cannot be stacked. One bucket: plain chunks."""
    by_bucket: dict[Any, list[int]] = {}
    for i in todo:
        by_bucket.setdefault(getattr(samples[i], "bucket", None), []).append(i)
    return [
        group[start : start + batch_size] for group in by_bucket.values() for start in range(0, len(group), batch_size)
    ]


def first_per_file(indices: list[int], files: list[Path]) -> dict[int, int]:
    """Each of ``indices`` mapped to the first of them naming the same cache file: kohya repeats share one entry
    (:meth:`~dit_lora.data.sources.RawSample.cache_key` ignores ``repeat``), which must be written once, by one rank."""
    first_of: dict[Path, int] = {}
    return {i: first_of.setdefault(Path(files[i]), i) for i in indices}


def for_copies(found: dict[int, str], first: dict[int, int]) -> dict[int, str]:
    """``found`` (``{first index: problem}``) handed to every index whose first it is (``first``:
    :func:`first_per_file`)."""
    return {**found, **{i: found[f] for i, f in first.items() if f in found}}


def build_cache(
    samples: list,
    files: list[Path],
    todo: list[int],
    *,
    encode_images: Callable[[torch.Tensor], torch.Tensor | dict[str, torch.Tensor]],
    encode_prompts: Callable[[list[str]], dict[str, torch.Tensor]],
    load_pixels: Callable[[int], Any],
    random_flip: bool,
    batch_size: int,
    rank: int = 0,
    log: Callable[[str], None] = say,
    what: str = "image",
    world: int = 1,
    encode_samples: Callable[[list], dict[str, torch.Tensor]] | None = None,
) -> dict[int, str]:
    """Encode the samples ``todo`` (this rank's share of the missing ones); return ``{index: reason}`` of failures.

    ``load_pixels(i)`` gives sample ``i``'s pixels (``(3, H, W)`` for an image, ``(F, 3, H, W)`` for a
    clip; every sample of one batch the same shape). ``encode_images`` returns a latent tensor or a dict of per-sample tensors with ``latents``; every
    entry is stored, and with ``random_flip`` also ``<name>_flipped`` from the horizontally flipped
    pixels. ``what`` names the medium in failure reasons ("image", "clip"). ``encode_samples`` (a family whose
    conditioning reads more of a sample than its caption: an edit model's control images) replaces
    ``encode_prompts``: it is given the samples themselves. ``load_pixels`` may return ``(pixels, mask)``
    (``--masked_loss``, a mask ``(1, H, W)``): the entry then also holds ``loss_mask``, the mask averaged over the
    latents' grid (:func:`~dit_lora.data.masks.latent_mask`), and ``loss_mask_flipped`` with ``random_flip``.

    Every rank must compute the missing list *before* any rank starts writing, or ranks disagree
    about the split and some samples are never cached.

    A sample that cannot be decoded, whose pixels are not finite, or whose latents or embeddings
    come out non-finite is not cached and is reported, so bad data never reaches training. A
    non-finite encoding is recomputed once on its own (a NaN can come from the batch rather than
    the sample) before the sample is given up.

    Rank 0 shows its share's progress (:class:`~dit_lora.core.progress.Progress`: a bar with rate and ETA on a terminal,
    a plain line every 10% or 30 s without one); with ``world`` ranks each has about ``1 / world`` of the work.
    """
    failed: dict[int, str] = {}
    if not todo:
        return failed
    # Repeats of one image (a kohya N_words folder) share one cache file: encode it once, for its first index.
    copies = first_per_file(todo, files)
    todo = [i for i in todo if copies[i] == i]
    for folder in {Path(files[i]).parent for i in todo}:  # several data sets: a namespace folder each
        folder.mkdir(parents=True, exist_ok=True)
    desc = "caching" if world <= 1 else f"caching (rank {rank}'s share, {world} ranks)"

    encode = _batch_encoder(samples, encode_images, encode_prompts, encode_samples, random_flip)

    with Progress(len(todo), desc=desc, unit="sample", enabled=rank == 0) as progress:
        chunks = same_bucket_chunks(todo, samples, batch_size)
        for start, chunk in zip(accumulate([len(c) for c in chunks], initial=0), chunks):  # start: samples before it
            ready, pixels, masks = _load_chunk(chunk, samples, load_pixels, failed, log, what)
            if ready:
                batch = encode(ready, torch.stack(pixels), masks)
                for r, index in enumerate(ready):
                    tensors = _row(batch, r)
                    if not _finite(tensors):
                        # Recompute once, alone, before giving the sample up.
                        tensors = _row(encode([index], pixels[r][None], masks[r : r + 1]), 0)
                        if not _finite(tensors):
                            failed[index] = (
                                "encoded latents or caption embeddings are not finite (also when recomputed)"
                            )
                            log(f"skipping {samples[index].key}: {failed[index]}")
                            continue
                        log(f"{samples[index].key}: non-finite encoding in its batch, finite when recomputed alone")
                    _atomic_save(tensors, files[index], left=len(todo) - start - r)
            progress.update(len(chunk))
    failed.update({i: failed[first] for i, first in copies.items() if first in failed and i != first})
    return failed


def _batch_encoder(
    samples: list,
    encode_images: Callable[[torch.Tensor], torch.Tensor | dict[str, torch.Tensor]],
    encode_prompts: Callable[[list[str]], dict[str, torch.Tensor]],
    encode_samples: Callable[[list], dict[str, torch.Tensor]] | None,
    random_flip: bool,
) -> Callable[[list[int], torch.Tensor, list[torch.Tensor]], dict[str, torch.Tensor]]:
    """``encode(indices, pixels, masks)``: the cache entries of a batch (latents, flipped latents with
    ``random_flip``, the captions' or samples' conditioning, and the loss masks on the latent grid)."""

    def encode(indices: list[int], pixels: torch.Tensor, masks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        out = as_encoding(encode_images(pixels))
        if random_flip:
            # The last axis is width for images (3, H, W) and clips (F, 3, H, W) alike.
            out.update({f"{k}_flipped": v for k, v in as_encoding(encode_images(pixels.flip(-1))).items()})
        chosen = [samples[i] for i in indices]
        out.update(encode_samples(chosen) if encode_samples else encode_prompts([s.caption for s in chosen]))
        # --masked_loss: each mask averaged over the latent grid, stored beside its latents (flipped as they are)
        if masks:
            out[LATENT_KEY] = latent_mask(torch.stack(masks), out["latents"].shape[-2:])
            if random_flip:
                out[LATENT_KEY + "_flipped"] = out[LATENT_KEY].flip(-1)
        return out

    return encode


def _row(batch: dict[str, torch.Tensor], r: int) -> dict[str, torch.Tensor]:
    """Row ``r`` of a batch's entries, on the CPU and contiguous (as one cache file holds it), its ragged tensors cut
    to their own tokens (:func:`~dit_lora.data.text_padding.cut_ragged_row`)."""
    return cut_ragged_row({k: v[r].detach().cpu().contiguous() for k, v in batch.items()})


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, left: int = 1) -> None:
    """Write one cache entry; a full disk is one paragraph naming the cache folder and about what the ``left``
    entries still to write (this one included) need."""
    needed = sum(t.numel() * t.element_size() for t in tensors.values()) * max(left, 1)
    advice = (
        "Nothing has been trained yet. Free some space there, or pass --cache_dir on a disk with room, and run "
        "the same command again: the entries already cached are kept and not encoded again."
    )
    with reporting_disk_full("the latent cache", path.parent, needed=needed, advice=advice):
        save_safetensors_atomic(tensors, path)
