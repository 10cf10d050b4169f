"""A toy PixArt-alpha family outside the package, on the diffusers family kit (``dit_lora/kit/``),
registered with ``register_family(ENTRY)`` (nothing in ``dit_lora`` names it); it states only what differs."""

from dit_lora.registry import FamilyEntry

from .options import PixArtOptions


def make(name: str):
    """The toy family's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"pixart_toy"``)."""
    from .spec import pixart_spec  # torch and diffusers: only when the registry builds the family

    return pixart_spec()


ENTRY = FamilyEntry(names=("pixart_toy",), factory=make, options=PixArtOptions)
