"""The files caption lists and how it decodes them: as a data folder is listed, images as one-frame clips decoded
as the image families decode them (EXIF orientation), clips as the video LLMs sample them."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dit_lora.captioning.media import MediaFile, list_media, read_media
from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.clips import write_moving_square_clip
from dit_lora.data.video import VideoDecodeError


def test_the_folder_is_listed_as_training_lists_it(tmp_path):
    for name in ("b.png", "a.JPG", "sub/c.mp4", "sub/d.gif", ".hidden.png", "notes.txt", "__MACOSX/e.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    root, media = list_media(tmp_path, print)
    assert root == tmp_path
    assert [m.key for m in media] == ["a.JPG", "b.png", "sub/c.mp4", "sub/d.gif"]
    assert [m.kind for m in media] == ["image", "image", "video", "video"]


def test_one_file_is_a_listing_of_one_and_other_paths_are_refused(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x")
    (tmp_path / "a.txt").write_text("x")
    assert list_media(tmp_path / "a.png", print) == (tmp_path, [MediaFile("a.png", tmp_path / "a.png")])
    with pytest.raises(UserError, match="is not an image or a clip"):
        list_media(tmp_path / "a.txt", print)
    with pytest.raises(UserError, match="does not exist"):
        list_media(tmp_path / "missing", print)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no image or clip"):
        list_media(tmp_path / "empty", print)


def test_an_image_is_one_upright_frame_at_second_zero(tmp_path):
    pixels = np.zeros((20, 30, 3), dtype=np.uint8)
    pixels[:, :10] = 255  # a white band on the left
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    Image.fromarray(pixels).save(tmp_path / "a.jpg", exif=exif, quality=95)
    clip = read_media(MediaFile("a.jpg", tmp_path / "a.jpg"), num_frames=8)
    assert clip.frames.shape == (1, 30, 20, 3) and clip.frames.flags.writeable
    assert clip.frames[0, :8].mean() > 200 and clip.frames[0, -8:].mean() < 50  # the band is now on top
    assert clip.fps is None and clip.times == (0.0,)


def test_a_clip_gives_its_sampled_frames_and_a_broken_file_its_reason(tmp_path):
    write_moving_square_clip(tmp_path / "c.mp4", color="red", direction="left to right", num_frames=8, size=32)
    clip = read_media(MediaFile("c.mp4", tmp_path / "c.mp4"), num_frames=4)
    assert clip.frames.shape == (4, 32, 32, 3) and clip.times is not None and len(clip.times) == 4
    (tmp_path / "bad.mp4").write_bytes(b"not a video")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    for name in ("bad.mp4", "bad.png"):
        with pytest.raises(VideoDecodeError, match="not a readable"):
            read_media(MediaFile(name, tmp_path / name), num_frames=4)


def test_frames_larger_than_max_pixels_are_scaled_down_keeping_the_aspect(tmp_path):
    Image.fromarray(np.full((300, 400, 3), 90, np.uint8)).save(tmp_path / "big.png")
    item = MediaFile("big.png", tmp_path / "big.png")
    assert read_media(item, 4, max_pixels=0).frames.shape == (1, 300, 400, 3)
    small = read_media(item, 4, max_pixels=300 * 400 // 4)
    assert small.frames.shape == (1, 150, 200, 3) and small.times == (0.0,)
    assert read_media(item, 4, max_pixels=10**6).frames.shape == (1, 300, 400, 3)  # never scaled up
