"""The data side of video-LLM training: question-answer samples in, padded token batches with frames out.

:class:`VideoQAMedia` is the media handler :func:`dit_lora.data.prepare.prepare_data` uses for a
family with ``media == "video_qa"``: it lists samples from a VideoChat2 instruction JSON or a chat
JSONL (``--train_data_dir``: the file, or a folder holding exactly one), screens their clips
(unreadable, truncated or missing clips are quarantined like the diffusion recipes' bad samples)
and builds a dataset that decodes ``--num_frames`` frames and tokenizes each conversation with
answer-only labels. Nothing is cached: a video LLM sees the frames through its own vision tower.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..errors import UserError
from .data import QASample, load_qa_samples, read_frames, screen_qa_samples
from .prompts import pad_batch

ANNOTATION_SUFFIXES = (".json", ".jsonl")


def annotation_file(train_data_dir: str | None) -> Path:
    """``--train_data_dir`` as an annotation file: the file itself, or the one .json/.jsonl in the folder."""
    if not train_data_dir:
        raise UserError("Video LLM training needs --train_data_dir: a VideoChat2 instruction JSON, a chat JSONL, "
                        "or a folder holding exactly one of them.")
    path = Path(train_data_dir)
    if path.is_file():
        return path
    if not path.is_dir():
        raise UserError(f"--train_data_dir `{path}` does not exist. Point it at a VideoChat2 instruction JSON, a "
                        "chat JSONL, or a folder holding one.")
    found = sorted(p for p in path.iterdir() if p.suffix in ANNOTATION_SUFFIXES and p.is_file())
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise UserError(f"--train_data_dir `{path}` must hold exactly one .json or .jsonl annotation file (found: "
                        f"{listed}). Pass the file itself as --train_data_dir.")
    return found[0]


class QADataset(torch.utils.data.Dataset):
    """Item ``i``: frames of sample ``i`` as model inputs, and its conversation tokenized with answer-only labels."""

    def __init__(self, samples: list[QASample], family, num_frames: int, max_length: int | None) -> None:
        self.samples, self.family, self.num_frames, self.max_length = samples, family, num_frames, max_length

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: tuple[int, bool]) -> dict[str, Any]:
        i, _ = item  # (index, flip): a horizontal flip would swap "left to right" answers, so it is never applied
        sample = self.samples[i]
        pixels, count = self.family.frame_inputs(read_frames(sample.video, self.num_frames))
        return {**self._fitting_example(sample, count), "pixels": pixels, "sample_index": i}

    def _fitting_example(self, sample: QASample, video_tokens: int) -> dict:
        """The conversation tokenized; later QA rounds are dropped while it exceeds --max_sequence_length."""
        messages = list(sample.messages)
        while True:
            try:
                return self.family.tokenize(messages, video_tokens, self.max_length)
            except ValueError as err:
                if "--max_sequence_length" not in str(err):
                    raise
                answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
                if len(answers) <= 1:
                    raise UserError(
                        f"{sample.key} ({sample.video}): even its first question and answer with {video_tokens} video "
                        f"tokens exceed --max_sequence_length {self.max_length}. Raise --max_sequence_length or "
                        "lower --num_frames."
                    ) from None
                messages = messages[: answers[-2] + 1]  # drop the last question-answer round

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Right-padded tokens, the architecture's batched pixel inputs, and the sample indices."""
        batch = pad_batch([{k: it[k] for k in ("input_ids", "labels", "attention_mask")} for it in items],
                          self.family.pad_token_id)
        batch.update(self.family.spec.collate_pixels([it["pixels"] for it in items]))
        batch["sample_index"] = [it["sample_index"] for it in items]
        return batch


class VideoQAMedia:
    """What :func:`~dit_lora.data.prepare.prepare_data` does for video-LLM families (``media == "video_qa"``)."""

    noun = "clip"
    cacheable = False

    def __init__(self, cfg, family) -> None:
        self.cfg, self.family = cfg, family

    def list_samples(self) -> list[QASample]:
        cfg = self.cfg
        return load_qa_samples(annotation_file(cfg.train_data_dir), cfg.video_folder, cfg.max_train_samples)

    def screen(self, samples: list, *, log, quarantine: list[dict[str, Any]]) -> list:
        return screen_qa_samples(samples, num_frames=self.cfg.num_frames, log=log, quarantine=quarantine)

    def namespace_identity(self) -> dict[str, Any]:
        return {"family": self.family.name, "num_frames": self.cfg.num_frames}

    def raw_dataset(self, samples: list) -> QADataset:
        return QADataset(samples, self.family, self.cfg.num_frames, self.family.max_length(self.cfg))

    def groups(self, samples: list, **_: Any) -> None:
        return None

