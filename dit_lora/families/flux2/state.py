"""``Flux2Run``: what a FLUX.2 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.guided_flow import GuidedFlowRun

#: the pipeline of FLUX.2 [dev] and the one of the klein models (``model_index.json``'s ``_class_name``)
DEV_PIPELINE, KLEIN_PIPELINE = "Flux2Pipeline", "Flux2KleinPipeline"


@dataclass
class Flux2Run(GuidedFlowRun):
    """The per-run state of a FLUX.2 run (mutable: setup fills it in as it decides): the kit's guided flow state
    (the checkpoint's scheduler config, its guidance embedding, the ``--max_sequence_length`` the pipelines pad to)
    and what the folder is."""

    #: ``Flux2Pipeline`` (dev: Mistral-3) or ``Flux2KleinPipeline`` (klein: Qwen3), from ``model_index.json``
    pipeline_class: str = DEV_PIPELINE
    #: the text-encoder layers whose hidden states are stacked into the prompt embedding
    out_layers: tuple[int, ...] = (10, 20, 30)


#: ``comps.state``, an empty :class:`Flux2Run` put there first for components built by hand (tests).
run_state = Flux2Run.of
