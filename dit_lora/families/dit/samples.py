"""DiT's validation samples: the kit's :class:`~dit_lora.kit.components.PipelineSamples` on
``DiTPipeline`` (no text parts, its native size, the checkpoint's own sampler), from the in-memory transformer and
from the saved adapter (class names through its ``labels``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.contract.family import Components
from dit_lora.families.dit.classes import split_class_names
from dit_lora.families.dit.state import run_state
from dit_lora.kit.components import PipelineSamples

if TYPE_CHECKING:
    from dit_lora.config.schema import ValidationOptions


class DiTSamples(PipelineSamples):
    """``FamilySpec.samples``: the validation prompt is one class name or several, comma-separated, each drawn
    ``--num_validation_images`` times."""

    pipeline = "DiTPipeline"
    text_parts = ()
    sized = False  # DiTPipeline samples at the transformer's own size
    fallback_sampler = "DDIMScheduler"  # the checkpoint's sampler, DDIM when its config names no diffusers class

    def cached_inputs(self, comps: Components, cond: dict[str, Any], validation: ValidationOptions) -> dict[str, Any]:
        """The ids of the prompt's classes in the run's label map."""
        label2id = run_state(comps).label2id
        if label2id is None:  # the data stage's inspect_samples builds it, before any validation
            raise RuntimeError("DiT's validation samples need the run's label map: DiTSetup.inspect_samples builds it")
        prompt = validation.validation_prompt
        assert prompt is not None  # validation runs only with a --validation_prompt
        names = split_class_names(prompt, label2id)
        return {"class_labels": [label2id[n] for n in names for _ in range(validation.num_validation_images)]}

    def prompt_inputs(self, pipe, prompt: str, num_images: int) -> dict[str, Any]:
        """The ids of the prompt's classes in the reloaded pipeline's ``labels`` (the trained names)."""
        names = split_class_names(prompt, pipe.labels)
        return {"class_labels": [i for i in pipe.get_label_ids(names) for _ in range(num_images)]}
