"""families/cogvideox/plan.py: the clips the planner traces (the plan of real layouts: tests/plan)."""

from __future__ import annotations

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family


def test_frame_buckets_are_each_planned_and_the_automatic_set_by_its_largest():
    plan = get_family("cogvideox").plan
    fixed = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b",
                        frame_buckets="49x480x720,25x480x720", train_batch_size=1)
    assert plan.pixel_batches(fixed) == [("49 x 480 x 720", (1, 49, 3, 480, 720)),
                                         ("25 x 480 x 720", (1, 25, 3, 480, 720))]
    auto = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b", train_batch_size=1)
    assert plan.pixel_batches(auto) == [("49 x 480 x 720", (1, 49, 3, 480, 720))]
    assert plan.depth_key == ("transformer/config.json", "num_layers")
