"""``dit_lora/data/video_sample.py``: one clip (:class:`VideoSample`), below the listing (``video_sources``) and the
decoding (``video``), which re-exports it."""

from __future__ import annotations

import pytest

from dit_lora.data import video, video_sample
from dit_lora.data.samples import RawSample
from dit_lora.data.video_sample import VideoDecodeError, VideoSample, is_image_file
from dit_lora.data.video_sources import load_video_samples


def test_video_re_exports_the_clip_and_the_listing():
    for name in ("VideoSample", "VideoInfo", "VideoDecodeError", "VIDEO_EXTENSIONS", "CLIP_IMAGE_EXTENSIONS",
                 "is_image_file", "describe_error"):
        assert getattr(video, name) is getattr(video_sample, name)
    assert video.load_video_samples is load_video_samples


def test_an_image_in_a_video_dataset_is_a_one_frame_clip_but_a_gif_is_a_clip():
    assert is_image_file("a/b.PNG") and not is_image_file("a/b.gif") and not is_image_file(None)
    assert VideoSample(key="x.jpg", caption="", path="x.jpg").is_image


def test_a_clip_is_keyed_like_an_image_file_plus_its_bucket(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"not really a video")
    clip = VideoSample(key="a.mp4", caption="cap", path=str(tmp_path / "a.mp4"))
    assert clip.content_id() == RawSample(key="a.mp4", caption="cap", path=str(tmp_path / "a.mp4")).content_id()
    with pytest.raises(ValueError, match="has no bucket"):
        clip.cache_key()
    turned = VideoSample(key="a.mp4", caption="cap", path=str(tmp_path / "a.mp4"), bucket=(9, 16, 16), rotation=90)
    assert turned.cache_key() == f"{clip.content_id()}:9x16x16:r90"


def test_a_refused_clip_is_never_opened():
    with pytest.raises(VideoDecodeError, match="outside"):
        VideoSample(key="a.mp4", caption="", path="/elsewhere/a.mp4", refused="outside the data folder").probe()
