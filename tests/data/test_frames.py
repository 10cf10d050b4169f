"""data/frames.py: CogVideoX's frame-count rule (1.0 and 1.5, strict and padded) and ``--frame_buckets``."""

from __future__ import annotations

import pytest

from dit_lora.data.frames import (
    check_num_frames,
    choose_bucket,
    frame_rule,
    latent_frames,
    latent_padding,
    one_frame_buckets,
    resolution_buckets,
)
from dit_lora.core.errors import UserError


def test_latent_frames_keep_the_first_frame_on_its_own():
    assert [latent_frames(n) for n in (1, 5, 9, 49, 81)] == [1, 2, 3, 13, 21]
    assert latent_frames(48) == 12  # a 4k frame count wastes its last three frames
    assert latent_frames(9, temporal_compression=8) == 2


def test_frame_rule_and_check_num_frames():
    assert [frame_rule(n) for n in (1, 4, 5, 48, 49, 50, 52, 53)] == [1, 1, 5, 45, 49, 49, 49, 53]
    assert frame_rule(0) == 0
    # CogVideoX 1.5 strict: latent frames (k + 1) even -> 5, 13, 21, ..., 45, 53, ..., 77, 85.
    assert [frame_rule(n, patch_size_t=2) for n in (4, 5, 12, 13, 49, 81, 85)] == [0, 5, 5, 13, 45, 77, 85]
    assert frame_rule(81, patch_size_t=2, pad_latent_frames=True) == 81
    assert latent_padding(81, patch_size_t=2) == 1 and latent_padding(85, patch_size_t=2) == 0
    assert latent_padding(49) == 0

    assert check_num_frames(49) == 49
    assert check_num_frames(53, patch_size_t=2) == 53
    with pytest.raises(UserError, match=r"--max_num_frames 50 .*4k\+1.*Use 49 or 53"):
        check_num_frames(50)
    with pytest.raises(UserError, match=r"--max_num_frames 49 .*patch_size_t=2.*Use 45 or 53"):
        check_num_frames(49, patch_size_t=2)
    assert check_num_frames(81, patch_size_t=2, pad_latent_frames=True) == 81
    with pytest.raises(UserError, match="positive whole number"):
        check_num_frames(0)


def test_buckets_parse_and_choose():
    buckets = resolution_buckets("49x480x720, 49x256x256,13x256x256,49x480x720")
    assert buckets == [(49, 480, 720), (49, 256, 256), (13, 256, 256)]
    assert choose_bucket(60, 720, 1280, buckets) == (49, 480, 720)
    assert choose_bucket(49, 500, 500, buckets) == (49, 256, 256)
    assert choose_bucket(20, 720, 1280, buckets) == (13, 256, 256)  # too short for 49 frames
    assert choose_bucket(9, 720, 1280, buckets) is None
    with pytest.raises(UserError, match=r"--frame_buckets.*'48x480x720'.*Use 45 or 49"):
        resolution_buckets("48x480x720")
    with pytest.raises(UserError, match="FRAMESxHEIGHTxWIDTH"):
        resolution_buckets("49x480")
    with pytest.raises(UserError, match="multiple of 16"):
        resolution_buckets("49x500x720")
    assert resolution_buckets("53x480x720", patch_size_t=2) == [(53, 480, 720)]


def test_images_get_one_frame_buckets_of_the_runs_sizes_by_the_aspect_rule():
    buckets = [(49, 480, 832), (49, 832, 480), (25, 480, 832), (49, 512, 512)]
    stills = one_frame_buckets(buckets)
    assert stills == [(1, 480, 832), (1, 832, 480), (1, 512, 512)]  # one per spatial size, in the run's order
    # (height, width) of an image -> its bucket: the nearest aspect (log space), then the larger area.
    for size, want in {(1080, 1920): (1, 480, 832), (1920, 1080): (1, 832, 480), (300, 310): (1, 512, 512),
                       (100, 1000): (1, 480, 832), (1000, 100): (1, 832, 480), (700, 900): (1, 512, 512)}.items():
        assert choose_bucket(1, *size, stills) == want, size
    # The video buckets never take an image: they all ask for more than one frame.
    assert choose_bucket(1, 1080, 1920, buckets) is None
    assert one_frame_buckets([(1, 64, 64), (9, 64, 64)]) == [(1, 64, 64)]


# ---- automatic aspect buckets (no --frame_buckets) -------------------------------------------

from dit_lora.data.aspect import CROP_WARNING
from dit_lora.data.frames import (automatic_buckets, bucket_table, choose_bucket, clip_cropped_share,
                                  describe_buckets, most_tokens)


def test_automatic_buckets_start_with_the_default_and_never_exceed_its_tokens():
    buckets = automatic_buckets((81, 480, 832), 16)
    assert buckets[0] == (81, 480, 832) and len(buckets) == len(set(buckets)) > 10
    assert all(f == 81 and h % 16 == 0 and w % 16 == 0 for f, h, w in buckets)
    assert all(h * w <= 480 * 832 and max(h / w, w / h) <= 4 for f, h, w in buckets)
    assert (81, 832, 480) in buckets  # the portrait twin of 16:9-ish
    assert most_tokens(buckets) == (81, 480, 832)  # what the memory plan traces: the first of the largest


def test_each_clip_takes_the_bucket_nearest_its_aspect_and_a_default_aspect_clip_the_default():
    buckets = automatic_buckets((81, 480, 832), 16)
    assert choose_bucket(81, 480, 832, buckets) == (81, 480, 832)
    assert choose_bucket(120, 960, 1664, buckets) == (81, 480, 832)  # same aspect, larger: still the default
    portrait = choose_bucket(81, 1920, 1080, buckets)
    square = choose_bucket(81, 512, 512, buckets)
    assert portrait[1] > portrait[2] and square[1] == square[2]
    assert clip_cropped_share(1920, 1080, portrait) < 0.03 and clip_cropped_share(512, 512, square) == 0.0
    # The one pinned bucket (the old behaviour) cuts most of a 9:16 clip.
    assert clip_cropped_share(1920, 1080, (81, 480, 832)) > 0.6


def test_describe_buckets_summarises_an_automatic_set_and_lists_given_ones():
    auto = automatic_buckets((49, 480, 720), 16)
    text = describe_buckets(auto, automatic=True)
    assert text.startswith(f"49x480x720 and {len(auto) - 1} other automatic aspect buckets") and "--frame_buckets 49x480x720" in text
    assert describe_buckets([(9, 32, 32), (9, 32, 64)], automatic=False) == "9x32x32, 9x32x64"


def test_bucket_table_lists_used_buckets_and_counts_clips_cropped_beyond_the_threshold():
    from types import SimpleNamespace as S

    buckets = automatic_buckets((81, 480, 832), 16)
    clips = [S(key="wide.mp4", bucket=choose_bucket(81, 720, 1280, buckets), source_size=(720, 1280), is_image=False),
             S(key="tall.mp4", bucket=choose_bucket(81, 1280, 720, buckets), source_size=(1280, 720), is_image=False),
             S(key="pano.mp4", bucket=buckets[-1], source_size=(100, 1000), is_image=False)]
    lines = bucket_table(buckets, clips, automatic=True)
    assert lines[0].startswith("buckets (frames x height x width): 81x480x832 and ")
    assert lines[1] == "clips per bucket:" and len(lines) == 2 + 3 + 1
    assert any(line.startswith("  81x480x832 (832x480 px, aspect 1.73): 1") for line in lines)
    assert clip_cropped_share(100, 1000, buckets[-1]) > CROP_WARNING
    assert lines[-1] == f"clips cropped by more than {CROP_WARNING:.0%} to fit their bucket: 1 of 3 (pano.mp4)"
