"""families/sanavideo/spec.py: both specs, their pipelines, and which family a pipeline or folder is."""

from __future__ import annotations

from dit_lora.registry import canonical_name, get_family
from dit_lora.setup.family_inference import family_for_pipeline


def test_both_specs_and_their_pipelines():
    from diffusers import SanaImageToVideoPipeline, SanaVideoPipeline

    t2v, i2v = get_family("sanavideo"), get_family("sanavideo_i2v")
    assert t2v.info.pipeline_class_name == "SanaVideoPipeline" and t2v.info.block_lists == ("transformer_blocks",)
    assert i2v.info.pipeline_class_name == "SanaImageToVideoPipeline" and "image-to-video" in i2v.info.card_tags
    assert t2v.video_frames is not None and t2v.frame_rate is not None and t2v.kernels is not None
    assert i2v.loss.image_to_video and not t2v.loss.image_to_video
    assert family_for_pipeline(SanaVideoPipeline.__new__(SanaVideoPipeline)).name == "sanavideo"
    assert family_for_pipeline(SanaImageToVideoPipeline.__new__(SanaImageToVideoPipeline)).name == "sanavideo_i2v"
    assert canonical_name("sana-video") == "sanavideo"
