"""What a video-LLM run writes: the adapter, the validation answers and the model card's snippet and rows.

Output: a PEFT adapter (``adapter_model.safetensors`` + ``adapter_config.json``, naming its base model) plus the
trained projector in ``dit_lora_backbone.safetensors``; ``dit_lora.load_adapter(model, output_dir)`` restores both,
``PeftModel.from_pretrained`` the adapter alone. Validation "samples" are answers to ``--validation_prompt`` about
one clip, written as text files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dit_lora.config.schema import ValidationOptions
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_text_atomic
from dit_lora.families.videollm.architecture import VideoLLMSpec
from dit_lora.families.videollm.processing import QAProcessingLoader, VideoQAProcessing
from dit_lora.families.videollm.state import run_processing, run_state
from dit_lora.output.adapter import attach_adapter, save_peft_adapter, set_peft_base_model


@dataclass
class VideoQAPipe:
    """A base model with a loaded adapter, and what it needs to answer a question about a clip."""

    model: torch.nn.Module
    processing: VideoQAProcessing


@dataclass(frozen=True)
class VideoLLMAdapter:
    """``FamilySpec.adapter`` and ``adapter_extras``: the PEFT adapter, its base model, and loading it back."""

    arch: VideoLLMSpec

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """PEFT's ``adapter_model.safetensors`` and ``adapter_config.json``."""
        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def save_adapter_extras(self, output_dir: Path, comps, cfg) -> None:
        """The base model named in ``adapter_config.json``."""
        set_peft_base_model(Path(output_dir), cfg.pretrained_model_name_or_path)

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device) -> VideoQAPipe:
        """The base model with the saved adapter (and projector) loaded by dit-lora's loader, and its processing."""
        model = self.arch.load_model(cfg.pretrained_model_name_or_path, cfg.weight_dtype)
        attach_adapter(None, model, adapter_dir)  # a video LLM fits no consumer before its adapter loads
        model.to(device).eval()
        processing = QAProcessingLoader(self.arch).load_processing(cfg.pretrained_model_name_or_path, model.config)
        return VideoQAPipe(model, processing)


def _validation_video(cfg, comps) -> Path | None:
    """The clip validation asks about: the run's (chosen once the samples were screened), else --validation_video."""
    state = run_state(comps)
    if state is not None and state.validation_video is not None:
        return state.validation_video
    chosen = cfg.family_options.validation_video
    return Path(chosen) if chosen else None


def _qa(processing: VideoQAProcessing, model, question: str, cfg, video: Path | None) -> str:
    if video is None:
        raise UserError("Video-LLM validation needs a clip: set --validation_video.")
    answer = processing.answer(model, question, video, cfg.family_options.num_frames)
    return f"video: {_shown(video, cfg)}\nQ: {question}\nA: {answer}"


def _shown(video: Path, cfg) -> str:
    """``video`` as the sample file names it: relative to the data folder (--video_folder, else --train_data_dir's
    folder), where clips of one name in two subfolders stay apart; the full path when it lies elsewhere."""
    given = cfg.family_options.video_folder or cfg.train_data_dir
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

    def generate(self, comps, model: torch.nn.Module, cond: dict, cfg, seed: int) -> list:
        """The in-memory model's greedy answer, as one text sample."""
        return [_qa(run_processing(comps), model, cond["question"], cfg, _validation_video(cfg, comps))]

    def generate_with_pipeline(
        self, pipe: VideoQAPipe, prompt: str, cfg, seed: int, num_images: int, comps=None
    ) -> list:
        """The reloaded adapter's greedy answer, as one text sample."""
        return [_qa(pipe.processing, pipe.model, prompt, cfg, _validation_video(cfg, comps))]

    def save_sample(self, sample: Any, stem: Path, cfg) -> Path:
        """``stem.txt`` holding the clip's name, the question and the answer."""
        path = Path(stem).with_suffix(".txt")
        write_text_atomic(path, str(sample) + "\n")  # replaces a link there, never follows it
        return path


@dataclass(frozen=True)
class VideoLLMCard:
    """``FamilySpec.card``: transformers code that loads the adapter and answers, and the family's rows."""

    arch: VideoLLMSpec

    def base_model_license(self, cfg) -> str | None:
        """Not known for video LLMs."""
        return None

    def card_settings(self, cfg) -> dict[str, Any]:
        """Frames, the projector, the vision tower and Liger."""
        return {
            "num_frames": cfg.family_options.num_frames,
            "projector": f"{self.arch.projector} (full, lr {cfg.backbone_learning_rate})",
            "vision_tower": "trained" if cfg.family_options.train_vision_tower else "frozen",
            "use_liger_kernel": cfg.family_options.use_liger_kernel or None,
        }

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """Load the base model and the adapter, sample the clip's frames as training did, and answer."""
        base = cfg.pretrained_model_name_or_path
        question = cfg.validation_prompt or "What happens in this video?"
        num_frames = cfg.family_options.num_frames
        model_class = self.arch.model_class
        return f'''import av, numpy as np, torch
from transformers import AutoProcessor, {model_class}
from dit_lora import load_adapter  # LoRA + the trained projector; PeftModel.from_pretrained loads the LoRA alone

model = {model_class}.from_pretrained("{base}", dtype=torch.bfloat16, device_map="cuda")
load_adapter(model, "{repo_or_dir}")
processor = AutoProcessor.from_pretrained("{base}")

with av.open("clip.mp4") as container:  # {num_frames} frames, uniformly over the clip, as in training
    stream = container.streams.video[0]
    fps = float(stream.average_rate)
    frames = [f.to_ndarray(format="rgb24") for f in container.decode(stream)]
indices = [(2 * i + 1) * len(frames) // {2 * num_frames} for i in range({num_frames})]
video = np.stack([frames[i] for i in indices])
conversation = [{{"role": "user", "content": [{{"type": "video"}}, {{"type": "text", "text": {question!r}}}]}}]
prompt = processor.apply_chat_template(conversation, add_generation_prompt=True)
{self._snippet_timing()}inputs = processor(text=prompt, videos=video, {"**timing, " if self.arch.positions_encode_time else ""}return_tensors="pt").to(model.device, torch.bfloat16)
out = model.generate(**inputs, max_new_tokens=64, do_sample=False)
print(processor.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
'''

    def _snippet_timing(self) -> str:
        """The snippet's lines that tell the processor the rate the frames were sampled at (time positions)."""
        if not self.arch.positions_encode_time:
            return ""
        return (
            "# The clip's time positions use the rate these frames were sampled at, as in training (without\n"
            "# metadata the processor assumes 24 fps).\n"
            'timing = dict(video_metadata={"total_num_frames": len(frames), "fps": fps, '
            '"frames_indices": indices}, do_sample_frames=False)\n'
        )
