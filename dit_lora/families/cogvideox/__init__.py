"""The cogvideox family: everything about this model lives in this folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.cogvideox.options import CogVideoXI2VOptions, CogVideoXOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.cogvideox.spec import cogvideox_spec

    return cogvideox_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    names=("cogvideox", "cogvideox_i2v"),
    options={"cogvideox": CogVideoXOptions, "cogvideox_i2v": CogVideoXI2VOptions},
    pipelines={"cogvideox": ("CogVideoXPipeline",), "cogvideox_i2v": ("CogVideoXImageToVideoPipeline",)},
    demo_configs=("cogvideox/demo.yaml", "cogvideox/i2v_demo.yaml"),
)
