"""Caption padding that no sample attends to: measured once over the latent cache, cut from every batch.

Sana pads every caption to ``--max_sequence_length`` (300) tokens and masks the padding out of the
cross-attention (a -10000 bias: its softmax weight underflows to exactly zero). Short captions leave most of
those keys masked in every sample, yet the attention, its backward and the key/value projections still run
over all 300. The positions past the last token any cached caption uses change nothing, so a run can cut them
from every batch: the model computes the same function, on fewer keys (up to float rounding: the sums run
over fewer terms). The length is one number per run, read from the cache before training (no host read in a
step, one static shape for ``--compile``), and the same on every process and after a resume.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open

#: lengths are rounded up to this many tokens (vector-friendly shapes; never past the padded length)
ROUND_TO = 8


def used_text_length(files: Iterable[Path], mask_key: str = "prompt_attention_mask") -> int | None:
    """One past the last caption position that any cached sample attends to, rounded up to :data:`ROUND_TO`
    and capped at the padded length; None when no file holds ``mask_key`` (nothing to cut)."""
    longest, padded = 0, None
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            if mask_key not in handle.keys():  # noqa: SIM118 - safe_open has keys(), no `in`
                return None
            mask = handle.get_tensor(mask_key).reshape(-1)
        padded = max(padded or 0, mask.numel())
        used = torch.nonzero(mask).reshape(-1)
        if used.numel():
            longest = max(longest, int(used[-1]) + 1)
    if padded is None:
        return None
    return min(padded, -(-max(longest, 1) // ROUND_TO) * ROUND_TO)


def cut_text_padding(embeds: torch.Tensor, mask: torch.Tensor, length: int | None):
    """``embeds`` (batch, tokens, width) and ``mask`` (batch, tokens) cut to their first ``length`` tokens (views,
    no copy); unchanged when ``length`` is None or not shorter."""
    if length is None or length >= embeds.shape[1]:
        return embeds, mask
    return embeds[:, :length], mask[:, :length]


#: the suffix that makes a cached tensor ragged: an encoding holding ``K`` ``(batch, tokens, ...)`` and ``K + LENGTHS``
#: ``(batch,)`` int64 (each row's own tokens) caches each row of ``K`` cut to its tokens, and a batch pads the rows back
#: with zeros to its longest (:func:`pad_ragged`). For captions whose padding costs more than it says: Ideogram 4's
#: 13 tapped layers of Qwen3-VL are 53,248 features a token, 218 MB a caption padded to its pipeline's 2,048 tokens.
LENGTHS = "_lengths"


def ragged_keys(names) -> list[str]:
    """The ragged tensors among ``names`` (those with a ``LENGTHS`` companion)."""
    return [k for k in names if k + LENGTHS in names]


def cut_ragged_row(row: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One cache entry's ragged tensors cut to their own tokens (a host tensor's length is read on the host)."""
    for key in ragged_keys(row):
        row[key] = row[key][: int(row[key + LENGTHS])].contiguous()
    return row


def pad_ragged(values: list[torch.Tensor]) -> torch.Tensor:
    """Rows of different token counts (dim 0) zero-padded after their tokens to the longest, stacked."""
    longest = max(v.shape[0] for v in values)
    out = values[0].new_zeros(len(values), longest, *values[0].shape[1:])
    for row, value in enumerate(values):
        out[row, : value.shape[0]] = value
    return out


def comparable_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A cache entry's tensor shapes with each ragged tensor's token count left out (entries of one bucket agree on
    the rest)."""
    return {k: (v[1:] if k in ragged_keys(shapes) else v) for k, v in shapes.items()}


__all__ = [
    "LENGTHS",
    "ROUND_TO",
    "comparable_shapes",
    "cut_ragged_row",
    "cut_text_padding",
    "pad_ragged",
    "ragged_keys",
    "used_text_length",
]
