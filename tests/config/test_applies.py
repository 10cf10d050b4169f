"""Options only some families read: tagged in the schema, refused when given explicitly to another family."""

import dataclasses

import pytest

from dit_lora.config import TrainConfig
from dit_lora.config.applies import check_applies, families_for, tagged_options
from dit_lora.core.errors import UserError


def test_the_video_options_are_tagged_for_the_families_declaring_video_frames():
    tags = tagged_options()
    for name in ("frame_buckets", "max_num_frames", "video_column", "frame_sampling", "height", "width"):
        assert name in tags, name
    holders = families_for(tags["frame_buckets"])
    assert "wan" in holders and "cogvideox" in holders and "sana" not in holders and "dit" not in holders
    assert "qwen2_5_vl" in families_for(tags["height"])  # the video LLMs' plan reads the clip size


@pytest.mark.parametrize("name, value", [("frame_buckets", "49x480x720"), ("height", 480), ("max_num_frames", 49),
                                         ("frame_sampling", "first"), ("video_column", "video")])
def test_an_image_family_refuses_an_explicit_video_option(name, value):
    cfg = TrainConfig.for_family("sana", **{name: value})
    cfg = dataclasses.replace(cfg, explicit=frozenset({name}))
    with pytest.raises(UserError) as err:
        check_applies(cfg.model.family, cfg.explicit)
    text = str(err.value)
    assert f"--{name} is an option of video families" in text and "`sana`" in text and "trains images" in text
    assert f"remove --{name}" in text and "--resolution" in text


def test_defaults_and_the_families_that_read_an_option_are_not_refused():
    cfg = TrainConfig.for_family("sana")  # frame_sampling has a default: never refused
    cfg = dataclasses.replace(cfg, explicit=frozenset())
    check_applies(cfg.model.family, cfg.explicit)
    video = TrainConfig.for_family("wan", frame_buckets="17x64x64")
    video = dataclasses.replace(video, explicit=frozenset({"frame_buckets"}))
    check_applies(video.model.family, video.explicit)


def test_a_video_llm_refuses_the_image_size():
    cfg = TrainConfig.for_family("qwen2_5_vl", resolution=512)
    cfg = dataclasses.replace(cfg, explicit=frozenset({"resolution"}))
    with pytest.raises(UserError, match="image families .*video LLM"):
        check_applies(cfg.model.family, cfg.explicit)


@pytest.mark.parametrize("name, value", [("instance_prompt", "a photo of sks dog"), ("caption_extension", ".caption"),
                                         ("dataset_split", "validation"), ("transformer_file", "wan.safetensors")])
def test_a_video_llm_refuses_the_diffusion_data_and_model_options(name, value):
    # the video LLMs read VideoQA annotations and a model folder: these would be ignored
    cfg = TrainConfig.for_family("qwen2_5_vl", **{name: value})
    cfg = dataclasses.replace(cfg, explicit=frozenset({name}))
    with pytest.raises(UserError) as err:
        check_applies(cfg.model.family, cfg.explicit)
    assert f"--{name} is an option of diffusion families" in str(err.value) and "video LLM" in str(err.value)
    for family in ("sana", "wan"):
        ok = TrainConfig.for_family(family, **{name: value})
        ok = dataclasses.replace(ok, explicit=frozenset({name}))
        check_applies(ok.model.family, ok.explicit)


def test_demo_size_belongs_to_the_image_families_demos():
    tag = tagged_options()["demo_size"]
    assert set(families_for(tag)) >= {"sana", "dit"} and not {"wan", "cogvideox", "qwen2_5_vl"} & set(
        families_for(tag))
    cfg = TrainConfig.for_family("wan", demo_size="small")
    cfg = dataclasses.replace(cfg, explicit=frozenset({"demo_size"}))
    with pytest.raises(UserError, match="--demo_wan_variant"):
        check_applies(cfg.model.family, cfg.explicit)
