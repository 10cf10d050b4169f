"""The option sections of the training config, gathered in the order ``--help`` and the options reference list them:
:data:`SECTIONS` (section name -> its class and its attribute on ``TrainConfig``), :func:`config_fields`,
:func:`section_fields` and :data:`SECTION_OF` (option -> section attribute).

The sections are declared in :mod:`dit_lora.config.input_sections` (model, data, video, lora: what a run trains) and
:mod:`dit_lora.config.run_sections` (training, checkpoints, validation, hub, guards, kernels, misc: how it goes),
with the declaration helpers of :mod:`dit_lora.config.option`. The config that gathers the sections,
:class:`dit_lora.config.schema.TrainConfig`, sits above :mod:`dit_lora.config.owners` (which reads the sections and
looks up each family's options class), so none of these modules imports either.
"""

from __future__ import annotations

from dataclasses import fields
from typing import cast

from dit_lora.config.input_sections import DataOptions, LoraOptions, ModelOptions, VideoOptions
from dit_lora.config.run_sections import (
    CheckpointOptions,
    GuardOptions,
    HubOptions,
    MiscOptions,
    PerformanceOptions,
    TrainingOptions,
    ValidationOptions,
)

#: the sections in the order --help and the reference list them: section name -> (its class, its attribute on
#: :class:`TrainConfig`). The kernels section is ``cfg.performance``: ``cfg.kernels`` is the --kernels option.
SECTIONS: dict[str, tuple[type, str]] = {
    "model": (ModelOptions, "model"),
    "data": (DataOptions, "data"),
    "video": (VideoOptions, "video"),
    "lora": (LoraOptions, "lora"),
    "training": (TrainingOptions, "training"),
    "checkpoints": (CheckpointOptions, "checkpoints"),
    "validation": (ValidationOptions, "validation"),
    "hub": (HubOptions, "hub"),
    "guards": (GuardOptions, "guards"),
    "kernels": (PerformanceOptions, "performance"),
    "misc": (MiscOptions, "misc"),
}
#: the reference table, the summaries and --help have always listed --cpu_reuse_memory among the guards' options,
#: before --attention_canary (it was declared there); it keeps that place in every listing
_LISTED_BEFORE = {"cpu_reuse_memory": "attention_canary"}


def _ordered_fields() -> list:
    out = [f for cls, _ in SECTIONS.values() for f in fields(cls) if f.name not in _LISTED_BEFORE]
    for name, before in _LISTED_BEFORE.items():
        moved = next(f for cls, _ in SECTIONS.values() for f in fields(cls) if f.name == name)
        out.insert(next(i for i, f in enumerate(out) if f.name == before), moved)
    return out


_FIELDS = _ordered_fields()
#: option name -> the attribute of its section on :class:`TrainConfig`
SECTION_OF: dict[str, str] = {f.name: SECTIONS[f.metadata["section"]][1] for f in _FIELDS}
_SECTION_ATTRS = tuple(attr for _, attr in SECTIONS.values())


#: the family a config trains when nothing names one
DEFAULT_FAMILY: str = cast(str, ModelOptions.__dataclass_fields__["family"].default)  # a plain default, no factory


def config_fields() -> list:
    """The common options: the fields of :class:`TrainConfig`'s sections in the order ``--help`` and the reference
    list them (not family_options; each family's own options are ``fields(options_class(family))``, see
    :mod:`.owners`)."""
    return list(_FIELDS)


def section_fields(section: str) -> list:
    """The option fields of one section (``"lora"``, ``"kernels"``, ...) in declaration order."""
    return list(fields(SECTIONS[section][0]))
