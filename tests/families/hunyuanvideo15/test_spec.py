"""families/hunyuanvideo15/spec.py: both names build, each with its own pipeline and task, the LoRA targets of both
attention streams."""

from __future__ import annotations

from dit_lora.families.hunyuanvideo15.spec import hunyuanvideo15_spec


def test_both_names_build_with_their_pipelines_and_targets():
    t2v, i2v = hunyuanvideo15_spec("hunyuanvideo15"), hunyuanvideo15_spec("hunyuanvideo15_i2v")
    assert t2v.info.pipeline_class_name == "HunyuanVideo15Pipeline"
    assert i2v.info.pipeline_class_name == "HunyuanVideo15ImageToVideoPipeline"
    assert t2v.video_frames.task == "t2v" and i2v.video_frames.task == "i2v"
    assert {"to_q", "add_q_proj", "to_add_out"} <= set(t2v.info.default_lora_layers)
    assert t2v.info.block_lists == ("transformer_blocks",) and t2v.info.compile_dynamic
