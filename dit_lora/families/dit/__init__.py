"""The dit family: everything about this model lives in this folder."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.families.dit.options import DiTOptions
from dit_lora.registry import FamilyEntry

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def build_spec(name: str) -> FamilySpec:
    """The spec of ``name``, one of this family's names (its ``spec.py`` is imported here, when a name is first
    built: the spec's modules load torch)."""
    from dit_lora.families.dit.spec import dit_spec

    return dit_spec(name)


ENTRY = FamilyEntry.in_package(
    __name__,
    factory=build_spec,
    options=DiTOptions,
    pipelines=("DiTPipeline",),
    demo_configs=("dit_class/demo.yaml",),
    recipe="dit_class_lora.py",  # recipes/dit_lora.py would shadow the dit_lora package
)
