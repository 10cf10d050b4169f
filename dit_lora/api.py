"""The public entry points for using a trained adapter: ``dit_lora.load_adapter``, and what the model cards' snippets
call where the base install lacks a package (``load_edit_processor``, ``answer_video``: no torchvision).

It sits above the families and the output files (it looks up the family of a pipeline), so neither of
them imports the other to load an adapter.
"""

from __future__ import annotations

from pathlib import Path

from dit_lora.core.errors import UserError
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


def load_edit_processor(path: str | Path, revision: str | None = None):
    """The Qwen-Image-Edit models' ``processor`` (a ``Qwen2VLProcessor``: image processor and tokenizer), built where
    torchvision is not installed (the base install), to pass as ``QwenImageEditPlusPipeline.from_pretrained(path,
    processor=...)``.

    transformers refuses to build the processor without torchvision (its video half, which the Edit pipelines never
    use); training loads it the same way (``families/qwenimage/processor.py``). With torchvision installed, it is
    ``Qwen2VLProcessor.from_pretrained(path, subfolder="processor")`` itself.
    """
    from dit_lora.families.qwenimage.processor import load_processor  # torch and transformers: on use only

    return load_processor(str(path), revision)


def answer_video(model, base: str | Path, video: str | Path, question: str, num_frames: int) -> str:
    """The greedy answer of a video LLM ``model`` (its adapter loaded) to ``question`` about the clip ``video``, its
    ``num_frames`` frames sampled and preprocessed as training did (uniformly over the clip; the clip's own rate and
    each frame's time for the models whose prompts or positions carry them, Qwen3-VL's timestamps among them).

    ``base``: the base model's folder or Hub id (its tokenizer, chat template and preprocessor configs are read; a
    Hub id is downloaded). Needs no torchvision: the frames go through dit-lora's own preprocessing, as in training
    and validation, not transformers' video processors.
    """
    from huggingface_hub import snapshot_download  # on use only: `import dit_lora` stays light

    family = family_for_pipeline(model)
    if family is None or family.video_qa is None:
        raise UserError(
            f"answer_video: {type(model).__name__} is not a video LLM dit-lora trains; load one of the classes the "
            "video-LLM guide lists (docs/guides/video-llms.md) and pass it here."
        )
    folder = Path(base).expanduser()
    if not folder.is_dir():
        folder = Path(snapshot_download(str(base), allow_patterns=["*.json", "*.jinja", "*.txt", "*.model"]))
    processing = family.video_qa.load_processing(str(folder), model.config)
    return processing.answer(model, question, Path(video), num_frames)
