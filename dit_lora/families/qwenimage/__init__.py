"""The Qwen-Image family: everything about Qwen-Image and its Edit models lives in this folder."""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """Qwen-Image's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"qwenimage"``)."""
    # here, not at the top: the registry imports this package for ENTRY, and the spec's modules load torch
    from dit_lora.families.qwenimage.spec import qwenimage_spec

    return qwenimage_spec()


ENTRY = FamilyEntry(
    names=("qwenimage",),
    factory=f"{__name__}:make",
    options=f"{__name__}.options:QwenImageOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("qwenimage/demo.yaml",),
    recipe="qwenimage_lora.py",
    docs="docs/guides/qwenimage.md",
)
