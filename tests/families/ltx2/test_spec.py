"""families/ltx2/spec.py: the spec builds with the family's components."""

from __future__ import annotations

from dit_lora.families.ltx2.loss import LTX2Loss
from dit_lora.families.ltx2.samples import LTX2Samples
from dit_lora.registry import get_family


def test_the_spec_names_its_components():
    spec = get_family("ltx2")
    assert spec.name == "ltx2" and spec.info.pipeline_class_name == "LTX2Pipeline"
    assert isinstance(spec.loss, LTX2Loss) and isinstance(spec.samples, LTX2Samples)
    assert spec.info.block_lists == ("transformer_blocks",) and spec.video_frames is spec.frame_rate


def test_image_to_video_is_the_same_checkpoints_other_pipeline():
    spec = get_family("ltx2_i2v")
    assert spec.info.pipeline_class_name == "LTX2ImageToVideoPipeline" and spec.loss.image_to_video
    assert spec.info.also_trains_folders_of == ("LTX2Pipeline",) and spec.video_frames.task == "i2v"
    assert not get_family("ltx2").loss.image_to_video
