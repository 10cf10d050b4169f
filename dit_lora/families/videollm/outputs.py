"""What a video-LLM run writes: the adapter, the validation answers and the model card's snippet and rows.

Output: a PEFT adapter (``adapter_model.safetensors`` + ``adapter_config.json``, naming its base model) plus the
trained projector in ``dit_lora_backbone.safetensors``; ``dit_lora.load_adapter(model, output_dir)`` restores both,
``PeftModel.from_pretrained`` the adapter alone. Validation "samples" are answers to ``--validation_prompt`` about
one clip, written as text files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.config.schema import DataOptions, ModelOptions, ValidationOptions
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_text_atomic
from dit_lora.families.videollm.architecture import VideoLLMSpec, model_folder
from dit_lora.families.videollm.options import VideoChatOptions
from dit_lora.families.videollm.processing import QAProcessingLoader, VideoQAProcessing
from dit_lora.families.videollm.state import run_processing, run_state
from dit_lora.output.adapter import attach_adapter, save_peft_adapter

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


@dataclass
class VideoQAPipe:
    """A base model with a loaded adapter, and what it needs to answer a question about a clip."""

    model: torch.nn.Module
    processing: VideoQAProcessing


@dataclass(frozen=True)
class VideoLLMAdapter:
    """``FamilySpec.adapter``: the PEFT adapter (its base model named by ``write_adapter``), and loading it back."""

    arch: VideoLLMSpec

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """PEFT's ``adapter_model.safetensors`` and ``adapter_config.json``."""
        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device) -> VideoQAPipe:
        """The base model with the saved adapter (and projector) loaded by dit-lora's loader, and its processing."""
        folder = model_folder(cfg.model, weights=True)
        model = self.arch.load_model(folder, cfg.weight_dtype)
        attach_adapter(None, model, adapter_dir)  # a video LLM fits no consumer before its adapter loads
        model.to(device).eval()
        processing = QAProcessingLoader(self.arch).load_processing(str(folder), model.config)
        return VideoQAPipe(model, processing)


def _validation_video(options: VideoChatOptions, comps) -> Path | None:
    """The clip validation asks about: the run's (chosen once the samples were screened), else --validation_video."""
    state = run_state(comps)
    if state is not None and state.validation_video is not None:
        return state.validation_video
    chosen = options.validation_video
    return Path(chosen) if chosen else None


def _qa(
    processing: VideoQAProcessing,
    model,
    question: str,
    options: VideoChatOptions,
    data: DataOptions,
    video: Path | None,
) -> str:
    if video is None:
        raise UserError("Video-LLM validation needs a clip: set --validation_video.")
    answer = processing.answer(model, question, video, options.num_frames)
    return f"video: {_shown(video, options, data)}\nQ: {question}\nA: {answer}"


def _shown(video: Path, options: VideoChatOptions, data: DataOptions) -> str:
    """``video`` as the sample file names it: relative to the data folder (--video_folder, else --train_data_dir's
    folder), where clips of one name in two subfolders stay apart; the full path when it lies elsewhere."""
    given = options.video_folder or data.train_data_dir
    if not given:
        return str(video)
    folder = Path(given)
    folder = folder if folder.is_dir() else folder.parent
    try:
        return Path(video).resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(video)


class VideoLLMSamples:
    """``FamilySpec.samples``: the model's answer to ``--validation_prompt`` about the validation clip."""

    def validation_inputs(self, comps, validation: ValidationOptions) -> dict[str, Any]:
        """The question (nothing is encoded ahead: the clip goes through the model's own processing)."""
        return {"question": validation.validation_prompt}

    def generate(self, comps, model: torch.nn.Module, cond: dict, cfg: TrainConfig, seed: int) -> list:
        """The in-memory model's greedy answer, as one text sample."""
        video = _validation_video(cfg.family_options, comps)
        return [_qa(run_processing(comps), model, cond["question"], cfg.family_options, cfg.data, video)]

    def generate_with_pipeline(
        self, pipe: VideoQAPipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """The reloaded adapter's greedy answer, as one text sample."""
        video = _validation_video(cfg.family_options, comps)
        return [_qa(pipe.processing, pipe.model, prompt, cfg.family_options, cfg.data, video)]

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """``stem.txt`` holding the clip's name, the question and the answer."""
        path = Path(stem).with_suffix(".txt")
        write_text_atomic(path, str(sample) + "\n")  # replaces a link there, never follows it
        return path


@dataclass(frozen=True)
class VideoLLMCard:
    """``FamilySpec.card``: transformers code that loads the adapter and answers, and the family's rows."""

    arch: VideoLLMSpec

    def base_model_license(self, model: ModelOptions) -> str | None:
        """Not known for video LLMs."""
        return None

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """Frames, the projector, the vision tower and Liger."""
        return {
            "num_frames": cfg.family_options.num_frames,
            "projector": f"{self.arch.projector} (full, lr {cfg.lora.backbone_learning_rate})",
            "vision_tower": "trained" if cfg.family_options.train_vision_tower else "frozen",
            "use_liger_kernel": cfg.family_options.use_liger_kernel or None,
        }

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        """Load the base model and the adapter, and answer about a clip whose frames are sampled and preprocessed as
        training's (``dit_lora.answer_video``: the clip's rate and frame times too, where the model's prompt or
        positions carry them; no torchvision, which transformers' video processors need)."""
        base = json.dumps(cfg.model.pretrained_model_name_or_path)
        question = json.dumps((cfg.validation.prompts or ["What happens in this video?"])[0])
        model_class = self.arch.model_class
        return (
            "import torch\n"
            f"from transformers import {model_class}\n"
            "from dit_lora import answer_video, load_adapter\n\n"
            f"base = {base}\n"
            'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
            f"model = {model_class}.from_pretrained(base, dtype=torch.bfloat16, device_map=device)\n"
            f"load_adapter(model, {json.dumps(repo_or_dir)})  # LoRA + the trained projector "
            "(PeftModel.from_pretrained: the LoRA alone)\n"
            f"# {cfg.family_options.num_frames} frames uniformly over the clip, preprocessed as in training\n"
            f'answer = answer_video(model, base, "clip.mp4", {question}, num_frames={cfg.family_options.num_frames})\n'
            "print(answer)\n"
        )
