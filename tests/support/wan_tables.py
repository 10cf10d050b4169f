"""Shared by the Wan family's loss and encoder tests: the shifted flow-matching table written out by hand, and the
tiny VAE loaded in fp32."""

from __future__ import annotations

import torch


def hand_table(shift: float, n: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigmas, timesteps), noisiest first: ``s = (n - i) / n``, ``sigma = shift s / (1 + (shift - 1) s)``."""
    s = torch.arange(n, 0, -1, dtype=torch.float64) / n
    sigma = shift * s / (1 + (shift - 1) * s)
    return sigma, sigma * n


def table_indices(timesteps: torch.Tensor, shift: float) -> torch.Tensor:
    """The hand table's index of each drawn timestep (nearest entry; they are the table's own values)."""
    _, table = hand_table(shift)
    found = (table[None, :] - timesteps.double().flatten()[:, None]).abs().argmin(1)
    assert torch.allclose(table[found], timesteps.double().flatten(), atol=1e-3)
    return found


def wan_vae(path):
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan.from_pretrained(path, subfolder="vae", torch_dtype=torch.float32).eval()
