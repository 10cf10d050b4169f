"""Video question-answering data (VideoChat2 style): annotation formats, errors, frame sampling, screening (the
demo set: tests/families/videollm/test_demo_clips.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

from dit_lora.data.video import VideoDecodeError, VideoInfo, VideoSample  # noqa: E402
from dit_lora.data.synthetic.clips import (  # noqa: E402
    CLIP_COLORS,
    write_corrupt_clip,
    write_moving_square_clip,
    write_truncated_clip,
)
from dit_lora.core.errors import UserError  # noqa: E402
from dit_lora.families.videollm import data as vlm_data  # noqa: E402
from dit_lora.families.videollm.data import (  # noqa: E402
    QASample,
    check_qa_samples,
    load_qa_samples,
    read_frames,
    sample_frame_indices,
    screen_qa_samples,
)

VIDEOCHAT2 = [
    {"video": "a.mp4", "QA": [{"i": "Answer briefly.", "q": "What colour is it?", "a": "red"}]},
    {"video": "sub/b.mp4", "system": "You are a careful viewer.",
     "QA": [{"i": "Describe the clip.", "q": "", "a": " A square moves. "},
            {"q": "Which way?", "a": "left to right"},
            {"i": "", "q": "How many squares?", "a": "one"}]},
]
CHAT = [
    {"video": "a.mp4", "messages": [
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Answer briefly."},
                                     {"type": "text", "text": "What colour is it?"}]},
        {"role": "assistant", "content": "red"}]},
    {"video": "sub/b.mp4", "messages": [
        {"role": "system", "content": "You are a careful viewer."},
        {"role": "user", "content": "Describe the clip."},
        {"role": "assistant", "content": [{"type": "text", "text": "A square moves."}]},
        {"role": "user", "content": "Which way?"},
        {"role": "assistant", "content": "left to right"},
        {"role": "user", "content": "How many squares?"},
        {"role": "assistant", "content": "one"}]},
]
EXPECTED_B = [
    {"role": "system", "content": "You are a careful viewer."},
    {"role": "user", "content": "Describe the clip."},
    {"role": "assistant", "content": "A square moves."},
    {"role": "user", "content": "Which way?"},
    {"role": "assistant", "content": "left to right"},
    {"role": "user", "content": "How many squares?"},
    {"role": "assistant", "content": "one"},
]


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows, *, blank_first: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n" if blank_first else ""
    path.write_text(text + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- formats --------------------------------------------------------------------------------------


def test_both_formats_normalise_to_the_same_conversations(tmp_path):
    # Detected by content: neither name says which format the file holds.
    vc2 = load_qa_samples(write_json(tmp_path / "one.txt", VIDEOCHAT2))
    chat = load_qa_samples(write_jsonl(tmp_path / "two.data", CHAT, blank_first=True))
    assert [s.messages for s in vc2] == [s.messages for s in chat]
    assert vc2[0].messages == [{"role": "user", "content": "Answer briefly.\nWhat colour is it?"},
                               {"role": "assistant", "content": "red"}]
    assert vc2[1].messages == EXPECTED_B  # system key, empty q, missing i, empty i, multi-QA -> multi-turn
    assert [s.key for s in vc2] == ["one.txt:1", "one.txt:2"]
    assert [s.key for s in chat] == ["two.data:2", "two.data:3"]  # line numbers, blank line counted
    assert all(isinstance(s, QASample) for s in vc2 + chat)
    # No video marker leaks into the text.
    assert not any("video" in m["content"].lower() for s in chat for m in s.messages)
    assert len(load_qa_samples(tmp_path / "one.txt", max_samples=1)) == 1


def test_relative_paths_resolve_against_annotation_folder_or_video_root(tmp_path):
    ann = write_json(tmp_path / "ann" / "vc2.json", VIDEOCHAT2 + [{"video": str(tmp_path / "abs.mp4"),
                                                                    "QA": [{"q": "q", "a": "a"}]}])
    samples = load_qa_samples(ann)
    assert samples[0].video == tmp_path / "ann" / "a.mp4"
    assert samples[1].video == tmp_path / "ann" / "sub" / "b.mp4"
    # An absolute path written in the annotation file is used as written (LLaMA-Factory's and VideoChat2's data are
    # written so), and said in one line; a relative one stays inside the data folder.
    notes: list[str] = []
    samples = load_qa_samples(ann, notes=notes)
    assert samples[2].refused is None and samples[2].video == tmp_path / "abs.mp4"
    assert notes == [f"1 entry of {ann} names its clip by an absolute path (vc2.json:3), used as written there "
                     "(as LLaMA-Factory does); relative paths stay inside the data folder"]
    (tmp_path / "videos").mkdir()
    rooted = load_qa_samples(ann, video_root=tmp_path / "videos")
    assert rooted[1].video == tmp_path / "videos" / "sub" / "b.mp4"
    assert rooted[2].video == tmp_path / "abs.mp4"
    assert all(s.video.is_absolute() for s in samples[:2] + rooted[:2])
    with pytest.raises(UserError, match="--video_folder"):
        load_qa_samples(ann, video_root=tmp_path / "nope")


# --- errors ---------------------------------------------------------------------------------------

CHAT_ERRORS = [
    ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, 'no "video"', "Give every entry"),
    ({"video": "a.mp4", "messages": [{"role": "user", "content": "q"}]}, "no assistant turn", "Add a"),
    ({"video": "a.mp4", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                     {"role": "user", "content": "q2"}]}, "ends with a 'user' turn", "add it or delete"),
    ({"video": "a.mp4", "messages": [{"role": "human", "content": "q"}, {"role": "gpt", "content": "a"}]},
     "role 'human'", "human -> user"),
    ({"video": "a.mp4", "messages": [{"role": "user", "content": "q"}, {"role": "user", "content": "q"},
                                     {"role": "assistant", "content": "a"}]}, "message 2 has role 'user' where role 'assistant'", "alternate"),
    ({"video": "a.mp4", "messages": [{"role": "assistant", "content": "a"}]}, "message 1 has role 'assistant' where role 'user'", "alternate"),
    ({"video": "a.mp4", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " "}]},
     "empty assistant turn", "Fill in"),
    ({"video": "a.mp4"}, 'neither "QA"', "Add the conversation"),
]


@pytest.mark.parametrize("bad,what,fix", CHAT_ERRORS)
def test_chat_errors_name_file_line_problem_and_fix(tmp_path, bad, what, fix):
    good = CHAT[0]
    path = write_jsonl(tmp_path / "chat.jsonl", [good, good, bad])
    with pytest.raises(UserError) as err:
        load_qa_samples(path)
    message = str(err.value)
    assert f"Line 3 of {path}" in message and what in message and fix in message


@pytest.mark.parametrize("bad_qa,what", [
    ([{"i": "i", "q": "q"}], 'QA item 1 has no answer ("a" is missing)'),
    ([{"q": "q", "a": "a"}, {"q": "q", "a": "  "}], "QA item 2 has an unusable answer"),
    ([], '"QA" that is empty'),
])
def test_videochat2_errors_name_file_entry_problem_and_fix(tmp_path, bad_qa, what):
    path = write_json(tmp_path / "vc2.json", [VIDEOCHAT2[0], {"video": "x.mp4", "QA": bad_qa}])
    with pytest.raises(UserError) as err:
        load_qa_samples(path)
    message = str(err.value)
    assert f"Entry 2 of {path}" in message and what in message
    assert "fill it in or delete the item" in message or "delete the entry" in message


def test_file_level_errors(tmp_path):
    with pytest.raises(UserError, match=r"does not exist\. Pass the path of a VideoChat2"):
        load_qa_samples(tmp_path / "missing.json")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(UserError, match=f"{empty} is empty. Put the training samples"):
        load_qa_samples(empty)
    (tmp_path / "nothing.json").write_text("[]")
    with pytest.raises(UserError, match="holds no entries"):
        load_qa_samples(tmp_path / "nothing.json")

    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"video": "a.mp4", "QA": []}\n {"video": "b.mp4"}\n]')
    with pytest.raises(UserError) as err:
        load_qa_samples(broken)
    assert str(broken) in str(err.value) and "line 3" in str(err.value) and "Fix the syntax" in str(err.value)

    pretty = tmp_path / "pretty.jsonl"  # one JSON object over several lines is not JSONL
    pretty.write_text(json.dumps(CHAT[0], indent=2))
    with pytest.raises(UserError) as err:
        load_qa_samples(pretty)
    message = str(err.value)
    assert f"Line 1 of {pretty} is not valid JSON" in message and "one complete JSON object per line" in message

    not_object = write_jsonl(tmp_path / "list.jsonl", [CHAT[0], ["a.mp4", "hi"]])
    with pytest.raises(UserError, match=f"Line 2 of {not_object} is a JSON list, not an object"):
        load_qa_samples(not_object)
    with pytest.raises(UserError, match="positive whole number"):
        load_qa_samples(not_object, max_samples=0)


def test_content_parts_and_missing_video_is_not_an_error(tmp_path):
    rows = [{"video": "nowhere/missing.mp4", "messages": [
        {"role": "user", "content": [{"type": "video", "path": "ignored.mp4"}, "plain part",
                                     {"type": "text", "text": "  second  "}]},
        {"role": "assistant", "content": "yes"}]}]
    [sample] = load_qa_samples(write_jsonl(tmp_path / "c.jsonl", rows))
    assert sample.messages[0] == {"role": "user", "content": "plain part\nsecond"}
    assert not sample.video.exists()
    rows[0]["messages"][0]["content"] = {"text": "not a list"}
    with pytest.raises(UserError, match="neither text nor a list of parts"):
        load_qa_samples(write_jsonl(tmp_path / "d.jsonl", rows))


# --- frames ---------------------------------------------------------------------------------------


def test_sample_frame_indices_uniform_centres_and_short_clips():
    assert sample_frame_indices(80, 8) == [5, 15, 25, 35, 45, 55, 65, 75]  # segment centres
    assert sample_frame_indices(8, 8) == list(range(8))
    assert sample_frame_indices(1, 4) == [0, 0, 0, 0]
    for total in (1, 3, 7, 8, 9, 50, 1001):
        for n in (1, 4, 8, 16):
            idx = sample_frame_indices(total, n)
            assert len(idx) == n and idx == sorted(idx) and 0 <= idx[0] and idx[-1] <= total - 1
            if total >= n:  # every frame distinct; the samples reach into the first and last segment
                assert len(set(idx)) == n
                assert idx[0] < total / n and idx[-1] >= total - total / n - 1
            else:  # short clips repeat frames but still cover them all
                assert set(idx) == set(range(total))
    with pytest.raises(ValueError):
        sample_frame_indices(0, 8)


def _square_color(frames: np.ndarray) -> str:
    """The CLIP_COLORS name nearest the mean of the pixels that are not background."""
    pixels = frames.reshape(-1, 3).astype(np.int64)
    square = pixels[np.abs(pixels - 20).sum(axis=1) > 90]
    mean = square.mean(axis=0)
    return min(CLIP_COLORS, key=lambda name: np.abs(mean - np.array(CLIP_COLORS[name])).sum())


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qa_clips")
    write_moving_square_clip(root / "good.mp4", color="blue", direction="left to right", num_frames=12)
    write_corrupt_clip(root / "corrupt.mp4")
    write_truncated_clip(root / "good.mp4", root / "truncated.mp4")
    (root / "empty.mp4").write_bytes(b"")
    return root


def test_read_frames_shape_dtype_motion(clip_dir):
    frames = read_frames(clip_dir / "good.mp4", 4)
    assert frames.shape == (4, 64, 64, 3) and frames.dtype == np.uint8
    assert _square_color(frames) == "blue"
    # The square moves left to right: its mean column grows from the first to the last sampled frame.
    columns = [np.nonzero(np.abs(f.astype(int) - 20).sum(axis=(0, 2)) > 90 * 8)[0].mean() for f in frames]
    assert columns == sorted(columns) and columns[-1] - columns[0] > 10
    assert read_frames(str(clip_dir / "good.mp4"), 20).shape == (20, 64, 64, 3)  # short: repeats
    np.testing.assert_array_equal(read_frames(clip_dir / "good.mp4", 4), frames)  # deterministic
    # The rate the frames were sampled at: 4 of the 12 frames of a 1.5 s clip at 8 fps.
    clip = vlm_data.read_clip(clip_dir / "good.mp4", 4)
    np.testing.assert_array_equal(clip.frames, frames)
    assert clip.fps == pytest.approx(4 / 12 * 8)


@pytest.mark.parametrize("name,reason", [("corrupt.mp4", "not a readable video"), ("truncated.mp4", "truncated"),
                                         ("empty.mp4", "empty file"), ("missing.mp4", "file not found")])
def test_read_frames_bad_clips_raise(clip_dir, name, reason):
    with pytest.raises(VideoDecodeError, match=reason):
        read_frames(clip_dir / name, 4)


def test_read_frames_trusts_decoded_count_over_a_header_off_by_one(clip_dir, monkeypatch):
    real = VideoSample.probe

    def claims(extra):
        monkeypatch.setattr(VideoSample, "probe", lambda self: VideoInfo(real(self).num_frames + extra, 8.0, 64, 64))

    claims(1)  # a header one frame too long: re-pick from the 12 frames that decode
    frames = read_frames(clip_dir / "good.mp4", 12)
    assert vlm_data.read_clip(clip_dir / "good.mp4", 12).fps == pytest.approx(8.0)  # 12 of the 12 that decode
    monkeypatch.setattr(VideoSample, "probe", real)
    np.testing.assert_array_equal(frames, read_frames(clip_dir / "good.mp4", 12))
    claims(30)  # 42 declared, 12 decode: a truncated file
    with pytest.raises(VideoDecodeError, match=r"truncated \(header declares 42 frames, only 12 decode\)"):
        read_frames(clip_dir / "good.mp4", 12)


def test_screen_quarantines_bad_videos_by_key_and_checks_each_video_once(tmp_path, clip_dir, monkeypatch):
    for name in ("good.mp4", "corrupt.mp4", "truncated.mp4"):
        shutil.copy(clip_dir / name, tmp_path / name)
    rows = [{"video": video, "QA": [{"q": "What colour is the square?", "a": "blue"}]}
            for video in ("good.mp4", "corrupt.mp4", "good.mp4", "truncated.mp4", "missing.mp4", "good.mp4", "corrupt.mp4")]
    samples = load_qa_samples(write_json(tmp_path / "vc2.json", rows))
    calls: list[Path] = []
    real = vlm_data.read_clip
    monkeypatch.setattr(vlm_data, "read_clip", lambda video, n: calls.append(video) or real(video, n))
    lines: list[str] = []
    quarantine: list[dict] = []
    good = screen_qa_samples(samples, num_frames=8, log=lines.append, quarantine=quarantine)

    assert sorted(calls) == sorted({s.video for s in samples})  # 4 distinct videos, each decoded once
    assert [s.key for s in good] == ["vc2.json:1", "vc2.json:3", "vc2.json:6"]
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert list(reasons) == ["vc2.json:2", "vc2.json:4", "vc2.json:5", "vc2.json:7"]
    assert reasons["vc2.json:2"].startswith("not a readable video") and str(tmp_path / "corrupt.mp4") in reasons["vc2.json:2"]
    assert reasons["vc2.json:4"].startswith("truncated")
    assert reasons["vc2.json:5"] == f"file not found (video {tmp_path / 'missing.mp4'})"
    assert reasons["vc2.json:7"] == reasons["vc2.json:2"]
    assert "vc2.json:2 and 1 more sample(s)" in "\n".join(lines)
    assert lines[-1] == ("checked 4 video(s) of 7 QA sample(s) at 8 frames: 3 unusable, 4 sample(s) left out, "
                         "3 remain")
    assert screen_qa_samples(good, num_frames=8, log=lines.append, num_workers=1) == good


def test_screen_quarantines_video_paths_leaving_the_folder_without_opening_them(tmp_path, clip_dir, monkeypatch):
    (tmp_path / "data").mkdir()
    shutil.copy(clip_dir / "good.mp4", tmp_path / "data" / "good.mp4")
    shutil.copy(clip_dir / "good.mp4", tmp_path / "outside.mp4")
    rows = [{"video": video, "QA": [{"q": "What colour is the square?", "a": "blue"}]}
            for video in ("good.mp4", "../outside.mp4", str(tmp_path / "outside.mp4"), "../../../../etc/hostname")]
    samples = load_qa_samples(write_json(tmp_path / "data" / "vc2.json", rows))
    calls: list[Path] = []
    real = vlm_data.read_clip
    monkeypatch.setattr(vlm_data, "read_clip", lambda video, n: calls.append(video) or real(video, n))
    quarantine: list[dict] = []
    good = screen_qa_samples(samples, num_frames=8, log=lambda _: None, quarantine=quarantine, num_workers=1)
    # the absolute path is the user's own (written in the file they pointed at): used as written
    assert [s.key for s in good] == ["vc2.json:1", "vc2.json:3"]
    assert calls == [tmp_path / "data" / "good.mp4", tmp_path / "outside.mp4"]
    reasons = {q["key"]: q["reason"] for q in quarantine}
    assert list(reasons) == ["vc2.json:2", "vc2.json:4"]
    assert reasons["vc2.json:2"].startswith(f"Entry 2 of {tmp_path / 'data' / 'vc2.json'}: \"video\" '../outside.mp4' "
                                            f"leaves the data folder {tmp_path / 'data'} (refused, never opened)")
    rows = check_qa_samples(samples, num_frames=8, num_workers=1)
    assert [r.status for r in rows] == ["ok", "block", "ok", "block"]
    assert "leaves the data folder" in rows[3].problem and calls[2:] == calls[:2]


# ---- what the frames look like: upright clips, images as one-frame clips ---------------------------------------------
def test_a_rotated_clip_is_read_upright_as_the_diffusion_families_decode_it(tmp_path):
    """A 64x32 clip whose display matrix turns it 90 degrees (a phone's portrait clip) gives 32x64 frames, the
    stored left edge (red) at the bottom, as players and the DiTs' decoder show it."""
    from data_files import write_rotated_clip

    path = write_rotated_clip(tmp_path / "phone.mp4", degrees=90)
    clip = vlm_data.read_clip(path, 2)
    assert clip.frames.shape == (2, 64, 32, 3) and clip.frames.flags.c_contiguous
    assert clip.frames[0, -8:, :, 0].mean() > 180 and clip.frames[0, :32, :, 0].mean() < 60


def test_an_image_is_a_one_frame_clip_at_second_zero(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((20, 30, 3), 77, np.uint8)).save(tmp_path / "still.png")
    clip = vlm_data.read_clip(tmp_path / "still.png", 8)
    assert clip.frames.shape == (1, 20, 30, 3) and clip.fps is None and clip.times == (0.0,)
    (tmp_path / "broken.jpg").write_bytes(b"nope")
    with pytest.raises(VideoDecodeError, match="not a readable image"):
        vlm_data.read_clip(tmp_path / "broken.jpg", 8)
