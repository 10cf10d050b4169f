"""kit/video_sizes.py: a video family's clip buckets and the planner's clip batches, written once
(Wan and SANA-Video state their trained size, multiple and name)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dit_lora.core.errors import UserError
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.video_sizes import ClipPlan, OneClipPerStep, clip_batches, clip_buckets
from config_stand_in import stand_in


def sizes(**values):
    return stand_in(**{"frame_buckets": None, "max_num_frames": None, "height": None, "width": None,
                       "dataset_config": None, "with_prior_preservation": False, "repeats": 1,
                       "train_batch_size": 2, **values})


def test_the_trained_size_first_then_its_aspect_buckets_and_the_largest_planned():
    buckets = clip_buckets(sizes(), (81, 480, 832), 16, 4, "Model", "why")
    assert buckets[0] == (81, 480, 832) and len(buckets) > 1
    assert all(h % 16 == 0 and w % 16 == 0 for _, h, w in buckets)
    ((name, shape),) = clip_batches(sizes().video, sizes().training, buckets)
    assert shape[0] == 2 and shape[2] == 3 and name == f"{shape[1]} x {shape[3]} x {shape[4]}"


def test_frame_buckets_are_the_only_buckets_and_each_is_planned():
    cfg = sizes(frame_buckets="17x256x256,9x128x128")
    buckets = clip_buckets(cfg, (81, 480, 832), 16, 4, "Model", "why")
    assert sorted(buckets) == [(9, 128, 128), (17, 256, 256)]
    assert len(clip_batches(cfg.video, cfg.training, buckets)) == 2


def test_a_size_off_the_multiple_is_refused_naming_the_flag_the_model_and_the_fix():
    with pytest.raises(UserError, match=r"--width 840 must be a multiple of 16 for this Model checkpoint \(why\); use 832\."):
        clip_buckets(sizes(width=840), (81, 480, 832), 16, 4, "Model", "why")


class Plan(ClipPlan, DiffusionPlan):
    plan_components = plan_conditioning = None


def test_a_clip_plan_plans_its_tasks_buckets():
    buckets = [(9, 64, 64), (17, 128, 128)]
    plan = Plan(SimpleNamespace(video_buckets=lambda cfg: buckets), encoders=None, loss=None)
    cfg = sizes(frame_buckets="9x64x64,17x128x128")
    assert plan.pixel_batches(cfg) == clip_batches(cfg.video, cfg.training, buckets)


def test_one_clip_per_step_says_why():
    assert OneClipPerStep("as the trainers").generic_defaults(None, None) == {"train_batch_size": (1, "as the trainers")}
