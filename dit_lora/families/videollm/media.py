"""The data side of video-LLM training: question-answer samples in, padded token batches with frames out.

:class:`VideoQAMedia` is the media handler :func:`dit_lora.data.prepare.prepare_data` uses for a
video-LLM family (:class:`VideoQAData`, the spec's ``data``): it lists samples from a VideoChat2 instruction JSON or a chat
JSONL (``--train_data_dir``: the file, or a folder holding exactly one) or LLaMA-Factory's data
(:mod:`.llamafactory`; its dataset_info.json folder with ``--dataset_info_name``), refuses a media token left in a
text (:func:`refuse_literal_tokens`), screens their clips
(unreadable, truncated or missing clips are quarantined like the diffusion recipes' bad samples)
and builds a dataset that decodes ``--num_frames`` frames and tokenizes each conversation with
answer-only labels. Nothing is cached: a video LLM sees the frames through its own vision tower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from dit_lora.core.errors import UserError
from dit_lora.data.preflight import BLOCK
from dit_lora.data.prepare import prepare_data
from dit_lora.data.sources import MAX_NAMED
from dit_lora.families.videollm import llamafactory
from dit_lora.families.videollm.architecture import VideoLLMSpec, model_folder
from dit_lora.families.videollm.data import QASample, check_qa_samples, load_qa_samples, read_clip, screen_qa_samples
from dit_lora.families.videollm.processing import max_tokens
from dit_lora.families.videollm.prompts import pad_batch
from dit_lora.families.videollm.state import run_processing

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

ANNOTATION_SUFFIXES = (".json", ".jsonl")


class Fitted(NamedTuple):
    """One conversation fitted to --max_sequence_length: its clip's video tokens, the QA rounds cut, and the
    blocking problem (even its first round is too long) or None."""

    video_tokens: int
    dropped: int
    problem: str | None


def annotation_file(train_data_dir: str | None) -> Path:
    """``--train_data_dir`` as an annotation file: the file itself, or the one .json/.jsonl in the folder."""
    if not train_data_dir:
        raise UserError(
            "Video LLM training needs --train_data_dir: a VideoChat2 instruction JSON, a chat JSONL, "
            "or a folder holding exactly one of them."
        )
    path = Path(train_data_dir)
    if path.is_file():
        return path
    if not path.is_dir():
        raise UserError(
            f"--train_data_dir `{path}` does not exist. Point it at a VideoChat2 instruction JSON, a "
            "chat JSONL, or a folder holding one."
        )
    found = sorted(p for p in path.iterdir() if p.suffix in ANNOTATION_SUFFIXES and p.is_file())
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise UserError(
            f"--train_data_dir `{path}` must hold exactly one .json or .jsonl annotation file (found: "
            f"{listed}). Pass the file itself as --train_data_dir."
        )
    return found[0]


def literal_tokens(arch: VideoLLMSpec | None) -> tuple[str, ...]:
    """The media tokens no message text may hold: LLaMA-Factory's placeholders (``<video>``, ``<image>``) and the
    architecture's own (:attr:`~dit_lora.families.videollm.architecture.VideoLLMSpec.media_tokens`)."""
    own = arch.media_tokens if arch is not None else ()
    return tuple(dict.fromkeys((llamafactory.VIDEO, llamafactory.IMAGE, *own)))


def refuse_literal_tokens(samples: Sequence[QASample], tokens: Sequence[str], family: str) -> None:
    """One paragraph for the samples whose text holds one of ``tokens``: the family's prompt builder writes the
    video tokens itself, so one in the text would be trained as plain words (or as a second, empty video)."""
    found = [
        (sample, number, token)
        for sample in samples
        for number, message in enumerate(sample.messages, 1)
        for token in tokens
        if token in message["content"]
    ]
    if not found:
        return
    sample, number, token = found[0]
    keys = list(dict.fromkeys(s.key for s, _, _ in found))
    more = (
        f" ({len(keys) - 1} more sample(s) hold such tokens: {', '.join(keys[1 : MAX_NAMED + 1])})" if keys[1:] else ""
    )
    raise UserError(
        f"{sample.key} ({sample.video}): message {number} ({sample.messages[number - 1]['role']}) holds `{token}` "
        f"as text{more}. --family {family} places the clip and writes its own video tokens in the first question, "
        f"so `{token}` would be trained as plain text. Remove it from the text; in LLaMA-Factory's data, one "
        f"`{llamafactory.VIDEO}` belongs in the first user message with one path in `videos` (dit-lora converts that "
        "one)."
    )


def fit_conversation(
    processing, sample: QASample, video_tokens: int, max_length: int | None, times: Sequence[float] | None = None
) -> tuple[dict, int]:
    """``sample``'s conversation tokenized, and how many later QA rounds were dropped to fit ``max_length``
    (``times``: its sampled frames' seconds, :attr:`~dit_lora.families.videollm.data.SampledClip.times`).

    Raises:
        UserError: even the first question and answer with ``video_tokens`` video tokens are too long.
    """
    messages = list(sample.messages)
    dropped = 0
    while True:
        try:
            return processing.tokenize(messages, video_tokens, max_length, times), dropped
        except ValueError as err:
            if "--max_sequence_length" not in str(err):
                raise
            answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
            if len(answers) <= 1:
                raise UserError(
                    f"{sample.key} ({sample.video}): even its first question and answer with {video_tokens} video "
                    f"tokens exceed --max_sequence_length {max_length}. Raise --max_sequence_length or "
                    "lower --num_frames."
                ) from None
            messages = messages[: answers[-2] + 1]  # drop the last question-answer round
            dropped += 1


class QADataset(torch.utils.data.Dataset):
    """Item ``i``: frames of sample ``i`` as model inputs, and its conversation tokenized with answer-only labels."""

    def __init__(self, samples: list[QASample], processing, num_frames: int, max_length: int | None) -> None:
        self.samples, self.processing, self.num_frames, self.max_length = samples, processing, num_frames, max_length

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, item: tuple[int, bool]) -> dict[str, Any]:
        i, _ = item  # (index, flip): a horizontal flip would swap "left to right" answers, so it is never applied
        sample = self.samples[i]
        clip = read_clip(sample.video, self.num_frames)
        pixels, count = self.processing.frame_inputs(clip.frames, clip.fps)
        example, _ = fit_conversation(self.processing, sample, count, self.max_length, clip.times)
        return {**example, "pixels": pixels, "sample_index": i}


class VideoQAMedia:
    """The :class:`~dit_lora.data.prepared_data.MediaHandler` of video-LLM families: QA samples, tokenized on the fly."""

    noun = "clip"
    cacheable = False

    def __init__(self, cfg: TrainConfig, spec, processing=None) -> None:
        #: the family's :class:`~dit_lora.contract.spec.FamilySpec` (its name; its ``video_qa`` loads the processing)
        self.cfg, self.spec = cfg, spec
        #: the model's tokenizer, preprocessing and config (``VideoQAProcessing``, or anything with its
        #: ``frame_inputs``/``tokenize``/``pad_token_id`` and the architecture's ``collate_pixels`` as
        #: ``spec.collate_pixels``); None until a model is known (``check`` loads it)
        self.processing = processing
        #: what reading the data did to it (LLaMA-Factory's entries converted), logged by ``screen`` and ``check``
        self.notes: list[str] = []

    def list_samples(self) -> list[QASample]:
        """The conversations of ``--train_data_dir`` (an annotation file, a folder holding one, or LLaMA-Factory's
        dataset_info.json folder with ``--dataset_info_name``), refused when a text holds a media token
        (:func:`refuse_literal_tokens`)."""
        cfg, options = self.cfg, self.cfg.family_options
        found = llamafactory.dataset_source(cfg.data.train_data_dir, options.dataset_info_name, options.video_folder)
        file, root, layout = found or (annotation_file(cfg.data.train_data_dir), options.video_folder, None)
        self.notes = []
        samples = load_qa_samples(file, root, cfg.data.max_train_samples, layout=layout, notes=self.notes)
        arch = self.spec.video_qa.arch if self.spec.video_qa is not None else None
        refuse_literal_tokens(samples, literal_tokens(arch), self.spec.name)
        return samples

    def screen(self, samples: list, *, log, quarantine: list[dict[str, Any]]) -> list:
        """The usable samples (clips screened); every rank screens, so all agree on them. What training cuts
        is reported apart, by the main process only (:meth:`cut_rounds_line`, from ``prepare_data``)."""
        for line in self.notes:  # the conversion of LLaMA-Factory's entries, said once
            log(line)
        return screen_qa_samples(samples, num_frames=self.cfg.family_options.num_frames, log=log, quarantine=quarantine)

    def cut_rounds_line(self, samples: list[QASample]) -> str | None:
        """One line (count, the first names) for the conversations whose later QA rounds are cut to fit
        --max_sequence_length, judged by the model's tokenizer with each clip's real video tokens, as the dataset
        will cut them; None when none is. Only conversations of several rounds can be cut: their clips are read
        once more, one video at a time (its frames are not kept)."""
        if self.processing is None:
            return None  # the model's processing is not loaded (screening without a model): nothing to judge by
        budget = max_tokens(self.cfg)
        by_video: dict[Path, list[QASample]] = {}
        for sample in samples:
            if sum(m["role"] == "assistant" for m in sample.messages) > 1:
                by_video.setdefault(sample.video, []).append(sample)
        cut: list[tuple[str, int]] = []  # (key, rounds cut)
        for video, users in by_video.items():
            clip = read_clip(video, self.cfg.family_options.num_frames)
            for sample in users:
                fitted = self._fit(sample, clip, budget)
                if fitted.dropped:
                    cut.append((sample.key, fitted.dropped))
        if not cut:
            return None
        order = {s.key: i for i, s in enumerate(samples)}
        cut.sort(key=lambda kv: order[kv[0]])
        named = ", ".join(f"{key} (last {dropped} round(s))" for key, dropped in cut[:MAX_NAMED])
        more = f" and {len(cut) - MAX_NAMED} more" if len(cut) > MAX_NAMED else ""
        return (
            f"long conversations: {len(cut)} of {len(samples)} conversation(s) do not fit --max_sequence_length "
            f"{budget} with their video tokens, so their last question-answer rounds are cut: {named}{more}. "
            f"Raise --max_sequence_length, lower --num_frames, or split those conversations."
        )

    def check(self, samples: list, *, log) -> tuple[list, list, str | None]:
        """``check-data``: the screening training does, per sample, and the token budget when the model is known.

        Returns (rows, the usable samples, a note or None). With --pretrained_model_name_or_path the model's
        tokenizer, preprocessing and config (not its weights) are read, and each conversation is fitted to
        --max_sequence_length with its clip's real video-token count, as the dataset will.
        """
        cfg = self.cfg
        fit = None
        note = (
            "token budget: not checked (pass --pretrained_model_name_or_path to fit each conversation to "
            "--max_sequence_length)"
        )
        if cfg.model.pretrained_model_name_or_path:
            # a Hub id's config, tokenizer and processor files (no weights), from the cache or downloaded
            self.processing = self.spec.video_qa.load_processing(str(model_folder(cfg.model, weights=False)))
            budget = max_tokens(cfg)
            fit = self._token_budget(budget)
            note = f"token budget: each conversation fitted to --max_sequence_length {budget} with its video tokens"
        for line in self.notes:  # what reading the data did (LLaMA-Factory's entries converted)
            log(line)
        log(f"checking {len(samples)} QA sample(s) at {cfg.family_options.num_frames} frames ...")
        rows = check_qa_samples(samples, num_frames=cfg.family_options.num_frames, fit=fit)
        usable = [s for s, row in zip(samples, rows) if row.status != BLOCK]
        return rows, usable, note

    def _fit(self, sample: QASample, clip, max_length: int) -> Fitted:
        """How :func:`fit_conversation` fits ``sample`` with ``clip``'s video tokens: the rounds it cuts, or why
        even its first round does not fit."""
        _, count = self.processing.frame_inputs(clip.frames, clip.fps)
        try:
            _, dropped = fit_conversation(self.processing, sample, count, max_length, clip.times)
        except UserError as err:
            return Fitted(count, 0, str(err).split(": ", 1)[-1])
        return Fitted(count, dropped, None)

    def _token_budget(self, max_length: int) -> Callable[[QASample, Any], tuple[str | None, str | None]]:
        """check-data's per-sample fit: (blocking problem, warning), as :func:`fit_conversation` will fit it."""

        def fit(sample: QASample, clip) -> tuple[str | None, str | None]:
            fitted = self._fit(sample, clip, max_length)
            if fitted.dropped:
                return None, (
                    f"its last {fitted.dropped} QA round(s) are cut to fit --max_sequence_length "
                    f"{max_length} ({fitted.video_tokens} video tokens)"
                )
            return fitted.problem, None

        return fit

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        return {"family": self.spec.name, "num_frames": self.cfg.family_options.num_frames}

    def raw_dataset(self, samples: list) -> QADataset:
        return QADataset(samples, self.processing, self.cfg.family_options.num_frames, max_tokens(self.cfg))

    def collate(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Right-padded tokens, the architecture's batched pixel inputs, and the sample indices."""
        batch: dict[str, Any] = pad_batch(
            [{k: it[k] for k in ("input_ids", "labels", "attention_mask")} for it in items],
            self.processing.pad_token_id,
        )
        batch.update(self.processing.spec.collate_pixels([it["pixels"] for it in items]))
        batch["sample_index"] = [it["sample_index"] for it in items]
        return batch

    def groups(self, samples: list, **_: Any) -> None:
        return None


class VideoQAData:
    """``FamilySpec.data``: question-answer samples with their clips, tokenized by the dataset (nothing is cached)."""

    def data_handler(self, cfg: TrainConfig, spec) -> VideoQAMedia:
        """Screening and ``check-data`` (``check`` loads the model's processing when the model is named)."""
        return VideoQAMedia(cfg, spec)

    def build_data(self, cfg: TrainConfig, spec, comps, accelerator):
        """The QA data on the standard path, tokenized with the loaded model's processing (the run's state)."""
        return prepare_data(cfg, spec, comps, accelerator, media=VideoQAMedia(cfg, spec, run_processing(comps)))
