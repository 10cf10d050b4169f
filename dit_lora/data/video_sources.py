"""List the clips of a local video folder and their captions, without decoding anything (``--train_data_dir``).

Two layouts, both written by people: ``metadata.jsonl``/``.csv`` (as for images) and the CogVideoX /
finetrainers ``prompts.txt`` + ``videos.txt`` pair. A path written in either that leaves the folder is kept
with the reason it is refused (:mod:`.paths`), so screening quarantines it without opening it.
"""

from __future__ import annotations

import dataclasses
import os

from dit_lora.errors import UserError

from .paths import locate
from .sources import METADATA_FILENAMES, is_hidden, name_some, read_metadata
from .video import VIDEO_EXTENSIONS, VideoSample

__all__ = ["load_video_samples"]


def load_video_samples(
    train_data_dir: str | os.PathLike,
    caption_column: str = "text",
    video_column: str | None = None,
    max_train_samples: int | None = None,
) -> list[VideoSample]:
    """List the clips of a local folder and their captions, without decoding anything.

    Two layouts:

    * ``metadata.jsonl`` or ``metadata.csv`` at the folder root, one row per clip with
      ``file_name`` (relative to the folder) and the caption column (``--caption_column``,
      default ``text``). A row whose clip is missing is kept so validation names it.
    * The CogVideoX / finetrainers layout: ``--caption_column prompts.txt --video_column videos.txt``
      name two text files in the folder with one caption / one clip path (relative to the folder)
      per line, paired by line number. Trailing blank lines are ignored, a line that is blank in
      both files is skipped, and a blank line in only one of them is an error, as is a different
      number of lines.

    Order is metadata/line order (deterministic); ``max_train_samples`` keeps the first N.

    Raises:
        UserError: missing folder, no metadata and no .txt pair, both metadata files, a missing
            column, mismatched prompts/videos lines, a blank caption, or no clips at all.
    """
    root = os.fspath(train_data_dir)
    if max_train_samples is not None and (
        isinstance(max_train_samples, bool) or not isinstance(max_train_samples, int) or max_train_samples < 1
    ):
        raise UserError(
            f"--max_train_samples must be a positive whole number, got {max_train_samples!r}. "
            f"Leave it unset to train on every clip."
        )
    if not os.path.isdir(root):
        what = "is a file, not a folder" if os.path.exists(root) else "does not exist"
        raise UserError(
            f"--train_data_dir {root!r} {what}. Pass the folder that holds your training videos and "
            f"their metadata.jsonl (or prompts.txt + videos.txt)."
        )
    txt_caption = caption_column.lower().endswith(".txt")
    txt_video = video_column is not None and video_column.lower().endswith(".txt")
    if txt_caption or txt_video:
        if not (txt_caption and txt_video):
            raise UserError(
                f"--caption_column {caption_column!r} and --video_column {video_column!r}: the "
                f"prompts.txt + videos.txt layout needs both flags to name .txt files in "
                f"--train_data_dir (e.g. --caption_column prompts.txt --video_column videos.txt)."
            )
        samples = _load_txt_pair(root, caption_column, video_column)  # type: ignore[arg-type]
    else:
        samples = _load_video_metadata(root, caption_column, video_column)
    if max_train_samples is not None:
        samples = samples[:max_train_samples]
    return [dataclasses.replace(s, index=i) for i, s in enumerate(samples)]


def _abs(root: str, rel: str) -> str:
    return os.path.normpath(os.path.join(os.path.abspath(root), *rel.split("/")))


def _read_lines(path: str, flag: str, name: str) -> list[str]:
    if not os.path.isfile(path):
        raise UserError(
            f"{flag} {name!r} names {path!r}, which does not exist. Put {name} in --train_data_dir "
            f"(one entry per line) or pass the right file name to {flag}."
        )
    try:
        with open(path, encoding="utf-8-sig") as handle:
            lines = [line.strip() for line in handle.read().splitlines()]
    except UnicodeDecodeError as err:
        raise UserError(f"{path} ({flag}) is not valid UTF-8 (byte {err.start}). Re-save it as UTF-8.") from None
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _load_txt_pair(root: str, caption_file: str, video_file: str) -> list[VideoSample]:
    prompts_path = os.path.join(root, caption_file)
    videos_path = os.path.join(root, video_file)
    prompts = _read_lines(prompts_path, "--caption_column", caption_file)
    videos = _read_lines(videos_path, "--video_column", video_file)
    if len(prompts) != len(videos):
        raise UserError(
            f"{prompts_path} has {len(prompts)} caption line(s) but {videos_path} has {len(videos)} "
            f"video line(s); line N of --caption_column {caption_file} must caption line N of "
            f"--video_column {video_file}. Make the two files the same length (one entry per line)."
        )
    samples: list[VideoSample] = []
    half_blank: list[str] = []
    for line_no, (prompt, video) in enumerate(zip(prompts, videos), 1):
        if not prompt and not video:
            continue
        if not prompt or not video:
            missing = caption_file if not prompt else video_file
            half_blank.append(f"line {line_no} of {missing}")
            continue
        located = locate(root, video, field=f"{video_file} line {line_no}")
        samples.append(VideoSample(key=located.key, caption=prompt, path=located.path or located.key,
                                   refused=located.refused))
    if half_blank:
        named = name_some(half_blank)
        raise UserError(
            f"{len(half_blank)} line(s) are blank in one of {prompts_path} / {videos_path} but not in "
            f"the other: {named}. Every clip in --video_column {video_file} needs a caption on "
            f"the same line of --caption_column {caption_file}; fill in or delete those lines in both."
        )
    if not samples:
        raise UserError(f"{videos_path} lists no videos. Put one clip path per line in --video_column {video_file}.")
    return samples


def _load_video_metadata(root: str, caption_column: str, video_column: str | None) -> list[VideoSample]:
    if video_column not in (None, "file_name"):
        raise UserError(
            f"--video_column {video_column!r}: with metadata.jsonl/csv the clip is always named in the "
            f"'file_name' column; --video_column only selects a videos.txt file (together with "
            f"--caption_column prompts.txt). Leave --video_column unset."
        )
    present = [m for m in METADATA_FILENAMES if os.path.isfile(os.path.join(root, m))]
    if len(present) > 1:
        raise UserError(
            f"{os.path.join(root, '')} holds both metadata.jsonl and metadata.csv, so it is unclear which "
            f"captions to use. Delete or rename one of them (see --train_data_dir)."
        )
    if not present:
        videos = sorted(
            name for name in os.listdir(root)
            if not is_hidden(name) and os.path.splitext(name)[1].lower() in VIDEO_EXTENSIONS
        )
        found = f"it holds {len(videos)} video file(s) but no captions" if videos else "it holds no videos"
        raise UserError(
            f"--train_data_dir {root!r} has no metadata.jsonl or metadata.csv ({found}). Add a "
            f'metadata.jsonl with one line per clip, e.g. {{"file_name": "clip0.mp4", "{caption_column}": '
            f'"a ..."}}, or use the prompts.txt + videos.txt layout with --caption_column prompts.txt '
            f"--video_column videos.txt."
        )
    rows = read_metadata(root, "", present[0], caption_column)
    samples: list[VideoSample] = []
    uncaptioned: list[str] = []
    not_video: list[str] = []
    for key, caption, refused in rows:
        if refused is not None:  # outside the folder: quarantined with the reason by screening, never opened
            samples.append(VideoSample(key=key, caption=caption or "", path=key, refused=refused))
        elif os.path.splitext(key)[1].lower() not in VIDEO_EXTENSIONS:
            not_video.append(key)
        elif caption is None or not caption:
            uncaptioned.append(key)
        else:
            samples.append(VideoSample(key=key, caption=caption, path=_abs(root, key)))
    metadata_path = os.path.join(root, present[0])
    if not_video:
        named = name_some(not_video)
        raise UserError(
            f"{metadata_path} lists {len(not_video)} file(s) that are not videos: {named}. Video "
            f"training reads {', '.join(sorted(VIDEO_EXTENSIONS))} files; fix the file_name column."
        )
    if uncaptioned:
        named = name_some(uncaptioned)
        raise UserError(
            f"{len(uncaptioned)} clip(s) in {metadata_path} have an empty {caption_column!r} caption: "
            f"{named}. Fill in the caption column (--caption_column) for every row."
        )
    if not samples:
        raise UserError(f"{metadata_path} lists no clips. Add one row per video (file_name and {caption_column!r}).")
    return samples
