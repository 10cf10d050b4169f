"""The dit family: everything about this model lives in this folder."""

from dit_lora.registry import FamilyEntry

ENTRY = FamilyEntry.in_package(
    __name__,
    options="DiTOptions",
    pipelines=("DiTPipeline",),
    demo_configs=("dit_class/demo.yaml",),
    recipe="dit_class_lora.py",  # recipes/dit_lora.py would shadow the dit_lora package
)
