"""dit-lora: LoRA fine-tuning for diffusion transformers and video LLMs that never silently goes NaN."""

__version__ = "0.2.0"


def load_adapter(pipe, output_dir, adapter_name=None):
    """Load a dit-lora output folder (LoRA plus any backbone weights) into a pipeline or video LLM.

    Works for pipelines with ``load_lora_weights`` (Sana, CogVideoX) and without (``DiTPipeline``:
    PEFT-format LoRA, the resized class embedding and the trained class names for
    ``pipe.get_label_ids``), and for transformers video LLMs; see :func:`dit_lora.api.load_adapter`.
    """
    # here, not at the top: `import dit_lora` (every submodule's import, the command line's start) must not load torch
    from dit_lora.api import load_adapter as _load

    return _load(pipe, output_dir, adapter_name=adapter_name)


__all__ = ["__version__", "load_adapter"]
