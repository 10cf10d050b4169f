"""families/hunyuanvideo15/demo.py: the tiny configs keep the published structure, both tasks' folders load into
their stock pipelines and generate, and an unknown task is refused."""

from __future__ import annotations

import pytest
import torch

from dit_lora.catalogue import by_hub_id
from dit_lora.families.hunyuanvideo15.demo import DEMO, build_tiny_hunyuanvideo15_pipeline


def test_tiny_configs_keep_the_published_structure():
    published = by_hub_id("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v").configs
    tiny = {key: DEMO.read().value(key) for key in ("transformer", "vae", "text_encoder", "text_encoder_2")}
    for key in ("patch_size", "patch_size_t", "qk_norm" if "qk_norm" in tiny["transformer"] else "patch_size"):
        assert tiny["transformer"][key] == published["transformer/config.json"][key], key
    for key in ("spatial_compression_ratio", "temporal_compression_ratio"):
        assert tiny["vae"][key] == published["vae/config.json"][key], key
    assert tiny["transformer"]["in_channels"] == 2 * tiny["vae"]["latent_channels"] + 1  # 65 = 2 x 32 + 1
    assert tiny["transformer"]["text_embed_dim"] == tiny["text_encoder"]["hidden_size"]
    assert tiny["transformer"]["text_embed_2_dim"] == tiny["text_encoder_2"]["d_model"]
    assert tiny["transformer"]["image_embed_dim"] == DEMO.read().value("image_encoder")["hidden_size"]


@pytest.mark.slow
def test_both_tasks_load_into_their_pipelines_and_generate(tmp_path):
    from diffusers import HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline
    from PIL import Image

    t2v = HunyuanVideo15Pipeline.from_pretrained(build_tiny_hunyuanvideo15_pipeline(tmp_path / "t2v", task="t2v"))
    i2v = HunyuanVideo15ImageToVideoPipeline.from_pretrained(
        build_tiny_hunyuanvideo15_pipeline(tmp_path / "i2v", task="i2v")
    )
    assert i2v.image_encoder is not None and t2v.transformer.config.task_type == "t2v"
    common = {"num_frames": 9, "num_inference_steps": 2, "output_type": "np"}
    video = t2v("a red square", height=64, width=64, generator=torch.manual_seed(0), **common).frames
    image = Image.new("RGB", (64, 64), (200, 20, 20))
    animated = i2v(image=image, prompt="a red square", generator=torch.manual_seed(0), **common).frames
    assert video.shape == animated.shape == (1, 9, 64, 64, 3)


def test_an_unknown_task_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown HunyuanVideo 1.5 demo task 'x2v'"):
        build_tiny_hunyuanvideo15_pipeline(tmp_path / "x", task="x2v")
