"""The PEFT config of each adapter type (``--lora_type``: ``config/adapter_types.py``) and the names of the weights
PEFT gives each.

LoRA and DoRA are ``LoraConfig`` (DoRA: ``use_dora=True``, a trained ``lora_magnitude_vector`` per layer beside
lora_A/lora_B), LoKr ``LoKrConfig`` (``lokr_w1``/``lokr_w1_a``/``lokr_w1_b``/``lokr_w2``/``lokr_w2_a``/
``lokr_w2_b``/``lokr_t2``) and LoHa ``LoHaConfig`` (``hada_w1_a``/``hada_w1_b``/``hada_w2_a``/``hada_w2_b``/
``hada_t1``/``hada_t2``). Every type starts as the base model (LoRA/DoRA: lora_B zero; LoKr: w1 (or w1_a) zero;
LoHa: w2_b zero) and is attached with the model's ``add_adapter`` (diffusers' and transformers' PEFT mixins accept
any ``PeftConfig``; a diffusers model without the mixin is given it first: ``families/diffusion/peft_capable.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dit_lora.config.schema import LoraOptions

#: the parameter-name parts of every adapter weight PEFT makes (one per type family: LoRA/DoRA, LoKr, LoHa)
ADAPTER_PARTS = ("lora_", "lokr_", "hada_")
_ADAPTER = re.compile(r"(?:^|\.)(?:lora_|lokr_|hada_)")


def is_adapter_weight(name: str) -> bool:
    """Whether the parameter (or state-dict key) ``name`` is an adapter weight of any type, not a base weight."""
    return _ADAPTER.search(name) is not None


def peft_config(lora: LoraOptions, targets: Iterable[str]):
    """The PEFT config of the adapter ``lora`` (the run's ``cfg.lora`` section) describes, on ``targets``.

    Alpha is the section's effective alpha (alpha / rank is the scale, as PEFT applies it for every type). LoRA and
    DoRA initialise lora_A from a Gaussian (PEFT's ``gaussian``, as before the types existed) and lora_B at zero;
    LoKr and LoHa take PEFT's default initialisation, which also starts at the base model.
    """
    from peft import LoHaConfig, LoKrConfig, LoraConfig

    targets = list(targets)
    alpha = lora.effective_alpha
    kind = lora.lora_type
    if kind in ("lora", "dora"):
        return LoraConfig(
            r=lora.rank,
            lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates an int; the scale alpha/r takes any float
            lora_dropout=lora.lora_dropout,
            init_lora_weights="gaussian",
            use_dora=kind == "dora",
            target_modules=targets,
        )
    shared = dict(
        r=lora.rank,
        alpha=alpha,
        rank_dropout=lora.rank_dropout,
        module_dropout=lora.module_dropout,
        use_effective_conv2d=lora.use_effective_conv2d,
        target_modules=targets,
    )
    if kind == "lokr":
        return LoKrConfig(
            **shared,  # type: ignore[arg-type]  # (above) alpha is a float
            decompose_both=lora.lokr_decompose_both,
            decompose_factor=-1 if lora.lokr_factor is None else lora.lokr_factor,
        )
    if kind == "loha":
        return LoHaConfig(**shared)  # type: ignore[arg-type]  # (above) alpha is a float
    raise ValueError(f"unknown lora_type {kind!r}")
