"""Caption dropout (``--caption_dropout_probability``): train some samples on the empty caption.

A text-to-image (or video) model used with classifier-free guidance needs to know the unconditional prediction:
dropping a share of the captions to ``""`` while fine-tuning keeps that prediction trained (SimpleTuner's
``--caption_dropout_probability``, kohya's ``--caption_dropout_rate``). Two pieces make it exact:

* the decision is a pure hash of (seed, epoch, sample index) (:func:`drop_caption`, like
  :func:`~dit_lora.data.transforms.flip_decision`): no RNG state is touched, so every worker, order and resumed run
  drops the same captions;
* with the latent cache, the empty caption is encoded once, by the family's own ``encode_prompts([""])``, into one
  entry of the cache namespace (:func:`ensure_empty_prompt`) while the text encoder is still loaded; a dropped
  sample's caption tensors (embeddings and attention masks: every tensor ``encode_prompts`` returns) are replaced by
  that entry's (:class:`~dit_lora.data.batches.CachedLatentDataset`). Without the cache the dataset hands the
  empty caption to the per-step encode instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open

from dit_lora.core.collective import main_process_check
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import reporting_disk_full, save_safetensors_atomic
from dit_lora.data.text_padding import cut_ragged_row

#: name of the empty caption's entry inside a cache namespace folder (sample entries are 32 hex digits)
EMPTY_PROMPT_FILE = "empty_prompt.safetensors"
#: resolution of the probability test: the hash is compared with ``probability * 2**64``
_SCALE = 1 << 64


def drop_caption(seed: int, epoch: int, index: int, probability: float) -> bool:
    """Whether sample ``index`` trains on the empty caption in ``epoch`` under run ``seed``: true with
    ``probability``, decided by a hash (no RNG state), so the same in any worker, order or resumed run."""
    if probability <= 0:
        return False
    digest = hashlib.blake2b(
        f"caption_dropout\x1f{int(seed)}\x1f{int(epoch)}\x1f{int(index)}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little") < probability * _SCALE


def start_line(probability: float) -> str:
    """The line a run logs once at the start when captions are dropped."""
    return (
        f"caption dropout: each step drops a sample's caption with probability {probability:g} "
        "(deterministic per seed, epoch and sample)"
    )


def empty_prompt_file(cache_dir: Path) -> Path:
    """The empty caption's entry in the namespace folder ``cache_dir`` (one per model and text settings)."""
    return Path(cache_dir) / EMPTY_PROMPT_FILE


def empty_prompt_problem(path: Path) -> str | None:
    """Why the empty caption's entry at ``path`` cannot be used (missing, unreadable, empty, not finite), or None."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            names = list(handle.keys())
            bad = [n for n in names if (t := handle.get_tensor(n)).is_floating_point() and not torch.isfinite(t).all()]
    except FileNotFoundError:
        return "missing"
    except Exception as err:
        return f"unreadable ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
    if not names:
        return "holds no tensor"
    return f"not finite ({', '.join(bad)})" if bad else None


def ensure_empty_prompt(
    path: Path, encode_prompts: Callable[[list[str]], dict[str, torch.Tensor]], log: Callable[[str], object]
) -> bool:
    """Encode ``""`` with ``encode_prompts`` into ``path`` (atomic) unless a usable entry is there; return whether
    it was encoded now. A damaged entry is said and replaced; a non-finite encoding is one paragraph."""
    problem = empty_prompt_problem(path)
    if problem is None:
        return False
    if problem != "missing":
        log(f"the empty caption's cache entry {path} is {problem}; encoding it again")
    encoded = encode_prompts([""])
    tensors = cut_ragged_row({name: value[0].detach().cpu().contiguous() for name, value in encoded.items()})
    if not tensors:
        raise UserError(
            "--caption_dropout_probability needs the empty caption's encoding, but this family's "
            "encode_prompts returned nothing for it. Remove --caption_dropout_probability."
        )
    bad = [n for n, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise UserError(
            f"The text encoder's encoding of the empty caption is not finite ({', '.join(bad)}), so "
            "--caption_dropout_probability cannot train on it. Check the text encoder (e.g. fp16 "
            "overflow: try --mixed_precision bf16) or remove --caption_dropout_probability."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    with reporting_disk_full(
        "the latent cache",
        path.parent,
        needed=sum(t.numel() * t.element_size() for t in tensors.values()),
        advice="Free some space there, or pass --cache_dir on a disk with room, and run the "
        "same command again: the entries already cached are kept.",
    ):
        save_safetensors_atomic(tensors, path)
    return True


def cached_empty_prompt(
    probability: float,
    cache_dir: Path,
    encode_prompts: Callable[[list[str]], dict],
    accelerator,
    log: Callable[[str], object],
) -> Path | None:
    """The empty caption's entry in the namespace folder ``cache_dir``, encoded there by the main process (the others
    wait and share its failure) unless usable already; None when ``probability`` is 0 (nothing is encoded)."""
    if probability <= 0:
        return None
    path = empty_prompt_file(cache_dir)
    encoded = main_process_check(
        accelerator,
        lambda: ensure_empty_prompt(path, encode_prompts, log),
        what=f"encoding the empty caption into {path}",
    )
    accelerator.wait_for_everyone()
    if encoded:
        log(f"caption dropout: the empty caption encoded once into {path}")
    return path


__all__ = [
    "EMPTY_PROMPT_FILE",
    "cached_empty_prompt",
    "drop_caption",
    "empty_prompt_file",
    "empty_prompt_problem",
    "ensure_empty_prompt",
    "start_line",
]
