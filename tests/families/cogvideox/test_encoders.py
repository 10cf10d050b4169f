"""families/cogvideox/encoders.py: the pipeline class per task and what changes the cached latents (encoding on tiny
pipelines is in test_spec.py)."""

from __future__ import annotations

from dit_lora.config import TrainConfig
from dit_lora.families.cogvideox.encoders import pipeline_class
from dit_lora.registry import get_family


def test_each_task_encodes_with_its_own_pipeline_and_cache_key():
    t2v, i2v = get_family("cogvideox"), get_family("cogvideox_i2v")
    assert pipeline_class(t2v.info).__name__ == "CogVideoXPipeline"
    assert pipeline_class(i2v.info).__name__ == "CogVideoXImageToVideoPipeline"
    cfg = TrainConfig(family="cogvideox", pretrained_model_name_or_path="THUDM/CogVideoX-5b")
    ident = t2v.encoders.cache_identity(cfg)
    assert ident["family"] == "cogvideox" and ident["cogvideox_variant"] == "t2v"
    assert ident["latents"] == "posterior_mean_fp32" and ident["max_sequence_length"] == 226
    i2v_cfg = TrainConfig(family="cogvideox_i2v", pretrained_model_name_or_path="THUDM/CogVideoX-5b-I2V")
    assert i2v.encoders.cache_identity(i2v_cfg)["latents"] == "posterior_mean_fp32+first_frame"
