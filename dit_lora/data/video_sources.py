"""List the clips of a local video folder and their captions, without decoding anything (``--train_data_dir``).

Three layouts, all written by people: ``metadata.jsonl``/``.csv`` (as for images), the CogVideoX /
finetrainers ``prompts.txt`` + ``videos.txt`` pair, and a folder of clips with a ``.txt`` caption beside each (as
image folders have). A path written in the first two that leaves the folder is kept with the reason it is refused
(:mod:`.paths`), so screening quarantines it without opening it. Any of them may list images
(:data:`~dit_lora.data.video.CLIP_IMAGE_EXTENSIONS`) among the clips: they train as one-frame clips.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath

from dit_lora.errors import UserError

from .paths import locate
from .sources import METADATA_FILENAMES, is_hidden, name_some, read_metadata
from .sources import _read_txt as read_txt_caption  # the image folders' .txt captions, read the same way
from .video import CLIP_IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, VideoSample

#: what a video dataset's file may be: a clip, or an image (a one-frame clip)
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | CLIP_IMAGE_EXTENSIONS

__all__ = ["load_video_samples"]


def load_video_samples(
    train_data_dir: str | os.PathLike,
    caption_column: str = "text",
    video_column: str | None = None,
    max_train_samples: int | None = None,
) -> list[VideoSample]:
    """List the clips (and images, one-frame clips) of a local folder and their captions, without decoding anything.

    Three layouts:

    * ``metadata.jsonl`` or ``metadata.csv`` at the folder root, one row per clip with
      ``file_name`` (relative to the folder) and the caption column (``--caption_column``,
      default ``text``). A row whose clip is missing is kept so validation names it.
    * The CogVideoX / finetrainers layout: ``--caption_column prompts.txt --video_column videos.txt``
      name two text files in the folder with one caption / one clip path (relative to the folder)
      per line, paired by line number. Trailing blank lines are ignored, a line that is blank in
      both files is skipped, and a blank line in only one of them is an error, as is a different
      number of lines.
    * Neither: every clip or image in the folder and its sub-folders (hidden ones skipped) with a ``.txt`` file of
      the same name beside it holding its caption (``clip0.mp4`` -> ``clip0.txt``); one without is an error.

    Order is metadata/line order (deterministic); ``max_train_samples`` keeps the first N.

    Raises:
        UserError: missing folder, both metadata files, a missing column, mismatched prompts/videos lines, a
            blank caption, a clip or image without a caption (no metadata: its .txt), or no clips at all.
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
        return _load_sidecar_captions(root, caption_column)
    rows = read_metadata(root, "", present[0], caption_column)
    samples: list[VideoSample] = []
    uncaptioned: list[str] = []
    not_video: list[str] = []
    for key, caption, refused in rows:
        if refused is not None:  # outside the folder: quarantined with the reason by screening, never opened
            samples.append(VideoSample(key=key, caption=caption or "", path=key, refused=refused))
        elif os.path.splitext(key)[1].lower() not in MEDIA_EXTENSIONS:
            not_video.append(key)
        elif caption is None or not caption:
            uncaptioned.append(key)
        else:
            samples.append(VideoSample(key=key, caption=caption, path=_abs(root, key)))
    metadata_path = os.path.join(root, present[0])
    if not_video:
        named = name_some(not_video)
        raise UserError(
            f"{metadata_path} lists {len(not_video)} file(s) that are neither videos nor images: {named}. Video "
            f"training reads clips ({', '.join(sorted(VIDEO_EXTENSIONS))}) and images as one-frame clips "
            f"({', '.join(sorted(CLIP_IMAGE_EXTENSIONS))}); fix the file_name column."
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


def _media_and_texts(root: str) -> tuple[list[str], set[str]]:
    """Clips and images, and .txt files, under ``root`` (keys relative to it, "/"-separated, sorted; hidden skipped)."""
    media: list[str] = []
    texts: set[str] = set()
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)  # a linked-in folder is followed once: a link cycle ends here
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not is_hidden(d))
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        for name in sorted(filenames):
            if is_hidden(name):
                continue
            rel = name if rel_dir == "." else posixpath.join(rel_dir, name)
            ext = os.path.splitext(name)[1].lower()
            if ext in MEDIA_EXTENSIONS:
                media.append(rel)
            elif ext == ".txt":
                texts.add(rel)
    return sorted(media), texts


def _load_sidecar_captions(root: str, caption_column: str) -> list[VideoSample]:
    """The layout without metadata: each clip or image with a same-named .txt caption beside it."""
    media, texts = _media_and_texts(root)
    hint = (f'Add a metadata.jsonl with one line per clip, e.g. {{"file_name": "clip0.mp4", "{caption_column}": '
            f'"a ..."}}, put a .txt caption beside each clip or image (clip0.mp4 -> clip0.txt), or use the '
            f"prompts.txt + videos.txt layout with --caption_column prompts.txt --video_column videos.txt.")
    if not media:
        raise UserError(f"--train_data_dir {root!r} has no metadata.jsonl or metadata.csv and holds no videos or "
                        f"images ({', '.join(sorted(MEDIA_EXTENSIONS))}). {hint}")
    uncaptioned: list[str] = []
    samples: list[VideoSample] = []
    for key in media:
        txt = posixpath.splitext(key)[0] + ".txt"
        caption = read_txt_caption(os.path.join(root, *txt.split("/"))) if txt in texts else ""
        if not caption:
            uncaptioned.append(key)
        else:
            samples.append(VideoSample(key=key, caption=caption, path=_abs(root, key)))
    if uncaptioned:
        raise UserError(
            f"--train_data_dir {root!r} has no metadata.jsonl or metadata.csv, and {len(uncaptioned)} of its "
            f"{len(media)} video and image file(s) have no caption (no .txt beside them, or an empty one): "
            f"{name_some(uncaptioned)}. {hint}"
        )
    return samples

