"""Stand-ins of the diffusion-family tests (tests/families/diffusion/): a VAE that records its moves, and the
pooling toy's encoders (latents: 8x average-pooled pixels; a caption's embedding: its length)."""

from __future__ import annotations

import torch


class Vae(torch.nn.Linear):
    """A stand-in VAE that says where it is (``.device``, as diffusers models do) and remembers each move."""

    def __init__(self):
        super().__init__(1, 1)
        self.moves = [torch.device("cpu")]

    @property
    def device(self):
        return self.moves[-1]

    def to(self, device):
        self.moves.append(torch.device(device))
        return self


def pool_images(pixel_values: torch.Tensor) -> torch.Tensor:
    """The toy's latents: the pixels 8x average-pooled."""
    return torch.nn.functional.avg_pool2d(pixel_values, 8)


def caption_lengths(captions: list[str], with_negative: bool = False) -> dict[str, torch.Tensor]:
    """The toy's prompt embeddings: each caption's length (and 0 for the CFG negative)."""
    lengths = [len(c) for c in captions] + ([0] if with_negative else [])
    return {"prompt_embeds": torch.tensor(lengths, dtype=torch.float32)[:, None]}


class PoolingEncoding:
    """The toy's encoders as methods (mixed into a DiffusionEncoders component or an old-style DiffusionFamily)."""

    def cache_identity(self, cfg, comps=None):
        return {"resolution": cfg.resolution}

    def encode_images(self, comps, pixel_values):
        return pool_images(pixel_values)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return caption_lengths(captions, with_negative)
