"""CogVideoX's frame-count rule and ``--frame_buckets``: which clip lengths and sizes a video model accepts.

CogVideoX frame-count facts (checked in diffusers 0.42.1):

* The VAE compresses time by ``temporal_compression_ratio`` = 4 and keeps the first frame on its
  own, so ``F`` pixel frames give ``(F - 1) // 4 + 1`` latent frames; only ``F = 4k + 1`` uses every
  frame (``pipeline_cogvideox.py`` ``prepare_latents``, line 336, and line 680). CogVideoX 1.0
  defaults to 49 frames = 13 latent frames (``CogVideoXTransformer3DModel`` ``sample_frames=49``,
  ``cogvideox_transformer_3d.py`` lines 191-195 and 237).
* CogVideoX 1.5 sets ``patch_size_t=2``: the patch embedding groups latent frames in pairs with
  ``reshape(batch, num_frames // p_t, p_t, ...)`` (``embeddings.py`` ``CogVideoXPatchEmbed.forward``,
  lines 539-546), so the *latent* frame count must be divisible by ``patch_size_t``. The pipeline
  does not require that of the caller: when ``latent_frames % patch_size_t != 0`` it adds
  ``additional_frames = patch_size_t - latent_frames % patch_size_t`` latent frames
  (``pipeline_cogvideox.py`` lines 682-687) and drops them from the front after denoising
  (``latents[:, additional_frames:]``, line 786). 1.5's usual 81 frames are 21 latent frames, so
  they are always padded to 22. The THUDM CogVideo ``finetune/`` trainers (``compute_loss``, seen in
  several public forks; upstream not checked offline) do the same to training latents: they prepend
  ``latent_frames % patch_size_t`` copies of the first latent frame.

  :func:`frame_rule` therefore offers both readings: strict (``patch_size_t=2``: ``4k + 1`` with
  ``k + 1`` even, i.e. 5, 13, 21, ..., 45, 53, ..., 77, 85 frames; no padding needed) and, with
  ``pad_latent_frames=True``, plain ``4k + 1`` (the trainer then pads latents like the pipeline;
  :func:`latent_padding` says by how many frames).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from dit_lora.config.option import SIDE
from dit_lora.core.errors import UserError
from dit_lora.data.aspect import CROP_WARNING, MAX_ASPECT, aspect_buckets, cropped_share

# ---------------------------------------------------------------------------------------------
# Frame-count rule
# ---------------------------------------------------------------------------------------------


def latent_frames(num_frames: int, *, temporal_compression: int = 4) -> int:
    """Latent frames the CogVideoX VAE makes of ``num_frames`` pixel frames: ``(F - 1) // r + 1``."""
    return (int(num_frames) - 1) // temporal_compression + 1


def latent_padding(num_frames: int, *, temporal_compression: int = 4, patch_size_t: int | None = None) -> int:
    """Latent frames the pipeline prepends so ``patch_size_t`` divides the latent frame count.

    Same formula as ``additional_frames`` in diffusers' ``CogVideoXPipeline.__call__``; 0 for
    CogVideoX 1.0 (``patch_size_t=None``). Example: 81 frames, ``patch_size_t=2`` -> 21 latent
    frames -> 1.
    """
    if not patch_size_t:
        return 0
    remainder = latent_frames(num_frames, temporal_compression=temporal_compression) % patch_size_t
    return 0 if remainder == 0 else patch_size_t - remainder


def _valid(n: int, temporal_compression: int, patch_size_t: int | None) -> bool:
    if n < 1 or (n - 1) % temporal_compression:
        return False
    return not patch_size_t or latent_frames(n, temporal_compression=temporal_compression) % patch_size_t == 0


def frame_rule(
    num_frames: int,
    *,
    temporal_compression: int = 4,
    patch_size_t: int | None = None,
    pad_latent_frames: bool = False,
) -> int:
    """The largest valid CogVideoX frame count ``<= num_frames``, or 0 if there is none.

    Valid means ``F = temporal_compression * k + 1`` (1, 5, 9, ..., 49, ...). With ``patch_size_t``
    (CogVideoX 1.5: 2) the latent frame count ``k + 1`` must also be divisible by it (for 2:
    5, 13, 21, ..., 77, 85; 49 and 81 are not), unless ``pad_latent_frames`` says the
    trainer pads latents the way the pipeline does (see the module docstring), in which case any
    ``4k + 1`` is fine. Used to cut a clip down to the frames the model can take.
    """
    n = int(num_frames)
    step = temporal_compression
    p_t = None if pad_latent_frames else patch_size_t
    if n < 1:
        return 0
    n = (n - 1) // step * step + 1  # largest 4k + 1 <= num_frames
    while n >= 1 and not _valid(n, step, p_t):
        n -= step
    return max(n, 0)


def check_num_frames(
    num_frames: int,
    *,
    temporal_compression: int = 4,
    patch_size_t: int | None = None,
    pad_latent_frames: bool = False,
    flag: str = "--max_num_frames",
) -> int:
    """Return ``num_frames`` if it satisfies :func:`frame_rule`, else raise naming the nearest valid values.

    Raises:
        UserError: not a positive whole number, or not of the form ``4k + 1`` (and, for
            ``patch_size_t``, ``k + 1`` not divisible by it).
    """
    if isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1:
        raise UserError(f"{flag} must be a positive whole number of frames such as 49, got {num_frames!r}.")
    step = temporal_compression
    p_t = None if pad_latent_frames else patch_size_t
    if _valid(num_frames, step, p_t):
        return num_frames
    below = frame_rule(
        num_frames, temporal_compression=step, patch_size_t=patch_size_t, pad_latent_frames=pad_latent_frames
    )
    above = num_frames + 1
    while not _valid(above, step, p_t):
        above += 1
    nearest = " or ".join(str(v) for v in (below, above) if v >= 1)
    if p_t:
        rule = (
            f"of the form {step}k+1 whose latent frame count k+1 is divisible by patch_size_t={p_t} "
            f"(CogVideoX 1.5: 5, 13, 21, ..., 77, 85)"
        )
    else:
        rule = f"of the form {step}k+1 (the VAE compresses {step} frames into one after the first: 1, 5, ..., 49, ...)"
    raise UserError(
        f"{flag} {num_frames} is not a frame count the model can take: it must be {rule}. "
        f"Use {nearest} (nearest valid values)."
    )


# ---------------------------------------------------------------------------------------------
# Buckets
# ---------------------------------------------------------------------------------------------

Bucket = tuple[int, int, int]  # (frames, height, width)
_BUCKET_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def resolution_buckets(
    spec: str,
    *,
    temporal_compression: int = 4,
    patch_size_t: int | None = None,
    pad_latent_frames: bool = False,
    spatial_multiple: int = 16,
    flag: str = "--frame_buckets",
) -> list[Bucket]:
    """Parse ``"49x480x720,49x256x256"`` (FRAMESxHEIGHTxWIDTH, comma separated) into (f, h, w) tuples.

    Each frame count must satisfy :func:`check_num_frames`; height and width must be multiples of
    ``spatial_multiple`` (16 for CogVideoX: VAE 8x times patch size 2). Duplicates are dropped,
    order is kept.

    Raises:
        UserError: empty spec, a malformed entry, or an invalid frame count / size (naming ``flag``).
    """
    entries = [part for part in str(spec).split(",") if part.strip()]
    if not entries:
        raise UserError(f"{flag} is empty. Give one or more FRAMESxHEIGHTxWIDTH buckets, e.g. 49x480x720,49x256x256.")
    buckets: list[Bucket] = []
    for entry in entries:
        match = _BUCKET_RE.match(entry)
        if match is None:
            raise UserError(
                f"{flag} entry {entry.strip()!r} is not FRAMESxHEIGHTxWIDTH. Write buckets like "
                f"49x480x720,49x256x256 (frames, height, width in pixels)."
            )
        frames, height, width = (int(v) for v in match.groups())
        check_num_frames(
            frames,
            temporal_compression=temporal_compression,
            patch_size_t=patch_size_t,
            pad_latent_frames=pad_latent_frames,
            flag=f"{flag} entry {entry.strip()!r}: frame count",
        )
        for name, value in (("height", height), ("width", width)):
            if value not in SIDE:
                raise UserError(f"{flag} entry {entry.strip()!r}: {name} {value} must be {SIDE}: {SIDE.why}.")
            if value < spatial_multiple or value % spatial_multiple:
                fixed = max(spatial_multiple, round(value / spatial_multiple) * spatial_multiple)
                raise UserError(
                    f"{flag} entry {entry.strip()!r}: {name} {value} must be a positive multiple of "
                    f"{spatial_multiple} (VAE downsampling times patch size); use {fixed}."
                )
        if (frames, height, width) not in buckets:
            buckets.append((frames, height, width))
    return buckets


def choose_bucket(frames: int, height: int, width: int, buckets: Sequence[Bucket]) -> Bucket | None:
    """The bucket for a clip of ``frames`` frames at ``height`` x ``width``, or None if it is too short for all.

    Among buckets whose frame count fits the clip (``bucket_frames <= frames``) the largest frame
    count wins; among those, the aspect ratio nearest the clip's (compared in log space, so 2:1
    and 1:2 are equally far from 1:1); then the larger area; then the earlier bucket. Spatial
    size never disqualifies a bucket: frames are resized and centre-cropped to it.
    """
    fitting = [b for b in buckets if b[0] <= frames]
    if not fitting or height <= 0 or width <= 0:
        return None
    most = max(b[0] for b in fitting)
    aspect = math.log(height / width)
    candidates = [(i, b) for i, b in enumerate(fitting) if b[0] == most]
    _, best = min(candidates, key=lambda ib: (abs(math.log(ib[1][1] / ib[1][2]) - aspect), -ib[1][1] * ib[1][2], ib[0]))
    return best


def one_frame_buckets(buckets: Sequence[Bucket]) -> list[Bucket]:
    """The one-frame buckets ``(1, h, w)`` images of a video dataset train in: one per spatial size of ``buckets``.

    An image is a one-frame clip; it keeps the run's spatial sizes (so its latents have the video buckets' height
    and width) and gets one of them by :func:`choose_bucket`'s aspect rule (``choose_bucket(1, h, w, these)``).
    Order follows ``buckets``, duplicates dropped.
    """
    out: list[Bucket] = []
    for _, height, width in buckets:
        if (1, height, width) not in out:
            out.append((1, height, width))
    return out


# ---------------------------------------------------------------------------------------------
# Automatic resolution buckets (no --frame_buckets)
# ---------------------------------------------------------------------------------------------


def automatic_buckets(base: Bucket, stride: int, *, max_aspect: float | None = None) -> list[Bucket]:
    """``base`` first, then every other aspect bucket of about its area at its frame count (:mod:`.aspect`).

    The sizes are :func:`~dit_lora.data.aspect.aspect_buckets` of ``height * width`` in ``stride`` (the model's
    spatial multiple): for each width the largest height whose area does not exceed the base's, so no bucket has
    more latent tokens than ``base`` (the memory plan and the trained-size checks that judge ``base`` judge the
    worst of the set), and a clip of ``base``'s aspect ratio gets exactly ``base`` (:func:`choose_bucket` prefers
    the larger area among equally near aspects, and ``base`` is the largest of its aspect).
    """
    frames, height, width = base
    limit = MAX_ASPECT if max_aspect is None else max_aspect
    sizes = aspect_buckets(height * width, stride, max_aspect=limit)
    return [base] + [(frames, h, w) for h, w in sizes if (h, w) != (height, width)]


def most_tokens(buckets: Sequence[Bucket]) -> Bucket:
    """The bucket with the most pixels across its frames (so the most latent tokens), the first among equals."""
    return max(buckets, key=lambda b: (b[0] * b[1] * b[2], -buckets.index(b)))


def clip_cropped_share(height: int, width: int, bucket: Bucket) -> float:
    """The share of a ``width`` x ``height`` clip's picture that the cover-resize to ``bucket`` and its centre crop
    cut off (:func:`~dit_lora.data.aspect.cropped_share` on the bucket's spatial size)."""
    return cropped_share(height, width, (bucket[1], bucket[2]))


def _sample_cropped_share(sample: Any, bucket: Bucket) -> float:
    """:func:`clip_cropped_share` of a sample with a ``source_size`` (``(height, width)``)."""
    height, width = sample.source_size
    return clip_cropped_share(height, width, bucket)


def describe_buckets(buckets: Sequence[Bucket], *, automatic: bool) -> str:
    """The run's buckets in one phrase, for the start notes, the log and the model card.

    Automatic sets are long (dozens of sizes), so they are summarised by their first (the default size), their
    count and the way to pin one; a user's ``--frame_buckets`` are listed as given.
    """
    listed = ", ".join(f"{f}x{h}x{w}" for f, h, w in buckets)
    if not automatic or len(buckets) < 2:
        return listed
    f, h, w = buckets[0]
    return (
        f"{f}x{h}x{w} and {len(buckets) - 1} other automatic aspect buckets of at most its area "
        f"(each clip takes the nearest to its aspect ratio; --frame_buckets {f}x{h}x{w} pins this one)"
    )


def automatic_note(buckets: Sequence[Bucket], *, automatic: bool) -> str:
    """The start note's clause on an automatic set (``""`` for given or single buckets): how many, and the pin."""
    if not automatic or len(buckets) < 2:
        return ""
    f, h, w = buckets[0]
    return (
        f"; clips of other shapes take the nearest of {len(buckets) - 1} other automatic aspect buckets of at "
        f"most its area (--frame_buckets {f}x{h}x{w} pins this one size)"
    )


def bucket_table(buckets: Sequence[Bucket], samples: Sequence, *, automatic: bool) -> list[str]:
    """Log lines: the bucket set, the clips per used bucket and how many lose more than :data:`CROP_WARNING`.

    ``samples`` carry ``bucket``, ``is_image`` and ``source_size`` (``(height, width)`` after rotation, or None).
    """
    lines = [f"buckets (frames x height x width): {describe_buckets(buckets, automatic=automatic)}"]
    rows = []
    for bucket in buckets:
        members = [s for s in samples if s.bucket == bucket]
        if not members:
            continue
        images = sum(1 for s in members if getattr(s, "is_image", False))
        shares = [_sample_cropped_share(s, bucket) for s in members if getattr(s, "source_size", None)]
        note = "" if not images else " (images)" if images == len(members) else f" ({images} images)"
        crop = f", up to {max(shares):.0%} cropped" if shares and max(shares) > 0.005 else ""
        f, h, w = bucket
        rows.append(f"  {f}x{h}x{w} ({w}x{h} px, aspect {w / h:.2f}): {len(members)}{note}{crop}")
    if rows:
        lines += ["clips per bucket:"] + rows
    cropped = [
        s
        for s in samples
        if getattr(s, "source_size", None) and s.bucket and _sample_cropped_share(s, s.bucket) > CROP_WARNING
    ]
    lines.append(
        f"clips cropped by more than {CROP_WARNING:.0%} to fit their bucket: {len(cropped)} of {len(samples)}"
        + (f" ({', '.join(s.key for s in cropped[:5])}{', ...' if len(cropped) > 5 else ''})" if cropped else "")
    )
    return lines
