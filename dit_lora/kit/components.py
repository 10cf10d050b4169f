"""The component bases every diffusion family fills its :class:`~dit_lora.contract.spec.FamilySpec` with.

A diffusion family (Sana, DiT, Wan, CogVideoX) encodes each sample once into latents and conditioning, caches them
(``--cache_latents``, the default) and then releases its encoders; without the cache it encodes every batch on the
fly. Validation decodes latents with the VAE, which waits off the accelerator between validations. A family
subclasses the bases below, one per component of the spec (the model's, :class:`~dit_lora.kit.loader.DiffusionModel`,
lives beside the loader it calls), and writes only what is its own: how it encodes
(:class:`DiffusionEncoders`), its loss (:class:`DiffusionLoss`), how it samples (:class:`DiffusionSamples`) and what
the planner builds (:class:`DiffusionPlan`). The components that need another one (the loss encodes raw batches, the
samples encode the validation prompt, the plan traces the loss) are handed it when the family builds its spec.

The plain functions (:func:`release_encoders`, :func:`encoded_batch`, :func:`save_png`, :func:`vae_on`,
:func:`image_pixel_batches`, :func:`encoded_plan_batches`) are the shared code the bases call; :func:`ddpm_schedule`
and :func:`ddpm_noised` what an epsilon-prediction DDPM family (DiT, PixArt-alpha) trains with.
"""

from __future__ import annotations

import os
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.config.schema import FamilyOptions, LoraOptions, ValidationOptions
from dit_lora.contract.capabilities import ImageBuckets
from dit_lora.contract.family import Components
from dit_lora.core.fileio import atomic_write
from dit_lora.data.aspect import run_buckets
from dit_lora.data.cache import as_encoding
from dit_lora.data.data_sets import distinct, set_configs
from dit_lora.data.image_media import ImageMedia
from dit_lora.data.masks import LATENT_KEY, PIXEL_KEY, latent_mask
from dit_lora.data.prepare import prepare_data
from dit_lora.data.synthetic.shapes import (
    SHAPES_CLASS_MARKER,
    SHAPES_MARKER,
    check_demo_resolution,
    make_shapes_class_dataset,
    make_shapes_dataset,
)
from dit_lora.kit.demo_data import add_control_images, demo_data
from dit_lora.kit.latents import scaled_latents
from dit_lora.kit.sampling import checkpoint_sampler
from dit_lora.modelfiles.pipeline_files import is_local, model_stamp

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, FamilyOptions, TrainConfig, TrainingOptions


# ---- the shared code ----------------------------------------------------------------------------
#: the encoders a validation sample decodes with: the VAE, and the audio VAE of a family that makes sound (LTX-2)
DECODERS = ("vae", "audio_vae")


def release_encoders(comps: Components, keep_for_validation: bool) -> None:
    """Drop every encoder after caching; keep the decoders (:data:`DECODERS`), parked on the CPU, when validation
    decodes."""
    decoders = {key: comps.encoders[key] for key in DECODERS if comps.encoders.get(key) is not None}
    comps.encoders.clear()
    if keep_for_validation:
        comps.encoders.update({key: module.to("cpu") for key, module in decoders.items()})


def prepare_and_release(cfg: TrainConfig, spec, comps: Components, accelerator):
    """List, screen and cache the samples (:func:`~dit_lora.data.prepare.prepare_data`); with the cache built,
    release the encoders (they are done) and give their memory back to the device (:func:`give_back_released`)."""
    data = prepare_data(cfg, spec, comps, accelerator)
    if cfg.data.cache_latents:
        held = [weakref.ref(m) for m in comps.encoders.values() if isinstance(m, torch.nn.Module)]
        release_encoders(comps, keep_for_validation=bool(cfg.validation.validation_prompt))
        # what release_encoders let go of (a kept VAE is the same module, parked on the CPU)
        kept = {id(m) for m in comps.encoders.values()}
        give_back_released([ref for ref in held if id(ref()) not in kept])
    return data


def give_back_released(released: list[weakref.ref]) -> None:
    """The device's cache emptied after encoders were dropped (``released``: weak references to them), with a full
    garbage collection first only when one of them is still alive (a reference cycle may hold it).

    Why not always collect: refcounting frees an encoder the moment its last reference goes, which is every family's
    case today, and a full collection then frees none of its memory while it walks every object of the process
    (about 0.4 s of CPU in a fresh run, more in a process that holds more, paid by every cached run)."""
    # here: only a run that built the cache needs it (a spec is also built by `plan` and `check-data`)
    from accelerate.utils.memory import clear_device_cache

    clear_device_cache(garbage_collection=any(ref() is not None for ref in released))


def to_device(batch: dict[str, Any], device) -> dict[str, Any]:
    """A cached batch's tensors on ``device`` (non-blocking), everything else as it is."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def encoded_batch(encoders, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
    """Cached batches move to ``device``; raw ones are encoded here by ``encoders``, every step
    (``--cache_latents false``; a mask averaged to the latents' grid, as the cache does)."""
    if cached:
        return to_device(batch, device)
    out = encoders.encode_prompts(comps, batch["caption"])
    out.update(as_encoding(encoders.encode_images(comps, batch["pixel_values"].to(device))))
    if PIXEL_KEY in batch:  # --masked_loss: the mask to the latent grid, as the cache stores it
        out[LATENT_KEY] = latent_mask(batch[PIXEL_KEY].to(device, non_blocking=True), out["latents"].shape[-2:])
    out["sample_index"] = batch["sample_index"]
    return out


def save_png(sample: Any, stem: Path) -> Path:
    """Write one validation sample (a PIL image) as ``stem.png``; return the path."""
    path = Path(stem).with_suffix(".png")
    atomic_write(path, lambda tmp: sample.save(tmp, format="PNG"))  # replaces a link there, never follows it
    return path


def model_identity(cfg: TrainConfig, family: str, folders: tuple[str, ...] = ("vae", "text_encoder")) -> dict[str, Any]:
    """The cache identity's model keys every diffusion family records: the family, the model (a local folder by its
    absolute path), the stamp of the ``folders`` that encode, the revision and the variant."""
    path = cfg.model.path
    return {
        "family": family,
        "model": os.path.abspath(path) if is_local(path) else path,
        "model_stamp": model_stamp(cfg.model, folders),
        "revision": cfg.model.revision,
        "variant": cfg.model.variant,
    }


def posterior_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """Pixels in [-1, 1] -> an ``AutoencoderKL``'s posterior mean, shifted and scaled by its config, in fp32
    (deterministic, so the cache is too)."""
    with torch.no_grad():
        latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent_dist.mode()
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    return ((latents - shift) * vae.config.scaling_factor).float()


def ddpm_schedule(scheduler_config: dict):
    """The DDPM training schedule of a checkpoint's betas (its scheduler config's), predicting epsilon, as DiT and
    PixArt-alpha train."""
    from diffusers import DDPMScheduler  # slow: only when a model is loaded or planned

    keys = ("num_train_timesteps", "beta_start", "beta_end", "beta_schedule", "trained_betas")
    betas = {k: scheduler_config[k] for k in keys if scheduler_config.get(k) is not None}
    return DDPMScheduler(**betas, prediction_type="epsilon")


def ddpm_noised(scheduler, latents: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """``(noise, timesteps, noisy latents)``: the noise, then a uniform timestep per sample, drawn from ``generator``
    in that order (a resumed run draws the same), the latents noised by ``scheduler`` (:func:`ddpm_schedule`)."""
    device = latents.device
    noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
    count = scheduler.config.num_train_timesteps
    timesteps = torch.randint(0, count, (latents.shape[0],), generator=generator, device=device)
    return noise, timesteps, scheduler.add_noise(latents, noise, timesteps)


@contextmanager
def module_on(module: Any, device: torch.device) -> Iterator[Any]:
    """``module`` on ``device`` while it lasts (a validation's VAE, Ideogram 4's unconditional transformer), then back
    where it waits between validations."""
    home = module.device  # a diffusers model's (its first parameter's)
    try:  # a move that runs out of memory half way goes home too
        module.to(device)
        yield module
    finally:
        module.to(home)


def vae_on(comps: Components, device: torch.device):
    """The VAE on ``device`` for a validation decode (:func:`module_on`)."""
    return module_on(comps.encoders["vae"], device)


def image_pixel_batches(
    data: DataOptions, training: TrainingOptions, stride: int | None
) -> list[tuple[str, tuple[int, ...]]]:
    """``[(bucket, shape)]`` of one micro-batch of pixels, ``(B, 3, H, W)``, for the run's largest image bucket
    (``data``, ``training``: a data set's ``cfg.data`` and ``cfg.training``).

    The most pixels (so the most tokens; the square on a tie): a fixed ``--aspect_buckets WxH``, that size; else the
    ``--resolution`` square, which bounds every ``auto`` bucket (``stride``: the family's bucket stride, None for
    squares only).
    """
    buckets = run_buckets(data.aspect_buckets, data.resolution, stride)
    height, width = max(buckets, key=lambda hw: (hw[0] * hw[1], hw[0] == hw[1]))
    return [(f"{width} x {height} px", (training.train_batch_size, 3, height, width))]


def encoded_plan_batches(
    encode_images: Callable[[torch.Tensor], Any], pixel_batches, conditioning: Callable[[int], dict[str, torch.Tensor]]
) -> list[tuple[str, dict[str, Any]]]:
    """Each bucket's pixels through the family's own encoder (the cache step), plus its conditioning."""
    out = []
    for bucket, shape in pixel_batches:
        batch = as_encoding(encode_images(torch.empty(shape)))
        batch.update(conditioning(shape[0]))
        out.append((bucket, batch))
    return out


# ---- the component bases ------------------------------------------------------------------------
class DiffusionEncoders(ABC):
    """``FamilySpec.encoders``: samples encoded once into the latent cache; a family says how and what changes it."""

    @abstractmethod
    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """Everything besides the sample that changes the encoded latents/embeddings (``comps``: what the data stage
        decided; None in ``check-data``, where no model is loaded)."""

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Pixels in [-1, 1] -> scaled latents in fp32: here an image VAE's (``comps.encoders["vae"]``, kept in fp32)
        posterior mode, shifted and scaled by its config (:func:`~.latents.scaled_latents`).

        Images: ``(B, 3, H, W)`` -> a latent tensor. Videos: ``(B, F, 3, H, W)`` -> a latent tensor or a dict with
        ``"latents"`` plus other per-sample tensors the loss needs (e.g. ``"image_latents"``); every entry is cached
        beside the caption embeddings and arrives in the batch under its own key.
        """
        return scaled_latents(comps.encoders["vae"], pixel_values)

    @abstractmethod
    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions -> conditioning tensors (batched along dim 0); ``with_negative`` adds the CFG negative."""


@dataclass  # not frozen: the Captions protocol declares plain attributes (a spec's components are never written)
class DiffusionCaptions:
    """``FamilySpec.captions``: captions from metadata, required (a class-conditional family: ``"class_folders"``)."""

    #: "captions" (metadata/.txt/column) or "class_folders" (a folder without metadata: the sub-folder's name)
    caption_source: str = "captions"
    #: whether a sample with an empty caption is unusable (skipped and quarantined)
    requires_captions: bool = True


class DiffusionData:
    """``FamilySpec.data``: images through the standard data path, the encoders released once the cache is built
    (a video family returns its :class:`~dit_lora.data.video_prepare.VideoMedia` from :meth:`data_handler`)."""

    def data_handler(self, cfg: TrainConfig, spec):
        """The image :class:`~dit_lora.data.prepared_data.MediaHandler`."""
        return ImageMedia(cfg, spec)

    def build_data(self, cfg: TrainConfig, spec, comps: Components, accelerator):
        """:func:`prepare_and_release`."""
        return prepare_and_release(cfg, spec, comps, accelerator)


class DiffusionLoss(ABC):
    """``FamilySpec.loss``: cached batches moved to the device, raw ones encoded by ``encoders``; a family writes
    :meth:`compute_loss`."""

    def __init__(self, encoders: DiffusionEncoders) -> None:
        self.encoders = encoders

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """:func:`encoded_batch` with the family's encoders."""
        return encoded_batch(self.encoders, comps, batch, device, cached)

    @abstractmethod
    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """The scalar loss of one micro-batch from :meth:`prepare_batch`."""


class DiffusionSamples(ABC):
    """``FamilySpec.samples``: the validation prompt encoded with its negative, PNG files; a family writes how it
    generates (from the in-memory model, and from the consumer with the saved adapter)."""

    #: the diffusers sampler class when the checkpoint's scheduler config names none (None: the training scheduler)
    fallback_sampler: str | None = None

    def __init__(self, encoders: DiffusionEncoders) -> None:
        self.encoders = encoders

    def sampler(self, comps: Components) -> Any:
        """The in-memory pipeline's scheduler: the class the checkpoint's scheduler config names
        (``comps.state.scheduler_config``), from that config; else :attr:`fallback_sampler`, else the training
        scheduler."""
        sampler = checkpoint_sampler(getattr(comps.state, "scheduler_config", None), self.fallback_sampler)
        return sampler if sampler is not None else comps.scheduler

    def validation_inputs(self, comps: Components, validation: ValidationOptions) -> dict[str, Any]:
        """``--validation_prompt`` encoded with its classifier-free-guidance negative, before the encoders go."""
        prompt = cast(str, validation.validation_prompt)  # set: the run asks for these only under --validation_prompt
        return self.encoders.encode_prompts(comps, [prompt], with_negative=True)

    @abstractmethod
    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Validation samples from the in-memory model."""

    @abstractmethod
    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Samples from the consumer with the saved adapter."""

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """:func:`save_png` (a video family writes its own format)."""
        return save_png(sample, stem)


class PipelineSamples(DiffusionSamples):
    """``FamilySpec.samples`` through the family's diffusers pipeline (:attr:`pipeline`): the in-memory transformer in
    a pipeline without text encoders, with the VAE moved in to decode, the cached prompt embeddings and the
    checkpoint's sampler (:meth:`sampler`); and the reloaded pipeline from the prompt; both at ``--resolution`` and
    the run's validation settings, under autocast where the transformer's dtype is not the VAE's. A family states the
    pipeline class and its call's own arguments (:meth:`call_kwargs`); a pipeline of other parts or inputs (DiT's: no
    text parts, class ids, its own size) states them too (:attr:`text_parts`, :attr:`sized`, :meth:`cached_inputs`,
    :meth:`prompt_inputs`)."""

    #: the diffusers pipeline class name, e.g. ``"PixArtAlphaPipeline"``
    pipeline: str = ""
    #: the pipeline's text parts, None in the in-memory pipeline (the cached conditioning stands in for them)
    text_parts: tuple[str, ...] = ("tokenizer", "text_encoder")
    #: whether the call takes the run's ``--resolution`` as its height and width
    sized: bool = True

    def call_kwargs(self, options: FamilyOptions, cached: bool) -> dict[str, Any]:
        """The pipeline call's own arguments (``options``: the run's ``cfg.family_options``; ``cached``: the in-memory
        model's call, from the cached embeddings; else the reloaded pipeline's, from the prompt); none here."""
        return {}

    def cached_inputs(self, comps: Components, cond: dict[str, Any], validation: ValidationOptions) -> dict[str, Any]:
        """The in-memory call's inputs: the cached conditioning ``cond``, ``--num_validation_images`` of it
        (``validation``: the run's ``cfg.validation``)."""
        return {"num_images_per_prompt": validation.num_validation_images, **cond}

    def prompt_inputs(self, pipe, prompt: str, num_images: int) -> dict[str, Any]:
        """The reloaded pipeline's inputs: ``num_images`` images of ``prompt``."""
        return {"prompt": prompt, "num_images_per_prompt": num_images}

    def _call(self, pipe, cfg: TrainConfig, seed: int, device: torch.device, cached: bool, **inputs: Any) -> list:
        """``pipe`` at the run's validation settings, seeded, without gradients."""
        generator = torch.Generator(device=device).manual_seed(seed)
        size = {"height": cfg.data.resolution, "width": cfg.data.resolution} if self.sized else {}
        # The pipeline hands the fp32 VAE's latents in the transformer's dtype: autocast reconciles them
        mixed = pipe.transformer.dtype != pipe.vae.dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=pipe.transformer.dtype, enabled=mixed):
            return pipe(
                **size,
                num_inference_steps=cfg.validation.validation_inference_steps,
                guidance_scale=cfg.validation.validation_guidance_scale,
                generator=generator,
                **inputs,
                **self.call_kwargs(cfg.family_options, cached),
            ).images

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the cached conditioning (:meth:`cached_inputs`)."""
        import diffusers  # slow: only at validation

        device = next(model.parameters()).device
        inputs = self.cached_inputs(comps, cond, cfg.validation)
        with vae_on(comps, device) as vae:
            pipe = getattr(diffusers, self.pipeline)(
                **dict.fromkeys(self.text_parts), vae=vae, transformer=model, scheduler=self.sampler(comps)
            )
            pipe.set_progress_bar_config(disable=True)
            return self._call(pipe, cfg, seed, device, True, **inputs)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """``num_images`` images of ``prompt`` from the reloaded pipeline (the final validation)."""
        device = pipe.transformer.device
        return self._call(pipe, cfg, seed, device, False, **self.prompt_inputs(pipe, prompt, num_images))


class DiffusionPlan(ABC):
    """``FamilySpec.plan``: one image micro-batch per bucket through the family's own encoder, the family's loss
    traced; a family writes :meth:`plan_conditioning` (and :meth:`plan_components` where the kit does not load it)."""

    #: the config value that counts the model's repeated blocks, as ``(config file, key)``: the planner traces two
    #: and three blocks and extrapolates to the real depth
    depth_key: tuple[str, str] = ("transformer/config.json", "num_layers")
    #: the family's model component (``diffusion_spec`` wires it): the default :meth:`plan_components` builds with it
    model: Any = None

    def __init__(self, encoders: DiffusionEncoders, loss: DiffusionLoss, buckets: ImageBuckets | None = None) -> None:
        self.encoders, self.loss, self.buckets = encoders, loss, buckets

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What ``load_components`` loads, built from configs on the meta device (``depth``: that many blocks): the
        kit model's own (:meth:`~dit_lora.kit.loader.DiffusionModel.plan_components`)."""
        if self.model is None:
            raise TypeError(f"{type(self).__name__} has no model to plan: build it with diffusion_spec, or override")
        return self.model.plan_components(cfg, read, depth, self.depth_key[1])

    @abstractmethod
    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached conditioning of ``batch_size`` samples (caption embeddings, class labels), as empty tensors."""

    def plan_loss(
        self, comps: Components, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """The family's loss on the planned model."""
        return self.loss.compute_loss(comps, comps.model, batch, generator, cfg)

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """:func:`image_pixel_batches` at the family's bucket stride (a video family plans clips instead)."""
        buckets = self.buckets
        out = []
        for config in set_configs(cfg):  # each data set's sizes (one config without --dataset_config)
            stride = None if buckets is None or buckets.square_only() else int(buckets.bucket_stride(config.model))
            out += image_pixel_batches(config.data, config.training, stride)
        return distinct(out)

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """:func:`encoded_plan_batches` with the family's encoder and conditioning."""
        return encoded_plan_batches(
            lambda px: self.encoders.encode_images(comps, px),
            self.pixel_batches(cfg),
            lambda size: self.plan_conditioning(comps, cfg, size),
        )


class DiffusionNotes:
    """``FamilySpec.notes``: no lines by default; a family overrides what it says."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the family chose from the checkpoint, and why (none here)."""
        return []

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision (none here)."""
        return []


class DiffusionPrecision:
    """``FamilySpec.precision``: the model in the run's weight dtype, every Linear quantizable; a family overrides."""

    def expected_dtypes(self, comps: Components, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """The model in the run's weight dtype."""
        return {"model": weight_dtype}

    def quantize_skip_modules(self) -> list[str]:
        """``--quantize_base`` quantizes every Linear of the transformer."""
        return []


class Fp32VaePrecision(DiffusionPrecision):
    """``FamilySpec.precision`` of a transformer and a text encoder in the run's weight dtype beside a VAE kept in fp32
    (the latents are cached once from it: a low-precision encode would lose what the fp32 load keeps);
    ``text_encoder=False``: a class-conditional model without one (DiT)."""

    def __init__(self, text_encoder: bool = True) -> None:
        self.text_encoder = text_encoder

    def expected_dtypes(self, comps: Components, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """The transformer and the text encoder in the run's weight dtype; the VAE in fp32."""
        encoder = {"text_encoder": weight_dtype} if self.text_encoder else {}
        return {"model": weight_dtype, **encoder, "vae": torch.float32}


class DiffusionTrainables:
    """``FamilySpec.trainables``: what a spec without the component gets (``--train_backbone``, no further groups,
    diffusers' own checkpointing switch); a family overrides what it trains besides LoRA or how it checkpoints."""

    def backbone_patterns(self, lora: LoraOptions, family_options: FamilyOptions) -> list[str]:
        """``--train_backbone``."""
        return list(lora.train_backbone)

    def extra_trainable(self, family_options: FamilyOptions) -> list[tuple[str, list[str], float]]:
        """No further groups."""
        return []

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Diffusers' own switch."""
        cast(Any, model).enable_gradient_checkpointing()  # a diffusers ModelMixin's method; Module's types lack it


class DiffusionSetup:
    """``FamilySpec.setup``: nothing recorded, nothing checked; a family overrides what it decides per run."""

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """Record the run's settings in ``comps.state`` (nothing here)."""

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """Check the screened samples against the loaded model (nothing here)."""


class ShapesDemo:
    """``FamilySpec.demo``: the family's tiny random pipeline (``build(cfg)``, its ``demo.py``, at the run's
    ``--pretrained_model_name_or_path`` and of the family's demo options) and the shapes data set at ``size`` pixels
    (None: ``--resolution``; a function: the size it gives the run, after the build), captioned or, ``classes``, in
    one folder per class (a class-conditional family's), with ``controls`` control images per sample named in its
    metadata (an edit model's: :func:`~dit_lora.kit.demo_data.add_control_images`). Before anything
    is built or drawn: ``check(cfg)``, the
    family's refusal of a ``--resolution`` its pipeline cannot take, then, where the shapes are drawn at
    ``--resolution``, the demo's own size range (:func:`~dit_lora.data.synthetic.shapes.check_demo_resolution`)."""

    def __init__(
        self,
        build: Callable[[TrainConfig], Any],
        size: int | Callable[[TrainConfig], int] | None = None,
        check: Callable[[TrainConfig], None] | None = None,
        *,
        classes: bool = False,
        controls: int = 0,
    ) -> None:
        self.build, self.size, self.check, self.classes, self.controls = build, size, check, classes, controls

    @classmethod
    def tiny(
        cls,
        module: Any,
        builder: str,
        resolution_rule: Callable[[int], None] | None = None,
        *,
        variant: str | None = None,
        **kwargs: Any,
    ) -> ShapesDemo:
        """The demo of a family whose tiny pipeline is ``module.<builder>(path, [variant,] seed=0)`` (``module``: its
        ``demo.py``; the builder looked up at each call, so that a test can stand in for it), its ``--resolution``
        refused first by ``resolution_rule(resolution)`` where given; ``kwargs``: as the constructor takes them."""

        def build(cfg: TrainConfig) -> None:
            variants = () if variant is None else (variant,)
            getattr(module, builder)(cfg.model.path, *variants, seed=0)

        if resolution_rule is not None:
            if "check" in kwargs:
                raise TypeError("ShapesDemo.tiny takes a resolution_rule or a check, not both")
            kwargs["check"] = lambda cfg: resolution_rule(cfg.data.resolution)
        return cls(build, **kwargs)

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Build the tiny model named in ``cfg`` and, into an empty ``--train_data_dir``, the shapes images (a folder
        that already holds other data is trained on as it is, and said so)."""
        # sizes first: nothing is built (or drawn at 100000 px) for a size refused anyway
        if self.check is not None:
            self.check(cfg)
        if self.size is None:
            check_demo_resolution(cfg.data.resolution)
        self.build(cfg)
        size = (self.size(cfg) if callable(self.size) else self.size) or cfg.data.resolution
        marker, make = (
            (SHAPES_CLASS_MARKER, make_shapes_class_dataset) if self.classes else (SHAPES_MARKER, make_shapes_dataset)
        )
        drawn = demo_data(cfg, marker, lambda folder: make(folder, n=cfg.model.demo_num_images, size=size, seed=0))
        if drawn and self.controls and cfg.data.train_data_dir:
            add_control_images(cfg.data.train_data_dir, per_sample=self.controls)
