"""diffusers models without PEFT's adapter methods (DiT, PixArt's transformer in some versions) given them."""

from __future__ import annotations

from pathlib import Path

import torch

#: diffusers model classes given PeftAdapterMixin, one subclass each (see make_peft_capable)
_PEFT_CLASSES: dict[type, type] = {}


def make_peft_capable(model: torch.nn.Module) -> torch.nn.Module:
    """Give a diffusers model without ``PeftAdapterMixin`` (DiT) its methods (``add_adapter``, ``peft_config``...).

    The instance's class is swapped for a subclass that adds the mixin (same name and module, so a
    saved config still names the original class); weights and behaviour are unchanged.
    """
    # Diffusers' loaders import slowly: only when a model is built
    from diffusers.loaders.peft import PeftAdapterMixin

    if isinstance(model, PeftAdapterMixin):
        return model
    base = type(model)
    if base not in _PEFT_CLASSES:
        _PEFT_CLASSES[base] = type(
            base.__name__, (base, PeftAdapterMixin), {"__module__": base.__module__, "__doc__": base.__doc__}
        )
    model.__class__ = _PEFT_CLASSES[base]
    return model


class PeftFitting:
    """``FamilySpec.fitting`` of a family whose transformer lacks PEFT's methods: the consumer's transformer gets them
    (:func:`make_peft_capable`) before the PEFT-format adapter loads, as training's did."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Give the pipeline's transformer PEFT's methods."""
        make_peft_capable(pipe.transformer)
