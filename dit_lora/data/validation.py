"""Weed out unusable samples before training: decode every image once, check captions, name the bad ones.

Kept apart from :mod:`.sources` (which lists samples and never decodes) so the trainer can report
all data problems up front; ``dit-lora check-data`` (:mod:`.preflight`) reuses the same checks.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from PIL import UnidentifiedImageError

from dit_lora.core.errors import UserError
from dit_lora.data.decode import ImageTooLarge, UnsupportedImage, decode_notes, decode_workers, pixel_budget
from dit_lora.data.kohya import copies_note, copy_of
from dit_lora.data.paths import printable
from dit_lora.data.sources import MAX_LOGGED_BAD, MAX_NAMED, RawSample


def image_problem(
    sample: RawSample,
    *,
    resolution: Any = None,
    max_pixels: int | None = None,
    notes: list[tuple[str, str]] | None = None,
) -> str | None:
    """Why ``sample``'s image cannot be used, or None if it decodes and converts to RGB.

    Decodes as training will (:meth:`RawSample.open_image`): within ``max_pixels`` (checked from the header,
    before decoding) and reduced for ``resolution`` when much larger. What the decoder says about a usable image
    (an animated image's first frame, an ignored colour profile: :func:`~dit_lora.data.decode.decode_notes`) is
    appended to ``notes`` as ``(key, note)`` when a list is given.
    """
    if sample.refused is not None:
        return sample.refused  # outside the data folder: never opened
    try:
        if sample.path is not None:
            if os.path.isdir(sample.path):
                return "is a folder, not an image file"
            if os.path.getsize(sample.path) == 0:
                return "empty file (0 bytes)"
        image = sample.open_image(resolution=resolution, max_pixels=max_pixels)
        if notes is not None:
            notes.extend((sample.key, note) for note in decode_notes(image))  # list.extend: safe across threads
        image.close()
    except FileNotFoundError:
        return "file not found"
    except UnidentifiedImageError:
        return "not a readable image (corrupt, or not an image despite its extension)"
    except ImageTooLarge as err:
        return f"image too large: {err}"
    except UnsupportedImage as err:
        return f"cannot be converted to 8-bit RGB faithfully: {err}"
    except OSError as err:
        text = " ".join(str(err).split())
        if "truncated" in text.lower():
            return f"truncated image ({text})"
        return f"unreadable ({type(err).__name__}: {text})"
    except Exception as err:
        return f"unreadable ({type(err).__name__}: {' '.join(str(err).split())})"
    return None


class Captioned(Protocol):
    """A sample with a caption (:class:`RawSample`, a video sample): what :func:`caption_problem` reads."""

    @property
    def caption(self) -> object: ...


def caption_problem(sample: Captioned) -> str | None:
    """Why ``sample``'s caption cannot be trained on, or None."""
    if not isinstance(sample.caption, str) or not sample.caption.strip():
        return "empty caption"
    return None


def sample_problem(
    sample: RawSample,
    *,
    require_caption: bool = True,
    resolution: Any = None,
    max_pixels: int | None = None,
    notes: list[tuple[str, str]] | None = None,
) -> str | None:
    """Why ``sample`` must be left out of training (empty caption, unreadable or too large image), or None;
    the decoder's notes on a usable image go to ``notes`` (:func:`image_problem`)."""
    if require_caption:
        problem = caption_problem(sample)
        if problem is not None:
            return problem
    return image_problem(sample, resolution=resolution, max_pixels=max_pixels, notes=notes)


def summarize_notes(notes: Sequence[tuple[str, str]]) -> list[str]:
    """The decoder's ``(key, note)`` pairs as log lines, once per run: one for the animated images (``3 animated
    images (GIF, WebP): training uses their first frame (a.gif, b.webp, c.webp)``), one for the rest."""
    animated = [(key, note) for key, note in notes if "training uses its first" in note]
    others = [(key, note) for key, note in notes if "training uses its first" not in note]
    lines = []
    if animated:
        kinds = sorted({note.split(" (")[0].replace("animated ", "") for _, note in animated})
        plural = len(animated) != 1
        lines.append(
            f"{len(animated)} animated image{'s' if plural else ''} ({', '.join(kinds)}): training uses "
            f"{'their' if plural else 'its'} first frame ({_named([key for key, _ in animated])})"
        )
    if others:
        lines.append(
            f"{len(others)} image{'s' if len(others) != 1 else ''} decoded with a note: "
            + _named([f"{key} ({note})" for key, note in others])
        )
    return lines


def _named(items: Sequence[str]) -> str:
    more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
    return ", ".join(printable(item) for item in items[:MAX_NAMED]) + more


def bad_fraction_error(
    bad: Sequence[tuple[str, str]],
    total: int,
    max_bad_samples_fraction: float,
    *,
    what: str = "training samples",
    failed: str = "could not be used",
    where: str = "",
) -> UserError | None:
    """The error to raise when ``bad`` ((key, reason) pairs) out of ``total`` is too many, else None."""
    if not bad or total <= 0 or len(bad) / total <= max_bad_samples_fraction:
        return None
    named = ", ".join(f"{key} ({reason})" for key, reason in bad[:MAX_NAMED])
    more = f" and {len(bad) - MAX_NAMED} more" if len(bad) > MAX_NAMED else ""
    needed = len(bad) / total
    # Round up so the suggested value actually lets this data through.
    suggestion = min(1.0, math.ceil(needed * 1000) / 1000)
    return UserError(
        f"{len(bad)} of {total} {what} ({needed:.1%}) {failed}, more than "
        f"--max_bad_samples_fraction={max_bad_samples_fraction} allows: {named}{more}.{where} Fix or "
        f"delete those files, or raise --max_bad_samples_fraction to at least {suggestion} "
        f"to train on the rest."
    )


def check_bad_fraction_value(max_bad_samples_fraction: float) -> None:
    if not 0.0 <= float(max_bad_samples_fraction) <= 1.0:
        raise UserError(
            f"--max_bad_samples_fraction must be between 0 and 1, got {max_bad_samples_fraction!r} "
            f"(0.05 means up to 5% of samples may be skipped as unreadable)."
        )


def validate_samples(
    samples: Sequence[RawSample],
    *,
    max_bad_samples_fraction: float = 0.05,
    log: Callable[[str], Any] = print,
    num_workers: int | None = None,
    require_captions: bool = True,
    quarantine: list[dict[str, Any]] | None = None,
    raise_on_fraction: bool = True,
    resolution: Any = None,
    max_pixels: int | None = None,
) -> list[RawSample]:
    """Decode every image once; drop and report the bad ones; renumber ``index`` 0..N-1.

    With ``resolution`` (the training size) images are decoded as training will: one beyond ``max_pixels``
    (default :func:`~dit_lora.data.decode.pixel_budget` of the resolution) is left out from its header, a much
    larger one is decoded reduced, and the threads are sized by memory (:func:`~dit_lora.data.decode.decode_workers`).

    Missing, zero-byte, truncated and corrupt files, and (with ``require_captions``) empty or
    whitespace-only captions, are skipped, each named once in ``log`` (at most 20 lines, then a
    count) and appended to ``quarantine`` as ``{"key": ..., "reason": ...}`` when a list is given.
    Decoding runs in ``num_workers`` threads (default: up to 8) since PIL releases the GIL while
    decoding; results keep the input order. An image that cannot be converted to 8-bit RGB faithfully
    (:class:`~dit_lora.data.decode.UnsupportedImage`) is skipped with its reason; what the decoder notes about the
    usable ones (animated images train on their first frame) is logged once, counted (:func:`summarize_notes`).

    Raises:
        UserError: the bad fraction exceeds ``max_bad_samples_fraction`` (``--max_bad_samples_fraction``;
            only with ``raise_on_fraction``), or no usable sample is left.
    """
    samples = list(samples)
    if resolution is not None:
        max_pixels = pixel_budget(resolution, max_pixels)
    if num_workers is None and max_pixels:
        num_workers = decode_workers(max_pixels, most=8)
    notes: list[tuple[str, str]] = []

    def check(s):
        return sample_problem(
            s,
            require_caption=require_captions,
            resolution=resolution,
            max_pixels=max_pixels,
            notes=notes,
        )

    problems = check_all(
        samples,
        check,
        max_bad_samples_fraction=max_bad_samples_fraction,
        num_workers=num_workers,
        empty_hint="Point --train_data_dir or --dataset_name at data with images.",
    )
    only_images = all(p != "empty caption" for p in problems if p is not None)
    usable = {s.key for s, p in zip(samples, problems) if p is None}
    for line in summarize_notes(sorted((key, note) for key, note in notes if key in usable)):
        log(line)
    return screen(
        samples,
        problems,
        max_bad_samples_fraction=max_bad_samples_fraction,
        log=log,
        quarantine=quarantine,
        raise_on_fraction=raise_on_fraction,
        what="training images" if only_images else "training samples",
        failed="could not be read" if only_images else "could not be used",
        skipped_as="unreadable images",
        fix="Check the files in --train_data_dir / --dataset_name.",
    )


def check_all(
    samples: list,
    check: Callable[[Any], str | None],
    *,
    max_bad_samples_fraction: float,
    num_workers: int | None,
    empty_hint: str,
) -> list[str | None]:
    """Run ``check`` on every sample (threads: decoders release the GIL); the problems, in input order.

    A kohya repeat (:func:`~dit_lora.data.kohya.copy_of`) is not checked again: it gets its first copy's verdict, so
    a file listed N times is decoded once."""
    check_bad_fraction_value(max_bad_samples_fraction)
    if not samples:
        raise UserError(f"No training samples to check. {empty_hint}")
    origin = copy_of(samples)
    firsts = [samples[i] for i, first in enumerate(origin) if first == i]
    workers = num_workers if num_workers is not None else min(8, os.cpu_count() or 1)
    if workers > 1 and len(firsts) > 1:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="validate") as pool:
            found = list(pool.map(check, firsts))
    else:
        found = [check(s) for s in firsts]
    verdict = dict(zip((i for i, first in enumerate(origin) if first == i), found))
    return [verdict[first] for first in origin]


_ONE = {
    "paths outside the data folder": "path outside the data folder",
    "empty captions": "empty caption",
    "images too large": "image too large",
    "unreadable images": "unreadable image",
    "images with no faithful 8-bit RGB conversion": "image with no faithful 8-bit RGB conversion",
    "clips that cannot be used": "clip that cannot be used",
}


def skipped_by_reason(bad: Sequence[tuple[Any, str]], other: str) -> str:
    """``6 unreadable images, 2 paths outside the data folder``: the skipped (sample, problem) pairs counted by
    reason; ``other`` names the problems that are neither a refused path, an empty caption nor a too-large image."""
    counts: dict[str, int] = {}
    for sample, problem in bad:
        if getattr(sample, "refused", None) is not None:
            reason = "paths outside the data folder"
        elif problem == "empty caption":
            reason = "empty captions"
        elif problem.startswith("image too large"):
            reason = "images too large"
        elif problem.startswith("cannot be converted"):
            reason = "images with no faithful 8-bit RGB conversion"
        else:
            reason = other
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(f"{n} {_ONE.get(reason, reason) if n == 1 else reason}" for reason, n in counts.items())


def screen(
    samples: list,
    problems: list[str | None],
    *,
    max_bad_samples_fraction: float,
    log: Callable[[str], Any],
    quarantine: list[dict[str, Any]] | None,
    raise_on_fraction: bool,
    what: str,
    failed: str,
    skipped_as: str,
    fix: str,
) -> list:
    """Drop the samples with a problem: name them (20 at most), quarantine them, enforce the fraction.

    Shared by images and videos; returns the good samples renumbered ``index`` 0..N-1. The count line words
    the skipped samples by reason (:func:`skipped_by_reason`; ``skipped_as`` names the problems of the media).
    A file listed several times (kohya ``N_words/`` repeats, :func:`~dit_lora.data.kohya.copy_of`) is named and
    quarantined once with its count (``"repeats"``), and the fraction counts files, not copies.
    """
    origin = copy_of(samples)
    listed = Counter(origin)
    failing = [
        (i, problem) for i, (first, problem) in enumerate(zip(origin, problems)) if first == i and problem is not None
    ]
    bad = [(samples[i], problem) for i, problem in failing]
    repeats = [listed[i] for i, _ in failing]
    good = [s for s, p in zip(samples, problems) if p is None]
    if quarantine is not None:
        quarantine.extend(
            {"key": s.key, "reason": p, **({"repeats": n} if n > 1 else {})} for (s, p), n in zip(bad, repeats)
        )
    for (sample, problem), n in list(zip(bad, repeats))[:MAX_LOGGED_BAD]:
        # a key read from a data file may hold a NUL or ESC
        log(f"skipping {printable(sample.key)}: {problem}{copies_note(n)}")
    if len(bad) > MAX_LOGGED_BAD:
        log(f"... and {len(bad) - MAX_LOGGED_BAD} more")
    total = len(listed)  # files (first copies), not kohya repeats
    if bad:
        copies = f" ({sum(repeats)} of {len(samples)} samples per epoch with repeats)" if total < len(samples) else ""
        log(
            f"skipped {len(bad)} of {total} {'files' if total < len(samples) else 'samples'}{copies}: "
            f"{skipped_by_reason(bad, skipped_as)}; {total - len(bad)} remain"
        )
    if raise_on_fraction:
        counted = f"{what} (files; their repeats are not counted)" if total < len(samples) else what
        error = bad_fraction_error(
            [(s.key, p) for s, p in bad], total, max_bad_samples_fraction, what=counted, failed=failed
        )
        if error is not None:
            raise error
    if not good:
        raise UserError(f"None of the {total} {what} can be used (first: {bad[0][0].key}: {bad[0][1]}). {fix}")
    return [dataclasses.replace(s, index=i) for i, s in enumerate(good)]
