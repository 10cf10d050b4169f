"""Lumina 2's model component and what is read from its small config files before anything loads: the config checks
(the resolution, the caption length its RoPE table holds), its precision policy, its aspect-ratio buckets and
default resolution, and ``--demo``."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.core.errors import UserError
from dit_lora.families.lumina2 import demo as tiny_lumina2  # looked up at call time: tests stand in the build
from dit_lora.families.lumina2.encoders import max_sequence_length
from dit_lora.families.lumina2.state import Lumina2Run
from dit_lora.kit.builder import LatentGrid
from dit_lora.kit.components import Fp32VaePrecision, ShapesDemo
from dit_lora.kit.loader import DiffusionModel, LoadedParts, published_parts
from dit_lora.modelfiles.pipeline_files import read_component_config
from dit_lora.modeling.flow_matching import flow_tables, training_scheduler

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: Lumina2Transformer2DModel's default ``axes_lens``: its RoPE table's length along each position axis
AXES_LENS = (300, 512, 512)


def check_caption_length(length: int, transformer_cfg: dict, model: str) -> None:
    """Refuse a caption length the transformer's RoPE table cannot place: caption tokens take positions 0 to
    ``length - 1`` on the first axis and the image tokens the next one, so ``length`` must stay below its
    ``axes_lens[0]`` (300 for Lumina-Image 2.0)."""
    limit = int((transformer_cfg.get("axes_lens") or AXES_LENS)[0]) - 1
    if length > limit:
        raise UserError(
            f"--max_sequence_length {length} is longer than {model}'s transformer can place: its RoPE table "
            f"(axes_lens[0] = {limit + 1} in transformer/config.json) holds caption positions up to {limit - 1} and "
            f"the image's at the next one. Use --max_sequence_length {limit} or less (Lumina2Pipeline's default is "
            f"{max_sequence_length.default}, the system prompt included)."
        )


class CountedMask:
    """A caption mask as ``Lumina2RotaryPosEmbed.forward`` reads it: its ``shape``, and per caption its token count,
    ``sum(dim=1).tolist()``, given from the host instead of read back from the device."""

    def __init__(self, shape: torch.Size, counts: list[int]) -> None:
        self.shape, self.counts = shape, counts

    def sum(self, dim: int) -> CountedMask:
        """The per-caption counts (``dim`` 1: the caption axis, the only sum the embedder takes)."""
        if dim != 1:
            raise ValueError(f"a caption mask's counts are over its caption axis (1), not {dim}")
        return self

    def tolist(self) -> list[int]:
        """Each caption's token count."""
        return list(self.counts)


def _counted_forward(rope: Any, hidden_states: torch.Tensor, attention_mask: torch.Tensor):
    """``Lumina2RotaryPosEmbed.forward`` given the run state's host counts while a loss runs, else as diffusers
    wrote it (bound to each embedder: a deep copy of the components, as the plan makes one per setting, rebinds it
    to the copied embedder and its copied state)."""
    counts = rope.host_counts.caption_counts
    mask = attention_mask if counts is None else CountedMask(attention_mask.shape, counts)
    return type(rope).forward(rope, hidden_states, mask)


def give_host_counts(transformer: Any, state: Lumina2Run) -> None:
    """Lumina2Transformer2DModel's RoPE embedder reads each caption's token count back from the mask
    (``attention_mask.sum(dim=1).tolist()``: the host waits for the device every step). While a loss is computed the
    run state holds those counts, read on the host (``caption_counts``: the cached mask's, or a planned caption's
    full length), and the embedder is given them (:class:`CountedMask`); at any other time (the validation
    pipeline) it reads its mask as diffusers wrote it."""
    rope = transformer.rope_embedder
    rope.host_counts = state
    rope.forward = types.MethodType(_counted_forward, rope)


class Lumina2Model(DiffusionModel):
    """``FamilySpec.model``: the folder's checks, then (the kit's loader, :data:`PARTS`) the transformer and Gemma-2
    in the run's weight dtype, the FLUX.1 VAE in fp32, and the tokenizer."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """A diffusers Lumina 2 folder of safetensors whose tokenizer can load, at a resolution the transformer
        patches and a caption length its RoPE table holds."""
        self.check_folder(cfg)
        BUCKETS.check_resolution(cfg.model, cfg.data.resolution)
        transformer_cfg = read_component_config(cfg.model, "transformer") or {}
        check_caption_length(max_sequence_length(cfg.data), transformer_cfg, cfg.model.path)

    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """The checkpoint's scheduler config and the training tables in the run's :class:`Lumina2Run`; the RoPE
        embedder given the host's caption counts (:func:`give_host_counts`)."""
        scheduler = training_scheduler(loaded.scheduler_config)
        state = Lumina2Run(scheduler_config=loaded.scheduler_config, flow_tables=flow_tables(scheduler, device))
        comps = loaded.components(scheduler, state)
        give_host_counts(comps.model, state)
        return comps


class Lumina2Precision(Fp32VaePrecision):
    """``FamilySpec.precision``: transformer and Gemma-2 in the run's weight dtype; the VAE stays fp32; the embedders
    and the output projection kept out of ``--quantize_base``."""

    def quantize_skip_modules(self) -> list[str]:
        """The patch embedder and the timestep and caption embedders (diffusers keeps ``x_embedder`` and the norms
        out of layerwise casting: precision sensitive) and the final projection."""
        return ["x_embedder", "time_caption_embed", "norm_out"]


#: Lumina 2's pipeline folder, as the kit's loader reads it. The VAE in fp32: the latents are cached once, and a bf16
#: encode would lose what the fp32 load keeps. Lumina2Pipeline's model_index names Gemma2Model: AutoModel loads it.
PARTS = published_parts(
    "Alpha-VLLM/Lumina-Image-2.0", kind="Lumina 2", text_encoder_class="AutoModel", precision=Lumina2Precision()
)

#: ``FamilySpec.image_buckets`` and ``FamilySpec.defaults``: any aspect ratio (the transformer patchifies any grid and
#: its RoPE positions follow it) in the latent stride, the VAE's 8 x the patch 2; an uncatalogued model's resolution
#: is its ``sample_size`` (128) x 8
BUCKETS = LatentGrid()


def check_demo_size(cfg: TrainConfig) -> None:
    """``FamilySpec.demo``'s check (:class:`~dit_lora.kit.components.ShapesDemo`): ``--resolution``
    against the demo model's latent stride, nothing built yet."""
    stride = tiny_lumina2.latent_stride()
    if cfg.data.resolution % stride:
        raise UserError(
            f"--resolution {cfg.data.resolution} is not a multiple of {stride}, the tiny Lumina 2's latent stride "
            f"(its VAE's downsampling x the patch size). Use {max(stride, cfg.data.resolution // stride * stride)}."
        )


#: ``FamilySpec.demo``: the tiny Lumina 2 (``demo.py``) and the shapes, its size checked first
DEMO = ShapesDemo.tiny(tiny_lumina2, "build_tiny_lumina2_pipeline", check=check_demo_size)
