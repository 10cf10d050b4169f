"""Data preflight: check every sample (and its cache entry) before a run, as ``dit-lora check-data`` does.

Each sample is decoded and put through the real preprocessing (:func:`preprocess_image`), then the
pixels are checked (shape 3xHxW, finite, within [-1, 1]); empty captions block; images smaller
than the training resolution warn (they are upscaled); a loss mask (``--masked_loss``) is read as training reads it
(:func:`~dit_lora.data.masks.check_mask`) and counted in the summary line. Clips (:func:`check_video_samples`) are
decoded whole once (unreadable, truncated and too-short clips block), given their frame bucket
and decoded to it as training would, then checked the same way; an image among them is a one-frame clip
(a broken one blocks with the image families' reason). Cache entries of the samples, when a cache
namespace exists, are read (safetensors only) and checked for NaN/Inf and for shapes that differ
from the other entries. Results are plain records, rendered by :func:`format_table`.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dit_lora.data.aspect import (
    CROP_WARNING,
    UPSCALE_WARNING,
    bucket_table,
    format_size,
    sample_bucket,
    share_text,
    upscale_factor,
)
from dit_lora.data.cache import cache_file_name, inspect_cache_file
from dit_lora.data.decode import decode_notes, decode_workers, file_notes, pixel_budget
from dit_lora.data.frames import clip_cropped_share
from dit_lora.data.kohya import copy_of
from dit_lora.data.masks import check_mask
from dit_lora.data.sources import RawSample
from dit_lora.data.text_padding import comparable_shapes
from dit_lora.data.transforms import crop_seed, preprocess_image, target_size
from dit_lora.data.validation import caption_problem, image_problem
from dit_lora.data.video import FrameStart, choose_bucket, decode_clip, one_frame_buckets, scan_clip

OK, WARN, BLOCK = "ok", "warn", "block"
_SEVERITY = {OK: 0, WARN: 1, BLOCK: 2}


@dataclass
class SampleCheck:
    """One line of the preflight report.

    ``key`` names the sample (its path relative to the data folder, or ``dataset[row]``); ``what``
    is ``"sample"`` (image + caption) or ``"cache"`` (its cached latents/embeddings, ``path`` is
    the cache file); ``problem`` says what is wrong (empty when ``status`` is ok). An image checked against
    aspect-ratio buckets has its ``bucket`` (height, width) and the share of its area the crop cuts (``cropped``).
    """

    key: str
    what: str = "sample"
    status: str = OK
    problem: str = ""
    path: str | None = None
    bucket: tuple[int, int] | None = None
    cropped: float | None = None
    noun: str = "image"  # what the bucket table counts: a video family's rows are clips
    repeats: int = 1  # how many times the file is listed (a kohya N_words/ folder's repeats): one row per file
    mask: str | None = None  # --masked_loss: its mask's status (ok, warn, white, block: MaskCheck.status), else None


def _combine(key: str, what: str, blocks: list[str], warns: list[str], path: str | None) -> SampleCheck:
    status = BLOCK if blocks else WARN if warns else OK
    return SampleCheck(key, what, status, "; ".join(blocks + warns), path)


def check_sample(
    sample: RawSample,
    *,
    resolution: int,
    center_crop: bool = False,
    seed: int = 0,
    require_caption: bool = True,
    max_pixels: int | None = None,
    buckets: Sequence[tuple[int, int]] | None = None,
    unmasked_weight: float = 0.0,
) -> SampleCheck:
    """Decode ``sample`` as training would (within ``max_pixels``, default the resolution's
    :func:`~dit_lora.data.decode.pixel_budget`; reduced when much larger), preprocess it, check caption and pixels.

    With ``buckets`` the image goes to its bucket as training chooses it (:func:`~dit_lora.data.aspect.sample_bucket`)
    and the row holds that bucket and the share the crop cuts, a warning above
    :data:`~dit_lora.data.aspect.CROP_WARNING`; without, to the ``resolution`` square. A sample with a loss mask
    (``--masked_loss``) has it read as training reads it (:func:`~dit_lora.data.masks.check_mask`: unreadable, not its
    image's shape, or all black with ``unmasked_weight`` 0 block; resized, all white or coloured warn)."""
    blocks: list[str] = []
    warns: list[str] = []
    if require_caption and caption_problem(sample):
        blocks.append("empty caption" if not sample.caption else "caption is only whitespace")
    max_pixels = pixel_budget(resolution, max_pixels)
    problem = image_problem(sample, resolution=resolution, max_pixels=max_pixels)
    if problem is not None:
        blocks.append(problem)
        return _combine(sample.key, "sample", blocks, warns, sample.path)
    bucket, cropped = None, None
    try:
        if buckets:
            bucket, cropped = sample_bucket(sample, buckets, max_pixels=max_pixels)
        size = bucket or resolution
        # Reduced only when at least 4 times the resized size, so never below the target when the file is not.
        image = sample.open_image(resolution=size, max_pixels=max_pixels)
        warns.extend(decode_notes(image))  # an animated image trains on its first frame: say it here too
        width, height = image.size
        pixels = preprocess_image(
            image, size, center_crop=center_crop, flip=False, crop_rng_seed=crop_seed(seed, sample.key)
        )
    except Exception as err:
        blocks.append(f"preprocessing failed ({type(err).__name__}: {' '.join(str(err).split())[:200]})")
        return _combine(sample.key, "sample", blocks, warns, sample.path)
    mask = check_mask(sample, unmasked_weight=unmasked_weight, max_pixels=max_pixels) if sample.has_mask else None
    if mask is not None:
        blocks.extend(mask.blocks)
        warns.extend(mask.warns)
    row = _check_pixels(sample, pixels, size, (width, height), blocks, warns, cropped)
    row.bucket, row.cropped, row.mask = bucket, cropped, mask.status if mask is not None else None
    return row


def _check_pixels(
    sample: RawSample,
    pixels: torch.Tensor,
    size,
    decoded: tuple[int, int],
    blocks: list[str],
    warns: list[str],
    cropped: float | None,
) -> SampleCheck:
    """The checks of a preprocessed image (shape, finite, range), its upscaling and its crop, as one row."""
    target_h, target_w = target_size(size)
    width, height = decoded
    if tuple(pixels.shape) != (3, target_h, target_w):
        blocks.append(f"preprocessed to shape {tuple(pixels.shape)}, expected (3, {target_h}, {target_w})")
    finite = torch.isfinite(pixels)
    if not finite.all():
        blocks.append(f"pixels have {int((~finite).sum())} NaN/Inf values after preprocessing")
    elif pixels.numel() and (pixels.min() < -1.0 or pixels.max() > 1.0):
        low, high = float(pixels.min()), float(pixels.max())
        blocks.append(f"pixels outside [-1, 1] after preprocessing ({low:.3g}..{high:.3g})")
    scale = upscale_factor(width, height, target_w, target_h)
    if scale > UPSCALE_WARNING:
        warns.append(
            f"{width}x{height} is smaller than the {target_w}x{target_h} training resolution; it is upscaled "
            f"(x{scale:.2f})"
        )
    if cropped is not None and cropped > CROP_WARNING:
        warns.append(f"the crop into its {target_w}x{target_h} bucket cuts {share_text(cropped)} of its area")
    return _combine(sample.key, "sample", blocks, warns, sample.path)


def _map_in_threads(fn: Callable[[Any], Any], items: list, num_workers: int | None, *, most: int) -> list:
    """``[fn(x) for x in samples]``, in order, on ``num_workers`` threads (default: up to ``most``, one per CPU).

    A kohya repeat (:func:`~dit_lora.data.kohya.copy_of`) gets its first copy's result: each file is decoded once."""
    origin = copy_of(items)
    firsts = [i for i, first in enumerate(origin) if first == i]
    workers = num_workers if num_workers is not None else min(most, os.cpu_count() or 1)
    if workers > 1 and len(firsts) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preflight") as pool:
            found = dict(zip(firsts, pool.map(fn, [items[i] for i in firsts])))
    else:
        found = {i: fn(items[i]) for i in firsts}
    return [found[first] for first in origin]


def one_row_per_file(rows: Sequence[SampleCheck]) -> list[SampleCheck]:
    """The rows with a kohya repeat's copies folded into their file's row (its ``repeats`` the count), in order.

    :func:`_map_in_threads` hands every copy its first copy's very row, so copies are the same object."""
    counts = Counter(id(r) for r in rows)
    seen: set[int] = set()
    out = []
    for r in rows:
        if id(r) not in seen:
            seen.add(id(r))
            out.append(dataclasses.replace(r, repeats=counts[id(r)]) if counts[id(r)] > 1 else r)
    return out


def check_samples(
    samples: Sequence[RawSample],
    *,
    resolution: int,
    center_crop: bool = False,
    seed: int = 0,
    require_captions: bool = True,
    num_workers: int | None = None,
    max_pixels: int | None = None,
    buckets: Sequence[tuple[int, int]] | None = None,
    unmasked_weight: float = 0.0,
) -> list[SampleCheck]:
    """:func:`check_sample` for every sample, in order (decoding in threads, as many as memory allows for
    the pixel budget; PIL releases the GIL)."""
    max_pixels = pixel_budget(resolution, max_pixels)

    def one(s: RawSample) -> SampleCheck:
        return check_sample(
            s,
            resolution=resolution,
            center_crop=center_crop,
            seed=seed,
            require_caption=require_captions,
            max_pixels=max_pixels,
            buckets=buckets,
            unmasked_weight=unmasked_weight,
        )

    workers = decode_workers(max_pixels, most=8) if num_workers is None else num_workers
    return one_row_per_file(_map_in_threads(one, list(samples), workers, most=8))


def check_video_sample(
    sample,
    *,
    buckets: Sequence[tuple[int, int, int]],
    frame_sampling: FrameStart = "uniform",
    frames_flag: str = "--max_num_frames",
    require_caption: bool = True,
    image_buckets: Sequence[tuple[int, int, int]] | None = None,
    max_pixels: int | None = None,
):
    """Decode a clip once, pick its bucket, decode it to that bucket as training would, check the pixels.

    Returns ``(row, bucket)``; ``bucket`` is None when the clip cannot be used (the row blocks then:
    unreadable, truncated, too short for every bucket, empty caption, bad pixels). A clip smaller
    than its bucket warns (its frames are upscaled). An image is a one-frame clip: its bucket is one of
    ``image_buckets`` (default: one per spatial size of ``buckets``), it is decoded within ``max_pixels``, and a
    broken one blocks with the image families' reason.

    A usable row holds its bucket's size and the share of the picture its crop cuts off (the report's ``bucket`` and
    ``cropped`` columns, counted as clips); above :data:`~dit_lora.data.aspect.CROP_WARNING` it warns. The bucket is
    chosen by training's own :func:`~dit_lora.data.frames.choose_bucket`, on the clip's size as displayed (after
    rotation metadata).
    """
    row, bucket, _ = _check_video_sample(
        sample,
        buckets=buckets,
        frame_sampling=frame_sampling,
        frames_flag=frames_flag,
        require_caption=require_caption,
        image_buckets=image_buckets,
        max_pixels=max_pixels,
    )
    return row, bucket


def _check_video_sample(
    sample: Any,
    *,
    buckets: Sequence[tuple[int, int, int]],
    frame_sampling: FrameStart,
    frames_flag: str,
    require_caption: bool,
    image_buckets: Sequence[tuple[int, int, int]] | None,
    max_pixels: int | None,
) -> tuple[SampleCheck, tuple[int, int, int] | None, tuple[int, int, int] | None]:
    """:func:`check_video_sample`, plus the clip's displayed ``(height, width, rotation)`` (None when unusable)."""
    blocks: list[str] = []
    warns: list[str] = []
    if require_caption and caption_problem(sample):
        blocks.append("empty caption" if not sample.caption else "caption is only whitespace")
    largest = max(((b[1], b[2]) for b in buckets), key=lambda hw: hw[0] * hw[1])
    scan = scan_clip(
        sample, min(b[0] for b in buckets), frames_flag=frames_flag, max_pixels=max_pixels, resolution=largest
    )
    if scan.problem is not None:
        blocks.append(scan.problem)
        return _combine(sample.key, "sample", blocks, warns, sample.path), None, None
    if sample.is_image:
        warns.extend(file_notes(sample.path, max_pixels))  # the notes training's decode_image_clip gets
    stills = one_frame_buckets(buckets) if image_buckets is None else image_buckets
    bucket = choose_bucket(scan.num_frames, scan.height, scan.width, stills if sample.is_image else buckets)
    if bucket is None:  # frames checked by scan_clip: no image bucket was given, or the picture has no pixels
        blocks.append(f"{scan.num_frames} frame(s) of {scan.width}x{scan.height} fit none of the buckets")
        return _combine(sample.key, "sample", blocks, warns, sample.path), None, None
    frames, height, width = bucket
    try:
        pixels = decode_clip(sample.path, frames, height, width, start=frame_sampling, max_pixels=max_pixels)
    except Exception as err:
        blocks.append(
            f"decoding to {frames}x{height}x{width} failed ({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        )
        return _combine(sample.key, "sample", blocks, warns, sample.path), None, None
    if tuple(pixels.shape) != (frames, 3, height, width):
        blocks.append(f"decoded to shape {tuple(pixels.shape)}, expected ({frames}, 3, {height}, {width})")
    finite = torch.isfinite(pixels)
    if not finite.all():
        blocks.append(f"pixels have {int((~finite).sum())} NaN/Inf values after decoding")
    elif pixels.numel() and (pixels.min() < -1.0 or pixels.max() > 1.0):
        blocks.append(f"pixels outside [-1, 1] after decoding ({float(pixels.min()):.3g}..{float(pixels.max()):.3g})")
    scale = upscale_factor(scan.width, scan.height, width, height)
    if scale > UPSCALE_WARNING:
        warns.append(
            f"{scan.width}x{scan.height} is smaller than its {frames}x{height}x{width} bucket; it is upscaled "
            f"(x{scale:.2f})"
        )
    share = clip_cropped_share(scan.height, scan.width, bucket)
    if share > CROP_WARNING:
        warns.append(
            f"the crop into its {frames}x{height}x{width} bucket cuts {share:.0%} of its {scan.width}x"
            f"{scan.height} picture"
        )
    row = _combine(sample.key, "sample", blocks, warns, sample.path)
    row.bucket, row.cropped, row.noun = (height, width), share, "clip"
    return row, (None if blocks else bucket), (scan.height, scan.width, scan.rotation)


def check_video_samples(
    samples: Sequence,
    *,
    buckets: Sequence[tuple[int, int, int]],
    frame_sampling: FrameStart = "uniform",
    frames_flag: str = "--max_num_frames",
    require_captions: bool = True,
    num_workers: int | None = None,
    image_buckets: Sequence[tuple[int, int, int]] | None = None,
    max_pixels: int | None = None,
) -> tuple[list[SampleCheck], list]:
    """:func:`check_video_sample` for every clip and image (a one-frame clip), in order (threads: FFmpeg and PIL
    release the GIL).

    Returns the rows and the usable clips with their ``bucket`` set (what :func:`check_cache` needs
    to find their cache entries).
    """
    import dataclasses

    def one(s):
        return _check_video_sample(
            s,
            buckets=buckets,
            frame_sampling=frame_sampling,
            frames_flag=frames_flag,
            require_caption=require_captions,
            image_buckets=image_buckets,
            max_pixels=max_pixels,
        )

    samples = list(samples)
    results = _map_in_threads(one, samples, num_workers, most=4)
    usable = [
        dataclasses.replace(s, bucket=b, source_size=shown[:2], rotation=shown[2])
        for s, (_, b, shown) in zip(samples, results)
        if b is not None
    ]
    return one_row_per_file([row for row, _, _ in results]), usable


def _namespace_folders(root: Path, namespace: str | None) -> list[Path]:
    if namespace is not None:
        folder = root / namespace
        return [folder] if folder.is_dir() else []
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if any(root.glob("*.safetensors")):
        folders.insert(0, root)  # the root is itself a namespace folder
    return folders


def check_cache(
    samples: Sequence[RawSample], root: str | os.PathLike, *, namespace: str | None = None
) -> tuple[list[SampleCheck], str]:
    """Check the cache entries of ``samples`` under ``root``; return (rows, one-line note).

    With ``namespace`` only that folder is read (what a run with that config uses); without it,
    every namespace folder under ``root`` (or ``root`` itself, if it holds cache files) is searched
    for entries belonging to ``samples``. Each entry found must be readable, hold ``latents``, be
    finite, and have the same tensor names and shapes as the most common entry in its namespace (for
    clips: among the clips of its bucket).
    """
    root = Path(root)
    if not root.is_dir():
        return [], f"cache: {root} does not exist, nothing cached to check"
    ids: list[tuple[RawSample, str]] = []
    for s in samples:
        try:
            ids.append((s, s.cache_key()))  # a clip's key includes its bucket: unbucketed clips are skipped
        except Exception:
            continue
    rows: list[SampleCheck] = []
    namespaces = 0
    for folder in _namespace_folders(root, namespace):
        ns = folder.name
        hits = [(s, folder / cache_file_name(ns, cid)) for s, cid in ids]
        first: dict[tuple[str, Path], Any] = {}  # a kohya repeat (same key) names its file's entry again: one row
        for s, f in hits:
            first.setdefault((s.key, f), s)
        hits = [(s, f) for (_, f), s in first.items() if f.is_file()]
        if not hits:
            continue
        namespaces += 1
        # a ragged caption's token count is its own (text_padding.LENGTHS): left out of the comparison
        inspected = []
        for s, f in hits:
            problem, shapes = inspect_cache_file(f)
            inspected.append((s, f, problem, comparable_shapes(shapes)))
        # Entries are compared within their shape group: a clip's bucket (frames x height x width) sets its
        # latent shape, so only clips of one bucket must agree; images form a single group.
        signatures: dict[Any, Counter] = {}
        for s, _, problem, shapes in inspected:
            if problem is None:
                signatures.setdefault(s.bucket, Counter())[tuple(sorted(shapes.items()))] += 1
        for s, f, problem, shapes in inspected:
            counts = signatures.get(s.bucket)
            common = counts.most_common(1)[0][0] if counts else None
            shown = f"{ns}/{f.name}" if folder != root else f.name
            blocks = []
            if problem is not None:
                blocks.append(f"{shown}: {problem}")
            elif common is not None and tuple(sorted(shapes.items())) != common:
                expected = dict(common)
                diff = ", ".join(
                    f"{k} {shapes.get(k)} (others: {expected.get(k)})"
                    for k in sorted(set(shapes) | set(expected))
                    if shapes.get(k) != expected.get(k)
                )
                blocks.append(f"{shown}: shapes differ from the other cache entries: {diff}")
            rows.append(_combine(s.key, "cache", blocks, [], str(f)))
    where = f"namespace {namespace}" if namespace is not None else f"{namespaces} namespace(s)"
    note = f"cache: checked {len(rows)} entr{'y' if len(rows) == 1 else 'ies'} in {where} under {root}"
    if not rows:
        note += " (nothing cached yet for these samples and settings)"
    return rows, note


def format_table(rows: Sequence[SampleCheck], *, show_ok: bool = False) -> str:
    """Fixed-width table: problems first (blocks, then warnings), ok rows only with ``show_ok``; with images checked
    against aspect-ratio buckets, a ``bucket`` (WxH) and a ``cropped`` (share of the area the crop cuts) column."""
    shown = [r for r in rows if show_ok or r.status != OK]
    shown.sort(key=lambda r: -_SEVERITY.get(r.status, 0))  # stable: keeps sample order within a status
    hidden = len(rows) - len(shown)
    lines: list[str] = []
    if shown:
        width_key = min(max(len("sample"), *(len(r.key) for r in shown)), 60)
        width_what = max(len("check"), *(len(r.what) for r in shown))
        sized = any(r.bucket is not None for r in shown)
        width_bucket = max([len("bucket")] + [len(format_size(r.bucket)) for r in shown if r.bucket is not None])
        columns = f"{'bucket':<{width_bucket}}  cropped  " if sized else ""
        repeated = any(r.repeats > 1 for r in shown)  # kohya N_words/ files: one row each, with its repeats
        columns += "repeats  " if repeated else ""
        header = f"{'status':<6}  {'sample':<{width_key}}  {'check':<{width_what}}  {columns}problem"
        lines += [header, "-" * len(header)]
        for r in shown:
            mark = {OK: "ok", WARN: "WARN", BLOCK: "BLOCK"}.get(r.status, r.status)
            size = f"{format_size(r.bucket) if r.bucket else '-':<{width_bucket}}  " if sized else ""
            cut = f"{format(r.cropped, '.0%') if r.cropped is not None else '-':>7}  " if sized else ""
            cut += f"{r.repeats if r.what == 'sample' else '-':>7}  " if repeated else ""
            lines.append(f"{mark:<6}  {r.key:<{width_key}}  {r.what:<{width_what}}  {size}{cut}{r.problem}".rstrip())
    if hidden:
        lines.append(f"{hidden} ok row(s) not shown (--all shows every row)")
    return "\n".join(lines)


def summarize(rows: Sequence[SampleCheck], *, max_bad_samples_fraction: float | None = None) -> str:
    """One line: how many samples are ok / warn / blocked, and what training would do with them; then, for images
    checked against aspect-ratio buckets, the table of buckets training would use (:func:`bucket_lines`)."""
    samples = [r for r in rows if r.what == "sample"]
    cache = [r for r in rows if r.what == "cache"]
    counts = Counter(r.status for r in samples)
    listed = sum(r.repeats for r in samples)
    what = (
        f"{len(samples)} sample(s)"
        if listed == len(samples)
        else f"{len(samples)} file(s) ({listed} samples per epoch with repeats)"
    )
    text = f"{what}: {counts[OK]} ok, {counts[WARN]} warning(s), {counts[BLOCK]} blocking"
    masked = Counter(r.mask for r in samples if r.mask is not None)
    if masked:
        text += (
            f"; {sum(masked.values())} mask(s): {masked['white']} all white (no masking), {masked['warn']} with a "
            f"warning, {masked['block']} blocking"
        )
    if cache:
        bad_cache = sum(r.status == BLOCK for r in cache)
        text += f"; {len(cache)} cache entr{'y' if len(cache) == 1 else 'ies'}, {bad_cache} bad"
    if max_bad_samples_fraction is not None and samples:
        # A bad cache entry is recomputed by training, so only sample problems leave samples out.
        bad_keys = [r.key for r in samples if r.status == BLOCK]
        fraction = len(bad_keys) / len(samples)
        if bad_keys:
            verdict = "within" if fraction <= max_bad_samples_fraction else "more than"
            text += (
                f". Training would leave out {len(bad_keys)} sample(s) ({fraction:.1%}), {verdict} "
                f"--max_bad_samples_fraction={max_bad_samples_fraction}"
            )
            if verdict == "more than":
                text += ", so it would stop"
    return "\n".join([text + "."] + bucket_lines(samples))


def bucket_lines(rows: Sequence[SampleCheck]) -> list[str]:
    """The bucket table of the usable checked images (as training logs it) and how many the crop cuts by more than
    :data:`~dit_lora.data.aspect.CROP_WARNING`; ``[]`` when no row has a bucket."""
    sized = [r for r in rows if r.bucket is not None and r.status != BLOCK]
    if not sized:
        return []
    over = sum(r.cropped is not None and r.cropped > CROP_WARNING for r in sized)
    noun = sized[0].noun
    return (
        [f"{noun}s per bucket, as training would batch them:"]
        + bucket_table([r.bucket for r in sized if r.bucket is not None], noun=noun)  # all of them (for the type)
        + [f"{over} of {len(sized)} {noun}(s) lose more than {CROP_WARNING:.0%} of their area to the crop"]
    )


def has_blocking(rows: Sequence[SampleCheck]) -> bool:
    return any(r.status == BLOCK for r in rows)


__all__ = [
    "BLOCK",
    "OK",
    "WARN",
    "SampleCheck",
    "check_cache",
    "check_sample",
    "check_samples",
    "check_video_sample",
    "check_video_samples",
    "format_table",
    "has_blocking",
    "summarize",
]
