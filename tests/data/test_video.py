"""Video data layer (groundwork for CogVideoX LoRA): loading, decoding, validation (the frame rule and buckets:
tests/data/test_frames.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("av")

from dit_lora.data.video import (  # noqa: E402
    VideoSample,
    decode_clip,
    load_video_samples,
    validate_video_samples,
    video_problem,
)
from dit_lora.demo.clips import (  # noqa: E402
    make_moving_square_dataset,
    write_corrupt_clip,
    write_moving_square_clip,
    write_truncated_clip,
)
from dit_lora.errors import UserError  # noqa: E402


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
