"""The adapter types a run trains (``--lora_type lora|dora|lokr|loha``): what each is in PEFT, which options are
its own, which consumers load its file, and the one-paragraph refusals of options that do not fit the type.

PEFT implements all four: LoRA and DoRA are ``LoraConfig`` (``use_dora=True``: a trained magnitude per output
channel beside lora_A/lora_B), LoKr is ``LoKrConfig`` (a Kronecker product ``kron(w1, w2)``), LoHa is
``LoHaConfig`` (a Hadamard product of two low-rank products). This module holds the facts as data, imports no
torch, and is read by the parser (the refusals), ``modeling/trainables.py`` (the PEFT config), ``output/`` (the
files, the card and ``dit-lora export``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dit_lora.core.errors import UserError


@dataclass(frozen=True)
class AdapterType:
    """One ``--lora_type``: its name in prose, PEFT's ``peft_type``, whether diffusers' ``load_lora_weights`` loads
    it (so the run writes diffusers' file; else PEFT's ``adapter_model.safetensors`` + ``adapter_config.json``),
    and the consumers that load it, as the model card says it."""

    title: str
    peft_type: str
    diffusers_loads: bool
    consumers: str


TYPES: dict[str, AdapterType] = {
    "lora": AdapterType("LoRA", "LORA", True, "diffusers' `load_lora_weights` and PEFT"),
    "dora": AdapterType(
        "DoRA",
        "LORA",
        True,
        "diffusers' `load_lora_weights` (it reads the magnitude vectors, `lora_magnitude_vector`) and PEFT "
        "(`LoraConfig(use_dora=True)`)",
    ),
    "lokr": AdapterType(
        "LoKr",
        "LOKR",
        False,
        "PEFT (`set_peft_model_state_dict` after `inject_adapter_in_model`, or `PeftModel.from_pretrained` for a "
        "transformers model); not diffusers' `load_lora_weights`, which reads LoRA files only",
    ),
    "loha": AdapterType(
        "LoHa",
        "LOHA",
        False,
        "PEFT (`set_peft_model_state_dict` after `inject_adapter_in_model`, or `PeftModel.from_pretrained` for a "
        "transformers model); not diffusers' `load_lora_weights`, which reads LoRA files only",
    ),
}

#: an option that only some types read -> those types (the rest read every type)
OWN_OPTIONS: dict[str, tuple[str, ...]] = {
    "lora_dropout": ("lora", "dora"),
    "loraplus_lr_ratio": ("lora", "dora"),
    "lokr_factor": ("lokr",),
    "lokr_decompose_both": ("lokr",),
    "rank_dropout": ("lokr", "loha"),
    "module_dropout": ("lokr", "loha"),
    "use_effective_conv2d": ("lokr", "loha"),
}

#: what the option is to the types that do not read it: the reason it would do nothing, and what to use instead
_WHY_NOT: dict[str, str] = {
    "lora_dropout": "PEFT's LoKr and LoHa have no input dropout; --rank_dropout and --module_dropout are theirs",
    "loraplus_lr_ratio": "LoRA+ (PEFT's create_loraplus_optimizer) gives lora_B another learning rate than "
    "lora_A, and LoKr/LoHa have no lora_A/lora_B (lokr_w1/lokr_w2, hada_w1_a...), so every weight would train "
    "at --learning_rate and the ratio would do nothing",
    "lokr_factor": "it is the Kronecker factor of LoKr's split of each weight (PEFT's decompose_factor)",
    "lokr_decompose_both": "it splits LoKr's left Kronecker factor into two low-rank matrices too",
    "rank_dropout": "it drops rows of the LoKr/LoHa update (PEFT's LycorisConfig); a LoRA's dropout is --lora_dropout",
    "module_dropout": "it skips a whole LoKr/LoHa layer at random (PEFT's LycorisConfig); a LoRA's dropout is "
    "--lora_dropout",
    "use_effective_conv2d": "it is LyCORIS' Tucker form of a LoKr/LoHa Conv2d update (PEFT's use_effective_conv2d)",
}


def type_names() -> tuple[str, ...]:
    """``--lora_type``'s choices."""
    return tuple(TYPES)


def resolve_dora_alias(values: dict, current_type: str) -> dict:
    """``--use_dora`` (diffusers' training examples' flag) read as ``--lora_type dora`` in the flat ``values`` the
    config is built from (``current_type``: the type without them); refused in one paragraph when both are given
    and disagree. From here on only ``lora_type`` is read (``use_dora`` is set back to false)."""
    use_dora = values.get("use_dora")
    given_type = values.get("lora_type")
    if use_dora is None:
        return values
    if use_dora and given_type is not None and given_type != "dora":
        raise UserError(
            f"Both --use_dora and --lora_type {given_type} were given: --use_dora is diffusers' name for "
            "--lora_type dora, so the two ask for different adapters. Give one of them: --lora_type dora (or "
            f"--use_dora) for DoRA, or --lora_type {given_type} without --use_dora."
        )
    if use_dora is False and given_type == "dora":
        raise UserError(
            "--use_dora false and --lora_type dora disagree (--use_dora is diffusers' name for --lora_type dora). "
            "Remove --use_dora false to train DoRA, or --lora_type dora to train a plain LoRA."
        )
    values = dict(values)
    if use_dora:
        values["lora_type"] = "dora"
    elif given_type is None:
        values["lora_type"] = current_type
    values["use_dora"] = False
    return values


# cfg: a TrainConfig, not annotated: config.schema imports this module (an annotation would make a circle)
def check_type_options(cfg, given: Callable[[str], str] | None = None) -> None:
    """Refuse, in one paragraph, an explicitly set option (``cfg.explicit_options``; for a config built in code
    without them: an option off its default) that the run's ``--lora_type`` never reads. ``given(name)`` says how
    it was set (``--name`` or ``name`` in a YAML path)."""
    from dit_lora.config.sections import config_fields

    lora_type = cfg.lora.lora_type
    if lora_type in ("lokr", "loha") and cfg.model.quantize_base == "nf4":
        raise UserError(
            f"--lora_type {lora_type} cannot train on --quantize_base nf4: PEFT's {TYPES[lora_type].title} builds its "
            "update as a full weight shaped like the base layer's weight, and a bitsandbytes 4-bit layer stores its "
            "weight packed, so the shapes do not fit. Use --quantize_base fp8_scaled or int8 (or none) with "
            f"{TYPES[lora_type].title}, or --lora_type lora/dora with nf4."
        )
    _check_full_matrix_lokr(cfg.lora)
    defaults = {f.name: f.default for f in config_fields() if f.name in OWN_OPTIONS}
    for name, readers in OWN_OPTIONS.items():
        value = getattr(cfg.lora, name)
        if not cfg.is_set(name) or lora_type in readers or value == defaults[name] or value is False:
            continue  # an option at its default (or a switch turned off) changes nothing: never refused
        how = given(name) if given else f"--{name}"
        fix = f"remove --{name}" if how.startswith("--") else f"remove `{name}` from {how.split(' in ', 1)[-1]}"
        readers_text = " or ".join(f"--lora_type {t}" for t in readers)
        raise UserError(
            f"{how} is an option of {readers_text}; this run trains --lora_type {lora_type} "
            f"({TYPES[lora_type].title}), which never reads it ({_WHY_NOT[name]}), so it would be ignored. "
            f"Train {readers_text} to use it; otherwise {fix}."
        )


#: a LoKr rank at least this large keeps both Kronecker factors whole in any model's layers (LyCORIS's users write
#: 10000 or more for "full matrix")
FULL_MATRIX_RANK = 1000


def _check_full_matrix_lokr(lora) -> None:
    """Refuse LyCORIS's full-matrix LoKr habit (a huge ``linear_dim`` with a small ``linear_alpha``) where PEFT's
    scale alpha / rank would make the adapter train at almost no strength, in one paragraph."""
    if lora.lora_type != "lokr" or lora.rank < FULL_MATRIX_RANK or lora.lora_alpha is None:
        return
    if lora.lora_alpha >= lora.rank:
        return
    raise UserError(
        f"--lora_type lokr with --rank {lora.rank} keeps LoKr's factors whole (a full-matrix LoKr, LyCORIS's "
        f"linear_dim 10000 habit), and --lora_alpha {lora.lora_alpha:g} would scale it by alpha / rank = "
        f"{lora.lora_alpha / lora.rank:.2g}: PEFT scales every LoKr that way, where LyCORIS takes scale 1 for a full "
        "matrix, so this adapter would train at almost no strength. Leave --lora_alpha unset (alpha = rank: scale "
        "1, as LyCORIS), or give a rank that factorises (e.g. --rank 16, with --lokr_factor)."
    )


def type_of_peft_config(config: dict) -> str:
    """The ``--lora_type`` of a saved adapter's PEFT config (``adapter_config.json``, or diffusers' metadata):
    ``peft_type`` LOKR/LOHA, else ``use_dora`` for DoRA, else LoRA."""
    peft_type = str(config.get("peft_type") or "LORA").upper().removeprefix("PEFTTYPE.")
    for name, kind in TYPES.items():
        if kind.peft_type == peft_type and name not in ("lora", "dora"):
            return name
    return "dora" if config.get("use_dora") else "lora"
