"""The Edit models' ``processor/`` (``Qwen2VLProcessor``: Qwen2.5-VL's image processor and the tokenizer), loaded
and built without torchvision.

transformers 5's ``Qwen2VLProcessor.__init__`` checks the class of its video processor even when none is given, and
that check fails where torchvision is not installed (the pinned environment: ``VIDEO_PROCESSOR_MAPPING`` has no
registry then), so neither ``Qwen2VLProcessor(...)`` nor ``QwenImageEditPipeline.from_pretrained`` can build one.
The Edit pipelines only call it with text and images (``processor(text=..., images=..., padding=True)``), which is
``ProcessorMixin.__call__`` over the image processor and the tokenizer: :func:`image_only_processor` sets those
attributes without the check. Where the processor class loads as published, it is used as it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: the Edit repos' processor folder
SUBFOLDER = "processor"


def image_only_processor(image_processor: Any, tokenizer: Any) -> Any:
    """A ``Qwen2VLProcessor`` of ``image_processor`` and ``tokenizer`` and no video processor (see the module)."""
    from transformers import Qwen2VLProcessor

    processor: Any = Qwen2VLProcessor.__new__(Qwen2VLProcessor)
    processor.chat_template = None
    processor.image_processor, processor.tokenizer, processor.video_processor = image_processor, tokenizer, None
    processor.image_token, processor.video_token = "<|image_pad|>", "<|video_pad|>"
    processor.image_token_id = tokenizer.convert_tokens_to_ids(processor.image_token)
    processor.video_token_id = tokenizer.convert_tokens_to_ids(processor.video_token)
    return processor


def load_processor(path: str, revision: str | None = None) -> Any:
    """The model's ``processor/``: ``Qwen2VLProcessor.from_pretrained``, or (no torchvision) its image processor and
    tokenizer put together by :func:`image_only_processor`. ``path``: a model folder, or a Hub id (at ``revision``)
    whose ``processor/`` files are fetched first (or found in the Hub cache offline)."""
    from transformers import AutoTokenizer, Qwen2VLImageProcessor, Qwen2VLProcessor

    folder = Path(path).expanduser()
    if not folder.is_dir():
        # transformers given the Hub id looks up processor/config.json, which the Edit repos lack: online the Hub's
        # 404 tells it so, offline (HF_HUB_OFFLINE, the files cached) nothing does and the tokenizer fails to load
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(str(path), revision=revision, allow_patterns=[f"{SUBFOLDER}/*"]))
    try:
        return Qwen2VLProcessor.from_pretrained(folder, subfolder=SUBFOLDER)
    except (AttributeError, ImportError):  # transformers without torchvision: no video processor class to check
        image = Qwen2VLImageProcessor.from_pretrained(folder, subfolder=SUBFOLDER)
        tokenizer = AutoTokenizer.from_pretrained(folder, subfolder=SUBFOLDER)
        return image_only_processor(image, tokenizer)


def save_processor(processor: Any, folder: str | os.PathLike) -> Path:
    """Write the processor folder as the Edit repos have it: the image processor's ``preprocessor_config.json`` and
    the tokenizer files (what :func:`load_processor` reads back)."""
    folder = Path(folder)
    processor.image_processor.save_pretrained(folder)
    processor.tokenizer.save_pretrained(folder)
    config = json.loads((folder / "preprocessor_config.json").read_text())
    config.update(image_processor_type="Qwen2VLImageProcessor", processor_class="Qwen2VLProcessor")
    (folder / "preprocessor_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder
