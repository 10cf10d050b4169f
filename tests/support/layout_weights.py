"""The weights and text encoders of the real-layout folders (real_layout.py and the other ``*_layout.py``): the
libraries' own init with its draws copied from a seeded pool (:func:`quick_init`), and the narrow inside of the
diffusion models' text encoders the tests ask for (:data:`NARROW_T5`, :data:`NARROW_GEMMA2`)."""

from __future__ import annotations

import contextlib
import functools

import torch

#: length of the pool quick_init tiles weights from: a prime, so no width of a model divides it (the rows of a
#: matrix are shifted copies of the pool, never one row repeated)
_POOL = 1_000_003


def _tiled(tensor: torch.Tensor, pool: torch.Tensor, offset: int) -> torch.Tensor:
    """``tensor`` filled with ``pool`` (already scaled) repeated from ``offset`` on: a copy, not a draw."""
    with torch.no_grad():
        flat, pool = tensor.view(-1), torch.roll(pool, -offset).to(tensor.dtype)
        full = flat.numel() // pool.numel()
        flat[: full * pool.numel()].view(full, pool.numel()).copy_(pool.expand(full, pool.numel()))
        flat[full * pool.numel():].copy_(pool[: flat.numel() - full * pool.numel()])
    return tensor


@contextlib.contextmanager
def quick_init(seed: int):
    """The libraries' own init (``Tensor.uniform_`` / ``normal_`` under ``nn.init`` and transformers'
    ``_init_weights``) with each draw replaced by a copy of a fixed pool of ``seed``'s draws, scaled to the asked
    range or mean and std, from a place in the pool drawn per tensor. Zeros, ones and constants stay the libraries';
    every drawn tensor keeps its distribution's first two moments, finite and full of distinct values. Why: a
    real-width layer is hundreds of millions of values, and drawing them (uniform_ in bf16 most of all) was most of
    building a 14B-wide layout (a minute of CPU for the Wan A14B's two experts); copying is ~40x faster."""
    generator = torch.Generator().manual_seed(seed)
    uniform, normal = torch.rand(_POOL, generator=generator), torch.randn(_POOL, generator=generator)
    real_uniform, real_normal = torch.Tensor.uniform_, torch.Tensor.normal_

    def offset() -> int:
        return int(torch.randint(_POOL, (1,), generator=generator))

    def uniform_(self, a=0.0, b=1.0, *, generator=None):
        if not self.is_contiguous() or self.is_meta or self.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return real_uniform(self, a, b, generator=generator)
        return _tiled(self, uniform * (b - a) + a, offset())

    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        if not self.is_contiguous() or self.is_meta or self.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return real_normal(self, mean, std, generator=generator)
        return _tiled(self, normal * std + mean, offset())

    own = {name: torch.Tensor.__dict__[name] for name in ("uniform_", "normal_") if name in torch.Tensor.__dict__}
    torch.Tensor.uniform_, torch.Tensor.normal_ = uniform_, normal_
    try:
        yield
    finally:
        for name in ("uniform_", "normal_"):  # the methods torch.Tensor had (its own or inherited) come back
            if name in own:
                setattr(torch.Tensor, name, own[name])
            else:
                delattr(torch.Tensor, name)


def random_weights(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Small random weights, std 0.02 (the libraries' own init can leave zero-initialised output layers), drawn as
    :func:`quick_init` draws."""
    with torch.no_grad(), quick_init(seed):
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


#: the inside of the Gemma-2-2B layer of the tests' Sana and SANA-Video folders: the model width (2304, the
#: transformer's caption_channels) and the heads stay; each head 32 wide instead of 256 and a 64-wide MLP instead of
#: 9216. dit-lora never reads these, and the published layer (78M parameters) over 300 tokens a caption was seconds
#: of each run. Opt-in (``narrow_text_encoder``): the benchmarks that measure memory or quantize the text encoder
#: build the published layer.
NARROW_GEMMA2 = {"head_dim": 32, "intermediate_size": 64}


def _quickly_initialised(build):
    """``build`` with its models' init under :func:`quick_init` (seed 0)."""
    @functools.wraps(build)
    def wrapped(*args, **kwargs):
        with quick_init(0):
            return build(*args, **kwargs)
    return wrapped


#: the inside of the (U)T5-XXL layer of the tests' CogVideoX and Wan folders: the model width (d_model 4096, the width
#: the transformer reads: its text_dim) and the 64 heads stay; each head 8 wide instead of 64, and a 64-wide
#: feed-forward instead of 10240. dit-lora never reads these, and the published layer (193M parameters) over 512 (Wan)
#: or 226 (CogVideoX) tokens a caption was most of a run's encoding and a third of the folder's bytes. Opt-in
#: (``narrow_text_encoder``), as :data:`NARROW_GEMMA2`.
NARROW_T5 = {"d_kv": 8, "d_ff": 64}


def _built_in(dtype: torch.dtype, seed: int, make):
    """``make()`` with parameters created in ``dtype`` (a 5120-wide 14B block is ~360M parameters: built in bf16
    it never exists in fp32) and a fixed seed; the libraries' own init (nothing all-zero in these models), its draws
    :func:`quick_init`'s."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.random.fork_rng(devices=[]), quick_init(seed):
            torch.manual_seed(seed)
            return make()
    finally:
        torch.set_default_dtype(previous)
