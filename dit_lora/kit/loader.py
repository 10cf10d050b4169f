"""The declarative loader of the diffusers family kit: a family states what its pipeline folder holds
(:class:`PipelineParts`), and :func:`load_pipeline` owns the order every diffusion family loads it in.

The order matters for memory and is the same for every family, so a new lever (a quantization scheme, parking,
block swap) edits this file, not the families:

1. inside one ``try`` (an ``OSError``, ``ValueError`` or ``ImportError`` becomes ``load_error``'s paragraph): each
   transformer in ``quantize.diffusers_loading`` (``--quantize_base`` through diffusers' own config; from the
   folder or ``--transformer_file``), the VAE, each text encoder (``--quantize_text_encoder`` where it reaches it)
   and its tokenizer, the scheduler config when a scheduler class reads it, the family's extra encoders;
2. ``quantize.after_loading`` on each transformer (``--quantize_base fp8_scaled``, skipping what the family's
   precision keeps out of quantization), then ``quantize.keep_4bit_layout``, both before the device;
3. everything frozen (the VAE and text encoders also in eval mode);
4. ``cache_parking.park_for_load``: ``--blocks_to_swap``'s blocks and, while the cache is built, the others stay
   in host memory through ``.to()``;
5. ``.to(device)``: the transformer, the VAE, the text encoders, the extra modules;
6. the family's :meth:`DiffusionModel.build_components`: the scheduler and its state from the loaded parts.

The memory plan builds the same parts on the meta device from their configs (:func:`plan_parts`), so a family's
``plan_components`` is its ``build_components`` of them (:meth:`DiffusionModel.plan_components`, which the kit's
``DiffusionPlan`` calls by default).

Classes are named as strings and looked up in diffusers or transformers at load time (:func:`model_class`): the
heavy imports stay inside the call.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import torch

from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.kit.components import DiffusionPrecision
from dit_lora.modelfiles.pipeline_files import (
    check_pipeline_folder,
    check_safetensors,
    load_error,
    read_component_config,
)
from dit_lora.modelfiles.single_file import load_transformer
from dit_lora.modeling import cache_parking, quantize
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth
from dit_lora.setup.tokenizer_check import check_tokenizer_packages

if TYPE_CHECKING:
    from dit_lora.config.schema import LoraOptions, ModelOptions, TrainConfig


@dataclass(frozen=True)
class TextEncoder:
    """One text encoder of a pipeline folder and its tokenizer, loaded in the run's weight dtype.

    Its ``subfolder`` is also its key in ``comps.encoders`` (``text_encoder``, ``text_encoder_2``), as its
    tokenizer's subfolder is the tokenizer's key.
    """

    #: the transformers class, e.g. ``"AutoModel"`` or ``"T5EncoderModel"`` (:meth:`DiffusionModel.text_encoder_class`
    #: may choose another per folder, as FLUX.2's dev and klein do)
    cls: str
    subfolder: str = "text_encoder"
    #: the tokenizer's subfolder, None when the encoder has none
    tokenizer: str | None = "tokenizer"
    tokenizer_cls: str = "AutoTokenizer"
    #: whether ``--quantize_text_encoder`` reaches this encoder
    quantized: bool = True


@dataclass(frozen=True)
class PipelineParts:
    """What a diffusion family's pipeline folder holds and how each part loads: the family's whole say in loading."""

    #: the checkpoint's display name in messages (``load_error``, the folder checks): ``"Sana"``, ``"Z-Image"``
    kind: str
    #: a Hub id the folder checks suggest
    example_id: str
    #: the diffusers transformer class, e.g. ``"SanaTransformer2DModel"``
    transformer: str
    #: the diffusers VAE class, e.g. ``"AutoencoderDC"``
    vae: str
    #: the subfolders ``check_pipeline_folder`` says a folder needs, as it prints them ("": the weight folders,
    #: ``"transformer/, vae/, text_encoder/"``)
    folder_listing: str = ""
    #: the VAE's dtype: ``"fp32"`` (the latents are cached once from it) or the run's ``"weight"`` dtype
    vae_dtype: Literal["fp32", "weight"] = "fp32"
    text_encoders: tuple[TextEncoder, ...] = ()
    #: the diffusers scheduler class whose ``load_config`` reads ``scheduler/`` (inside the load's ``try``); None:
    #: ``scheduler/scheduler_config.json`` as it is (``{}`` when absent)
    scheduler: str | None = None
    #: the family's precision policy: its ``quantize_skip_modules`` are kept out of ``--quantize_base fp8_scaled``
    precision: DiffusionPrecision = field(default_factory=DiffusionPrecision)

    def weight_folders(self, transformer: str = "transformer") -> tuple[str, ...]:
        """The subfolders whose weights must be safetensors: the transformer, the VAE, the text encoders."""
        return (transformer, "vae", *(enc.subfolder for enc in self.text_encoders))

    def listing(self) -> str:
        """The subfolders a folder needs, as the folder checks print them (``folder_listing``, else the weight
        folders)."""
        return self.folder_listing or ", ".join(f"{folder}/" for folder in self.weight_folders())


def published_parts(
    example_id: str, *, kind: str, text_encoder_class: str | None = None, **fields: Any
) -> PipelineParts:
    """The :class:`PipelineParts` of the pipeline published as ``example_id``, read from its catalogued
    ``model_index.json``: its transformer and VAE classes, and each ``text_encoder*`` with its ``tokenizer*`` (the
    class ``text_encoder_class`` where given: ``AutoModel`` takes the encoders of other checkpoints of the family);
    ``kind`` names it in messages; ``fields``: the other fields of :class:`PipelineParts`."""
    from dit_lora.catalogue import by_hub_id

    entry = by_hub_id(example_id)
    if entry is None:
        raise KeyError(f"{example_id} is not catalogued: its pipeline's parts are read from the catalogue")
    index = entry.configs["model_index.json"]

    def tokenizer_of(key: str) -> str | None:
        name = key.replace("text_encoder", "tokenizer")
        return name if (index.get(name) or [None, None])[1] else None

    encoders = tuple(
        TextEncoder(text_encoder_class or index[key][1], subfolder=key, tokenizer=tokenizer_of(key))
        for key in sorted(index)
        if re.fullmatch(r"text_encoder(_\d+)?", key) and index[key][1]
    )
    return PipelineParts(kind, example_id, index["transformer"][1], index["vae"][1], text_encoders=encoders, **fields)


@dataclass
class LoadedParts:
    """What :func:`load_pipeline` loaded, handed to the family's :meth:`DiffusionModel.build_components` (the modules as
    ``Any``: diffusers' and transformers' classes, whose ``config`` the families read)."""

    #: the transformer(s) by key: ``{"transformer": ...}``, or Wan A14B's ``{"high": ..., "low": ...}``
    transformers: dict[str, Any]
    vae: Any
    #: by subfolder, in the order the parts list them
    text_encoders: dict[str, Any] = field(default_factory=dict)
    #: by subfolder
    tokenizers: dict[str, Any] = field(default_factory=dict)
    #: what :meth:`DiffusionModel.extra_encoders` loaded (a processor, an image encoder)
    extra: dict[str, Any] = field(default_factory=dict)
    scheduler_config: dict = field(default_factory=dict)

    @property
    def transformer(self) -> Any:
        """The (first) transformer."""
        return next(iter(self.transformers.values()))

    @property
    def text_encoder(self) -> Any:
        """The first text encoder (None for a class-conditional model such as DiT)."""
        return next(iter(self.text_encoders.values()), None)

    def encoders(self) -> dict[str, Any]:
        """``comps.encoders``: the VAE, each text encoder followed by its tokenizer, then the extra encoders."""
        out: dict[str, Any] = {"vae": self.vae}
        for name, encoder in self.text_encoders.items():
            out[name] = encoder
            tokenizer = name.replace("text_encoder", "tokenizer")
            if tokenizer in self.tokenizers:
                out[tokenizer] = self.tokenizers[tokenizer]
        out.update({k: v for k, v in self.tokenizers.items() if k not in out})
        return {**out, **self.extra}

    def components(self, scheduler: Any, state: Any) -> Components:
        """The run's components: the (first) transformer, ``scheduler``, :meth:`encoders` and the family's typed
        run ``state``."""
        return Components(model=self.transformer, scheduler=scheduler, encoders=self.encoders(), state=state)


def model_class(library: Literal["diffusers", "transformers"], name: str) -> Any:
    """The class ``name`` of ``library``, imported now (diffusers and transformers import slowly: only when a run
    loads)."""
    if library == "diffusers":
        import diffusers

        return getattr(diffusers, name)
    import transformers

    return getattr(transformers, name)


class DiffusionModel(ABC):
    """``FamilySpec.model`` of a diffusion family, loaded by the kit: the family writes its checks
    (:meth:`validate_config`), states its :class:`PipelineParts` (``parts``, or :meth:`pipeline_parts` where they
    depend on the run) and builds its components from what was loaded (:meth:`build_components`);
    :meth:`load_components` is :func:`load_pipeline`, the same for every family. LoRA goes on ``--lora_layers`` or the
    family's default layers (``info.default_lora_layers``)."""

    def __init__(self, info: FamilyInfo, parts: PipelineParts | None = None) -> None:
        self.info = info
        self.parts = parts

    @abstractmethod
    def validate_config(self, cfg: TrainConfig) -> None:
        """Family-specific checks that read only small config files (never weights)."""

    def lora_targets(self, model: torch.nn.Module, lora: LoraOptions) -> list[str]:
        """``--lora_layers``, else the family's default layers."""
        return list(lora.lora_layers or self.info.default_lora_layers)

    def pipeline_parts(self, cfg: TrainConfig) -> PipelineParts:
        """What the family's pipeline folder holds: its ``parts`` (a family whose parts depend on the run, on its
        task, overrides this)."""
        if self.parts is None:
            raise TypeError(f"{type(self).__name__} states no PipelineParts: pass parts= or override pipeline_parts")
        return self.parts

    @abstractmethod
    def build_components(self, cfg: TrainConfig, loaded: LoadedParts, device: torch.device) -> Components:
        """The run's components from the loaded, frozen parts already on ``device``: the scheduler and the family's
        typed state."""

    def load_components(self, cfg: TrainConfig, device: torch.device) -> Components:
        """The run's components on ``device`` (the model frozen), its typed state in ``comps.state``:
        :func:`load_pipeline`."""
        return load_pipeline(self, cfg, device)

    def plan_components(
        self, cfg: TrainConfig, read, depth: int | None = None, depth_key: str = "num_layers"
    ) -> Components:
        """What :meth:`load_components` loads, built on the meta device from the configs ``read`` returns
        (``depth``: that many blocks, the transformer config's ``depth_key``): :meth:`build_components` of
        :func:`plan_parts`, with no device (a family planned here takes ``device`` None: nothing moves)."""
        loaded = plan_parts(self.pipeline_parts(cfg), cfg, read, depth, depth_key)
        return cast(Any, self).build_components(cfg, loaded, None)  # None: the planned parts stay on the meta device

    def transformer_folders(self, cfg: TrainConfig) -> dict[str, str]:
        """The transformers to load, ``{key: subfolder}``: one, ``transformer/`` (Wan A14B: the trained experts)."""
        return {"transformer": "transformer"}

    def text_encoder_class(self, cfg: TrainConfig, encoder: TextEncoder) -> str:
        """The transformers class of ``encoder`` in this folder (the parts' own by default)."""
        return encoder.cls

    def extra_encoders(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """Encoders besides the VAE, text encoders and tokenizers, loaded inside the load's ``try`` (``common``: the
        revision and safetensors-only keywords); their modules go to the device with the rest. None by default."""
        return {}

    def check_folder(self, cfg: TrainConfig) -> None:
        """The checks every diffusion folder gets before anything loads: a pipeline folder, safetensors weights,
        tokenizers whose packages are installed (:func:`check_pipeline_files`)."""
        check_pipeline_files(self.pipeline_parts(cfg), cfg)


def image_encoder_parts(cfg: TrainConfig, common: dict[str, Any], encoder: str, processor: str, folder: str) -> dict:
    """An image-to-video pipeline's image encoder (the transformers class ``encoder``, fp32, eval) from
    ``image_encoder/`` and its processor (``processor``) from ``folder``, under the pipeline's keywords
    (``image_encoder`` and ``folder``): a :meth:`DiffusionModel.extra_encoders` (``common``: revision, safetensors only)."""
    path = cfg.model.pretrained_model_name_or_path
    assert path is not None  # the parser refuses a run without one (validate_static)
    revision: Any = cfg.model.revision  # None is transformers' default ("main")
    return {
        "image_encoder": model_class("transformers", encoder)
        .from_pretrained(path, subfolder="image_encoder", **dtype_kwarg("transformers", torch.float32), **common)
        .eval(),
        folder: model_class("transformers", processor).from_pretrained(path, subfolder=folder, revision=revision),
    }


def model_configs(model: ModelOptions, *folders: str) -> tuple[dict, ...]:
    """The small configs of the named ``model``'s ``folders`` (``config.json``), each ``{}`` when it cannot be read or
    no model is named (as in ``check-data``, where a family's config defaults stand in)."""
    named = bool(model.pretrained_model_name_or_path)
    return tuple((read_component_config(model, folder) if named else None) or {} for folder in folders)


def index_pipeline(index: dict, pipelines: tuple[str, ...]) -> str:
    """The pipeline class of a folder's ``model_index.json`` (``index``) among a family's ``pipelines``
    (``FamilyInfo.pipeline_classes``: FLUX.2's dev or klein): its ``_class_name`` when that is one of them, else the
    family's first."""
    named = index.get("_class_name")
    return named if named in pipelines else pipelines[0]


def folder_pipeline(model, pipelines: tuple[str, ...]) -> str:
    """:func:`index_pipeline` of the folder ``model`` (the first of ``pipelines`` when it cannot be read; nothing is
    read for a family of one pipeline)."""
    if len(pipelines) == 1:
        return pipelines[0]
    return index_pipeline(read_component_config(model, "", "model_index.json") or {}, pipelines)


def check_pipeline_files(parts: PipelineParts, cfg: TrainConfig) -> None:
    """A diffusers pipeline folder (``check_pipeline_folder``) of safetensors weights (``check_safetensors``) whose
    tokenizers' packages are installed (``check_tokenizer_packages``), each refusal one paragraph."""
    check_pipeline_folder(cfg.model, parts.kind, parts.example_id, parts.listing())
    check_safetensors(cfg.model, parts.weight_folders(), parts.kind)
    for encoder in parts.text_encoders:
        if encoder.tokenizer is not None:
            check_tokenizer_packages(cfg.model.path, encoder.tokenizer, cfg.model.revision)


def load_pipeline(model: DiffusionModel, cfg: TrainConfig, device: torch.device) -> Components:
    """Load ``model``'s pipeline in the kit's order (the module's docstring) and return the family's components."""
    parts = model.pipeline_parts(cfg)
    loaded = read_parts(model, parts, cfg)
    transformers = list(loaded.transformers.values())
    skip = parts.precision.quantize_skip_modules()
    for transformer in transformers:  # --quantize_base fp8_scaled: converted before the device
        quantize.after_loading(cfg.model, transformer, skip, device)
    quantize.keep_4bit_layout(*transformers, *loaded.text_encoders.values())
    extra = [m for m in loaded.extra.values() if isinstance(m, torch.nn.Module)]
    # extra encoders too: Wan 2.1 I2V's CLIP was left trainable
    freeze(transformers, loaded.vae, (*loaded.text_encoders.values(), *extra))
    # Several transformers (Wan A14B's experts) are placed by the family's build_components (WanExperts.place):
    # their blocks never wait for the cache and they are not moved here.
    alone = len(transformers) == 1
    for transformer in transformers:
        # --blocks_to_swap's blocks, and while the cache is built the others, stay in host memory through .to()
        cache_parking.park_for_load(transformer, model.info.block_lists, cfg, device, wait=alone)
    for module in (*(transformers if alone else ()), loaded.vae, *loaded.text_encoders.values(), *extra):
        module.to(device)
    return model.build_components(cfg, loaded, device)


def load_frozen_transformer(parts: PipelineParts, cfg: TrainConfig, subfolder: str) -> Any:
    """A further transformer of the folder that a run never trains (Ideogram 4's ``unconditional_transformer``, which
    only its samples run): read as the trained one is (the weight dtype, ``--quantize_base``, fp8_scaled skipping the
    family's list, the 4-bit layout kept), frozen and in eval mode, then in host memory (a bitsandbytes load lands on the GPU):
    the family brings it to the device while it runs."""
    try:
        with quantize.diffusers_loading(cfg.model):
            module = model_class("diffusers", parts.transformer).from_pretrained(
                cfg.model.pretrained_model_name_or_path,
                subfolder=subfolder,
                revision=cfg.model.revision,
                variant=cfg.model.variant,
                use_safetensors=True,  # never a pickle
                **dtype_kwarg("diffusers", cfg.weight_dtype),
                **quantize.diffusers_kwargs(cfg.model, cfg.weight_dtype),
            )
    except (OSError, ValueError, ImportError) as err:
        raise load_error(parts.kind, cfg.model, err) from None
    quantize.after_loading(cfg.model, module, parts.precision.quantize_skip_modules())
    quantize.keep_4bit_layout(module)
    return module.requires_grad_(False).eval().to("cpu")


def freeze(transformers: Iterable[Any], vae: Any, text_encoders: Iterable[Any] = ()) -> None:
    """Every part frozen, the VAE and the text encoders (None: absent) also in eval mode: what a load does, and a
    memory plan's parts on the meta device."""
    for transformer in transformers:
        transformer.requires_grad_(False)
    vae.requires_grad_(False).eval()
    for encoder in text_encoders:
        if encoder is not None:
            encoder.requires_grad_(False).eval()


def read_parts(model: DiffusionModel, parts: PipelineParts, cfg: TrainConfig) -> LoadedParts:
    """Every part read from the folder (or the Hub), in the run's dtypes; a failure is ``load_error``'s paragraph."""
    path, dtype = cfg.model.pretrained_model_name_or_path, cfg.weight_dtype
    common = {
        "revision": cfg.model.revision,
        "use_safetensors": True,
    }  # never a pickle: it can run code when it is read
    try:
        transformers: dict[str, Any] = {}
        cls = model_class("diffusers", parts.transformer)
        for key, subfolder in model.transformer_folders(cfg).items():
            # torch_dtype loads straight into the weight dtype: no fp32 copy of the transformer on the way
            with quantize.diffusers_loading(cfg.model):  # --quantize_base: diffusers' own quantization config
                transformers[key] = load_transformer(  # from the folder, or --transformer_file
                    cls,
                    cfg.model,
                    subfolder,
                    **dtype_kwarg("diffusers", dtype),
                    variant=cfg.model.variant,
                    **quantize.diffusers_kwargs(cfg.model, cfg.weight_dtype),
                    **common,
                )
        vae_dtype = torch.float32 if parts.vae_dtype == "fp32" else dtype
        vae = model_class("diffusers", parts.vae).from_pretrained(
            path, subfolder="vae", **dtype_kwarg("diffusers", vae_dtype), **common
        )
        loaded = LoadedParts(transformers=transformers, vae=vae)
        for encoder in parts.text_encoders:
            loaded.text_encoders[encoder.subfolder] = model_class(
                "transformers", model.text_encoder_class(cfg, encoder)
            ).from_pretrained(
                path,
                subfolder=encoder.subfolder,
                **dtype_kwarg("transformers", dtype),
                **(quantize.text_encoder_kwargs(cfg.model, cfg.weight_dtype) if encoder.quantized else {}),
                **common,
            )
            if encoder.tokenizer is not None:
                loaded.tokenizers[encoder.tokenizer] = model_class(
                    "transformers", encoder.tokenizer_cls
                ).from_pretrained(path, subfolder=encoder.tokenizer, revision=cfg.model.revision)
        if parts.scheduler is not None:
            scheduler = model_class("diffusers", parts.scheduler)
            loaded.scheduler_config = dict(
                scheduler.load_config(path, subfolder="scheduler", revision=cfg.model.revision)
            )
        loaded.extra = model.extra_encoders(cfg, common)
    except (OSError, ValueError, ImportError) as err:
        raise load_error(parts.kind, cfg.model, err) from None
    if parts.scheduler is None:  # a small file read as it is (never raises: None when it cannot be read)
        loaded.scheduler_config = read_component_config(cfg.model, "scheduler", "scheduler_config.json") or {}
    return loaded


@dataclass(frozen=True)
class BlockMix:
    """A transformer of two block lists (Black Forest Labs' double-stream then single-stream blocks: FLUX.2, FLUX.1,
    Chroma), as the memory plan counts it.

    The planner traces two and three "blocks" and extrapolates to the depth its ``depth_key`` reads (the first
    list's length), so one planned unit is one block of the first list with its share of the second, rounded up
    (FLUX.2 [dev]: 8 double, 48 single, so 1 + 6), and the extrapolation adds whole units of the real model's mix.
    A family states the config keys of both lengths and the lengths to assume where a config leaves them out."""

    #: the config keys of the two lists' lengths
    first: str = "num_layers"
    second: str = "num_single_layers"
    #: the lengths where the config has none (the family's largest model's)
    defaults: tuple[int, int] = (1, 1)

    def at_depth(self, config: dict, units: int | None) -> dict:
        """The transformer config cut to ``units`` planned units (None: unchanged): :func:`plan_parts`' ``at_depth``."""
        out = dict(config)
        if units is None:
            return out
        first, second = int(config.get(self.first, self.defaults[0])), int(config.get(self.second, self.defaults[1]))
        out[self.first] = units
        out[self.second] = units * math.ceil(second / max(first, 1))
        return out

    @property
    def swap_depth_keys(self) -> tuple[tuple[str, str], ...]:
        """Each list's length in the transformer config: ``DiffusionPlan.swap_depth_keys`` (``--blocks_to_swap``
        counts the longest: ``block_swap.per_list_counts``)."""
        return (("transformer/config.json", self.first), ("transformer/config.json", self.second))


def plan_parts(
    parts: PipelineParts,
    cfg: TrainConfig,
    read,
    depth: int | None = None,
    depth_key: str = "num_layers",
    *,
    at_depth: Callable[[dict, int | None], dict] | None = None,
) -> LoadedParts:
    """What :func:`read_parts` loads (one transformer), built on the meta device from the configs ``read`` returns
    (a ``DiffusionPlan.plan_components``' ``read``; ``depth``: that many blocks, the config's ``depth_key``, or the
    config ``at_depth(config, depth)`` returns for a transformer of several block lists), in the dtypes the load
    uses; the scheduler config as the folder holds it."""
    dtype = cfg.weight_dtype
    config = read("transformer", "config.json")
    config = at_depth(config, depth) if at_depth is not None else with_depth(config, depth_key, depth)
    transformer = diffusers_on_meta(model_class("diffusers", parts.transformer), config, dtype)
    vae_dtype = torch.float32 if parts.vae_dtype == "fp32" else dtype
    vae = diffusers_on_meta(model_class("diffusers", parts.vae), read("vae", "config.json"), vae_dtype)
    encoders = {}
    for encoder in parts.text_encoders:  # AutoModel picks the class from the config's model_type itself
        cls = None if encoder.cls == "AutoModel" else model_class("transformers", encoder.cls)
        encoders[encoder.subfolder] = transformers_on_meta(read(encoder.subfolder, "config.json"), dtype, cls)
    return LoadedParts(
        transformers={"transformer": transformer},
        vae=vae,
        text_encoders=encoders,
        scheduler_config=read("scheduler", "scheduler_config.json") or {},
    )
