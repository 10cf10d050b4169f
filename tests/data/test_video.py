"""Video data layer (groundwork for CogVideoX LoRA): loading, decoding, validation, images as one-frame clips (the
frame rule and buckets: tests/data/test_frames.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

pytest.importorskip("av")

from dit_lora.data import video as video_lib  # noqa: E402
from dit_lora.data.video import (  # noqa: E402
    VideoDecodeError,
    VideoSample,
    decode_clip,
    decode_image_clip,
    scan_clip,
    load_video_samples,
    validate_video_samples,
    video_problem,
)
from dit_lora.data.synthetic.clips import (  # noqa: E402
    make_moving_square_dataset,
    write_corrupt_clip,
    write_moving_square_clip,
    write_truncated_clip,
)
from dit_lora.core.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "meta", n=4, num_frames=9, seed=0)


def test_probe_matches_what_was_written(tmp_path):
    path = write_moving_square_clip(tmp_path / "p.mp4", num_frames=13, size=48, fps=12)
    info = VideoSample(key="p.mp4", caption="x", path=str(path)).probe()
    assert (info.num_frames, info.fps, info.width, info.height) == (13, 12.0, 48, 48)


def test_decode_clip_shape_range_determinism_motion(clips):
    path = load_video_samples(clips)[0].path
    clip = decode_clip(path, 9, 32, 48)
    assert clip.shape == (9, 3, 32, 48) and clip.dtype == torch.float32
    assert clip.min() >= -1.0 and clip.max() <= 1.0 and clip.max() > 0  # the square is bright
    assert torch.equal(clip, decode_clip(path, 9, 32, 48))
    # The square moves: consecutive frames differ, and first vs last differ a lot.
    assert all((clip[i + 1] - clip[i]).abs().max() > 0.5 for i in range(8))
    assert (clip[0] - clip[-1]).abs().mean() > 0.02

    first = decode_clip(path, 5, 32, 32, start="first")
    uniform = decode_clip(path, 5, 32, 32, start="uniform")
    full = decode_clip(path, 9, 32, 32)
    assert torch.equal(first, full[:5])
    assert torch.equal(uniform, full[[0, 2, 4, 6, 8]])

    from dit_lora.data.video import VideoDecodeError

    with pytest.raises(VideoDecodeError, match="too short"):
        decode_clip(path, 13, 32, 32)


@pytest.fixture()
def bad_clips(tmp_path, clips):
    root = tmp_path / "bad"
    shutil.copytree(clips, root)
    source = root / "clip_00000.mp4"
    write_corrupt_clip(root / "corrupt.mp4")
    write_truncated_clip(source, root / "truncated.mp4")
    (root / "empty.mp4").write_bytes(b"")
    write_moving_square_clip(root / "short.mp4", num_frames=3)
    with open(root / "metadata.jsonl", "a") as handle:
        for name in ("corrupt.mp4", "truncated.mp4", "empty.mp4", "short.mp4", "missing.mp4"):
            handle.write(json.dumps({"file_name": name, "text": f"bad {name}"}) + "\n")
    return root


def test_bad_clips_named_and_quarantined(bad_clips):
    samples = load_video_samples(bad_clips)
    assert len(samples) == 9
    lines: list[str] = []
    quarantine: list[dict] = []
    good = validate_video_samples(
        samples, min_frames=9, max_bad_samples_fraction=0.6, log=lines.append, quarantine=quarantine
    )
    assert [s.key for s in good] == [f"clip_{i:05d}.mp4" for i in range(4)]
    assert [s.index for s in good] == [0, 1, 2, 3]
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert set(reasons) == {"corrupt.mp4", "truncated.mp4", "empty.mp4", "short.mp4", "missing.mp4"}
    assert "not a readable video" in reasons["corrupt.mp4"]
    assert "truncated" in reasons["truncated.mp4"]
    assert reasons["empty.mp4"] == "empty file (0 bytes)"
    assert reasons["short.mp4"].startswith("too short (3 frame(s), need at least 9")
    assert reasons["missing.mp4"] == "file not found"
    assert all(any(key in line for line in lines) for key in reasons)
    assert "skipped 5 of 9" in lines[-1]

    # The same checks one at a time; a long enough requirement passes the short clip.
    short = next(s for s in samples if s.key == "short.mp4")
    assert video_problem(short, 3) is None


def test_bad_fraction_stops(bad_clips):
    samples = load_video_samples(bad_clips)
    with pytest.raises(UserError) as err:
        validate_video_samples(samples, min_frames=9, max_bad_samples_fraction=0.5, log=lambda _: None)
    message = str(err.value)
    assert "5 of 9 training videos" in message and "--max_bad_samples_fraction" in message
    assert "corrupt.mp4" in message
    with pytest.raises(UserError, match="between 0 and 1"):
        validate_video_samples(samples, min_frames=9, max_bad_samples_fraction=2.0)


# ---------------------------------------------------------------------------------------------
# images: one-frame clips
# ---------------------------------------------------------------------------------------------


def _picture(width: int, height: int) -> np.ndarray:
    """A smooth colour gradient with a dark bar: content the crop position shows, mild for yuv420p's chroma."""
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([x * 255 // (width - 1), y * 255 // (height - 1), (x + y) * 255 // (width + height - 2)], -1)
    rgb[height // 3 : height // 2, :] //= 4
    return rgb.astype(np.uint8)


def test_an_image_decodes_like_a_one_frame_clip_of_the_same_picture(tmp_path, monkeypatch):
    from dit_lora.output.video import write_video

    picture = _picture(80, 48)
    png = tmp_path / "still.png"
    Image.fromarray(picture).save(png)
    clip = write_video([picture], tmp_path / "still.mp4", crf=0)
    calls: list[tuple[int, int]] = []
    real = video_lib._frame_tensor
    monkeypatch.setattr(video_lib, "_frame_tensor", lambda img, h, w: calls.append(img.size) or real(img, h, w))
    image = decode_clip(png, 1, 32, 32)
    from_clip = decode_clip(clip, 1, 32, 32)
    # Both went through the one resize/crop function, from the same 80x48 picture.
    assert calls == [(80, 48), (80, 48)]
    assert image.shape == from_clip.shape == (1, 3, 32, 32) and image.dtype == torch.float32
    assert image.min() >= -1 and image.max() <= 1
    assert (image - from_clip).abs().mean() < 0.02  # the codec's error (yuv420p halves the chroma)
    assert torch.equal(image, real(Image.open(png), 32, 32)[None])
    assert torch.equal(decode_image_clip(png, 32, 32), image)
    with pytest.raises(VideoDecodeError, match="one-frame clip; it cannot give 5 frames"):
        decode_clip(png, 5, 32, 32)


def test_image_exif_orientation_is_applied_to_its_size_and_pixels(tmp_path):
    jpg = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait (a phone held upright)
    Image.fromarray(_picture(64, 32)).save(jpg, exif=exif, quality=95)
    sample = VideoSample(key="rotated.jpg", caption="x", path=str(jpg))
    assert sample.is_image and scan_clip(sample, 9)[1:4] == (1, 32, 64)  # one frame, never too short; 32 wide
    good = validate_video_samples([sample], buckets=[(9, 32, 64), (9, 64, 32)], log=lambda _: None, num_workers=1)
    assert good[0].bucket == (1, 64, 32)
    upright = ImageOps.exif_transpose(Image.open(jpg))
    assert torch.equal(decode_clip(jpg, 1, 64, 32), video_lib._frame_tensor(upright, 64, 32)[None])


def test_bad_images_are_quarantined_with_the_image_reasons_and_good_ones_bucketed(tmp_path):
    root = tmp_path / "stills"
    root.mkdir()
    Image.fromarray(_picture(96, 32)).save(root / "wide.png")
    Image.fromarray(_picture(32, 96)).save(root / "tall.png")
    Image.fromarray(_picture(40, 40)).save(root / "square.webp")
    data = (root / "wide.png").read_bytes()
    (root / "truncated.png").write_bytes(data[: len(data) // 2])
    write_corrupt_clip(root / "corrupt.png")
    (root / "empty.jpg").write_bytes(b"")
    names = ["wide.png", "tall.png", "square.webp", "truncated.png", "corrupt.png", "empty.jpg", "missing.png"]
    samples = [VideoSample(key=n, caption=f"still {n}", path=str(root / n)) for n in names]
    quarantine: list[dict] = []
    good = validate_video_samples(samples, buckets=[(5, 32, 64), (5, 64, 32), (9, 32, 32)], log=lambda _: None,
                                  quarantine=quarantine, max_bad_samples_fraction=0.6)
    assert {s.key: s.bucket for s in good} == {"wide.png": (1, 32, 64), "tall.png": (1, 64, 32),
                                              "square.webp": (1, 32, 32)}
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert reasons["corrupt.png"] == "not a readable image (corrupt, or not an image despite its extension)"
    assert reasons["truncated.png"].startswith(("truncated image", "unreadable"))
    assert reasons["empty.jpg"] == "empty file (0 bytes)" and reasons["missing.png"] == "file not found"
    # Beyond the pixel budget: refused from the header, as for the image families.
    too_large: list[dict] = []
    validate_video_samples(samples[:3], buckets=[(5, 32, 64)], log=lambda _: None, quarantine=too_large,
                           max_pixels=2000, max_bad_samples_fraction=1.0)
    assert [q["key"] for q in too_large] == ["wide.png", "tall.png"]
    assert too_large[0]["reason"].startswith("image too large: 96x32 pixels")


# ---- rotation metadata ---------------------------------------------------------------------------------------------
def _rotated_clip(path: Path, *, degrees: int, frames: int = 5) -> Path:
    from data_files import write_rotated_clip

    return write_rotated_clip(path, degrees=degrees, frames=frames)


def test_a_rotated_clip_is_bucketed_and_decoded_as_displayed(tmp_path):
    """A 64x32 clip turned 90 degrees is a 32x64 portrait clip: scanned, bucketed and decoded upright."""
    from dit_lora.data.frames import automatic_buckets
    from dit_lora.data.video import scan_clip

    sample = VideoSample(key="phone.mp4", caption="c", path=str(_rotated_clip(tmp_path / "phone.mp4", degrees=90)))
    scan = scan_clip(sample)
    assert (scan.width, scan.height, scan.rotation) == (32, 64, 90)
    (kept,) = validate_video_samples([sample], buckets=automatic_buckets((5, 32, 64), 16), log=lambda _: None)
    assert kept.bucket == (5, 64, 32) and kept.source_size == (64, 32) and kept.rotation == 90
    assert kept.cache_key().endswith(":5x64x32:r90")  # upright frames: never an entry cached sideways
    pixels = decode_clip(sample.path, 1, 64, 32)[0]
    # Turned counter-clockwise, the stored left edge (red) is the displayed bottom edge.
    assert pixels[0, -8:].mean() > 0.6 and pixels[0, :32].mean() < -0.6
    plain = VideoSample(key="a.mp4", caption="c", path=sample.path, bucket=(5, 64, 32))
    assert plain.cache_key().endswith(":5x64x32")
