"""A toy PixArt-alpha family that lives in this test folder: registered with ``register_family(ENTRY)``.

It shows what a new diffusion family needs: its spec (:mod:`.spec`), its options (:mod:`.options`), its tiny
offline model (:mod:`.demo`) and this entry; nothing in ``dit_lora`` names it.
"""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The :class:`~.spec.PixArtFamily` (``name`` is ``"pixart_toy"``)."""
    from .spec import PixArtFamily

    return PixArtFamily()


ENTRY = FamilyEntry(names=("pixart_toy",), factory=make, options=f"{__name__}.options:PixArtOptions")
