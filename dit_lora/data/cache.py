"""Disk cache of latents and text embeddings, keyed by content, model and preprocessing.

One safetensors file per sample holds that sample's latents (and flipped latents when
--random_flip) together with its own caption's embeddings, so shuffling can never pair a latent
with another image's caption. Files are written atomically and reused by later runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import save_file

from .transforms import crop_seed, preprocess_image


def default_cache_root() -> Path:
    """``$HF_HOME/dit-lora/cache`` or ``~/.cache/dit-lora/cache``."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "dit-lora" / "cache"


def cache_namespace(identity: dict[str, Any]) -> str:
    """Stable short hash of everything besides the sample that shapes the cached tensors."""
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def cache_files(root: Path, namespace: str, samples: list) -> list[Path]:
    """The cache path of every sample (existing or not)."""
    folder = Path(root) / namespace
    return [folder / f"{hashlib.sha256((namespace + s.content_id()).encode()).hexdigest()[:32]}.safetensors" for s in samples]


def build_cache(
    samples: list,
    files: list[Path],
    todo: list[int],
    *,
    encode_images: Callable[[torch.Tensor], torch.Tensor],
    encode_prompts: Callable[[list[str]], dict[str, torch.Tensor]],
    resolution: int,
    center_crop: bool,
    random_flip: bool,
    seed: int,
    batch_size: int,
    rank: int = 0,
    log: Callable[[str], None] = print,
) -> list[int]:
    """Encode the samples ``todo`` (this rank's share of the missing ones); return indices that failed.

    Every rank must compute the missing list *before* any rank starts writing, or ranks disagree
    about the split and some samples are never cached.

    A sample whose latents or embeddings come out non-finite is not cached and is reported, so
    bad data never reaches training.
    """
    failed: list[int] = []
    if not todo:
        return failed
    Path(files[todo[0]]).parent.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        images = [samples[i].open_image() for i in chunk]
        pixels = torch.stack([
            preprocess_image(img, resolution, center_crop=center_crop, flip=False, crop_rng_seed=crop_seed(seed, samples[i].key))
            for img, i in zip(images, chunk)
        ])
        latents = encode_images(pixels)
        flipped = encode_images(pixels.flip(-1)) if random_flip else None
        cond = encode_prompts([samples[i].caption for i in chunk])
        for row, index in enumerate(chunk):
            tensors = {"latents": latents[row]}
            if flipped is not None:
                tensors["latents_flipped"] = flipped[row]
            tensors.update({k: v[row] for k, v in cond.items()})
            if not all(torch.isfinite(t.float()).all() for t in tensors.values() if t.is_floating_point()):
                log(f"skipping {samples[index].key}: its encoded latents or caption embeddings are not finite")
                failed.append(index)
                continue
            _atomic_save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, files[index])
        log(f"cached {min(start + batch_size, len(todo))}/{len(todo)} samples (rank {rank})")
    return failed


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)
