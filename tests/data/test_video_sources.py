"""Listing a local video folder (dit_lora.data.video_sources): the three layouts, images among the clips, their
errors, paths leaving it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("av")

from dit_lora.data.video import validate_video_samples  # noqa: E402
from dit_lora.data.video_sources import load_video_samples  # noqa: E402
from dit_lora.data.synthetic.clips import make_moving_square_dataset, write_moving_square_clip  # noqa: E402
from PIL import Image  # noqa: E402
from dit_lora.core.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "meta", n=4, num_frames=9, seed=0)


def test_metadata_layout_loads(clips):
    samples = load_video_samples(clips)
    assert [s.key for s in samples] == [f"clip_{i:05d}.mp4" for i in range(4)]
    assert [s.index for s in samples] == [0, 1, 2, 3]
    assert all(s.caption.startswith("a ") and " square moving " in s.caption for s in samples)
    assert all(os.path.isabs(s.path) and os.path.isfile(s.path) for s in samples)
    assert len(load_video_samples(clips, max_train_samples=2)) == 2


def test_txt_layout_loads_and_matches_metadata(tmp_path, clips):
    root = make_moving_square_dataset(tmp_path / "txt", n=4, num_frames=9, seed=0, layout="txt")
    assert not (root / "metadata.jsonl").exists()
    samples = load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt")
    reference = load_video_samples(clips)
    assert [(s.key, s.caption) for s in samples] == [(s.key, s.caption) for s in reference]
    # Same bytes + same caption -> same content id, wherever the folder lives.
    assert [s.content_id() for s in samples] == [s.content_id() for s in reference]


def test_txt_layout_blank_lines_and_mismatch(tmp_path, clips):
    root = tmp_path / "pair"
    shutil.copytree(clips, root)
    (root / "prompts.txt").write_text("a red square\n\nsecond\n\n\n")
    (root / "videos.txt").write_text("clip_00000.mp4\n\nclip_00001.mp4\n")
    samples = load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt")
    assert [(s.key, s.caption) for s in samples] == [("clip_00000.mp4", "a red square"), ("clip_00001.mp4", "second")]

    (root / "videos.txt").write_text("clip_00000.mp4\n\nclip_00001.mp4\nclip_00002.mp4\n")
    with pytest.raises(UserError) as err:
        load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt")
    message = str(err.value)
    assert "prompts.txt" in message and "videos.txt" in message
    assert "3 caption line(s)" in message and "4 video line(s)" in message

    (root / "prompts.txt").write_text("a\n\nb\nc\n")
    (root / "videos.txt").write_text("clip_00000.mp4\nclip_00003.mp4\nclip_00001.mp4\nclip_00002.mp4\n")
    with pytest.raises(UserError, match=r"line 2 of prompts\.txt"):
        load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt")

    with pytest.raises(UserError, match="--video_column"):
        load_video_samples(root, caption_column="prompts.txt")


def test_folder_without_captions_is_a_clear_error(tmp_path):
    write_moving_square_clip(tmp_path / "a.mp4", num_frames=5)
    with pytest.raises(UserError, match=r"no metadata\.jsonl.*1 of its 1 video and image file\(s\) have no caption"):
        load_video_samples(tmp_path)
    (tmp_path / "a.mp4").unlink()
    with pytest.raises(UserError, match=r"holds no videos or images"):
        load_video_samples(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        load_video_samples(tmp_path / "missing")


def test_clip_paths_leaving_the_folder_are_quarantined_in_both_layouts(tmp_path, clips, monkeypatch):
    root = tmp_path / "data"
    shutil.copytree(clips, root)
    shutil.copy(root / "clip_00001.mp4", tmp_path / "outside.mp4")
    with open(root / "metadata.jsonl", "a") as handle:
        for name in ("../outside.mp4", str(tmp_path / "outside.mp4"), str(root / "clip_00002.mp4")):
            handle.write(json.dumps({"file_name": name, "text": "a clip"}) + "\n")
    (root / "prompts.txt").write_text("a\nb\nc\n")
    (root / "videos.txt").write_text(f"clip_00000.mp4\n../outside.mp4\n{tmp_path / 'outside.mp4'}\n")
    import av

    opened = []
    real_open = av.open
    monkeypatch.setattr(av, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    for samples in (load_video_samples(root),
                    load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt")):
        quarantine: list[dict] = []
        good = validate_video_samples(samples, min_frames=9, max_bad_samples_fraction=1.0, log=lambda _: None,
                                      quarantine=quarantine, num_workers=1)
        reasons = {q["key"]: q["reason"] for q in quarantine}
        assert set(reasons) == {"../outside.mp4", str(tmp_path / "outside.mp4")}
        assert all("leaves the data folder" in r and "never opened" in r for r in reasons.values())
        assert all(s.refused is None for s in good)
    assert reasons["../outside.mp4"].startswith("videos.txt line 2 '../outside.mp4' leaves the data folder")
    assert not [p for p in opened if "outside" in p]
    # An absolute path inside the folder is the clip it names (metadata row 7 is clip_00002.mp4).
    assert [s.key for s in load_video_samples(root)][-1] == "clip_00002.mp4"


def test_still_importable_from_the_video_module():
    from dit_lora.data import video

    assert video.load_video_samples is load_video_samples


def _image(path: Path, size=(40, 24)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 30, 30)).save(path)
    return path


def test_metadata_lists_images_among_clips_and_refuses_other_files(tmp_path, clips):
    root = tmp_path / "mixed"
    shutil.copytree(clips, root)
    _image(root / "still.png")
    _image(root / "photos" / "b.JPG")
    with open(root / "metadata.jsonl", "a") as handle:
        for name in ("still.png", "photos/b.JPG"):
            handle.write(json.dumps({"file_name": name, "text": f"the image {name}"}) + "\n")
    samples = load_video_samples(root)
    assert [(s.key, s.is_image) for s in samples] == [(f"clip_{i:05d}.mp4", False) for i in range(4)] + [
        ("still.png", True), ("photos/b.JPG", True)]
    assert samples[-1].caption == "the image photos/b.JPG" and os.path.isfile(samples[-1].path)

    (root / "notes.pdf").write_bytes(b"%PDF")
    with open(root / "metadata.jsonl", "a") as handle:
        handle.write(json.dumps({"file_name": "notes.pdf", "text": "a document"}) + "\n")
    with pytest.raises(UserError, match=r"1 file\(s\) that are neither videos nor images: notes\.pdf.*\.png"):
        load_video_samples(root)


def test_folder_of_images_and_clips_with_txt_captions(tmp_path):
    root = tmp_path / "sidecar"
    _image(root / "a.png")
    _image(root / "sub" / "b.webp")
    write_moving_square_clip(root / "sub" / "c.mp4", num_frames=5, size=32)
    for name, text in (("a", "first still"), ("sub/b", "second still"), ("sub/c", "a clip")):
        (root / f"{name}.txt").write_text(f"  {text}\n")
    (root / ".hidden.png").write_bytes(b"")  # hidden files are skipped, as for image folders
    samples = load_video_samples(root)
    assert [(s.key, s.caption, s.is_image) for s in samples] == [
        ("a.png", "first still", True), ("sub/b.webp", "second still", True), ("sub/c.mp4", "a clip", False)]
    assert [s.index for s in samples] == [0, 1, 2] and len(load_video_samples(root, max_train_samples=1)) == 1
    good = validate_video_samples(samples, buckets=[(5, 32, 32)], log=lambda _: None, num_workers=1)
    assert [s.bucket for s in good] == [(1, 32, 32), (1, 32, 32), (5, 32, 32)]

    (root / "sub" / "b.txt").write_text("  \n")
    _image(root / "d.png")
    with pytest.raises(UserError) as err:
        load_video_samples(root)
    text = str(err.value)
    assert "2 of its 4 video and image file(s) have no caption" in text and "d.png, sub/b.webp" in text
    assert "clip0.mp4 -> clip0.txt" in text


# ---------------------------------------------------------------------------------------------
# kohya N_words/ folders, --caption_extension, --instance_prompt (issue 33)
# ---------------------------------------------------------------------------------------------


def _clip_folder(root: Path, folder: str = "3_clipword", n: int = 2, caption: str | None = None) -> Path:
    """``n`` distinct 9-frame clips in ``root/folder`` (a caption file ``caption`` beside each, e.g. ``.caption``)."""
    for i, color in enumerate(("red", "blue", "green")[:n]):
        path = root / folder / f"c{i}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_moving_square_clip(path, color=color, num_frames=9, size=32)
        if caption:
            (root / folder / f"c{i}{caption}").write_text(f"a {color} square")
    return root


def test_kohya_clip_folder_repeats_each_clip_and_its_words_caption_it(tmp_path):
    log: list[str] = []
    samples = load_video_samples(_clip_folder(tmp_path), log=log.append)
    assert [(s.key, s.repeat, s.index) for s in samples] == [
        ("3_clipword/c0.mp4", 0, 0), ("3_clipword/c0.mp4", 1, 1), ("3_clipword/c0.mp4", 2, 2),
        ("3_clipword/c1.mp4", 0, 3), ("3_clipword/c1.mp4", 1, 4), ("3_clipword/c1.mp4", 2, 5)]
    assert {s.caption for s in samples} == {"clipword"}
    assert "`3_clipword/`: 2 clip(s) x 3 repeats = 6 samples per epoch (kohya's N_words folder)" in log
    assert "6 samples per epoch from 2 clip(s)" in log
    assert any("2 clip(s) without a .txt caption are captioned 'clipword'" in line for line in log)
    # Copies are screened once and get their first's bucket, so they name one cache entry.
    scanned: list[str] = []
    import dit_lora.data.video as video

    real = video.scan_clip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(video, "scan_clip", lambda s, *a, **k: scanned.append(s.key) or real(s, *a, **k))
        good = validate_video_samples(samples, buckets=[(9, 32, 32)], log=log.append)
    assert sorted(scanned) == ["3_clipword/c0.mp4", "3_clipword/c1.mp4"]
    assert [s.repeat for s in good] == [0, 1, 2, 0, 1, 2] and {s.bucket for s in good} == {(9, 32, 32)}
    assert len({s.cache_key() for s in good}) == 2


def test_kohya_clip_folders_in_metadata_and_pair_layouts_repeat_too(tmp_path):
    root = _clip_folder(tmp_path / "meta", "2_x", n=2)
    (root / "metadata.jsonl").write_text("".join(json.dumps({"file_name": f"2_x/c{i}.mp4", "text": f"clip {i}"}) + "\n"
                                                 for i in range(2)))
    samples = load_video_samples(root, log=lambda _: None)
    assert [(s.caption, s.repeat) for s in samples] == [("clip 0", 0), ("clip 0", 1), ("clip 1", 0), ("clip 1", 1)]
    (root / "prompts.txt").write_text("first\nsecond\n")
    (root / "videos.txt").write_text("2_x/c0.mp4\n2_x/c1.mp4\n")
    pair = load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt", log=lambda _: None)
    assert [(s.caption, s.repeat) for s in pair] == [("first", 0), ("first", 1), ("second", 0), ("second", 1)]
    assert len(load_video_samples(root, max_train_samples=1, log=lambda _: None)) == 2  # N clips, then repeats


@pytest.mark.parametrize("folder", ["0_clipword", "5000_trip"])
def test_kohya_clip_folder_with_zero_or_absurd_repeats_is_refused(tmp_path, folder):
    with pytest.raises(UserError, match=rf"Folder '{folder}' .* each clip listed N times per epoch"):
        load_video_samples(_clip_folder(tmp_path, folder, n=1, caption=".txt"), log=lambda _: None)


def test_caption_extension_reads_clip_captions_and_names_the_other_one(tmp_path):
    root = _clip_folder(tmp_path, "clips", n=2, caption=".caption")
    log: list[str] = []
    samples = load_video_samples(root, caption_extension="caption", log=log.append)
    assert [s.caption for s in samples] == ["a red square", "a blue square"]
    with pytest.raises(UserError) as err:
        load_video_samples(root, log=log.append)  # .txt by default: the .caption files are named, not read
    assert "no .txt beside them" in str(err.value) and "--instance_prompt" in str(err.value)
    assert any("have no .txt caption file but a .caption one" in line and "--caption_extension .caption" in line
               for line in log)


def test_instance_prompt_captions_every_clip_and_says_so(tmp_path):
    root = _clip_folder(tmp_path, "2_sks", n=2, caption=".txt")
    log: list[str] = []
    samples = load_video_samples(root, instance_prompt="  a video of sks  ", log=log.append)
    assert len(samples) == 4 and {s.caption for s in samples} == {"a video of sks"}
    assert any(line.startswith("--instance_prompt: all 2 clip(s)") and "2 caption file(s)" in line for line in log)
    (root / "metadata.jsonl").write_text(json.dumps({"file_name": "2_sks/c0.mp4", "text": ""}) + "\n")
    assert {s.caption for s in load_video_samples(root, instance_prompt="sks", log=log.append)} == {"sks"}
    with pytest.raises(UserError, match="--instance_prompt is empty"):
        load_video_samples(root, instance_prompt=" ", log=log.append)


@pytest.mark.parametrize("flags, refused", [({"instance_prompt": "sks"}, "--instance_prompt 'sks' gives every clip"),
                                            ({"caption_extension": ".caption"}, "--caption_extension .caption names")])
def test_pair_layout_refuses_caption_flags_it_cannot_apply(tmp_path, clips, flags, refused):
    root = make_moving_square_dataset(tmp_path / "txt", n=2, num_frames=9, seed=0, layout="txt")
    with pytest.raises(UserError) as err:
        load_video_samples(root, caption_column="prompts.txt", video_column="videos.txt", **flags)
    assert str(err.value).startswith(refused) and "prompts.txt + videos.txt" in str(err.value)


def test_metadata_row_without_caption_falls_back_to_its_caption_file(tmp_path):
    root = _clip_folder(tmp_path, "clips", n=1, caption=".caption")
    (root / "metadata.jsonl").write_text(json.dumps({"file_name": "clips/c0.mp4", "text": ""}) + "\n")
    assert [s.caption for s in load_video_samples(root, caption_extension=".caption")] == ["a red square"]


def test_clip_folders_refuse_every_bad_caption_file_together_and_leave_out_links_out(tmp_path):
    """The video listing reads captions and follows links as the image one does (data/caption_files.py, paths.py)."""
    from dit_lora.data.caption_files import refuse_unreadable_captions

    root = tmp_path / "clips"
    for name, data in (("a", "a café".encode()), ("b", "a café".encode("latin-1")), ("c", "a cat".encode("utf-16-le"))):
        _image(root / f"{name}.png")
        (root / f"{name}.txt").write_bytes(data)
    _image(tmp_path / "outside.png")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink(tmp_path, root / "up")
    said: list[str] = []
    samples = load_video_samples(root, log=said.append)
    assert [(s.key, s.refused is None) for s in samples] == [("a.png", True), ("b.png", False), ("c.png", False)]
    with pytest.raises(UserError, match=r"^2 caption file\(s\) in --train_data_dir `clips` are not UTF-8 text.*b\.txt "
                                        r"\(byte 0xe9.*c\.txt \(NUL bytes"):
        refuse_unreadable_captions(samples, "--train_data_dir `clips`")
    assert len([line for line in said if "1 link(s) lead out of the folder" in line and "Copy those clips" in line]) == 1
