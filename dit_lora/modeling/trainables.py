"""LoRA injection (PEFT), backbone unfreezing, fp32 master weights and optimizer parameter groups."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.config.schema import LoraOptions
from dit_lora.contract import spec as fallback
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.modeling import quantize
from dit_lora.modeling.adapters import check_rank, is_adapter_weight, layer_sides, peft_config

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def _target_sides(model: torch.nn.Module, patterns: list[str]) -> dict[str, tuple[int, int]]:
    """``{name: (inputs, outputs)}`` of every Linear/Conv2d layer the resolved ``patterns`` target (PEFT's suffix
    match: the name itself or ``.<pattern>`` at its end)."""
    sides = {}
    for name, module in model.named_modules():
        found = layer_sides(module)
        if found is not None and any(name == p or name.endswith("." + p) for p in patterns):
            sides[name] = found
    return sides


def _resolve_targets(model: torch.nn.Module, patterns: Iterable[str]) -> list[str]:
    """Expand user target names/suffixes to the module names PEFT will match, or fail naming the valid ones."""
    names = [n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    resolved: list[str] = []
    for pattern in patterns:
        hits = [n for n in names if n == pattern or n.endswith("." + pattern)]
        if not hits:
            suffixes = sorted(
                {".".join(n.split(".")[-2:]) if n.split(".")[-1].isdigit() else n.split(".")[-1] for n in names}
            )
            raise UserError(
                f"--lora_layers entry `{pattern}` matches no Linear/Conv layer of the model. Valid layer names "
                f"include: {', '.join(suffixes[:40])}. Use those names (suffixes match every block)."
            )
        resolved.append(pattern)
    return resolved


def add_adapter(model: torch.nn.Module, lora: LoraOptions, *, targets: Iterable[str], seed: int, notes=None):
    """Attach the PEFT adapter ``lora`` (the run's ``cfg.lora``: its ``--lora_type``, rank, alpha and the type's
    own options; :func:`~dit_lora.modeling.adapters.peft_config`) named ``default`` and return its PEFT config.

    A rank no targeted layer can use is refused before PEFT allocates it
    (:func:`~dit_lora.modeling.adapters.check_rank`); one beyond some layers' size only is a note, appended to
    ``notes`` (a list) when given. Initialisation draws from the global RNG, so it is seeded here: the same seed
    gives the same adapter in every process and on resume.
    """
    resolved = _resolve_targets(model, targets)
    note = check_rank(lora, _target_sides(model, resolved))
    if note and notes is not None:
        notes.append(note)
    config = peft_config(lora, resolved)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # diffusers' and transformers' models have add_adapter (PEFT's adapter mixin, any PeftConfig); a plain
        # torch.nn.Module does not
        cast(Any, model).add_adapter(config)
    if lora.use_effective_conv2d and not any(
        isinstance(getattr(m, "base_layer", None), torch.nn.Conv2d) for m in model.modules()
    ):
        raise UserError(
            f"--use_effective_conv2d shapes the {lora.lora_type} update of a convolution, but none of the layers "
            "the adapter trains is a Conv2d (--lora_layers names only linear layers here), so it would do nothing. "
            "Drop --use_effective_conv2d, or add a convolution's name to --lora_layers."
        )
    return config


def add_lora(model: torch.nn.Module, *, rank: int, alpha: float, dropout: float, targets: Iterable[str], seed: int):
    """Attach a plain PEFT LoRA adapter named ``default`` and return its ``LoraConfig`` (:func:`add_adapter` with
    ``--lora_type lora``)."""
    lora = LoraOptions(rank=rank, lora_alpha=alpha, lora_dropout=dropout)
    return add_adapter(model, lora, targets=targets, seed=seed)


def unfreeze_backbone(model: torch.nn.Module, patterns: Iterable[str]) -> list[str]:
    """Make original (non-LoRA) parameters matching any regex in ``patterns`` trainable; return their names."""
    patterns = list(patterns)
    if not patterns:
        return []
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as err:
            raise UserError(f"--train_backbone pattern `{p}` is not a valid regular expression ({err}).")
    chosen = []
    for name, param in model.named_parameters():
        if is_adapter_weight(name):
            continue
        if any(c.search(name) for c in compiled):
            param.requires_grad_(True)
            chosen.append(name)
    if not chosen:
        sample = sorted(
            {n.rsplit(".", 1)[0].split(".")[-1] for n, _ in model.named_parameters() if not is_adapter_weight(n)}
        )
        raise UserError(
            f"--train_backbone {' '.join(patterns)} matches no parameter of the model. Module names include: "
            f"{', '.join(sample[:40])}."
        )
    return chosen


def cast_trainable_to_fp32(model: torch.nn.Module, *, under_autocast: bool) -> None:
    """Keep trainable weights as fp32 master weights even when the frozen base is bf16.

    Under autocast, PEFT's cast of each LoRA input to the fp32 weight dtype is undone by autocast
    right away (an extra copy per layer, ~8% of a step measured on CPU); switching it off leaves
    losses and gradients bit-identical (benchmarks/sana/lora_dtype_cpu.py).
    """
    from diffusers.training_utils import cast_training_params
    from peft.tuners.tuners_utils import BaseTunerLayer

    cast_training_params(model, dtype=torch.float32)
    if under_autocast:
        for module in model.modules():
            if isinstance(module, BaseTunerLayer):
                cast(Any, module).cast_input_dtype_enabled = False  # a plain flag; Module's types take tensors


@dataclass
class Trainables:
    """What :func:`attach_trainables` made trainable on a model."""

    lora_config: object  # the adapter's PEFT config: LoraConfig (LoRA, DoRA), LoKrConfig or LoHaConfig
    backbone_names: list[str]
    extra_groups: list[tuple[str, list[str], float]]  # (label, weight names, learning rate)
    checkpointing: bool
    notes: list[str] = field(default_factory=list)  # for the run's log (a rank beyond some layers' size)

    @property
    def saved_backbone(self) -> list[str]:
        """Every fully trained original weight (backbone and extra groups): saved beside the adapter."""
        return self.backbone_names + [n for _, names, _ in self.extra_groups for n in names]


def check_adapter_rank(model: torch.nn.Module, spec: FamilySpec, cfg: TrainConfig) -> None:
    """Refuse the run's ``--rank`` when no layer it targets can use it
    (:func:`~dit_lora.modeling.adapters.check_rank`), right after the model loads: a run learns it before its data
    is read and cached, not at the attach that comes after (which checks again, for ``dit-lora plan``)."""
    check_rank(cfg.lora, _target_sides(model, _resolve_targets(model, spec.model.lora_targets(model, cfg.lora))))


def attach_trainables(model: torch.nn.Module, spec: FamilySpec, cfg: TrainConfig) -> Trainables:
    """The adapter (``--lora_type``), unfrozen backbone groups, fp32 masters and activation checkpointing, as ``cfg`` and the family say.

    The run and the memory planner (on a meta-device model) both call this, so the plan counts exactly
    the weights a run trains.
    """
    notes: list[str] = []
    lora_config = add_adapter(
        model, cfg.lora, targets=spec.model.lora_targets(model, cfg.lora), seed=cfg.training.seed, notes=notes
    )
    backbone = unfreeze_backbone(model, fallback.backbone_patterns(spec, cfg.lora, cfg.family_options))
    extra = [
        (label, [n for n in unfreeze_backbone(model, patterns) if n not in backbone], lr)  # one group a weight
        for label, patterns, lr in fallback.extra_trainable(spec, cfg.family_options)
    ]
    if quantize.enabled(cfg.model):  # on the plan's meta model (before loading) and on the loaded one
        quantize.check_trainable(
            cfg.model,
            cfg.lora,
            backbone + [n for _, names, _ in extra for n in names],
            quantize.quantized_linears(model, fallback.quantize_skip_modules(spec)),
        )
    cast_trainable_to_fp32(model, under_autocast=cfg.training.mixed_precision != "no")
    checkpointing = (
        spec.info.gradient_checkpointing_default
        if cfg.training.gradient_checkpointing is None
        else cfg.training.gradient_checkpointing
    )
    if checkpointing:
        fallback.enable_gradient_checkpointing(spec, model)
    return Trainables(lora_config, backbone, extra, bool(checkpointing), notes)


@dataclass
class ParamGroupInfo:
    """What one optimizer parameter group holds: for the start-of-run table and the summary."""

    name: str
    num_params: int
    lr: float


class _GroupCollector:
    """Stands in for an optimizer class so PEFT's LoRA+ grouping can be reused as-is."""

    def __init__(self, groups, **kwargs):
        self.groups = groups
        self.kwargs = kwargs


def build_param_groups(
    model: torch.nn.Module,
    *,
    learning_rate: float,
    backbone_names: list[str],
    backbone_learning_rate: float,
    weight_decay: float,
    loraplus_lr_ratio: float | None,
    extra_groups: Sequence[tuple[str, list[str], float]] = (),
) -> list[dict]:
    """Split trainable parameters into named groups: LoRA (or LoRA+ A/B), backbone, and ``extra_groups``.

    ``extra_groups`` are ``(label, parameter names, learning rate)`` of further original weights with a
    learning rate of their own (e.g. a video LLM's vision tower).
    """
    extra_names = {n for _, names, _ in extra_groups for n in names}
    backbone = set(backbone_names)
    frozen_for_lora = backbone | extra_names
    named = dict(model.named_parameters())
    lora_params = [p for n, p in named.items() if p.requires_grad and n not in frozen_for_lora]
    groups: list[dict] = []
    if loraplus_lr_ratio:
        from peft.optimizers import create_loraplus_optimizer

        # PEFT groups every trainable parameter; hide the backbone so only LoRA weights are grouped.
        hidden = [named[n] for n in frozen_for_lora]
        for p in hidden:
            p.requires_grad_(False)
        try:
            # a model with a PEFT adapter groups like a PeftModel; _GroupCollector only records the groups
            collected = cast(
                _GroupCollector,
                create_loraplus_optimizer(
                    model,  # type: ignore[arg-type]  # (above) PEFT's types name a PeftModel
                    _GroupCollector,  # type: ignore[arg-type]  # (above) and an Optimizer class
                    lr=learning_rate,
                    loraplus_lr_ratio=loraplus_lr_ratio,
                    loraplus_weight_decay=weight_decay,
                ),
            )
        finally:
            for p in hidden:
                p.requires_grad_(True)
        for label, group in zip(("lora_A", "lora_embedding", "lora_B", "lora_B_no_decay"), collected.groups):
            if group["params"]:
                groups.append({**group, "name": label})
    elif lora_params:
        groups.append({"params": lora_params, "lr": learning_rate, "weight_decay": weight_decay, "name": "lora"})
    if backbone:
        groups.append(
            {
                "params": [named[n] for n in backbone_names],
                "lr": backbone_learning_rate,
                "weight_decay": 0.0,
                "name": "backbone",
            }
        )
    for label, names, lr in extra_groups:
        if names:
            groups.append({"params": [named[n] for n in names], "lr": lr, "weight_decay": 0.0, "name": label})
    return groups


def describe_groups(groups: list[dict]) -> list[ParamGroupInfo]:
    """Name, parameter count and learning rate of each group."""
    return [ParamGroupInfo(g["name"], sum(p.numel() for p in g["params"]), float(g["lr"])) for g in groups]


def format_groups(infos: list[ParamGroupInfo]) -> str:
    """A small fixed-width table of the parameter groups."""
    lines = [f"{'group':<18}{'#params':>14}{'lr':>12}"]
    for info in infos:
        lines.append(f"{info.name:<18}{info.num_params:>14,}{info.lr:>12.3g}")
    lines.append(f"{'total trainable':<18}{sum(i.num_params for i in infos):>14,}")
    return "\n".join(lines)


def split_trainable_state(
    model: torch.nn.Module, backbone_names: list[str], state: dict[str, torch.Tensor] | None = None
) -> tuple[dict, dict]:
    """Return (LoRA state dict in diffusers format, backbone state dict), both detached on CPU. ``state``: the
    trainable weights by parameter name when the model's own are not whole (FSDP2 gathers them), else read from it."""
    from peft.utils import get_peft_model_state_dict

    lora = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model, state_dict=state).items()}
    named = dict(model.named_parameters()) if state is None else state
    backbone = {n: named[n].detach().cpu().contiguous() for n in backbone_names}
    return lora, backbone
