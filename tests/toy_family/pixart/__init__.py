"""A toy PixArt-alpha family that lives in this test folder: registered with ``register_family(ENTRY)``.

It shows what a new diffusion family needs: its spec (:mod:`.spec`, filled from small components, one module per
concern: :mod:`.model`, :mod:`.encoders`, :mod:`.loss`, :mod:`.samples`, :mod:`.plan`, :mod:`.adapter`), its
per-run state (:mod:`.state`), its options (:mod:`.options`), its tiny offline model (:mod:`.demo`) and this entry;
nothing in ``dit_lora`` names it.
"""

from dit_lora.registry import FamilyEntry


def make(name: str):
    """The toy family's :class:`~dit_lora.contract.spec.FamilySpec` (``name`` is ``"pixart_toy"``)."""
    # The spec's modules load torch and diffusers: only when the registry builds the family
    from .spec import pixart_spec

    return pixart_spec()


ENTRY = FamilyEntry(names=("pixart_toy",), factory=make, options=f"{__name__}.options:PixArtOptions")
