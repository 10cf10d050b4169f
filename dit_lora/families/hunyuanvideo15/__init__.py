"""The hunyuanvideo15 family: HunyuanVideo 1.5 LoRA, text-to-video and image-to-video; everything about it lives here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.hunyuanvideo15.options import HunyuanVideo15I2VOptions, HunyuanVideo15Options
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.hunyuanvideo15.spec import hunyuanvideo15_spec

    return hunyuanvideo15_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("hunyuanvideo15", "hunyuanvideo15_i2v"),
    aliases=("hunyuanvideo-1.5", "hunyuan-video-1.5"),
    options={"hunyuanvideo15": HunyuanVideo15Options, "hunyuanvideo15_i2v": HunyuanVideo15I2VOptions},
    pipelines={
        "hunyuanvideo15": ("HunyuanVideo15Pipeline",),
        "hunyuanvideo15_i2v": ("HunyuanVideo15ImageToVideoPipeline",),
    },
    demo_configs=("hunyuanvideo15/demo.yaml", "hunyuanvideo15/i2v_demo.yaml"),
    docs="docs/guides/hunyuanvideo-1.5.md",
)
