"""Stand-ins of the diffusion-family tests (tests/kit/): a VAE that records its moves, and the
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
    """The toy's encoders as methods (mixed into a DiffusionEncoders component)."""

    def cache_identity(self, cfg, comps=None):
        return {"resolution": cfg.data.resolution}

    def encode_images(self, comps, pixel_values):
        return pool_images(pixel_values)

    def encode_prompts(self, comps, captions, *, with_negative=False):
        return caption_lengths(captions, with_negative)


class _StandInModel:
    """``model`` of a stand-in family that the data tests never load."""

    def validate_config(self, cfg):
        raise NotImplementedError

    def load_components(self, cfg, device):
        raise NotImplementedError

    def lora_targets(self, model, lora):
        raise NotImplementedError


class _StandInAdapter:
    """``adapter`` of a stand-in family that the data tests never save."""

    def save_adapter(self, output_dir, lora_state, lora_config):
        raise NotImplementedError

    def load_pipeline_with_adapter(self, cfg, adapter_dir, device):
        raise NotImplementedError


def stand_in_spec(name: str, encoders, **components):
    """A diffusion family's spec for the data tests: ``encoders`` (a DiffusionEncoders), the shared data path, loss
    (raw batches encoded by ``encoders``) and captions, ``components`` adding or replacing any field."""
    from dit_lora.contract.spec import FamilyInfo, FamilySpec
    from dit_lora.kit import components as base

    class _Loss(base.DiffusionLoss):
        def compute_loss(self, comps, model, batch, generator, cfg):
            raise NotImplementedError

    parts = dict(info=FamilyInfo(pipeline_class_name="StandInPipeline"), model=_StandInModel(),
                 data=base.DiffusionData(), loss=_Loss(encoders), adapter=_StandInAdapter(), encoders=encoders,
                 captions=base.DiffusionCaptions())
    return FamilySpec(name=name, **{**parts, **components})
