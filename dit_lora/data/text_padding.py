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


__all__ = ["ROUND_TO", "cut_text_padding", "used_text_length"]
