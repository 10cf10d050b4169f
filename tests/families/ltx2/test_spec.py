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
