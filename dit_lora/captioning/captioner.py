"""The captioning model: a video LLM loaded as its family trains it, and batched greedy generation.

:func:`load_captioner` reads the model through the family's own loader (``spec.model.load_components``: bf16, or
fp32 with ``--mixed_precision no``; ``--quantize_base nf4/int8/fp8/fp8_scaled`` on the language model, the vision
tower and projector kept), then an adapter trained by dit-lora (``--adapter``) at its trained strength
(:func:`~dit_lora.output.adapter.attach_adapter`, what ``dit_lora.load_adapter`` does). :meth:`Captioner.caption`
builds each prompt exactly as :meth:`~dit_lora.families.videollm.processing.VideoQAProcessing.answer` does (the
chat template, the video tokens expanded, the frame times the architecture writes), pads the batch on the left and
calls the model's own ``generate`` with greedy decoding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from dit_lora.config.parser import parse_config
from dit_lora.config.schema import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.families.videollm.frames import SampledClip
from dit_lora.families.videollm.processing import VideoQAProcessing
from dit_lora.families.videollm.prompts import pad_batch
from dit_lora.output.adapter import adapter_folder, attach_adapter
from dit_lora.registry import available, get_spec
from dit_lora.setup.family_inference import family_for_model

__all__ = ["Caption", "Captioner", "captioner_config", "captioners", "load_captioner"]


def captioners() -> list[str]:
    """The registered families that can caption: those with a video question-answering component."""
    return [name for name in available() if get_spec(name).video_qa is not None]


def captioner_config(
    model: str, *, family: str | None, quantize_base: str | None, mixed_precision: str, num_frames: int
) -> TrainConfig:
    """The run config the family's loader reads: the model, its family (given, else the model folder's),
    ``--quantize_base``, ``--mixed_precision`` and ``--num_frames``, every other option at its default."""
    argv = ["--pretrained_model_name_or_path", model, "--mixed_precision", mixed_precision]
    argv += ["--quantize_base", quantize_base] if quantize_base else []
    if not family:  # the folder's: known before the video-LLM options (--num_frames) are read
        found = parse_config(argv, prog="dit-lora caption", needs_data=False, infer_family=family_for_model)
        family = found.model.family
    if family not in captioners():
        raise UserError(
            f"dit-lora caption: `{model}` is a {family} model, which does not caption: the captioner is a "
            f"video LLM. Pass --model with one of {', '.join(captioners())} (e.g. a Qwen2.5-VL or Qwen3-VL Instruct "
            "folder), and --family when its folder does not say which."
        )
    argv += ["--family", family, "--num_frames", str(num_frames)]
    cfg = parse_config(argv, prog="dit-lora caption", needs_data=False)
    return cfg


@dataclass(frozen=True)
class Caption:
    """What the model wrote for one file: the text, and whether it stopped by itself (False: it reached
    ``--max_new_tokens``, so the caption is cut)."""

    text: str
    finished: bool


@dataclass
class Captioner:
    """A loaded video LLM (its adapter attached, if any) and what turns frames into its inputs."""

    family: str
    model: torch.nn.Module
    processing: VideoQAProcessing
    max_new_tokens: int

    @property
    def device(self) -> torch.device:
        """Where the model's first parameters are (its inputs go there)."""
        return next(self.model.parameters()).device

    def prompt_inputs(self, clip: SampledClip, prompt: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """One file's prompt tokens (1-D ``input_ids``, ``attention_mask``) and pixel inputs, as the family's
        validation answers (``VideoQAProcessing.generation_inputs``)."""
        return self.processing.generation_inputs(clip, prompt)

    def caption(self, clips: list[SampledClip], prompts: list[str]) -> list[Caption]:
        """Greedy captions of ``clips``, one batch (:meth:`prompt_inputs`, then :meth:`generate`)."""
        return self.generate([self.prompt_inputs(clip, prompt) for clip, prompt in zip(clips, prompts)])

    def generate(self, built: list[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]) -> list[Caption]:
        """Greedy captions of prompts built by :meth:`prompt_inputs`, one batch: padded on the left so that each
        ends where generation starts; a file's caption is what ``generate`` gives for it alone (tested per family)."""
        proc = self.processing
        batch = pad_batch([tokens for tokens, _ in built], proc.pad_token_id, padding_side="left")
        batch.update(proc.spec.collate_pixels([pixels for _, pixels in built]))
        device = self.device
        inputs = {k: v.to(device) for k, v in batch.items()}
        generate = cast("Any", self.model).generate  # a transformers model (the video-LLM families load one)
        with torch.no_grad():
            out = generate(
                **inputs, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=proc.pad_token_id
            )
        new = out[:, inputs["input_ids"].shape[1] :].cpu()
        stops = _stop_ids(self.model, proc)
        return [
            Caption(
                proc.tokenizer.decode(row, skip_special_tokens=True).strip(),
                any(int(token) in stops for token in row.tolist()),
            )
            for row in new
        ]


def _stop_ids(model: torch.nn.Module, processing: VideoQAProcessing) -> set[int]:
    """The token ids that end a generation (the generation config's, and the tokenizer's end of sequence)."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None)
    found = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if processing.tokenizer.eos_token_id is not None:
        found.add(int(processing.tokenizer.eos_token_id))
    return found


def load_captioner(cfg: TrainConfig, device: torch.device, adapter: str | None, max_new_tokens: int) -> Captioner:
    """The model of ``cfg`` on ``device`` as its family loads it for training, frozen and in eval mode, with the
    dit-lora adapter in ``adapter`` (a folder or Hub repo id) attached at its trained strength."""
    spec = get_spec(cfg.model.family)
    folder = adapter_folder(adapter) if adapter else None
    if folder is not None:
        check_adapter(folder, cfg.model.family)
    comps = spec.model.load_components(cfg, device)
    model = comps.model
    if folder is not None:
        attach_adapter(spec, model, folder)
        model.to(device)
    model.eval()
    processing = comps.state.processing
    return Captioner(cfg.model.family, model, processing, max_new_tokens)


def check_adapter(folder: Path, family: str) -> None:
    """``--adapter`` must be a dit-lora run's output of a video LLM of the captioner's family: a folder without
    adapter files, or one trained for another family, is one paragraph."""
    summary = folder / "train_summary.json"
    if not (folder / "adapter_config.json").is_file() and not summary.is_file():
        raise UserError(
            f"--adapter {folder}: no adapter here (adapter_config.json or train_summary.json). Pass the output folder "
            "of a video-LLM run of dit-lora (its --output_dir), or a Hub repo it was pushed to."
        )
    if summary.is_file():
        trained = _summary_family(summary)
        if trained is not None and trained not in captioners():
            raise UserError(
                f"--adapter {folder} was trained for {trained}, a model that makes images or clips, not captions. "
                "Pass the output folder of a video-LLM run (recipes/videollm_lora.py; `dit-lora caption PATH "
                "--training_file NAME` writes its data from your own captions)."
            )
        if trained is not None and trained != family:
            raise UserError(
                f"--adapter {folder} was trained on a {trained} model, but the captioner (--model) is {family}. "
                f"An adapter loads into the model family it was trained on: pass --model with the {trained} base "
                "it was trained from."
            )


def _summary_family(summary: Path) -> str | None:
    try:
        data: Any = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    family = data.get("family") if isinstance(data, dict) else None
    return family if isinstance(family, str) else None
