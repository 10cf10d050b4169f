"""The typed training config: :class:`TrainConfig`, the option sections (:mod:`dit_lora.config.sections`) gathered
with the family's own options and the options the user set.

Names follow the diffusers training examples wherever the concept exists there, so a user of
``train_dreambooth_lora_sana.py`` can bring their flags along. The sections live in
:mod:`dit_lora.config.input_sections` and :mod:`dit_lora.config.run_sections`, gathered in order by
:mod:`dit_lora.config.sections`, and the helpers that declare options in :mod:`dit_lora.config.option` (all below
:mod:`dit_lora.config.owners`, which this module reads for the family's options class); their names are re-exported
here, where callers have always imported them.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Generic, TypeVar

from dit_lora.config.adapter_types import resolve_dora_alias
from dit_lora.config.dataset_file import DatasetConfig
from dit_lora.config.input_sections import DataOptions, LoraOptions, ModelOptions, VideoOptions
from dit_lora.config.option import (
    BETA,
    DIFFUSION_FAMILIES,
    FINITE,
    IMAGE_DEMOS,
    IMAGE_FAMILIES,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    RESUME_CLASSES,
    SECTION_RESUME,
    SEED,
    VIDEO_FAMILIES,
    VIDEO_SIZE,
    WEIGHTING_SCHEMES,
    Applies,
    FamilyOptions,
    Range,
    opt,
    resume_class,
)
from dit_lora.config.owners import options_class, split_values
from dit_lora.config.run_sections import (
    LR_SCHEDULERS,
    MIXED_PRECISIONS,
    REPORT_TO,
    CheckpointOptions,
    GuardOptions,
    HubOptions,
    MiscOptions,
    PerformanceOptions,
    TrainingOptions,
    ValidationOptions,
)
from dit_lora.config.sections import (
    _FIELDS,
    _SECTION_ATTRS,
    DEFAULT_FAMILY,
    SECTION_OF,
    SECTIONS,
    config_fields,
    section_fields,
)
from dit_lora.core.errors import UserError

#: the sections' names, importable from here as before the split (the modules holding them are below owners)
__all__ = [
    "BETA",
    "DEFAULT_FAMILY",
    "DIFFUSION_FAMILIES",
    "FINITE",
    "IMAGE_DEMOS",
    "IMAGE_FAMILIES",
    "LR_SCHEDULERS",
    "MIXED_PRECISIONS",
    "NON_NEGATIVE",
    "POSITIVE",
    "PROBABILITY",
    "REPORT_TO",
    "RESUME_CLASSES",
    "SECTIONS",
    "SECTION_OF",
    "SECTION_RESUME",
    "SEED",
    "VIDEO_FAMILIES",
    "VIDEO_SIZE",
    "WEIGHTING_SCHEMES",
    "Applies",
    "CheckpointOptions",
    "DataOptions",
    "FamilyOptions",
    "GuardOptions",
    "HubOptions",
    "LoraOptions",
    "MiscOptions",
    "ModelOptions",
    "PerformanceOptions",
    "Range",
    "TrainConfig",
    "TrainingOptions",
    "ValidationOptions",
    "VideoOptions",
    "config_fields",
    "opt",
    "options_class_of",
    "resume_class",
    "section_fields",
]

FamilyOptionsT = TypeVar("FamilyOptionsT", bound=FamilyOptions)


@dataclass(frozen=True, init=False)
class TrainConfig(Generic[FamilyOptionsT]):
    """Everything a LoRA run needs, frozen: one typed section per group of options, the family's own options
    (typed per family: ``TrainConfig[WanOptions]``) and the options the user set explicitly.

    Built from sections (``TrainConfig(lora=LoraOptions(rank=8))``) or from flat option names, as the flags and
    YAML keys name them (``TrainConfig(rank=8)``); an option is read through its section (``cfg.lora.rank``), or
    by a name given as data with :meth:`option`. :func:`dit_lora.setup.resolve.resolve` returns the resolved one a
    run trains with; a changed copy is :func:`dataclasses.replace` (flat names accepted).
    """

    model: ModelOptions
    data: DataOptions
    video: VideoOptions
    lora: LoraOptions
    training: TrainingOptions
    checkpoints: CheckpointOptions
    validation: ValidationOptions
    hub: HubOptions
    guards: GuardOptions
    performance: PerformanceOptions
    misc: MiscOptions
    # the family's own options (not a flag: its fields are)
    family_options: FamilyOptionsT = field(metadata={"option": False})
    #: the options the user set (a flag or a YAML key), recorded by the parser; None for a config built in code
    #: (then the options off their default count as set: :func:`dit_lora.catalogue.defaults.explicit_options`)
    explicit: frozenset[str] | None = field(default=None, compare=False, metadata={"option": False})
    #: what the parser decided in the user's place (a --config key that a command-line flag took the place of), said
    #: at the run's start and by check-data
    notes: tuple[str, ...] = field(default=(), compare=False, metadata={"option": False})
    #: the --dataset_config file as read at setup, typed (:func:`dit_lora.config.dataset_config.with_data_sets`, the
    #: one reading a run makes of it; read through :func:`~dit_lora.config.dataset_config.data_sets_of`); None
    #: without one, or before setup read it
    data_sets: DatasetConfig | None = field(default=None, compare=False, metadata={"option": False})

    def __init__(
        self,
        *,
        family_options: FamilyOptions | None = None,
        explicit: frozenset[str] | None = None,
        notes: tuple[str, ...] = (),
        data_sets: DatasetConfig | None = None,
        **values: Any,
    ) -> None:
        """Sections by their attribute name, options by their flat name (each put into its section, over a
        section given too); the family's options default to its options class's defaults."""
        sections = {attr: values.pop(attr, None) for attr in _SECTION_ATTRS}
        unknown = [name for name in values if name not in SECTION_OF]
        if unknown:
            raise TypeError(f"TrainConfig got an unexpected keyword argument {unknown[0]!r}")
        values = _normalised(values, sections)
        for cls, attr in SECTIONS.values():
            given = sections[attr] if sections[attr] is not None else cls()
            own = {k: v for k, v in values.items() if SECTION_OF[k] == attr}
            object.__setattr__(self, attr, replace(given, **own) if own else given)
        object.__setattr__(self, "explicit", None if explicit is None else frozenset(explicit))
        object.__setattr__(self, "notes", tuple(notes))
        object.__setattr__(self, "data_sets", data_sets)
        wanted = options_class(self.model.family)
        if family_options is None:
            family_options = wanted()
        elif type(family_options) is not wanted:
            raise TypeError(
                f"family_options of family `{self.model.family}` must be a {wanted.__name__}, "
                f"not a {type(family_options).__name__}"
            )
        object.__setattr__(self, "family_options", family_options)

    def option(self, name: str) -> Any:
        """The common option ``name`` when the name is data (a flag, a YAML key, a field listed by
        :func:`config_fields`): read through its section. Code that names an option reads ``cfg.<section>.<name>``,
        which the type checker follows."""
        attr = SECTION_OF.get(name)
        if attr is None:
            raise AttributeError(f"{name!r} is not a common option of {type(self).__name__}")
        return getattr(getattr(self, attr), name)

    @property
    def explicit_options(self) -> frozenset[str] | None:
        """The options the user set (:attr:`explicit`), under the name the code has always read."""
        return self.explicit

    def is_set(self, name: str) -> bool:
        """Whether the option ``name`` (common or the family's) was set: named by the user (:attr:`explicit`), or,
        for a config built in code, off its default."""
        if self.explicit is not None:
            return name in self.explicit
        own = name not in SECTION_OF
        # KeyError: an unknown name; Any: mypy types a Field's default_factory as possibly MISSING
        found: Any = {f.name: f for f in (fields(self.family_options) if own else _FIELDS)}[name]
        default = found.default if found.default is not MISSING else found.default_factory()
        return (getattr(self.family_options, name) if own else self.option(name)) != default

    def options(self) -> dict[str, Any]:
        """The common options as flat ``name: value`` pairs, in the order the reference lists them."""
        return {f.name: self.option(f.name) for f in _FIELDS}

    @classmethod
    def for_family(cls, family: str | None = None, /, **values: Any) -> TrainConfig:
        """A config for ``family`` built in code: each keyword goes where it belongs, common or the family's.

        ``TrainConfig.for_family("dit", num_classes=10, resolution=64)``. ``family`` may also come as a keyword
        (default: the schema's). A keyword that is another family's option raises the paragraph the parser gives.
        """
        explicit = values.pop("explicit", None)
        if family is None:
            family = values.pop("family", None) or DEFAULT_FAMILY
        elif values.pop("family", family) != family:
            raise TypeError("for_family: the family is given twice, with different values")
        common, own = split_values(family, values, source=None)
        return cls(family=family, family_options=options_class_of(family)(**own), explicit=explicit, **common)

    @property
    def weight_dtype(self):
        """The torch dtype --mixed_precision names: frozen weights load in it and autocast computes in it."""
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16, "no": torch.float32}[self.training.mixed_precision]

    @property
    def effective_lora_alpha(self) -> float:
        """LoRA alpha with the documented default (alpha = rank)."""
        return self.lora.effective_alpha


def _normalised(values: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    """The flat ``values`` with diffusers' spellings read as ours: --instance_data_dir is --train_data_dir, and
    ``--lora_layers "to_k,to_q"`` (one comma-separated string, as diffusers' examples take it) is a list."""
    values = dict(values)
    data = sections.get("data")

    def current(name: str) -> Any:
        if name in values:
            return values[name]
        return getattr(data, name) if data is not None else DataOptions.__dataclass_fields__[name].default

    alias = current("instance_data_dir")
    if alias is not None:  # an alias: from here on only train_data_dir is read
        train = current("train_data_dir")
        if train is not None and train != alias:
            raise UserError(
                f"Both --train_data_dir {train!r} and --instance_data_dir {alias!r} "
                f"were given; --instance_data_dir is diffusers' name for --train_data_dir. Give one of them."
            )
        values["train_data_dir"], values["instance_data_dir"] = alias, None
    lora = sections.get("lora")
    values = _init_lora_alias(values, lora)
    values = resolve_dora_alias(values, lora.lora_type if lora is not None else "lora")
    for name in ("lora_layers", "train_backbone"):
        value = values.get(name, getattr(lora, name) if lora is not None else None)
        if isinstance(value, (list, tuple)) and any("," in str(v) for v in value):
            values[name] = [p.strip() for v in value for p in str(v).split(",") if p.strip()]
    return values


#: PEFT's ``init_lora_weights`` schemes: names, not files (dit-lora starts every LoRA as ``gaussian``)
_PEFT_INIT_SCHEMES = (
    "true",
    "false",
    "gaussian",
    "eva",
    "olora",
    "pissa",
    "pissa_niter",
    "corda",
    "loftq",
    "orthogonal",
)


def _init_lora_alias(values: dict[str, Any], lora: Any) -> dict[str, Any]:
    """``--init_lora_weights FILE`` read as ``--network_weights FILE``; a PEFT scheme name, or both flags
    disagreeing, refused in one paragraph. From here on only ``network_weights`` is read."""
    given = values.get("init_lora_weights", getattr(lora, "init_lora_weights", None))
    if given is None:
        return values
    if str(given).lower() in _PEFT_INIT_SCHEMES or str(given).lower().startswith("pissa_niter_"):
        raise UserError(
            f"--init_lora_weights {given} names one of PEFT's initialisation schemes; dit-lora starts every LoRA as "
            "PEFT's gaussian one (lora_B at zero) and offers no other. --init_lora_weights (like --network_weights) "
            "takes an adapter file or folder to start from; remove it to start fresh."
        )
    other = values.get("network_weights", getattr(lora, "network_weights", None))
    if other is not None and str(other) != str(given):
        raise UserError(
            f"Both --network_weights {other!r} and --init_lora_weights {given!r} were given; they name the same "
            "thing (the adapter to start from). Give one of them."
        )
    return {**values, "network_weights": str(given), "init_lora_weights": None}


def options_class_of(family: str) -> type[FamilyOptions]:
    """The options dataclass of ``family`` (:class:`FamilyOptions` when it declares none)."""
    return options_class(family)
