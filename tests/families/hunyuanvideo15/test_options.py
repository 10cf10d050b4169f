"""families/hunyuanvideo15/options.py: the two tasks' option classes and what they add."""

from __future__ import annotations

from dataclasses import fields

from dit_lora.families.hunyuanvideo15.options import HunyuanVideo15I2VOptions, HunyuanVideo15Options


def test_both_tasks_take_the_flow_options_and_image_to_video_its_image():
    t2v = {f.name for f in fields(HunyuanVideo15Options)}
    i2v = {f.name for f in fields(HunyuanVideo15I2VOptions)}
    assert {"weighting_scheme", "flow_shift"} <= t2v and "validation_image" not in t2v
    assert i2v - t2v == {"validation_image"}
    assert HunyuanVideo15Options().flow_shift is None  # the checkpoint scheduler's shift
