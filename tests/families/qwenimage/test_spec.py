"""families/qwenimage/spec.py: the spec's components and facts."""

from __future__ import annotations

from dit_lora.registry import get_family, get_spec


def test_spec_components_and_info():
    spec = get_family("qwenimage")
    assert spec.name == "qwenimage" and spec.info.pipeline_class_name == "QwenImagePipeline"
    assert spec.info.block_lists == ("transformer_blocks",)
    for part in ("encoders", "samples", "plan", "demo", "card", "image_buckets", "precision", "setup"):
        assert getattr(spec, part) is not None, part
    assert get_spec("qwenimage") is get_spec("qwenimage")
