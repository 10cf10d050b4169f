"""The public entry points for using a trained adapter: ``dit_lora.load_adapter``.

It sits above the families and the output files (it looks up the family of a pipeline), so neither of
them imports the other to load an adapter.
"""

from __future__ import annotations

from pathlib import Path

from dit_lora.output.adapter import adapter_folder, attach_adapter, load_adapter_files
from dit_lora.setup.family_inference import family_for_pipeline


def load_adapter(pipe, output_dir: str | Path, adapter_name: str | None = None):
    """Load a dit-lora output folder (or Hub repo id) into ``pipe``: the LoRA plus any backbone weights.

    ``pipe`` is a diffusers pipeline (``SanaPipeline``, ``CogVideoXPipeline``, ``DiTPipeline``) or a
    transformers video LLM. Pipelines with ``load_lora_weights`` get exactly that call; others get the
    PEFT-format adapter at its trained rank/alpha. When ``pipe`` belongs to a dit-lora family, the
    family first fits the pipeline to the adapter (DiT: class embedding resized to the trained class
    count, ``pipe.labels`` / ``get_label_ids`` set to the trained class names). Returns ``pipe``.
    """
    family = family_for_pipeline(pipe)
    if family is not None:
        return attach_adapter(family, pipe, output_dir, adapter_name)
    return load_adapter_files(pipe, adapter_folder(output_dir), adapter_name)
