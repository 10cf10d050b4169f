"""The family spec: one frozen dataclass of the components a family fills, and the fallbacks of the optional ones.

A family is a :class:`FamilySpec`: its name, its descriptive :class:`FamilyInfo`, four REQUIRED components
(``model``, ``data``, ``loss``, ``adapter``: what the loop cannot run without) and OPTIONAL components that default
to None. Every component's type is a protocol of :mod:`dit_lora.contract.capabilities`; :meth:`FamilySpec.__post_init__`
checks each one, naming the missing member and the fix. A caller reads ``spec.loss.compute_loss(...)`` or
``spec.samples`` (None: the fallback below applies; each fallback is written once, here). What a run decides lives
in ``comps.state``, a typed object of the family's own, never on the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from dit_lora.contract.capabilities import (
    AdapterExtras,
    AdapterFitting,
    AdapterIO,
    Captions,
    DataPath,
    Demo,
    Encoders,
    Exports,
    FrameRate,
    FusedKernels,
    ImageBuckets,
    Loss,
    MemoryPlan,
    ModelCard,
    ModelDefaults,
    ModelLoading,
    Precision,
    RunNotes,
    RunSetup,
    Samples,
    Trainables,
    VideoFrames,
    VideoQA,
    members,
)
from dit_lora.core.errors import UserError

if TYPE_CHECKING:  # annotations only: the registry and `dit-lora --help` read the contract without torch
    import torch

    from dit_lora.config.schema import FamilyOptions, LoraOptions, ModelOptions, TrainConfig, TrainingOptions


@dataclass(frozen=True)
class FamilyInfo:
    """What the model card, the loader and ``--compile`` say about a family (plain values, no behaviour)."""

    #: consumer class name (a diffusers pipeline or a transformers model) shown in the model card
    pipeline_class_name: str
    #: further pipeline classes the family trains with the same spec (FLUX.2: ``Flux2KleinPipeline`` besides
    #: ``Flux2Pipeline``): a folder of any of them is this family's, and ``--family`` accepts it
    other_pipeline_classes: tuple[str, ...] = ()
    #: pipeline classes of the other names of the family's registry entry whose folders this name trains too
    #: (Wan I2V: the TI2V-5B checkpoint is a ``WanPipeline`` folder; SANA-Video: one checkpoint for both tasks). A
    #: folder of another name's class not listed here is refused by ``--family`` in one paragraph
    #: (:func:`~dit_lora.setup.family_inference.check_family_trains_model`)
    also_trains_folders_of: tuple[str, ...] = ()
    #: model-card tags besides `lora` and `dit-lora`
    card_tags: tuple[str, ...] = ()
    #: the model card's ``library_name`` (the library that loads the adapter)
    library_name: str = "diffusers"
    #: the model card's ``pipeline_tag``
    pipeline_tag: str | None = None
    #: file the adapter is saved to (what `load_lora_weights` reads by default)
    adapter_weight_name: str = "pytorch_lora_weights.safetensors"
    #: default LoRA targets when --lora_layers is empty
    default_lora_layers: tuple[str, ...] = ()
    #: gradient checkpointing when --gradient_checkpointing is unset
    gradient_checkpointing_default: bool = False
    #: the text encoder ``--quantize_text_encoder`` quantizes, as users know it (None: refused, the family has none)
    text_encoder_label: str | None = None
    #: --compile: class names of the repeated blocks (empty: the model's ``_repeated_blocks``/``_no_split_modules``)
    repeated_block_classes: tuple[str, ...] = ()
    #: --compile: dynamic shapes from the first call instead of one static graph per batch shape
    compile_dynamic: bool = False
    #: --blocks_to_swap: attribute paths, from the model that gets LoRA, of its lists of repeated blocks in execution
    #: order (paths a model lacks are skipped: one Wan transformer has ``blocks``, the two A14B experts
    #: ``high.blocks`` and ``low.blocks``); empty: the family refuses --blocks_to_swap
    block_lists: tuple[str, ...] = ()
    #: FSDP2: attribute paths of modules inside a block that the model also calls outside that block's forward; each
    #: becomes a sharding unit of its own, gathered whenever it runs (diffusers' DiT calls
    #: ``transformer_blocks[0].norm1.emb`` again after the blocks, for the final layer's modulation: inside block 0's
    #: unit its weights would still be sharded there)
    fsdp_shared_modules: tuple[str, ...] = ()
    #: ``dit-lora export`` formats whose consumer loads the run's LoRA file as it is, with its own loader (each checked
    #: with that consumer's code: the ``comfyui`` tests): exporting to one has nothing to write, and the card says so
    loads_as_is: tuple[str, ...] = ()

    @property
    def pipeline_classes(self) -> tuple[str, ...]:
        """Every pipeline class the family trains: :attr:`pipeline_class_name` first."""
        return (self.pipeline_class_name, *self.other_pipeline_classes)


@dataclass(frozen=True)
class FamilySpec:
    """One model family: what the loop, the data path, the planner and the exporters call (torchtitan's TrainSpec).

    Immutable: what a run decides goes into ``comps.state`` (the family's own typed object), never here.
    """

    #: registry name, used by ``--family``
    name: str
    #: the descriptive attributes
    info: FamilyInfo
    #: REQUIRED: config checks, loading the components, what gets LoRA
    model: ModelLoading
    #: REQUIRED: the data handler (listing, screening, batching) and, optionally, the family's own data stage
    data: DataPath
    #: REQUIRED: a collated batch as the step's inputs, and the loss of one micro-batch
    loss: Loss
    #: REQUIRED: saving the adapter, and loading it back into the real consumer
    adapter: AdapterIO
    #: samples encoded once into the latent cache (None: no cache; the samples reach the loss raw)
    encoders: Encoders | None = None
    #: where captions come from (None: metadata captions, required)
    captions: Captions | None = None
    #: aspect-ratio buckets of images (None: squares only)
    image_buckets: ImageBuckets | None = None
    #: the ``(frames, height, width)`` buckets of clips (None: the family trains no video)
    video_frames: VideoFrames | None = None
    #: the frame rate the model generates at (None: not logged)
    frame_rate: FrameRate | None = None
    #: clips read through a video LLM's own processor
    video_qa: VideoQA | None = None
    #: validation samples (None: ``--validation_prompt`` is refused)
    samples: Samples | None = None
    #: the memory plan (None: ``dit-lora plan`` is refused)
    plan: MemoryPlan | None = None
    #: fused-kernel patch points (None: only the generic points)
    kernels: FusedKernels | None = None
    #: ``dit-lora export`` formats (None: the adapter only)
    exports: Exports | None = None
    #: model card snippet, rows and license (None: a card without them)
    card: ModelCard | None = None
    #: defaults for an uncatalogued model (None: none)
    defaults: ModelDefaults | None = None
    #: lines shown before training (None: none)
    notes: RunNotes | None = None
    #: hooks once the components are loaded and once the samples are screened (None: nothing)
    setup: RunSetup | None = None
    #: original weights trained besides LoRA, checkpointing switch (None: ``--train_backbone``, diffusers' switch)
    trainables: Trainables | None = None
    #: the precision policy (None: the model in the run's weight dtype, every Linear quantizable)
    precision: Precision | None = None
    #: ``--demo``'s tiny offline model (None: ``--demo`` is refused)
    demo: Demo | None = None
    #: reshape a consumer before the adapter loads (None: loaded as it is)
    fitting: AdapterFitting | None = None
    #: files beside the adapter that depend on the run (None: none)
    adapter_extras: AdapterExtras | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UserError(f"A FamilySpec needs a name (the --family it registers), got {self.name!r}.")
        if not isinstance(self.info, FamilyInfo):
            raise UserError(f"The `{self.name}` family's `info` must be a FamilyInfo, got {type(self.info).__name__}.")
        for field, proto in COMPONENTS.items():
            _check_component(self.name, field, proto, getattr(self, field), required=field in REQUIRED)

    @property
    def capabilities(self) -> tuple[type, ...]:
        """The protocols of the optional components it fills (what ``opt(applies=...)`` tags read)."""
        return tuple(proto for field, proto in OPTIONAL.items() if getattr(self, field) is not None)


#: the required components and their protocols
REQUIRED: dict[str, type] = {"model": ModelLoading, "data": DataPath, "loss": Loss, "adapter": AdapterIO}
#: the optional components and their protocols, in the order of the fields
OPTIONAL: dict[str, type] = {
    "encoders": Encoders,
    "captions": Captions,
    "image_buckets": ImageBuckets,
    "video_frames": VideoFrames,
    "frame_rate": FrameRate,
    "video_qa": VideoQA,
    "samples": Samples,
    "plan": MemoryPlan,
    "kernels": FusedKernels,
    "exports": Exports,
    "card": ModelCard,
    "defaults": ModelDefaults,
    "notes": RunNotes,
    "setup": RunSetup,
    "trainables": Trainables,
    "precision": Precision,
    "demo": Demo,
    "fitting": AdapterFitting,
    "adapter_extras": AdapterExtras,
}
#: every component
COMPONENTS: dict[str, type] = {**REQUIRED, **OPTIONAL}


def _check_component(family: str, field: str, proto: type, value: Any, *, required: bool) -> None:
    """One paragraph for a missing required component or a component lacking a member of its protocol."""
    if value is None:
        if required:
            raise UserError(
                f"The `{family}` family's spec has no `{field}` component, which every family needs: pass "
                f"`{field}=` an object with {', '.join(members(proto))} ({proto.__name__}, "
                "dit_lora.contract.capabilities)."
            )
        return
    missing = [m for m in members(proto) if not hasattr(value, m)]
    if missing:
        raise UserError(
            f"The `{family}` family's `{field}` component ({type(value).__name__}) lacks "
            f"{', '.join(missing)} of the {proto.__name__} protocol (its members: {', '.join(members(proto))}). "
            f"Implement {'them' if len(missing) > 1 else 'it'} on {type(value).__name__}"
            f"{'' if required else f', or leave `{field}` None for the default behaviour'}."
        )


# ---- the fallbacks of the optional components, in one place ------------------------------------
def require(spec: FamilySpec, field: str, what: str) -> Any:
    """``spec``'s optional component ``field``, or a ``UserError`` saying ``what`` needs it."""
    found = getattr(spec, field)
    if found is None:
        proto = OPTIONAL[field]
        raise UserError(
            f"{what} needs the {proto.__name__} capability, which the `{spec.name}` family does not "
            f"declare ({', '.join(members(proto))})."
        )
    return found


def backbone_patterns(spec: FamilySpec, lora: LoraOptions, family_options: FamilyOptions) -> list[str]:
    """The family's backbone regexes, else ``--train_backbone``."""
    return spec.trainables.backbone_patterns(lora, family_options) if spec.trainables else list(lora.train_backbone)


def extra_trainable(spec: FamilySpec, family_options: FamilyOptions) -> list[tuple[str, list[str], float]]:
    """The family's further trained groups, else none."""
    return spec.trainables.extra_trainable(family_options) if spec.trainables else []


def enable_gradient_checkpointing(spec: FamilySpec, model: torch.nn.Module) -> None:
    """The family's way, else diffusers' ``enable_gradient_checkpointing``."""
    if spec.trainables:
        spec.trainables.enable_gradient_checkpointing(model)
    else:  # diffusers' ModelMixin method; torch.nn.Module's types do not know it
        cast(Any, model).enable_gradient_checkpointing()


def expected_dtypes(spec: FamilySpec, comps, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
    """The family's precision policy, else the model in the run's weight dtype."""
    return spec.precision.expected_dtypes(comps, weight_dtype) if spec.precision else {"model": weight_dtype}


def quantize_skip_modules(spec: FamilySpec) -> list[str]:
    """Modules ``--quantize_base`` leaves alone, else none."""
    return spec.precision.quantize_skip_modules() if spec.precision else []


def generic_defaults(
    spec: FamilySpec, model: ModelOptions, family_options: FamilyOptions
) -> dict[str, tuple[Any, str]]:
    """The family's defaults for an uncatalogued model, else none."""
    return spec.defaults.generic_defaults(model, family_options) if spec.defaults else {}


def start_notes(spec: FamilySpec, cfg: TrainConfig) -> list[str]:
    """What the family chose and why, else no lines."""
    return spec.notes.start_notes(cfg) if spec.notes else []


def precision_notes(spec: FamilySpec, cfg: TrainConfig) -> list[str]:
    """Warnings about the checkpoint's stored precision, else none."""
    return spec.notes.precision_notes(cfg) if spec.notes else []


def configure(spec: FamilySpec, comps, cfg: TrainConfig) -> None:
    """The family's per-run settings recorded in ``comps.state``, when it has a setup component."""
    if spec.setup:
        spec.setup.configure(comps, cfg)


def inspect_samples(spec: FamilySpec, comps, cfg: TrainConfig, samples: list) -> None:
    """The family's check of the screened samples, when it has a setup component."""
    if spec.setup:
        spec.setup.inspect_samples(comps, cfg, samples)


def sample_notes(
    spec: FamilySpec, training: TrainingOptions, family_options: FamilyOptions, samples: list
) -> list[str]:
    """What the family says about the screened samples before it trains them (LTX-2: the clips without sound), the
    same lines in the training log and in ``check-data``; none when its notes component says nothing of them
    (``training``, ``family_options``: the run's ``cfg.training`` and ``cfg.family_options``)."""
    notes = getattr(getattr(spec, "notes", None), "sample_notes", None)  # a stand-in spec may have no notes
    return list(notes(training, family_options, samples)) if notes is not None else []


def requires_captions(spec: FamilySpec) -> bool:
    """Whether an empty caption makes a sample unusable (True without a captions component)."""
    return bool(spec.captions.requires_captions) if spec.captions else True


def caption_source(spec: FamilySpec) -> str:
    """Where captions come from (``"captions"`` without a captions component)."""
    return spec.captions.caption_source if spec.captions else "captions"


def bucket_stride(spec: FamilySpec, model: ModelOptions) -> tuple[int | None, str | None]:
    """``(stride, None)`` for a family whose images take aspect-ratio buckets, else ``(None, why only squares)``:
    its own reason, or that it declares no buckets (``model``: the run's ``cfg.model``)."""
    if spec.image_buckets is None:
        return None, f"the `{spec.name}` family declares no aspect-ratio buckets (ImageBuckets)"
    reason = spec.image_buckets.square_only()
    return (None, reason) if reason else (int(spec.image_buckets.bucket_stride(model)), None)
