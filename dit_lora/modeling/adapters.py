"""The PEFT config of each adapter type (``--lora_type``: ``config/adapter_types.py``) and the names of the weights
PEFT gives each.

LoRA and DoRA are ``LoraConfig`` (DoRA: ``use_dora=True``, a trained ``lora_magnitude_vector`` per layer beside
lora_A/lora_B), LoKr ``LoKrConfig`` (``lokr_w1``/``lokr_w1_a``/``lokr_w1_b``/``lokr_w2``/``lokr_w2_a``/
``lokr_w2_b``/``lokr_t2``) and LoHa ``LoHaConfig`` (``hada_w1_a``/``hada_w1_b``/``hada_w2_a``/``hada_w2_b``/
``hada_t1``/``hada_t2``). Every type starts as the base model (LoRA/DoRA: lora_B zero; LoKr: w1 (or w1_a) zero;
LoHa: w2_b zero) and is attached with the model's ``add_adapter`` (diffusers' and transformers' PEFT mixins accept
any ``PeftConfig``; a diffusers model without the mixin is given it first: ``kit/peft_capable.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dit_lora.config.adapter_types import TYPES
from dit_lora.config.schema import LoraOptions
from dit_lora.core.errors import UserError

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


def layer_sides(module) -> tuple[int, int] | None:
    """``(inputs, outputs)`` of the weight matrix an adapter's update is added to: a Linear's ``in_features`` and
    ``out_features``; a Conv2d's ``in_channels / groups x kernel`` and ``out_channels`` (PEFT's conv LoRA: lora_A
    a conv to ``r`` channels, lora_B a 1x1 one); None for another kind of layer."""
    import torch

    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, torch.nn.Conv2d):
        kh, kw = module.kernel_size
        return module.in_channels // module.groups * kh * kw, module.out_channels
    return None


def check_rank(lora: LoraOptions, layers: dict[str, tuple[int, int]]) -> str | None:
    """Refuse a ``--rank`` no targeted layer can use, in one paragraph, before PEFT allocates anything; return a note
    when it exceeds only some of them (None when it fits them all). ``layers``: each targeted layer's
    :func:`layer_sides`.

    A LoRA/DoRA update ``B A`` (``out x r`` times ``r x in``) has rank at most ``min(in, out)``, and so does each of
    LoHa's two products, whose Hadamard product already reaches every matrix at ``r = min(in, out)``: a larger
    ``r`` adds weights (``r x (in + out)`` per layer) and nothing the adapter can learn. PEFT allows it, and
    kohya's sd-scripts and LyCORIS do not check either; refused rather than capped because capping would change the
    scale ``alpha / r`` (and the saved rank) behind the user's back. Where it exceeds only some layers (a small
    embedding among wide blocks), those layers' update is still whole: a note says so, and the run goes on.
    LoKr is not checked: PEFT keeps a Kronecker factor whole once ``r`` reaches half its larger side, so a larger
    ``r`` costs no weights (LyCORIS's "full matrix" rank; ``config/adapter_types.py`` checks its alpha).
    """
    if lora.lora_type == "lokr" or not layers:
        return None
    useful = {name: min(sides) for name, sides in layers.items()}
    best = max(useful, key=lambda n: useful[n])
    if lora.rank > useful[best]:
        # the weights beyond each layer's useful rank: r x (in + out) per product (LoHa has two)
        factors = 2 if lora.lora_type == "loha" else 1
        wasted = factors * sum((lora.rank - useful[n]) * sum(layers[n]) for n in layers)
        raise UserError(
            f"--rank {lora.rank} is larger than any layer the adapter trains can use: the largest useful rank is "
            f"{useful[best]}, min(in_features, out_features) of the widest targeted layer ({best}: "
            f"{layers[best][0]} in, {layers[best][1]} out; {len(layers)} layers targeted). A "
            f"{TYPES[lora.lora_type].title} update of a layer has rank at most min(in, out), so every rank beyond it "
            "only adds weights (here "
            f"{wasted:,} of them, {wasted * 4 / 1e6:,.1f} MB in fp32) and nothing the adapter can learn. "
            f"Use --rank {useful[best]} or lower (typical LoRA ranks are 4 to 128)."
        )
    over = sorted(n for n in layers if lora.rank > useful[n])
    if not over:
        return None
    return (
        f"note: --rank {lora.rank} exceeds min(in_features, out_features) of {len(over)} of the {len(layers)} "
        f"targeted layers (e.g. {over[0]}: {useful[over[0]]}); their update is already whole, the extra rank adds "
        "weights but nothing to learn there"
    )
