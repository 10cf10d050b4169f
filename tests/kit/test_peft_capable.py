"""kit/peft_capable.py: a diffusers model without PEFT's methods gets them, keeping its class name."""

from __future__ import annotations

import torch
from diffusers.loaders.peft import PeftAdapterMixin

from dit_lora.kit.peft_capable import make_peft_capable


class Plain(torch.nn.Linear):
    """A model class without PeftAdapterMixin."""


def test_the_class_is_swapped_once_per_base_and_weights_are_kept():
    model = Plain(2, 2)
    weight = model.weight.detach().clone()
    assert make_peft_capable(model) is model and isinstance(model, PeftAdapterMixin)
    assert type(model).__name__ == "Plain" and type(model).__module__ == Plain.__module__
    assert torch.equal(model.weight, weight)
    other = make_peft_capable(Plain(2, 2))
    assert type(other) is type(model)  # one subclass per base class
    assert make_peft_capable(model) is model and type(model) is type(other)  # already capable: unchanged


def test_peft_fitting_gives_the_consumers_transformer_peft_methods(tmp_path):
    """``FamilySpec.fitting`` of a family whose transformer lacks the mixin (PixArt's): the consumer's transformer."""
    from types import SimpleNamespace

    from dit_lora.kit.peft_capable import PeftFitting

    pipe = SimpleNamespace(transformer=Plain(2, 2))
    PeftFitting().prepare_pipeline_for_adapter(pipe, tmp_path)
    assert isinstance(pipe.transformer, PeftAdapterMixin)
