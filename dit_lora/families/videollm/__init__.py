"""Video-language models: VideoChat-style question answering data, prompts and model specs.

One family name per video-LLM architecture in :mod:`.registry` (LLaVA-NeXT-Video first: the recipe's default).
"""

from dit_lora.registry import FamilyEntry
from dit_lora.families.videollm import registry as _architectures


def make(name: str):
    """The :class:`~.spec.VideoChatFamily` of the architecture ``name`` (see :mod:`.registry`)."""
    from dit_lora.families.videollm.spec import VideoChatFamily

    return VideoChatFamily(_architectures.spec_for(name))


ENTRY = FamilyEntry(
    names=tuple(_architectures.names()), factory=f"{__name__}:make", options=f"{__name__}.options:VideoChatOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("videollm/demo.yaml",), recipe="videollm_lora.py",
    docs="docs/guides/video-llms.md",
)
