"""families/videollm/loading.py: the video-LLM family's checks, what trains and what stays unquantized, and the
placeholder check, on stand-in modules. Loading a real tiny model: tests/e2e/test_videollm.py."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.families.videollm.loading import skip_placeholder_count_check
from dit_lora.families.videollm.processing import DEFAULT_MAX_LENGTH, max_tokens


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
    family = get_family("llava_next_video").model
    with pytest.raises(UserError, match="--pretrained_model_name_or_path is required"):
        family.validate_config(config())
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="--validation_video `.*clip.mp4` does not exist"):
        family.validate_config(config(pretrained_model_name_or_path=str(tmp_path),
                                      validation_video=str(tmp_path / "clip.mp4")))


def test_lora_goes_on_the_language_models_projections_only():
    family = get_family("llava_next_video").model
    spec = family.arch
    layer = torch.nn.Module()
    layer.q_proj, layer.fc = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    model = nested(spec.language_model + ".layers", torch.nn.ModuleList([layer]))
    model.add_module("vision_q", torch.nn.Module())
    model.vision_q.q_proj = torch.nn.Linear(2, 2)  # same suffix outside the language model
    assert family.lora_targets(model, config().lora) == [spec.language_model + ".layers.0.q_proj"]
    # `all` (LLaMA-Factory's lora_target default) is the family's default set
    assert family.lora_targets(model, config(lora_layers=["all"]).lora) == [spec.language_model + ".layers.0.q_proj"]
    with pytest.raises(UserError, match="match no Linear layer of the language model"):
        family.lora_targets(model, config(lora_layers=["k_proj"]).lora)


def test_lora_layers_are_checked_before_anything_is_read():
    """An unknown --lora_layers name ends in validate_config (before the data's clips are decoded), naming the
    projections; `all` is every one of them."""
    family = get_family("llava_next_video").model
    assert family.lora_layers(config(lora_layers=["all"]).lora) == set(family.arch.lora_projections)
    assert family.lora_layers(config(lora_layers=["q_proj", "v_proj"]).lora) == {"q_proj", "v_proj"}
    with pytest.raises(UserError, match=r"--lora_layers to_q: not a projection .* q_proj, k_proj") as err:
        family.validate_config(config(lora_layers=["to_q", "all"]))
    assert "\n" not in str(err.value)


def test_what_trains_beside_lora_and_what_stays_unquantized():
    family = get_family("llava_next_video")
    spec = family.model.arch
    assert family.trainables.backbone_patterns(config().lora, config().family_options) == [spec.projector.replace(".", r"\.") + r"\..*"]
    assert family.trainables.backbone_patterns(config(train_backbone=["norm"]).lora, None) == ["norm"]
    assert family.trainables.extra_trainable(config().family_options) == []
    ((name, patterns, lr),) = family.trainables.extra_trainable(
        config(train_vision_tower=True, vision_tower_learning_rate=2e-6).family_options)
    assert name == "vision_tower" and lr == 2e-6 and patterns[0].endswith(r"\..*")
    assert set(family.precision.quantize_skip_modules()) == {spec.vision_tower, spec.projector, "lm_head"}
    assert max_tokens(config()) == DEFAULT_MAX_LENGTH and max_tokens(config(max_sequence_length=64)) == 64
    assert family.defaults.generic_defaults(config().model, config().family_options)["train_batch_size"][0] == 1


def test_the_precision_policy_is_the_run_weight_dtype():
    family = get_family("qwen2_5_vl")
    assert family.precision.expected_dtypes(None, config(mixed_precision="no").weight_dtype) == {"model": torch.float32}


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
