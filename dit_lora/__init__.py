"""dit-lora: LoRA fine-tuning for diffusion transformers and video LLMs that never silently goes NaN."""

__version__ = "0.2.0"

# The composition root: the registry tells the option layer below it (dit_lora.config, which imports no registry)
# which families exist; importing it here installs it for every `import dit_lora...` (it loads no family or torch).
from dit_lora import registry as _registry  # noqa: F401


def load_adapter(pipe, output_dir, adapter_name=None):
    """Load a dit-lora output folder (LoRA plus any backbone weights) into a pipeline or video LLM.

    Works for pipelines with ``load_lora_weights`` (Sana, CogVideoX) and without (``DiTPipeline``:
    PEFT-format LoRA, the resized class embedding and the trained class names for
    ``pipe.get_label_ids``), and for transformers video LLMs; see :func:`dit_lora.api.load_adapter`.
    """
    # here, not at the top: `import dit_lora` (every submodule's import, the command line's start) must not load torch
    from dit_lora.api import load_adapter as _load

    return _load(pipe, output_dir, adapter_name=adapter_name)


def load_edit_processor(path, revision=None):
    """The Qwen-Image-Edit models' processor built without torchvision; see :func:`dit_lora.api.load_edit_processor`."""
    from dit_lora.api import load_edit_processor as _load  # torch: on use only, as above

    return _load(path, revision)


def answer_video(model, base, video, question, num_frames):
    """A video LLM's answer about a clip, its frames sampled as training did; see :func:`dit_lora.api.answer_video`."""
    from dit_lora.api import answer_video as _answer  # torch: on use only, as above

    return _answer(model, base, video, question, num_frames)


__all__ = ["__version__", "answer_video", "load_adapter", "load_edit_processor"]
