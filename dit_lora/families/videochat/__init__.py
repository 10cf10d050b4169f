"""Video-language models: VideoChat-style question answering data, prompts and model specs.

One family name per video-LLM architecture in :mod:`.registry` (LLaVA-NeXT-Video first: the recipe's default).
"""

from ..registry import FamilyEntry
from . import registry as _architectures


def make(name: str):
    """The :class:`~.spec.VideoChatFamily` of the architecture ``name`` (see :mod:`.registry`)."""
    from .spec import VideoChatFamily

    return VideoChatFamily(_architectures.spec_for(name))


ENTRY = FamilyEntry(
    names=tuple(_architectures.names()), factory=f"{__name__}:make", options=f"{__name__}.options:VideoChatOptions",
    catalogue=f"{__name__}.catalogue",
    demo_configs=("videochat/demo.yaml",), recipe="videochat_lora.py",
    docs="docs/guides/video-llms.md",
)
