"""demo/clips.py: the moving-square clips (deterministic, captioned by what moves where) and the broken files."""

from __future__ import annotations

import json

import numpy as np
import pytest

av = pytest.importorskip("av")

from dit_lora.data.synthetic.clips import (  # noqa: E402
    CLIP_COLORS,
    DIRECTIONS,
    make_moving_square_dataset,
    write_corrupt_clip,
    write_moving_square_clip,
    write_truncated_clip,
)


def frames_of(path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def square_center(frame: np.ndarray) -> tuple[float, float]:
    """(row, column) of the bright square's centre."""
    rows, cols = np.nonzero(frame.max(axis=-1) > 100)
    return rows.mean(), cols.mean()


@pytest.mark.parametrize("direction, axis, sign", [("left to right", 1, 1), ("right to left", 1, -1),
                                                   ("top to bottom", 0, 1), ("bottom to top", 0, -1)])
def test_the_square_moves_as_its_caption_says(tmp_path, direction, axis, sign):
    path = write_moving_square_clip(tmp_path / "c.mp4", color="green", direction=direction, num_frames=5, size=32)
    frames = frames_of(path)
    assert len(frames) == 5 and frames[0].shape == (32, 32, 3)
    first, last = square_center(frames[0])[axis], square_center(frames[-1])[axis]
    assert sign * (last - first) > 8
    r, c = map(int, square_center(frames[0]))
    assert np.argmax(frames[0][r, c]) == int(np.argmax(CLIP_COLORS["green"]))  # green dominates


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="direction must be one of"):
        write_moving_square_clip(tmp_path / "c.mp4", direction="diagonal")
    with pytest.raises(ValueError, match="even"):
        write_moving_square_clip(tmp_path / "c.mp4", size=33)
    with pytest.raises(ValueError, match="layout"):
        make_moving_square_dataset(tmp_path, layout="csv")


def test_both_layouts_caption_the_same_clips_deterministically(tmp_path):
    meta = make_moving_square_dataset(tmp_path / "meta", n=3, num_frames=5, size=16, seed=4)
    txt = make_moving_square_dataset(tmp_path / "txt", n=3, num_frames=5, size=16, seed=4, layout="txt")
    rows = [json.loads(line) for line in (meta / "metadata.jsonl").read_text().splitlines()]
    assert [r["file_name"] for r in rows] == (txt / "videos.txt").read_text().split()
    assert [r["text"] for r in rows] == (txt / "prompts.txt").read_text().splitlines()
    for text in (r["text"] for r in rows):
        words = text.split(" square moving ")
        assert words[0].removeprefix("a ") in CLIP_COLORS and words[1] in DIRECTIONS
    assert (meta / "clip_00000.mp4").read_bytes() == (txt / "clip_00000.mp4").read_bytes()


def test_broken_files(tmp_path):
    corrupt = write_corrupt_clip(tmp_path / "sub" / "bad.mp4", size=100, seed=1)
    assert corrupt.read_bytes() == write_corrupt_clip(tmp_path / "again.mp4", size=100, seed=1).read_bytes()
    source = write_moving_square_clip(tmp_path / "whole.mp4", num_frames=5, size=16)
    cut = write_truncated_clip(source, tmp_path / "cut" / "half.mp4", keep=0.5)
    assert cut.stat().st_size == source.stat().st_size // 2
    assert source.read_bytes().startswith(cut.read_bytes())


def test_build_demo_clips_builds_once_and_never_over_the_users_files(tmp_path):
    """The video families' --demo clips: built with their marker, kept on a second call, and a folder that holds the
    user's own files is refused in one paragraph naming the flag."""
    from dit_lora.core.errors import UserError
    from dit_lora.data.synthetic.clips import build_demo_clips

    folder = tmp_path / "clips"
    build_demo_clips(folder, n=2, num_frames=5, size=32, fps=8)
    built = sorted(p.name for p in folder.iterdir())
    assert "dit_lora_clips.json" in built and len([n for n in built if n.endswith(".mp4")]) == 2
    stamp = (folder / "clip_00000.mp4").stat().st_mtime_ns
    build_demo_clips(folder, n=2, num_frames=5, size=32, fps=8)
    assert (folder / "clip_00000.mp4").stat().st_mtime_ns == stamp
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    import pytest

    with pytest.raises(UserError, match="--train_data_dir"):
        build_demo_clips(mine, n=2, num_frames=5, size=32, fps=8)
    assert (mine / "notes.txt").read_text() == "mine"


def test_mixed_sound_gives_every_second_clip_its_colours_tone(tmp_path):
    """``sound="mixed"``: clips 0, 2, ... carry a tone at their colour's pitch over their frames' span, the others no
    track; the frames and captions are those of ``sound="none"`` (the same draws)."""
    from dit_lora.data.audio import decode_audio, has_audio
    from dit_lora.data.synthetic.clips import CLIP_TONES

    mixed = make_moving_square_dataset(tmp_path / "mixed", n=4, num_frames=16, fps=8, seed=3, sound="mixed")
    plain = make_moving_square_dataset(tmp_path / "plain", n=4, num_frames=16, fps=8, seed=3)
    rows = [json.loads(line) for line in (mixed / "metadata.jsonl").read_text().splitlines()]
    assert (mixed / "metadata.jsonl").read_text() == (plain / "metadata.jsonl").read_text()
    for i, row in enumerate(rows):
        clip = mixed / row["file_name"]
        assert has_audio(clip) == (i % 2 == 0)
        if i % 2:
            continue
        color = row["text"].split()[1]
        got = decode_audio(clip, 0.0, 2.0, 16000)
        assert got is not None and got.sound_fraction > 0.95
        wave = got.waveform[0, : got.valid].numpy()
        peak = float(np.argmax(np.abs(np.fft.rfft(wave * np.hanning(len(wave)))))) * 16000 / len(wave)
        assert abs(peak - CLIP_TONES[color]) < 3.0, (color, peak)
    with pytest.raises(ValueError, match="sound must be one of"):
        make_moving_square_dataset(tmp_path / "bad", n=1, sound="loud")
