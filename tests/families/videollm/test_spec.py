"""families/videollm/spec.py: the video-LLM family's own decisions (checks, what trains, what stays unquantized,
text samples, the placeholder check), on stand-in modules. Training end to end: tests/e2e/test_videollm.py."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.families.videollm.spec import DEFAULT_MAX_LENGTH, skip_placeholder_count_check


def config(**kw) -> TrainConfig:
    return TrainConfig.for_family(family="llava_next_video", **kw)


def nested(path: str, leaf: torch.nn.Module) -> torch.nn.Module:
    """A module holding ``leaf`` at the dotted ``path``."""
    root = torch.nn.Module()
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        child = torch.nn.Module()
        node.add_module(part, child)
        node = child
    node.add_module(parts[-1], leaf)
    return root


def test_validate_config_names_what_is_missing(tmp_path):
    family = get_family("llava_next_video")
    with pytest.raises(UserError, match="--pretrained_model_name_or_path is required"):
        family.validate_config(config())
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="--validation_video `.*clip.mp4` does not exist"):
        family.validate_config(config(pretrained_model_name_or_path=str(tmp_path),
                                      validation_video=str(tmp_path / "clip.mp4")))


def test_lora_goes_on_the_language_models_projections_only():
    family = get_family("llava_next_video")
    spec = family.spec
    layer = torch.nn.Module()
    layer.q_proj, layer.fc = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    model = nested(spec.language_model + ".layers", torch.nn.ModuleList([layer]))
    model.add_module("vision_q", torch.nn.Module())
    model.vision_q.q_proj = torch.nn.Linear(2, 2)  # same suffix outside the language model
    assert family.lora_targets(model, config()) == [spec.language_model + ".layers.0.q_proj"]
    with pytest.raises(UserError, match="match no Linear layer of the language model"):
        family.lora_targets(model, config(lora_layers=["nope"]))


def test_what_trains_beside_lora_and_what_stays_unquantized():
    family = get_family("llava_next_video")
    spec = family.spec
    assert family.backbone_patterns(config()) == [spec.projector.replace(".", r"\.") + r"\..*"]
    assert family.backbone_patterns(config(train_backbone=["norm"])) == ["norm"]
    assert family.extra_trainable(config()) == []
    ((name, patterns, lr),) = family.extra_trainable(config(train_vision_tower=True, vision_tower_learning_rate=2e-6))
    assert name == "vision_tower" and lr == 2e-6 and patterns[0].endswith(r"\..*")
    assert set(family.quantize_skip_modules(config())) == {spec.vision_tower, spec.projector, "lm_head"}
    assert family.max_length(config()) == DEFAULT_MAX_LENGTH and family.max_length(config(max_sequence_length=64)) == 64
    assert family.generic_defaults(config())["train_batch_size"][0] == 1


def test_samples_are_text_files(tmp_path):
    path = get_family("llava_next_video").save_sample("It is red.", tmp_path / "step_5", config())
    assert path == tmp_path / "step_5.txt" and path.read_text() == "It is red.\n"


def test_the_placeholder_check_gets_no_features():
    seen = []

    class Inner(torch.nn.Module):
        def get_placeholder_mask(self, input_ids, **kwargs):
            seen.append(sorted(kwargs))
            return "mask"

    model = torch.nn.Module()
    model.model = Inner()
    skip_placeholder_count_check(model)
    assert model.model.get_placeholder_mask("ids", inputs_embeds=1, video_features=2, image_features=3) == "mask"
    assert seen == [["inputs_embeds"]]
    skip_placeholder_count_check(torch.nn.Linear(1, 1))  # a model without the check: nothing to do
