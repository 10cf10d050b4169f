"""TRANSITIONAL: a :class:`~dit_lora.contract.spec.FamilySpec` filled from an old-style family object.

Until every family fills a spec of its own (Sana does; DiT, Wan, CogVideoX, the video LLMs and the test folder's
toy family follow), the registry serves the others through :func:`spec_from_family`: the object's methods become
its components (itself for ``model``, ``loss``, ``adapter`` and each capability it declares in ``capabilities``).
:func:`as_spec` lets a caller that may still be handed such an object (a test, a family's own code) take either.
This module goes when the last family is converted.
"""

from __future__ import annotations

import weakref
from typing import Any

from dit_lora.contract.capabilities import FrameRate, capability, check_capabilities
from dit_lora.contract.family import ModelFamily
from dit_lora.contract.spec import OPTIONAL, FamilyInfo, FamilySpec

_SPECS: weakref.WeakKeyDictionary[Any, FamilySpec] = weakref.WeakKeyDictionary()


class LegacyData:
    """The ``data`` component of an old-style family: its ``data_handler(cfg)`` and ``build_data(cfg, comps, acc)``."""

    def __init__(self, family: Any) -> None:
        self.family = family

    def data_handler(self, cfg, spec):
        """The family's own handler (it holds the family object; the data path takes it through :func:`as_spec`)."""
        return self.family.data_handler(cfg)

    def build_data(self, cfg, spec, comps, accelerator):
        """The family's own data stage, or None for the standard path."""
        return self.family.build_data(cfg, comps, accelerator)


def family_info(family: Any) -> FamilyInfo:
    """The descriptive class attributes of an old-style family as a :class:`FamilyInfo`."""
    return FamilyInfo(
        pipeline_class_name=family.pipeline_class_name, card_tags=tuple(family.card_tags),
        library_name=family.library_name, pipeline_tag=family.pipeline_tag,
        adapter_weight_name=family.adapter_weight_name, default_lora_layers=tuple(family.default_lora_layers),
        gradient_checkpointing_default=family.gradient_checkpointing_default,
        text_encoder_label=family.text_encoder_label, repeated_block_classes=tuple(family.repeated_block_classes),
        compile_dynamic=family.compile_dynamic,
    )


def spec_from_family(family: Any) -> FamilySpec:
    """TRANSITIONAL: the spec of an old-style family object (one per object; its declared capabilities checked).

    Each capability it declares fills the optional component of that protocol; :class:`FrameRate` is taken when
    the object has ``model_fps`` (it was never declared, only probed).
    """
    found = _SPECS.get(family)
    if found is None:
        check_capabilities(family)
        optional = {field: family if capability(family, proto) is not None else None
                    for field, proto in OPTIONAL.items()}
        optional["frame_rate"] = family if isinstance(family, FrameRate) else None
        found = FamilySpec(name=family.name, info=family_info(family), model=family, data=LegacyData(family),
                           loss=family, adapter=family, **optional)
        _SPECS[family] = found
    return found


def as_spec(family: Any) -> FamilySpec:
    """TRANSITIONALLY :func:`spec_from_family` of an old-style :class:`ModelFamily`; anything else (a
    :class:`FamilySpec`, a test's stand-in with the spec's fields) as it is."""
    return spec_from_family(family) if isinstance(family, ModelFamily) else family
