"""``Flux2Run``: what a FLUX.2 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dit_lora.families.diffusion.run_state import FlowRun

#: the pipeline of FLUX.2 [dev] and the one of the klein models (``model_index.json``'s ``_class_name``)
DEV_PIPELINE, KLEIN_PIPELINE = "Flux2Pipeline", "Flux2KleinPipeline"


@dataclass
class Flux2Run(FlowRun):
    """The per-run state of a FLUX.2 run (mutable: setup fills it in as it decides): the flow family's (``text``:
    the ``--max_sequence_length`` the pipelines pad to) and what the folder is."""

    #: the checkpoint's scheduler config (the dynamic shift's line and the validation sampler); {} until loaded
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: ``Flux2Pipeline`` (dev: Mistral-3) or ``Flux2KleinPipeline`` (klein: Qwen3), from ``model_index.json``
    pipeline_class: str = DEV_PIPELINE
    #: the transformer has a guidance embedding (FLUX.2 [dev]); the klein models have none
    guidance_embeds: bool = True
    #: the text-encoder layers whose hidden states are stacked into the prompt embedding
    out_layers: tuple[int, ...] = (10, 20, 30)


#: ``comps.state``, an empty :class:`Flux2Run` put there first for components built by hand (tests).
run_state = Flux2Run.of
