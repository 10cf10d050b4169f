"""The latent cache stage of :func:`~dit_lora.data.prepare.prepare_data`: each sample's cache file checked (bad
entries deleted and recomputed), the missing ones encoded by every rank its share, the samples that cannot be
encoded left out, and the cached training and held-out data returned."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from dit_lora.config.schema import DataOptions
from dit_lora.contract import spec as fallback
from dit_lora.core.collective import Failure, exchange
from dit_lora.core.errors import UserError
from dit_lora.core.progress import say
from dit_lora.data import batches as batch_lib
from dit_lora.data import caption_dropout, held_out
from dit_lora.data.cache import (
    build_cache,
    cache_files,
    cache_namespace,
    default_cache_root,
    first_per_file,
    for_copies,
    verify_cache_file,
)
from dit_lora.data.data_sets import SetsMedia
from dit_lora.data.kohya import copy_of
from dit_lora.data.prepared_data import LeftOut, PreparedData, write_quarantine


def cache_root_for(data: DataOptions) -> Path:
    """The latent-cache root (``data``: the run's ``cfg.data``): ``--cache_dir`` or :func:`default_cache_root`."""
    return Path(data.cache_dir) if data.cache_dir else default_cache_root()


def _gather(accelerator, local: dict[int, str]) -> dict[int, str]:
    """Union of every rank's ``{sample index: reason}``, identical on all ranks (a collective)."""
    if accelerator.num_processes <= 1:
        return dict(local)
    from accelerate.utils import gather_object

    return dict(sorted(gather_object(sorted(local.items()))))


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


def _checked_cache_files(data: DataOptions, media, comps, samples: list, training: int, accelerator, log):
    """Stage 3a: each sample's cache file, its bad existing entries deleted; returns (cache folder, files,
    ``{index: problem}`` of the bad entries, indices still to encode). Indices >= ``training`` are held out."""
    root = cache_root_for(data)
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
    data: DataOptions, media, encoders, comps, samples: list, files: list[Path], missing: list[int], accelerator
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
            random_flip=data.random_flip,
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


def cached_data(
    data: DataOptions,
    output_dir: str,
    spec,
    media,
    comps,
    samples: list,
    held: list,
    left_out: LeftOut,
    accelerator,
    log,
):
    """Stage 3: cache the training and held-out samples together (each file once) and return the cached data."""
    encoders = fallback.require(spec, "encoders", "The latent cache (--cache_latents)")
    training, samples = len(samples), samples + held  # cached together, each file once: indices >= training held out
    folder, files, invalid, missing = _checked_cache_files(data, media, comps, samples, training, accelerator, log)
    failed = _encode_missing(data, media, encoders, comps, samples, files, missing, accelerator)
    _list_failures(failed, invalid, samples, training, left_out)
    keep = [i for i in range(len(files)) if i not in failed]
    if failed:
        log(f"{len(failed)} sample(s) could not be encoded finitely and are left out (see {left_out.path})")
    write_quarantine(output_dir, accelerator, left_out.entries)
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
        data.caption_dropout_probability,
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
