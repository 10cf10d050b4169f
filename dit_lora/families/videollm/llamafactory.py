"""LLaMA-Factory's data for the video LLMs, read as LLaMA-Factory reads it, into dit-lora's conversations.

LLaMA-Factory (hiyouga/LLaMA-Factory; ``src/llamafactory/data/parser.py``, ``converter.py``, ``mm_plugin.py`` and
``data/README.md`` were read for this) keeps a dataset as a JSON list or JSONL of entries in one of two formats:

* **sharegpt**: a list of turns under ``conversations`` (``{"from": "human"|"gpt"|"system", "value": ...}``) or, as
  its multimodal demos write it, ``messages`` (``{"role": "user"|"assistant"|"system", "content": ...}``); the keys
  and role names are ``dataset_info.json``'s ``tags``. User turns (or tool results) sit at odd positions, assistant
  turns (or function calls) at even ones, after an optional first system turn; a conversation has an even count.
* **alpaca**: ``instruction`` and ``input`` (joined by a newline into the question), ``output`` (the answer), with
  ``system`` and ``history`` (``[[question, answer], ...]``, earlier rounds, also learned).

Media are lists beside the turns: ``videos`` (and ``images``, ``audios``), and each one has a placeholder in the
text, ``<video>`` (``<image>``, ``<audio>``): LLaMA-Factory's plugins for LLaVA-NeXT-Video, Qwen2-VL/Qwen3-VL and
InternVL stop when the counts differ (``_validate_messages``) and replace each placeholder by the model's own video
tokens where it stands. dit-lora trains one clip per conversation, attached to the first question, where the
model's chat template puts it: so one video and one ``<video>`` in the first user turn are converted (the
placeholder removed from the text; the family's prompt builder writes its own tokens there), and everything
dit-lora cannot train (no video, several, images, audio, tool turns, preference data) is refused by name, entry
and fix: :func:`convert`. ``dataset_info.json`` (``--train_data_dir`` at its folder, ``--dataset_info_name`` for
LLaMA-Factory's ``--dataset``) gives the file, the format, the columns and the tags: :func:`dataset_source`; a file
given directly has its format read from each entry's keys: :func:`layout_of`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dit_lora.core.errors import UserError

__all__ = ["DATASET_INFO", "IMAGE", "VIDEO", "Layout", "convert", "dataset_source", "layout_of"]

#: LLaMA-Factory's placeholders (``extras/constants.py``; they can be changed there by environment variables)
VIDEO, IMAGE, AUDIO = "<video>", "<image>", "<audio>"
DATASET_INFO = "dataset_info.json"
#: the keys that make an entry LLaMA-Factory's (dit-lora's own formats name their clip by ``"video"``)
_MARKS = ("videos", "images", "conversations", "instruction")
#: LLaMA-Factory's defaults (``parser.DatasetAttr``); the media columns are read under their usual names even
#: where dataset_info.json does not map them
_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "messages": "conversations"}
_MEDIA = {"videos": "videos", "images": "images", "audios": "audios"}
_SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt"}
_OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
_TOOL_TAGS = {"observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}
_FIX_VIDEO = f"one clip path in `videos` and one `{VIDEO}` at the start of the first user message"


@dataclass(frozen=True)
class Layout:
    """How one LLaMA-Factory dataset is written: ``formatting`` (``sharegpt`` or ``alpaca``), its ``columns`` (role:
    the entry's key, LLaMA-Factory's ``DatasetAttr`` names) and sharegpt ``tags``; ``source`` says where that was
    decided (a dataset_info.json entry, or the entry's own keys)."""

    formatting: str
    columns: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    source: str = "the entry's keys"


def layout_of(entry: Any) -> Layout | None:
    """The layout of a LLaMA-Factory ``entry`` of a file given directly (no dataset_info.json), from its keys; None
    for an entry in dit-lora's own formats (it names its clip by ``"video"``) or one that is neither."""
    if not isinstance(entry, dict) or "video" in entry or not any(key in entry for key in _MARKS):
        return None
    if "instruction" in entry:
        columns = {**_COLUMNS, **_MEDIA, "system": "system", "history": "history"}
        return Layout("alpaca", columns)
    key = "messages" if "messages" in entry else "conversations"
    turns = entry.get(key)
    first = turns[0] if isinstance(turns, list) and turns and isinstance(turns[0], dict) else {}
    tags = {**(_OPENAI_TAGS if "role" in first else _SHAREGPT_TAGS), **_TOOL_TAGS}
    return Layout("sharegpt", {**_COLUMNS, **_MEDIA, "messages": key, "system": "system"}, tags)


# ---------------------------------------------------------------------------------------------
# dataset_info.json
# ---------------------------------------------------------------------------------------------


def _read_info(info: Path) -> dict:
    try:
        data = json.loads(info.read_text(encoding="utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{info} (LLaMA-Factory's dataset list) is not valid JSON ({err}). Fix it, or pass the data file "
            "itself as --train_data_dir."
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{info} is a JSON {type(data).__name__}, not an object of named datasets. Fix it.")
    return data


def _pick(info: Path, data: dict, name: str | None) -> tuple[str, dict]:
    """The dataset ``name`` of ``data`` (the only one when ``name`` is None and there is one)."""
    listed = ", ".join(f"`{n}`" for n in data) or "none"
    if name is None:
        if len(data) != 1:
            raise UserError(
                f"--train_data_dir {info.parent} holds LLaMA-Factory's {DATASET_INFO}, which lists {len(data)} "
                f"datasets ({listed}). Name the one to train with --dataset_info_name NAME (LLaMA-Factory's "
                "--dataset), or pass its data file itself as --train_data_dir."
            )
        name = next(iter(data))
    if "," in name:
        raise UserError(
            f"--dataset_info_name {name!r} names several datasets; dit-lora trains one per run (LLaMA-Factory's "
            f"--dataset mixes them). Name one of {listed}, or merge the files into one and add it to {info}."
        )
    if name not in data or not isinstance(data[name], dict):
        raise UserError(
            f"--dataset_info_name {name!r} is not a dataset of {info}: it lists {listed}. Pass one of them."
        )
    return name, data[name]


def _refuse_attrs(name: str, attrs: dict, info: Path) -> None:
    """The dataset_info.json settings dit-lora does not read: remote sources, preference data, random subsets."""
    remote = [
        key for key in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name") if key in attrs
    ]
    if remote or "file_name" not in attrs:
        what = f"loads from `{remote[0]}`" if remote else "has no `file_name`"
        raise UserError(
            f"Dataset `{name}` of {info} {what}; dit-lora reads local files only. Download the data beside "
            f"{DATASET_INFO} and give the entry `file_name` (a .json or .jsonl file)."
        )
    if attrs.get("ranking") or "kto_tag" in (attrs.get("columns") or {}):
        raise UserError(
            f"Dataset `{name}` of {info} is preference data (`ranking` or `kto_tag`); dit-lora's video LLMs train "
            "supervised question-answer pairs. Use a dataset of questions and answers (sharegpt or alpaca)."
        )
    if attrs.get("formatting", "alpaca") not in ("sharegpt", "alpaca"):
        raise UserError(
            f"Dataset `{name}` of {info} has formatting `{attrs['formatting']}`; dit-lora reads LLaMA-Factory's "
            "sharegpt and alpaca formats. Write it as sharegpt (`messages` with role/content tags) and set "
            '"formatting": "sharegpt".'
        )
    if attrs.get("num_samples") is not None:
        raise UserError(
            f"Dataset `{name}` of {info} sets `num_samples` {attrs['num_samples']} (LLaMA-Factory draws that "
            "many entries at random); dit-lora draws none. Remove it and pass --max_train_samples N, which keeps "
            "the first N entries."
        )


def dataset_source(
    train_data_dir: str | None, name: str | None, video_folder: str | None
) -> tuple[Path, Path, Layout] | None:
    """``(data file, media folder, layout)`` of the LLaMA-Factory dataset ``name`` (``--dataset_info_name``) when
    ``train_data_dir`` is a folder holding dataset_info.json (or that file itself, read as its folder); None when it
    holds none (and no name is given).

    The file is the entry's ``file_name`` in that folder; the media folder is ``video_folder`` (``--video_folder``,
    LLaMA-Factory's ``media_dir``) or the folder itself, as LLaMA-Factory's ``media_dir`` defaults to its
    ``dataset_dir``. Raises :class:`UserError` for a name without dataset_info.json, an unknown name, or an entry
    dit-lora cannot read (:func:`_refuse_attrs`), one paragraph each.
    """
    folder = Path(train_data_dir) if train_data_dir else None
    if folder is not None and folder.name == DATASET_INFO and folder.is_file():
        folder = folder.parent  # the list itself given: read as its folder, as LLaMA-Factory's dataset_dir
    info = folder / DATASET_INFO if folder is not None and folder.is_dir() else None
    if info is None or not info.is_file():
        if name is None:
            return None
        raise UserError(
            f"--dataset_info_name {name!r} names a dataset of LLaMA-Factory's {DATASET_INFO}, but --train_data_dir "
            f"{train_data_dir or '(unset)'} is no folder holding one. Point --train_data_dir at the folder with "
            f"{DATASET_INFO} (LLaMA-Factory's --dataset_dir), or drop --dataset_info_name and pass the data file."
        )
    name, attrs = _pick(info, _read_info(info), name)
    _refuse_attrs(name, attrs, info)
    file = info.parent / str(attrs["file_name"])
    if not file.is_file() or file.suffix not in (".json", ".jsonl"):
        problem = "does not exist" if not file.exists() else "is not one .json or .jsonl file"
        raise UserError(
            f"The `file_name` of dataset `{name}` in {info}, {file}, {problem}. dit-lora reads a JSON list or a "
            "JSONL file there (LLaMA-Factory's csv, parquet and folders are not read): convert it, or fix the name."
        )
    columns = {**_COLUMNS, **_MEDIA, **(attrs.get("columns") or {})}
    tags = {**_SHAREGPT_TAGS, **_TOOL_TAGS, **(attrs.get("tags") or {})}
    layout = Layout(attrs.get("formatting", "alpaca"), columns, tags, f"dataset `{name}` of {info}")
    return file, Path(video_folder) if video_folder else info.parent, layout


# ---------------------------------------------------------------------------------------------
# One entry
# ---------------------------------------------------------------------------------------------


def _text(value: Any, where: str, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UserError(
            f"{where}: {what} is a JSON {type(value).__name__}, not text ({value!r:.60}). Make it a string."
        )
    return value


def _sharegpt(entry: dict, layout: Layout, where: str) -> tuple[str, list[dict[str, str]]]:
    """``(system, turns)`` as LLaMA-Factory's ``SharegptDatasetConverter`` aligns them, refusing what it skips."""
    tags, column = layout.tags, layout.columns.get("messages", "conversations")
    turns = entry.get(column)
    if not isinstance(turns, list) or not turns:
        raise UserError(
            f'{where} has no turns under "{column}" (sharegpt, per {layout.source}). Put the conversation there as '
            f'a list of {{"{tags["role_tag"]}": ..., "{tags["content_tag"]}": ...}} turns.'
        )
    system = _text(entry.get(layout.columns["system"]), where, "its system") if layout.columns.get("system") else ""
    if isinstance(turns[0], dict) and turns[0].get(tags["role_tag"]) == tags.get("system_tag"):
        system, turns = _text(turns[0].get(tags["content_tag"]), where, "its system turn"), turns[1:]
    user, assistant = tags["user_tag"], tags["assistant_tag"]
    tools = (tags.get("observation_tag"), tags.get("function_tag"))
    messages = []
    for number, turn in enumerate(turns, 1):
        role = turn.get(tags["role_tag"]) if isinstance(turn, dict) else None
        expected = (user, assistant)[(number - 1) % 2]
        if role in tools:
            raise UserError(
                f"{where}: turn {number} is a tool turn ({tags['role_tag']} {role!r}); dit-lora's video LLMs train "
                f"questions and answers only. Remove the tool turns, or train this data with LLaMA-Factory."
            )
        if role != expected:
            raise UserError(
                f'{where}: turn {number} has {tags["role_tag"]} {role!r} where "{expected}" belongs (sharegpt, per '
                f"{layout.source}: questions `{user}` at odd positions, answers `{assistant}` at even ones, after an "
                "optional first system turn; LLaMA-Factory skips such an entry). Fix the turn's role, or give the "
                f"role names in {DATASET_INFO}'s `tags`."
            )
        content = _text(turn.get(tags["content_tag"]), where, f"turn {number}'s {tags['content_tag']}")
        messages.append({"role": "user" if role == user else "assistant", "content": content})
    if len(messages) % 2:
        raise UserError(
            f"{where} ends with a question (an odd number of turns, which LLaMA-Factory skips). Add the "
            "assistant's answer after it, or delete the last question."
        )
    return system, messages


def _alpaca(entry: dict, layout: Layout, where: str) -> tuple[str, list[dict[str, str]]]:
    """``(system, turns)`` as LLaMA-Factory's ``AlpacaDatasetConverter`` builds them: each ``history`` pair, then
    ``instruction`` and ``input`` joined by a newline, then ``output``."""
    cols = layout.columns
    messages: list[dict[str, str]] = []
    history = entry.get(cols["history"]) if cols.get("history") else None
    if isinstance(history, list):  # LLaMA-Factory reads a list only
        for number, pair in enumerate(history, 1):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise UserError(
                    f"{where}: history item {number} is not a [question, answer] pair ({pair!r:.60}). Write each "
                    "earlier round as a two-string list."
                )
            messages += [
                {"role": "user", "content": _text(pair[0], where, f"history item {number}'s question")},
                {"role": "assistant", "content": _text(pair[1], where, f"history item {number}'s answer")},
            ]
    question = [_text(entry.get(cols[key]), where, f'"{cols[key]}"') for key in ("prompt", "query") if cols.get(key)]
    answer = entry.get(cols.get("response", "output"))
    if not isinstance(answer, str) or not answer.strip():
        raise UserError(
            f'{where} has no answer in "{cols.get("response", "output")}" (alpaca, per {layout.source}). Give '
            "every entry the answer the model learns to say, or delete the entry."
        )
    messages += [
        {"role": "user", "content": "\n".join(q for q in question if q)},
        {"role": "assistant", "content": answer},
    ]
    system = _text(entry.get(cols["system"]), where, "its system") if cols.get("system") else ""
    return system, messages


def _media(entry: dict, layout: Layout, key: str) -> list:
    """The entry's ``key`` media (``videos``, ``images``, ``audios``) as a list, empty when it has none."""
    column = layout.columns.get(key)
    value = entry.get(column) if column else None
    if value is None or value == []:
        return []
    return value if isinstance(value, list) else [value]  # one path alone is a list of one, as LLaMA-Factory reads it


def _one_video(entry: dict, layout: Layout, messages: list[dict[str, str]], where: str) -> str:
    """The entry's one clip path, after refusing images, audio, frame lists and a count of videos or placeholders
    that dit-lora cannot train."""
    for key, mark, what in (("images", IMAGE, "image"), ("audios", AUDIO, "audio")):
        items = _media(entry, layout, key)
        marks = sum(m["content"].count(mark) for m in messages)
        if items or marks:
            raise UserError(
                f"{where} has {len(items)} {what}(s) in `{layout.columns[key]}` and {marks} `{mark}` placeholder(s); "
                f"dit-lora's video LLMs train on one clip per conversation, without {what}s. Remove the {what}s "
                f"(and `{mark}`), or train this entry with LLaMA-Factory."
            )
    videos = _media(entry, layout, "videos")
    marks = sum(m["content"].count(VIDEO) for m in messages)
    if len(videos) != 1:
        problem = "no video" if not videos else f"{len(videos)} videos"
        raise UserError(
            f"{where} has {problem} in `{layout.columns['videos']}`; dit-lora's video LLMs train one clip per "
            f"conversation. Give it {_FIX_VIDEO}" + (" (or split it into one entry per clip)." if videos else ".")
        )
    if not isinstance(videos[0], str) or not videos[0].strip():
        kind = "a list of frame images" if isinstance(videos[0], list) else f"{videos[0]!r:.60}"
        raise UserError(
            f"{where}: its video is {kind}, not a video file's path. dit-lora decodes video files: encode the "
            "frames into a clip (e.g. with ffmpeg) and give its path."
        )
    if marks != 1:
        raise UserError(
            f"{where} has 1 video but {marks} `{VIDEO}` placeholders in its turns; LLaMA-Factory stops on this too "
            f"(one placeholder per video). Give it {_FIX_VIDEO}."
        )
    return videos[0]


def _turn_name(layout: Layout, count: int, at: int) -> str:
    """How the entry's author knows turn ``at`` (0-based) of ``count``: sharegpt's turn number and role; alpaca's
    history item, instruction or output (its history rounds come first)."""
    if layout.formatting != "alpaca":
        return f"turn {at + 1} ({'user' if at % 2 == 0 else 'assistant'})"
    rounds = (count - 2) // 2
    if at >= 2 * rounds:
        part = f'"{layout.columns.get("prompt", "instruction")}"' if at == 2 * rounds else "the answer"
        return f"{part}, after {rounds} history round{'' if rounds == 1 else 's'}"
    return f"history item {at // 2 + 1}'s {'question' if at % 2 == 0 else 'answer'}"


def convert(entry: Any, layout: Layout, where: str) -> tuple[str, list[dict[str, str]], bool]:
    """``(clip path as written, messages, whether <video> opened the question)`` of a LLaMA-Factory ``entry``.

    Messages are dit-lora's ``{"role", "content"}`` turns (an optional system message first), the ``<video>``
    placeholder taken out of the first question: dit-lora attaches the clip to that turn and the family's chat
    template puts it at its start, so the returned flag is False where the placeholder stood elsewhere in the text
    (the caller says so in a log line). Raises :class:`UserError` naming ``where`` (the entry) for what dit-lora
    cannot train: no video or several, images or audio, the placeholder missing, repeated or in a later turn, tool
    turns, turns out of order, no answer.
    """
    if not isinstance(entry, dict):
        raise UserError(f"{where} is a JSON {type(entry).__name__}, not an object. Write each entry as an object.")
    build = _sharegpt if layout.formatting == "sharegpt" else _alpaca
    system, messages = build(entry, layout, where)
    video = _one_video(entry, layout, messages, where)
    at = next(i for i, m in enumerate(messages) if VIDEO in m["content"])
    if at != 0:
        raise UserError(
            f"{where}: `{VIDEO}` is in {_turn_name(layout, len(messages), at)}; dit-lora attaches the clip to the "
            f"first question. Move `{VIDEO}` to the start of the first user message."
        )
    text = messages[0]["content"]
    leading = text.lstrip().startswith(VIDEO)
    messages[0] = {"role": "user", "content": " ".join(part.strip() for part in text.split(VIDEO) if part.strip())}
    return video, ([{"role": "system", "content": system}] if system.strip() else []) + messages, leading
