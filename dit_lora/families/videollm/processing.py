"""What turns clips and conversations into a video LLM's inputs, and the family's ``video_qa`` component.

:class:`VideoQAProcessing` is one model's tokenizer, frame preprocessing and config (never its weights): a run keeps
it in its state (:class:`~dit_lora.families.videollm.state.VideoLLMState`), ``check-data`` loads it through
:class:`QAProcessingLoader`, the spec's :class:`~dit_lora.contract.capabilities.VideoQA` component.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.families.videollm.architecture import VideoLLMSpec
from dit_lora.families.videollm.data import SampledClip, read_clip
from dit_lora.families.videollm.prompts import build_generation_prompt, build_training_example

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: tokens a training example may hold when --max_sequence_length is unset
DEFAULT_MAX_LENGTH = 2048
#: tokens a validation answer may hold (the demo's answers are a few words)
MAX_NEW_TOKENS = 24


def max_tokens(cfg: TrainConfig) -> int:
    """The longest training example a run of ``cfg`` keeps: ``--max_sequence_length`` or :data:`DEFAULT_MAX_LENGTH`."""
    return cfg.data.max_sequence_length or DEFAULT_MAX_LENGTH


@dataclass(frozen=True)
class VideoQAProcessing:
    """A model's tokenizer, frame preprocessing and config: what turns clips and conversations into its inputs.

    Loaded per run (the run's state, or ``check-data``), never kept on the family.
    """

    #: the architecture (module names, frame preprocessing, video tokens)
    spec: VideoLLMSpec
    tokenizer: Any
    prep: dict
    model_config: Any

    @property
    def pad_token_id(self) -> int:
        """The tokenizer's padding id, else its end-of-sequence id (LLaVA's Mistral has no padding token)."""
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def frame_inputs(self, frames, fps: float | None = None) -> tuple[dict[str, torch.Tensor], int]:
        """The spec's pixel inputs for uint8 frames sampled at ``fps``, and how many video tokens they make."""
        pixels = self.spec.frame_inputs(frames, self.prep, fps=fps)
        return pixels, self.spec.video_token_count(pixels, self.model_config)

    def tokenize(
        self, messages: list[dict], video_tokens: int, max_length: int | None, times: Sequence[float] | None = None
    ) -> dict:
        """A conversation as training tokens with answer-only labels (``max_length``: refuse longer; ``times``: the
        sampled frames' seconds, for architectures that write them)."""
        return build_training_example(
            self.tokenizer,
            messages,
            video_placeholder=self.spec.video_placeholder,
            video_token_id=self.tokenizer.convert_tokens_to_ids(self.spec.video_token),
            video_token_count=video_tokens,
            max_length=max_length,
            video_ids=self.spec.video_prompt_ids(self.tokenizer, video_tokens, self.model_config, times),
        )

    def generation_inputs(
        self, clip: SampledClip, question: str
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One question about one clip, ready to generate from: the prompt's 1-D ``input_ids`` and
        ``attention_mask`` (the chat template, the video tokens expanded, the frame times the architecture writes)
        and the clip's pixel inputs."""
        pixels, count = self.frame_inputs(clip.frames, clip.fps)
        prompt = build_generation_prompt(
            self.tokenizer,
            [{"role": "user", "content": question}],
            video_placeholder=self.spec.video_placeholder,
            video_token_id=self.tokenizer.convert_tokens_to_ids(self.spec.video_token),
            video_token_count=count,
            video_ids=self.spec.video_prompt_ids(self.tokenizer, count, self.model_config, clip.times),
        )
        return prompt, pixels

    def answer(self, model, question: str, video: Path, num_frames: int) -> str:
        """Greedy answer of ``model`` to ``question`` about ``video``."""
        prompt, pixels = self.generation_inputs(read_clip(video, num_frames), question)
        device = next(model.parameters()).device
        inputs = {k: v[None].to(device) for k, v in prompt.items()}
        inputs.update({k: v.to(device) for k, v in self.spec.collate_pixels([pixels]).items()})
        with torch.no_grad():
            out = model.generate(
                **inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=self.pad_token_id
            )
        return self.tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()


@dataclass(frozen=True)
class QAProcessingLoader:
    """``FamilySpec.video_qa``: a model's :class:`VideoQAProcessing` read from its folder, without its weights."""

    arch: VideoLLMSpec

    def load_processing(self, path: str, model_config=None) -> VideoQAProcessing:
        """Tokenizer, frame preprocessing and model config of ``path`` (``model_config``: the loaded model's)."""
        from transformers import AutoConfig

        config = model_config if model_config is not None else AutoConfig.from_pretrained(path)
        return VideoQAProcessing(self.arch, self.arch.load_tokenizer(path), self.arch.load_preprocessing(path), config)
