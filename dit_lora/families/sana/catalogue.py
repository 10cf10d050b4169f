"""Sana's catalogue facts besides its entries: SANA-Sprint's refusal (``catalogue.json`` beside this module holds
the entries, the refused Sprint checkpoints and, under ``provenance``, where each fact was checked).
"""

from __future__ import annotations

from dit_lora.catalogue.files import catalogue_of

_FILE = catalogue_of(__package__)
ENTRIES = _FILE.entries
#: SANA-Sprint: recognised, refused (each entry's ``refusal`` says why)
REFUSED = _FILE.refused
#: why a Sprint checkpoint is refused, where the model is recognised (``{model}``: the path or Hub id given)
SPRINT_REFUSAL: str = _FILE.parts["sprint_refusal"]
