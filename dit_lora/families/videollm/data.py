"""Video question-answering data for video-language models (VideoChat2 style): load, sample frames, screen.

* :func:`load_qa_samples` reads an annotation file into :class:`QASample` conversations without
  touching any video. Two formats, told apart by content rather than extension:

  - VideoChat2's instruction JSON: a list of ``{"video", "QA": [{"i", "q", "a"}, ...]}`` entries
    (optionally with a per-entry ``"system"``);
  - chat JSONL: one ``{"video", "messages": [{"role", "content"}, ...]}`` object per line, with
    ``content`` a string or a list of parts (``{"type": "text", "text": ...}``, ``{"type": "video"}``)
    as transformers' chat templates take it.

  Either kind of entry is accepted in either container, so a JSONL of ``QA`` entries loads too. LLaMA-Factory's
  entries (sharegpt or alpaca, the clip in ``"videos"``) are converted by :mod:`.llamafactory`.
* :func:`sample_frame_indices` / :func:`read_clip` pick and decode the frames a model sees:
  the centres of ``num_frames`` equal segments of the whole clip, as VideoChat2 samples at eval,
  with the rate they were sampled at (Qwen2.5-VL's time positions need it).
* :func:`screen_qa_samples` decodes each distinct video once, the way training will, and leaves
  out (and quarantines) the samples whose video is missing or broken.

Decoding uses PyAV through the helpers of :mod:`dit_lora.data.video`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.data.paths import locate
from dit_lora.data.preflight import BLOCK, OK, WARN, SampleCheck
from dit_lora.data.sources import MAX_LOGGED_BAD, json_lines
from dit_lora.data.video import VideoDecodeError, describe_error
from dit_lora.families.videollm import llamafactory
from dit_lora.families.videollm.frames import SampledClip, read_clip, read_frames, sample_frame_indices

__all__ = [
    "QASample",
    "check_qa_samples",
    "ROLES",
    "load_qa_samples",
    "SampledClip",
    "read_clip",
    "read_frames",
    "sample_frame_indices",
    "screen_qa_samples",
]

ROLES = ("system", "user", "assistant")

_FORMATS_HINT = (
    'a VideoChat2 instruction JSON (a list of {"video": ..., "QA": [{"i": ..., "q": ..., "a": ...}]} entries) '
    'or a chat JSONL file (one {"video": ..., "messages": [{"role": ..., "content": ...}]} object per line)'
)


@dataclass(frozen=True)
class QASample:
    """One training conversation about one video.

    ``key`` names the sample in logs and quarantine lists: ``<annotation file name>:<N>``, where N
    is the 1-based entry number of a JSON list or the line number of a JSONL file, so it points
    at the place to fix and stays the same however many samples are kept. ``video`` is absolute
    (the file may not exist: :func:`screen_qa_samples` finds that out). ``messages`` is the
    normalised conversation, ``{"role": "system"|"user"|"assistant", "content": str}`` dicts: an
    optional system message, then user/assistant turns alternating, ending with the assistant.
    The video belongs to the first user message; no marker for it is put in the text, the
    model's chat template places it.
    """

    key: str
    video: Path
    messages: list[dict[str, str]]
    #: why the video is never opened (its written path leaves the data folder, :mod:`dit_lora.data.paths`, or the
    #: LLaMA-Factory entry cannot be converted: then ``messages`` is empty), or None
    refused: str | None = None
    #: what reading the entry changed that its owner should know (check-data shows it as a warning), or None
    note: str | None = None

    @property
    def unconverted(self) -> bool:
        """Whether this is a LLaMA-Factory entry that could not be converted (``refused`` says why; no clip)."""
        return self.refused is not None and not self.messages

    def reason(self, problem: str) -> str:
        """``problem`` as reports give it: with the video's path, except for an entry that has no clip."""
        return problem if self.unconverted else f"{problem} (video {self.video})"

    def display_name(self) -> str:
        """How reports name this sample: the annotation entry and its video."""
        return f"{self.key} ({self.video})"


# ---------------------------------------------------------------------------------------------
# Loading annotations
# ---------------------------------------------------------------------------------------------


def load_qa_samples(
    path: str | os.PathLike,
    video_root: str | os.PathLike | None = None,
    max_samples: int | None = None,
    layout: llamafactory.Layout | None = None,
    notes: list[str] | None = None,
) -> list[QASample]:
    """Read a VideoChat2 instruction JSON or a chat JSONL file into :class:`QASample` conversations.

    LLaMA-Factory's entries (sharegpt or alpaca with ``videos``) are converted by
    :func:`~dit_lora.families.videollm.llamafactory.convert`, per ``layout`` (a dataset_info.json entry's) or, where
    it is None, per each entry's keys; ``notes`` gets the one line saying what the conversion did.

    A file whose first non-blank character is ``[`` is parsed as one JSON list; anything else as
    JSONL (blank lines skipped). Each entry needs ``"video"`` and either ``"QA"`` (each item one
    user turn, the instruction ``"i"`` and question ``"q"`` joined by a newline, empty parts left
    out, then an assistant turn with the answer ``"a"``; a per-entry ``"system"`` string becomes a
    system message) or ``"messages"`` (kept as they are, text parts of list contents joined by
    newlines, non-text parts such as ``{"type": "video"}`` dropped). Texts are stripped of
    surrounding whitespace.

    Relative video paths resolve against ``video_root`` if given, else the annotation file's folder.
    A video that does not exist is not an error here (see :func:`screen_qa_samples`). Order is file
    order; ``max_samples`` keeps the first N, after every entry has been checked.

    Raises:
        UserError: the file or ``video_root`` is missing, the file is empty, not UTF-8, not JSON /
            JSONL, or an entry is malformed (no ``"video"``, a QA item without an answer, a chat
            without a final assistant turn, unknown roles, turns that do not alternate, ...). The
            message names the file, the entry or line, and the fix.
    """
    if max_samples is not None and (
        isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1
    ):
        raise UserError(
            f"--max_train_samples must be a positive whole number, got {max_samples!r}. Leave it unset "
            f"to train on every question-answer sample."
        )
    file = Path(os.path.abspath(os.fspath(path)))
    if not file.is_file():
        what = "is a folder, not a file" if file.is_dir() else "does not exist"
        raise UserError(f"The QA annotation file {file} {what}. Pass the path of {_FORMATS_HINT}.")
    if video_root is not None:
        root = Path(os.path.abspath(os.fspath(video_root)))
        if not root.is_dir():
            raise UserError(
                f"The video folder {root} (--video_folder, for the relative video paths of {file}) does "
                f'not exist or is not a folder. Pass the folder the "video" paths in {file.name} are '
                f"relative to, or leave it unset to resolve them against the annotation file's folder."
            )
    else:
        root = file.parent
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise UserError(
            f"The QA annotation file {file} is not valid UTF-8 (byte {err.start}). Re-save it as UTF-8."
        ) from None
    if not text.strip():
        raise UserError(f"The QA annotation file {file} is empty. Put the training samples in it: {_FORMATS_HINT}.")

    reading = _Reading()
    samples = [
        _sample(entry, where, f"{file.name}:{number}", root, layout, reading)
        for number, where, entry in _entries(file, text)
    ]
    if not samples:  # a JSON list with no entries
        raise UserError(
            f"The QA annotation file {file} holds no entries. Put the training samples in it: {_FORMATS_HINT}."
        )
    kept = samples if max_samples is None else samples[:max_samples]
    if notes is not None:
        notes.extend(reading.notes(file, samples, len(kept)))
    return kept


@dataclass
class _Reading:
    """What reading one annotation file did, for its log lines: the LLaMA-Factory entries converted (whether
    ``<video>`` opened each question, by key) and the keys of the entries naming their clip by an absolute path."""

    converted: dict[str, bool] = dataclasses.field(default_factory=dict)
    absolute: list[str] = dataclasses.field(default_factory=list)

    def notes(self, file: Path, samples: list[QASample], kept: int) -> list[str]:
        lines = [_conversion_note(file, self.converted, samples, kept)] if self.converted else []
        if self.absolute:
            one = len(self.absolute) == 1
            lines.append(
                f"{len(self.absolute)} entr{'y' if one else 'ies'} of {file} name{'s its' if one else ' their'} clip "
                f"by an absolute path ({_named(self.absolute)}), used as written there (as LLaMA-Factory does); "
                "relative paths stay inside the data folder"
            )
        return lines


def _named(keys: list[str]) -> str:
    return ", ".join(keys[:MAX_LOGGED_BAD]) + (" ..." if len(keys) > MAX_LOGGED_BAD else "")


def _entries(file: Path, text: str) -> list[tuple[int, str, Any]]:
    """(number, "entry N of FILE" / "line N of FILE", parsed object) for each entry, in file order."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)  # starts with '[', so a list or an error
        except json.JSONDecodeError as err:
            raise UserError(
                f"The QA annotation file {file} starts like a JSON list but is not valid JSON (line "
                f"{err.lineno}, column {err.colno}: {err.msg}). Fix the syntax there (a missing comma, "
                f"bracket or quote is typical); the file must be {_FORMATS_HINT}."
            ) from None
        return [(n, f"Entry {n} of {file}", entry) for n, entry in enumerate(data, 1)]
    bad_line = lambda no, err: (  # noqa: E731
        f"Line {no} of {file} is not valid JSON ({err.msg}, column {err.colno}). A file that does not start "
        "with '[' is read as chat JSONL, one complete JSON object per line: fix that line, or, if the file is "
        "one JSON document, make it a JSON list of entries (VideoChat2 format)."
    )
    return [(no, f"Line {no} of {file}", entry) for no, entry in json_lines(text.splitlines(), bad_line)]


def _conversion_note(file: Path, converted: dict[str, bool], samples: list[QASample], kept: int) -> str:
    """The log line of a LLaMA-Factory file: how many entries were read (and kept, by --max_train_samples), the
    ones that cannot be converted (left out as bad samples), and those whose ``<video>`` stood elsewhere than at
    the start of the question (the clip goes where the chat template puts it)."""
    count = f"{len(converted)} read" + (f", the first {kept} kept" if kept < len(samples) else "")
    bad = [s.key for s in samples if s.unconverted]
    elsewhere = [key for key, leading in converted.items() if not leading]
    unusable = (
        f"; {len(bad)} cannot be trained ({_named(bad)}) and are left out as bad samples, each with its reason"
        if bad
        else ""
    )
    moved = (
        f"; {len(elsewhere)} had it elsewhere in the question ({_named(elsewhere)}), and their clip goes to the "
        "start of the question all the same (LLaMA-Factory keeps it in place)"
        if elsewhere
        else ""
    )
    return (
        f"LLaMA-Factory entries of {file}: {count}; each `{llamafactory.VIDEO}` taken out of the first question, and "
        f"the clip given to the model's chat template, which puts the model's own video tokens at the start of that "
        f"question{unusable}{moved}"
    )


_MOVED = (
    f"its `{llamafactory.VIDEO}` stands inside the question; the clip goes to the question's start all the same "
    "(LLaMA-Factory keeps it in place)"
)


def _sample(
    entry: Any, where: str, key: str, root: Path, layout: llamafactory.Layout | None, reading: _Reading
) -> QASample:
    layout = layout or llamafactory.layout_of(entry)
    if layout is not None:
        try:
            clip, turns, leading = llamafactory.convert(entry, layout, where)
            messages = _chat_messages(turns, where)
        except UserError as err:  # LLaMA-Factory skips such an entry: a bad sample of its own, never opened
            reading.converted[key] = True
            return QASample(key=key, video=Path(key), messages=[], refused=str(err))
        reading.converted[key] = leading
        sample = _placed(root, clip, messages, where, key, "videos", reading)
        return sample if leading else QASample(sample.key, sample.video, sample.messages, sample.refused, _MOVED)
    if not isinstance(entry, dict):
        raise UserError(
            f"{where} is a JSON {type(entry).__name__}, not an object. Each entry must be an object "
            f'with "video" and "QA" (VideoChat2) or "messages" (chat); the file must be {_FORMATS_HINT}.'
        )
    video = entry.get("video")
    if not isinstance(video, str) or not video.strip():
        problem = 'has no "video"' if video is None else f'has an unusable "video" ({video!r})'
        raise UserError(
            f'{where} {problem}. Give every entry the path of its clip as a "video" string, relative '
            f'to {root} (or absolute, inside that folder); LLaMA-Factory\'s entries give it in a "videos" list.'
        )
    if "QA" in entry:
        messages = _qa_messages(entry, where)
    elif "messages" in entry:
        messages = _chat_messages(entry["messages"], where)
    else:
        raise UserError(
            f'{where} has neither "QA" (VideoChat2: a list of {{"i", "q", "a"}} items) nor '
            f'"messages" (chat: a list of {{"role", "content"}} turns); keys found: '
            f"{', '.join(sorted(map(str, entry))) or 'none'}. Add the conversation under one of those keys."
        )
    return _placed(root, video, messages, where, key, "video", reading)


def _placed(
    root: Path, video: str, messages: list[dict[str, str]], where: str, key: str, column: str, reading: _Reading
) -> QASample:
    """The sample of ``video`` (as written in ``column``) placed in ``root``, or refused there (never opened).

    An absolute path written in the annotation file is used as given, as LLaMA-Factory joins ``media_dir`` with
    it (the user pointed at this file, and wrote the path in it; counted in ``reading`` for a log line); a
    relative path stays inside ``root`` (``..`` and links out of it refused, :func:`~dit_lora.data.paths.locate`).
    """
    located = locate(
        root,
        video,
        field=f'{where}: "{column}"',
        hint=" (or pass --video_folder with a folder that holds every video)",
        absolute_as_written=True,
    )
    if located.path is not None and os.path.isabs(located.key):
        reading.absolute.append(key)
    if located.path is None:  # refused (Located holds no path then)
        return QASample(key=key, video=Path(located.key), messages=messages, refused=located.refused)
    return QASample(key=key, video=Path(located.path), messages=messages)


def _qa_messages(entry: dict, where: str) -> list[dict[str, str]]:
    qa = entry["QA"]
    if not isinstance(qa, list) or not qa:
        raise UserError(
            f'{where} has a "QA" that is {"empty" if qa == [] else "not a list"}. Make "QA" a list of '
            f'one or more {{"i": instruction, "q": question, "a": answer}} items, or delete the entry.'
        )
    messages: list[dict[str, str]] = []
    system = entry.get("system")
    if system is not None and not isinstance(system, str):
        raise UserError(f'{where} has a "system" that is not text ({system!r}). Make it a string or remove it.')
    if system and system.strip():
        messages.append({"role": "system", "content": system.strip()})
    for item_no, item in enumerate(qa, 1):
        if not isinstance(item, dict):
            raise UserError(
                f"{where}: QA item {item_no} is a JSON {type(item).__name__}, not an object. Write each QA "
                f'item as {{"i": instruction, "q": question, "a": answer}}.'
            )
        parts = []
        for field in ("i", "q"):
            value = item.get(field)
            if value is not None and not isinstance(value, str):
                raise UserError(
                    f'{where}: QA item {item_no} has a "{field}" that is not text ({value!r}). Make it a '
                    f"string (or leave it out)."
                )
            if value and value.strip():
                parts.append(value.strip())
        answer = item.get("a")
        if not isinstance(answer, str) or not answer.strip():
            problem = 'no answer ("a" is missing)' if answer is None else f'an unusable answer "a" ({answer!r})'
            raise UserError(
                f"{where}: QA item {item_no} has {problem}. Every QA item needs a non-empty answer string "
                f'"a" (it is what the model learns to say); fill it in or delete the item.'
            )
        messages.append({"role": "user", "content": "\n".join(parts)})
        messages.append({"role": "assistant", "content": answer.strip()})
    return messages


def _content_text(content: Any, where: str, turn_no: int) -> str:
    """A turn's text: a string as is, or the text parts of a parts list joined by newlines."""
    if isinstance(content, str):
        return content.strip()
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text":
                if not isinstance(part.get("text"), str):
                    break
                texts.append(part["text"])
            elif not (isinstance(part, dict) and isinstance(part.get("type"), str)):
                break
            # other typed parts ({"type": "video"}, {"type": "image"}): the video comes from "video"
        else:
            return "\n".join(t.strip() for t in texts if t.strip())
    raise UserError(
        f'{where}: message {turn_no} has a "content" that is neither text nor a list of parts '
        f'({content!r:.80}). Write it as a string, or as a list like [{{"type": "video"}}, '
        f'{{"type": "text", "text": "..."}}].'
    )


def _chat_messages(raw: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise UserError(
            f'{where} has "messages" that are {"empty" if raw == [] else "not a list"}. Make "messages" '
            f'a list of {{"role": "user"|"assistant"|"system", "content": ...}} turns ending with '
            f"the assistant's answer."
        )
    messages: list[dict[str, str]] = []
    for turn_no, turn in enumerate(raw, 1):
        role = turn.get("role") if isinstance(turn, dict) else None
        if role not in ROLES:
            found = f"role {role!r}" if isinstance(turn, dict) else f"a JSON {type(turn).__name__}"
            raise UserError(
                f'{where}: message {turn_no} has {found}; every message must be an object with "role" '
                f'"system", "user" or "assistant" and a "content". Rename the role (e.g. human -> '
                f"user, gpt -> assistant)."
            )
        messages.append({"role": role, "content": _content_text(turn.get("content"), where, turn_no)})
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise UserError(
            f"{where} has no assistant turn, so there is nothing to learn from it. Add a "
            f'{{"role": "assistant", "content": ...}} message with the answer after the user\'s question.'
        )
    # After an optional leading system message: user, assistant, user, assistant, ...
    start = 1 if roles[0] == "system" else 0
    for offset, role in enumerate(roles[start:]):
        expected = ("user", "assistant")[offset % 2]
        if role != expected:
            raise UserError(
                f"{where}: message {start + offset + 1} has role {role!r} where role {expected!r} belongs. "
                f"After an optional first system message, turns must alternate user, assistant, user, "
                f"assistant; merge consecutive turns of one role or remove the stray one."
            )
    if roles[-1] != "assistant":
        raise UserError(
            f"{where} ends with a {roles[-1]!r} turn. A conversation must end with the assistant's answer; "
            f"add it or delete the trailing turn."
        )
    for number, message in enumerate(messages, 1):
        if message["role"] == "assistant" and not message["content"]:
            raise UserError(
                f"{where}: message {number} is an empty assistant turn. Fill in the answer (it is what the "
                f"model learns to say) or delete the turn and the question before it."
            )
    return messages


# ---------------------------------------------------------------------------------------------
# Screening
# ---------------------------------------------------------------------------------------------


def _video_problem(video: Path, num_frames: int) -> str | None:
    try:
        read_clip(video, num_frames)
    except VideoDecodeError as err:
        return str(err)
    except Exception as err:
        return f"unreadable ({describe_error(err)})"
    return None


def _video_problems(videos: list, num_frames: int, num_workers: int | None) -> dict:
    """``{video: problem or None}`` for each distinct video, checked in threads (FFmpeg releases the GIL)."""
    workers = min(4, os.cpu_count() or 1) if num_workers is None else max(1, num_workers)
    check = lambda video: _video_problem(video, num_frames)  # noqa: E731
    if workers > 1 and len(videos) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="screen-qa") as pool:
            return dict(zip(videos, pool.map(check, videos)))
    return {video: check(video) for video in videos}


def _sample_problems(
    samples: list[QASample], num_frames: int, num_workers: int | None
) -> Callable[[QASample], str | None]:
    """``sample -> problem or None``: each distinct video decoded once; a refused path (outside the data folder)
    is its own problem and never opened."""
    videos = list(dict.fromkeys(s.video for s in samples if s.refused is None))
    problems = _video_problems(videos, num_frames, num_workers)
    return lambda s: s.refused if s.refused is not None else problems[s.video]


def check_qa_samples(
    samples: Sequence[QASample],
    *,
    num_frames: int,
    fit: Callable[[QASample, SampledClip], tuple[str | None, str | None]] | None = None,
    num_workers: int | None = None,
) -> list:
    """``dit-lora check-data``'s rows for video-QA samples: the check :func:`screen_qa_samples` makes, per sample.

    A sample whose video cannot give ``num_frames`` frames blocks (training leaves it out, naming the
    same reason). With ``fit`` (the family's token-budget check, given the decoded clip), a conversation
    that cannot fit ``--max_sequence_length`` blocks and one whose later rounds would be cut warns.
    Each distinct video is decoded once.
    """

    samples = list(samples)
    problem_of = _sample_problems(samples, num_frames, num_workers)
    clips: dict[Path, SampledClip] = {}
    rows = []
    for sample in samples:
        problem = problem_of(sample)
        if problem is not None:
            path = None if sample.unconverted else str(sample.video)
            rows.append(SampleCheck(sample.key, "sample", BLOCK, sample.reason(problem), path))
            continue
        block, warn = None, sample.note
        if fit is not None:
            if sample.video not in clips:
                clips[sample.video] = read_clip(sample.video, num_frames)
            block, fit_warn = fit(sample, clips[sample.video])
            warn = "; ".join(w for w in (warn, fit_warn) if w) or None
        status = BLOCK if block else WARN if warn else OK
        rows.append(SampleCheck(sample.key, "sample", status, block or warn or "", str(sample.video)))
    return rows


def screen_qa_samples(
    samples: Sequence[QASample],
    *,
    num_frames: int,
    log: Callable[[str], Any] = print,
    quarantine: list[dict[str, Any]] | None = None,
    num_workers: int | None = None,
) -> list[QASample]:
    """Leave out the samples whose video cannot give ``num_frames`` frames; keep the rest in order.

    Each distinct video is checked once (many samples often share a clip) by decoding exactly the
    frames training will read (:func:`read_frames`), in ``num_workers`` threads (default up to 4;
    FFmpeg releases the GIL). Every sample of a bad video is appended to ``quarantine`` as
    ``{"key": sample.key, "reason": "<problem> (video <path>)"}``. ``log`` gets one line per bad
    video (at most 20, then a count) and a one-line summary.

    Does not judge how many may be bad: the caller compares ``quarantine`` with
    ``--max_bad_samples_fraction`` (:func:`~dit_lora.data.validation.bad_fraction_error`) and
    decides what an empty result means.
    """
    samples = list(samples)
    videos = list(dict.fromkeys(s.video for s in samples))  # distinct, first-seen order
    problem_of = _sample_problems(samples, num_frames, num_workers)

    good = [s for s in samples if problem_of(s) is None]
    bad = [s for s in samples if problem_of(s) is not None]
    if quarantine is not None:
        quarantine.extend({"key": s.key, "reason": s.reason(str(problem_of(s)))} for s in bad)
    for s in [s for s in bad if s.unconverted][:MAX_LOGGED_BAD]:
        log(f"skipping {s.key}: {s.refused}")
    unconverted = sum(s.unconverted for s in bad)
    bad_videos = list(dict.fromkeys(s.video for s in bad if not s.unconverted))
    for video in bad_videos[:MAX_LOGGED_BAD]:
        users = [s for s in bad if s.video == video]
        used_by = users[0].key if len(users) == 1 else f"{users[0].key} and {len(users) - 1} more sample(s)"
        log(f"skipping {used_by}: video {video}: {problem_of(users[0])}")
    if len(bad_videos) > MAX_LOGGED_BAD:
        log(f"... and {len(bad_videos) - MAX_LOGGED_BAD} more unusable videos")
    log(
        f"checked {len(videos) - unconverted} video(s) of {len(samples)} QA sample(s) at {num_frames} frames: "
        f"{len(bad_videos)} unusable, {len(bad)} sample(s) left out"
        f"{f' ({unconverted} LLaMA-Factory entries that cannot be trained)' if unconverted else ''}, {len(good)} remain"
    )
    return good
