"""``WanRun``: what a Wan run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from dit_lora.kit.run_state import FamilyRun


@dataclass
class WanRun(FamilyRun):
    """The per-run state of a Wan run (mutable: the data stage adds the validation image of image-to-video)."""

    loaded_by: ClassVar[str] = "the Wan components' loading sets it (model.make_components)"

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: the flow shift trained with (``--flow_shift`` or the checkpoint's)
    flow_shift: float | None = None
    #: the training scheduler's ``(sigmas, timesteps)`` on the run's device (``flow_matching.flow_tables``)
    flow_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: each expert's ``[first, end)`` part of the timestep table, and ``"all"``: the whole of it
    index_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: the trained expert(s) of a two-expert checkpoint (``high``, ``low``, ``both``); None: one transformer
    expert: str | None = None
    #: the experts whose LoRA the run trains, in file order
    trained_experts: list[str] = field(default_factory=lambda: ["high"])
    #: the frame rate the checkpoint generates at
    fps: float | None = None
    #: where a two-expert checkpoint hands over from the high-noise to the low-noise expert
    boundary_ratio: float | None = None
    #: TI2V-5B: the share of samples trained in image mode
    image_probability: float = 0.0
    #: TI2V-5B: per-token timesteps (the first latent frame can stay clean)
    expand_timesteps: bool = False
    #: the VAE's latent normalisation, ``(1, C, 1, 1, 1)`` each (fp32)
    latents_mean: torch.Tensor | None = None
    latents_std: torch.Tensor | None = None
    #: the memory plan of 2.1 I2V: the CLIP image embedding's token count
    clip_tokens: int | None = None
    #: image-to-video: the image validation videos start from (``kept_conditioning_image``)
    validation_image: Any = None
    #: Wan 2.1 I2V: that image's CLIP embedding, computed while the image encoder was loaded
    validation_image_embeds: torch.Tensor | None = None


#: ``comps.state``, an empty :class:`WanRun` put there first for components built by hand (tests, benchmarks).
run_state = WanRun.of

#: ``value``: a part of the run state that loading the components sets (``model.make_components``). Components
#: built by hand without it are refused by its name, not with a TypeError on None.
required = WanRun.required
