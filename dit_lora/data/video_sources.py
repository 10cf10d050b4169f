"""List the clips of a local video folder and their captions, without decoding anything (``--train_data_dir``).

Three layouts, all written by people: ``metadata.jsonl``/``.csv`` (as for images), the CogVideoX /
finetrainers ``prompts.txt`` + ``videos.txt`` pair, and a folder of clips with a caption file beside each (as
image folders have; ``--caption_extension``, ``.txt`` by default). kohya-ss ``N_words/`` folders repeat their clips
N times per epoch in every layout, and their words caption a clip without its own caption; ``--instance_prompt``
captions every clip (:mod:`.kohya`, shared with the image folders).

A path written in the first two that leaves the folder is kept with the reason it is refused (:mod:`.paths`), so
screening quarantines it without opening it. Any of them may list images
(:data:`~dit_lora.data.video.CLIP_IMAGE_EXTENSIONS`) among the clips: they train as one-frame clips.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Callable
from typing import Any

from dit_lora.core.errors import UserError
from dit_lora.data import listing
from dit_lora.data.kohya import checked_caption_extension, checked_instance_prompt, kohya_folders, repeat_folder_samples
from dit_lora.data.paths import FolderWalk, locate
from dit_lora.data.sources import (
    COMMON_CAPTION_EXTENSIONS,
    METADATA_FILENAMES,
    name_some,
    read_metadata,
)
from dit_lora.data.sources import (
    _SidecarCaptions as SidecarCaptions,
)  # the image folders' sidecar captions, read the same way
from dit_lora.data.video_sample import CLIP_IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, VideoSample

#: what a video dataset's file may be: a clip, or an image (a one-frame clip)
MEDIA_EXTENSIONS = VIDEO_EXTENSIONS | CLIP_IMAGE_EXTENSIONS

__all__ = ["load_video_samples"]


def load_video_samples(
    train_data_dir: str | os.PathLike,
    caption_column: str = "text",
    video_column: str | None = None,
    max_train_samples: int | None = None,
    *,
    caption_extension: str = ".txt",
    instance_prompt: str | None = None,
    log: Callable[[str], Any] | None = None,
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
    * Neither: every clip or image in the folder and its sub-folders (hidden ones skipped) with a caption file of
      the same name beside it (``caption_extension``: ``clip0.mp4`` -> ``clip0.txt``); one without is an error.
      A metadata row with an empty caption falls back to that file too, as image folders do.

    kohya-ss folders (any layout): a first-level sub-folder ``N_words`` lists each of its clips N times per epoch
    (copies with ``repeat`` 1..N-1 right after the clip, sharing its cache entry and bucket); a clip in it without a
    caption takes ``words`` (not in the prompts.txt layout, where every clip has its line). ``instance_prompt``
    captions every clip with itself (the captions of the files are not read). Said through ``log`` (default: print,
    on the main process only).

    Order is metadata/line order (deterministic); ``max_train_samples`` keeps the first N clips (before repeats).

    Raises:
        UserError: missing folder, both metadata files, a missing column, mismatched prompts/videos lines, a
            blank caption, a clip or image without a caption, no clips at all, a kohya folder asking for 0 or more
            than 1000 repeats, or ``--instance_prompt``/``--caption_extension`` with the prompts.txt layout.
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
    say = log if log is not None else listing.say
    extension = checked_caption_extension(caption_extension)
    instance_prompt = checked_instance_prompt(instance_prompt)
    txt_caption = caption_column.lower().endswith(".txt")
    txt_video = video_column is not None and video_column.lower().endswith(".txt")
    if txt_caption or txt_video:
        if not (txt_caption and txt_video):
            raise UserError(
                f"--caption_column {caption_column!r} and --video_column {video_column!r}: the "
                f"prompts.txt + videos.txt layout needs both flags to name .txt files in "
                f"--train_data_dir (e.g. --caption_column prompts.txt --video_column videos.txt)."
            )
        assert video_column is not None  # txt_video: it names a .txt file
        _refuse_for_pair_layout(caption_column, video_column, extension, instance_prompt)
        samples = _load_txt_pair(root, caption_column, video_column)
        folders = kohya_folders(root, [s.key for s in samples if s.refused is None], noun="clip")
    else:
        samples, folders = _load_video_metadata(root, caption_column, video_column, extension, instance_prompt, say)
    if max_train_samples is not None:
        samples = samples[:max_train_samples]
    if folders:
        samples = repeat_folder_samples(samples, folders, say, noun="clip")
    return [dataclasses.replace(s, index=i) for i, s in enumerate(samples)]


def _refuse_for_pair_layout(caption_file: str, video_file: str, extension: str, instance_prompt: str | None) -> None:
    """The prompts.txt + videos.txt layout reads every caption from its prompts file: a flag about other captions
    would be ignored, so it is refused."""
    layout = f"--caption_column {caption_file} --video_column {video_file}"
    if instance_prompt is not None:
        raise UserError(
            f"--instance_prompt {instance_prompt!r} gives every clip one caption, but {layout} (the CogVideoX "
            f"prompts.txt + videos.txt layout) captions each clip by its line of {caption_file}, so one of the two "
            f"would be ignored. Leave --instance_prompt unset to train on {caption_file}, or leave --caption_column "
            f"and --video_column unset to caption every clip of --train_data_dir with --instance_prompt."
        )
    if extension != ".txt":
        raise UserError(
            f"--caption_extension {extension} names the caption file beside each clip, but {layout} (the CogVideoX "
            f"prompts.txt + videos.txt layout) reads every caption from {caption_file}: no file beside a clip is "
            f"read. Leave --caption_extension unset, or leave --caption_column and --video_column unset to read the "
            f"{extension} file beside each clip."
        )


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
        samples.append(
            VideoSample(key=located.key, caption=prompt, path=located.path or located.key, refused=located.refused)
        )
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


def _load_video_metadata(
    root: str,
    caption_column: str,
    video_column: str | None,
    extension: str,
    instance_prompt: str | None,
    log: Callable[[str], Any],
) -> tuple[list[VideoSample], dict[str, tuple[int, str]]]:
    """The metadata layout, else the sidecar one (:func:`_load_sidecar_captions`); the samples and kohya folders."""
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
    media, caption_files = _media_and_captions(root, extension, log)
    if not present:
        return _load_sidecar_captions(root, caption_column, media, caption_files, extension, instance_prompt, log)
    rows = read_metadata(root, "", present[0], caption_column)
    folders = kohya_folders(root, [key for key, _, refused in rows if refused is None], noun="clip")
    sidecar = SidecarCaptions(root, caption_files, extension, folders, noun="clip")
    samples: list[VideoSample] = []
    uncaptioned: list[str] = []
    not_video: list[str] = []
    for key, caption, refused in rows:
        if refused is not None:  # outside the folder: quarantined with the reason by screening, never opened
            samples.append(VideoSample(key=key, caption=instance_prompt or caption or "", path=key, refused=refused))
            continue
        if os.path.splitext(key)[1].lower() not in MEDIA_EXTENSIONS:
            not_video.append(key)
            continue
        # --instance_prompt wins; an empty cell falls back to the caption file beside the clip, then its folder's words
        caption = instance_prompt or caption or sidecar.read(key)
        if sidecar.refusal(key) is not None:  # its caption file is not UTF-8: refused, all of them named together
            samples.append(VideoSample(key=key, caption="", path=key, refused=sidecar.refusal(key)))
            continue
        if not caption:
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
    sidecar.report(log)
    if uncaptioned:
        named = name_some(uncaptioned)
        raise UserError(
            f"{len(uncaptioned)} clip(s) in {metadata_path} have an empty {caption_column!r} caption and no "
            f"{extension} file beside them: {named}. Fill in the caption column (--caption_column) for every row, put "
            f"a {extension} caption beside each of them, or give every clip one caption with --instance_prompt."
        )
    if not samples:
        raise UserError(f"{metadata_path} lists no clips. Add one row per video (file_name and {caption_column!r}).")
    if instance_prompt is not None:
        _say_instance_prompt(log, len(samples), instance_prompt, f"the {caption_column!r} column of {present[0]}")
    return samples, folders


def _media_and_captions(root: str, extension: str, log: Callable[[str], Any]) -> tuple[list[str], dict[str, str]]:
    """Clips and images under ``root`` (keys relative to it, "/"-separated, sorted; hidden skipped), and the caption
    files of ``extension`` and the other common one, as :class:`~dit_lora.data.sources._SidecarCaptions` reads them
    (``<media key without extension><extension, lower case>`` -> the file's key). Listed by
    :class:`~dit_lora.data.paths.FolderWalk` (links never followed out of ``root``; what was left out said through
    ``log``)."""
    wanted = {e.lower() for e in (*COMMON_CAPTION_EXTENSIONS, extension)}
    media: list[str] = []
    captions: dict[str, str] = {}
    walk = FolderWalk(root)  # links never followed out of the folder
    for _, rel_dir, _, filenames in walk:
        for name in filenames:
            rel = posixpath.join(rel_dir, name) if rel_dir else name
            stem, ext = posixpath.splitext(rel)
            if ext.lower() in MEDIA_EXTENSIONS:
                media.append(rel)
            elif ext.lower() in wanted:
                captions[stem + ext.lower()] = rel
    walk.report(log, noun="clip")
    return sorted(media), captions


def _load_sidecar_captions(
    root: str,
    caption_column: str,
    media: list[str],
    caption_files: dict[str, str],
    extension: str,
    instance_prompt: str | None,
    log: Callable[[str], Any],
) -> tuple[list[VideoSample], dict[str, tuple[int, str]]]:
    """The layout without metadata: each clip or image with a same-named caption file beside it (``extension``),
    else its kohya folder's words; every one ``instance_prompt`` when given. The samples and kohya folders."""
    hint = (
        f'Add a metadata.jsonl with one line per clip, e.g. {{"file_name": "clip0.mp4", "{caption_column}": '
        f'"a ..."}}, put a {extension} caption beside each clip or image (clip0.mp4 -> clip0{extension}), give '
        f"them all one caption with --instance_prompt, or use the prompts.txt + videos.txt layout with "
        f"--caption_column prompts.txt --video_column videos.txt."
    )
    if not media:
        raise UserError(
            f"--train_data_dir {root!r} has no metadata.jsonl or metadata.csv and holds no videos or "
            f"images ({', '.join(sorted(MEDIA_EXTENSIONS))}). {hint}"
        )
    folders = kohya_folders(root, media, noun="clip")
    if instance_prompt is not None:
        _say_instance_prompt(log, len(media), instance_prompt, f"{len(caption_files)} caption file(s)")
        return [VideoSample(key=key, caption=instance_prompt, path=_abs(root, key)) for key in media], folders
    sidecar = SidecarCaptions(root, caption_files, extension, folders, noun="clip")
    uncaptioned: list[str] = []
    samples: list[VideoSample] = []
    for key in media:
        caption = sidecar.read(key)
        if sidecar.refusal(key) is not None:  # its caption file is not UTF-8: refused, all of them named together
            samples.append(VideoSample(key=key, caption="", path=key, refused=sidecar.refusal(key)))
            continue
        if not caption:
            uncaptioned.append(key)
        else:
            samples.append(VideoSample(key=key, caption=caption, path=_abs(root, key)))
    sidecar.report(log)
    if uncaptioned:
        raise UserError(
            f"--train_data_dir {root!r} has no metadata.jsonl or metadata.csv, and {len(uncaptioned)} of its "
            f"{len(media)} video and image file(s) have no caption (no {extension} beside them, or an empty one): "
            f"{name_some(uncaptioned)}. {hint}"
        )
    return samples, folders


def _say_instance_prompt(log: Callable[[str], Any], count: int, prompt: str, unread: str) -> None:
    log(
        f"--instance_prompt: all {count} clip(s) of --train_data_dir are captioned {prompt!r}; their own captions "
        f"({unread}) are not read (diffusers' DreamBooth scripts do the same)"
    )
