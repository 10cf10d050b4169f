"""families/videollm/plan.py: the memory plan's batch (one clip's embeddings) and traced loss, on the meta device.
The plan of a whole run: tests/plan/."""

from __future__ import annotations

import json

from dit_lora.config import TrainConfig
from dit_lora.families.videollm.plan import PLAN_TEXT_TOKENS
from dit_lora.registry import get_family


def test_the_plan_builds_the_model_on_meta_and_one_clips_batch(tiny_path):
    plan = get_family("llava_next_video").plan
    config = json.loads((tiny_path / "config.json").read_text())
    cfg = TrainConfig.for_family(family="llava_next_video", pretrained_model_name_or_path=str(tiny_path),
                                 num_frames=4, train_batch_size=2)
    comps = plan.plan_components(cfg, lambda sub, name: config if name == "config.json" else None, depth=1)
    assert next(comps.model.parameters()).is_meta
    assert plan.depth_key == ("config.json", "num_hidden_layers")
    ((label, batch),) = plan.plan_batches(cfg, comps)
    embeds = batch["inputs_embeds"]
    assert embeds.shape[0] == 2 and embeds.requires_grad and batch["labels"].shape == embeds.shape[:2]
    video = int(label.split(": ")[1].split(" video")[0])
    assert embeds.shape[1] == video + PLAN_TEXT_TOKENS and label.startswith("4 frames of 448 x 448")
