"""What every diffusion family shares: text/image encoders, the latent cache and the VAE.

A diffusion family (Sana, DiT, CogVideoX) encodes each sample once into latents and conditioning,
caches them (``--cache_latents``, the default) and then releases its encoders; without the cache it
encodes every batch on the fly. Validation decodes latents with the VAE, which waits off the
accelerator between validations. Subclasses say how to encode (:meth:`encode_images`,
:meth:`encode_prompts`) and what changes the encoding (:meth:`cache_identity`); this base does the rest.
"""

from __future__ import annotations

from abc import abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components, ModelFamily
from dit_lora.contract.capabilities import Captions, Encoders
from dit_lora.data.prepare import prepare_data


class DiffusionFamily(ModelFamily):
    """A diffusion transformer trained on cached (or on-the-fly) VAE latents and prompt embeddings.

    Declares :class:`~.capabilities.Encoders` and :class:`~.capabilities.Captions`; a subclass adds what it
    implements (``capabilities = DiffusionFamily.capabilities + (Samples, ...)``). The hooks below with a
    default (notes, setup, trainables, PNG samples, plan loss) are the diffusers defaults a subclass inherits
    when it declares the capability they belong to.
    """

    capabilities = (Encoders, Captions)

    #: where a sample's caption comes from: "captions" (metadata/.txt/column) or "class_folders"
    #: (class-conditional: a folder without metadata gives each image its sub-folder's name)
    caption_source: str = "captions"
    #: whether a sample with an empty caption is unusable (skipped and quarantined)
    requires_captions: bool = True

    # ---- encoding ---------------------------------------------------------------------------
    @abstractmethod
    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """Everything besides the sample that changes the encoded latents/embeddings.

        ``comps``: the run's components, holding what the data stage decided (e.g. DiT's label map); None in
        ``check-data``, where no model is loaded.
        """

    @abstractmethod
    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """Pixels in [-1, 1] -> scaled latents in fp32.

        Images: ``(B, 3, H, W)`` -> a latent tensor. Videos: ``(B, F, 3, H, W)`` -> a latent tensor or a dict
        with ``"latents"`` plus other per-sample tensors the loss needs (e.g. ``"image_latents"``); every
        entry is cached beside the caption embeddings and arrives in the batch under its own key.
        """

    @abstractmethod
    def encode_prompts(self, comps: Components, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> conditioning tensors (batched along dim 0); ``with_negative`` adds the CFG negative."""

    # ---- data -------------------------------------------------------------------------------
    def data_handler(self, cfg: TrainConfig):
        """Images by default; video families return a :class:`~dit_lora.data.video_prepare.VideoMedia`."""
        from dit_lora.data.prepare import ImageMedia

        return ImageMedia(cfg, self)

    def build_data(self, cfg: TrainConfig, comps: Components, accelerator):
        """List, screen and cache the samples; with the cache built, release the encoders (they are done)."""
        data = prepare_data(cfg, self, comps, accelerator)
        if cfg.cache_latents:
            self.release_encoders(comps, keep_for_validation=bool(cfg.validation_prompt))
            from diffusers.training_utils import free_memory

            free_memory()
        return data

    def prepare_batch(self, comps: Components, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """Cached batches move to ``device``; raw ones are encoded here, every step (``--cache_latents false``)."""
        if cached:
            return super().prepare_batch(comps, batch, device, cached)
        from dit_lora.data.cache import as_encoding

        out = self.encode_prompts(comps, batch["caption"])
        out.update(as_encoding(self.encode_images(comps, batch["pixel_values"].to(device))))
        out["sample_index"] = batch["sample_index"]
        return out

    def release_encoders(self, comps: Components, keep_for_validation: bool) -> None:
        """Drop every encoder after caching; keep the VAE, parked on the CPU, when validation decodes."""
        vae = comps.encoders.get("vae")
        comps.encoders.clear()
        if keep_for_validation and vae is not None:
            comps.encoders["vae"] = vae.to("cpu")

    # ---- defaults of optional hooks (used when a subclass declares their capability) ----------
    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.RunNotes`: no start lines."""
        return []

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.RunNotes`: no precision warnings."""
        return []

    def quantize_skip_modules(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.Precision`: ``--quantize_base`` quantizes every Linear of the transformer."""
        return []

    def configure(self, comps: Components, cfg: TrainConfig) -> None:
        """:class:`~.capabilities.RunSetup`: nothing to record."""

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """:class:`~.capabilities.RunSetup`: nothing to check."""

    def backbone_patterns(self, cfg: TrainConfig) -> list[str]:
        """:class:`~.capabilities.Trainables`: ``--train_backbone``."""
        return list(cfg.train_backbone)

    def extra_trainable(self, cfg: TrainConfig) -> list[tuple[str, list[str], float]]:
        """:class:`~.capabilities.Trainables`: no further groups."""
        return []

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """:class:`~.capabilities.Trainables`: diffusers models' own switch."""
        model.enable_gradient_checkpointing()

    # ---- samples ----------------------------------------------------------------------------
    def validation_inputs(self, comps: Components, cfg: TrainConfig) -> dict[str, Any]:
        """``--validation_prompt`` encoded with its classifier-free-guidance negative, before the encoders go."""
        return self.encode_prompts(comps, [cfg.validation_prompt], with_negative=True)

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """Write one validation sample (a PIL image here) as ``stem.png``; return the path."""
        from dit_lora.core.fileio import atomic_write

        path = Path(stem).with_suffix(".png")
        atomic_write(path, lambda tmp: sample.save(tmp, format="PNG"))  # replaces a link there, never follows it
        return path

    @contextmanager
    def vae_on(self, comps: Components, device: torch.device) -> Iterator[Any]:
        """The VAE on ``device`` for a validation decode, then back where it waits between validations."""
        vae = comps.encoders["vae"]
        home = vae.device
        vae.to(device)
        try:
            yield vae
        finally:
            vae.to(home)

    # ---- memory plan ------------------------------------------------------------------------
    #: the config value that counts ``model``'s repeated blocks, as ``(config file, key)``: the planner traces
    #: two and three blocks and extrapolates to the real depth
    depth_key: tuple[str, str] = ("transformer/config.json", "num_layers")

    def plan_loss(self, comps: Components, batch: dict[str, Any], generator: torch.Generator,
                  cfg: TrainConfig) -> torch.Tensor:
        """The loss the planner traces (on fake tensors): :meth:`compute_loss` on the planned model."""
        return self.compute_loss(comps, comps.model, batch, generator, cfg)

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """``[(bucket, shape)]`` of one micro-batch of pixels per bucket: images ``(B, 3, H, W)``; video overrides.

        The run's largest image bucket is planned (the most pixels, so the most tokens; the square on a tie): a fixed
        ``--aspect_buckets WxH``, that size; else the ``--resolution`` square, which bounds every ``auto`` bucket.
        """
        from dit_lora.data.aspect import run_buckets
        from dit_lora.contract.legacy import as_spec
        from dit_lora.contract.spec import bucket_stride

        buckets = run_buckets(cfg.aspect_buckets, cfg.resolution, bucket_stride(as_spec(self), cfg)[0])
        height, width = max(buckets, key=lambda hw: (hw[0] * hw[1], hw[0] == hw[1]))
        return [(f"{width} x {height} px", (cfg.train_batch_size, 3, height, width))]

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached conditioning of ``batch_size`` samples (caption embeddings, class labels), as empty tensors."""
        raise NotImplementedError(f"the memory planner does not cover the {self.name} family yet")

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """Each bucket's pixels through the family's own :meth:`encode_images` (the cache step), plus conditioning."""
        from dit_lora.data.cache import as_encoding

        out = []
        for bucket, shape in self.pixel_batches(cfg):
            batch = as_encoding(self.encode_images(comps, torch.empty(shape)))
            batch.update(self.plan_conditioning(comps, cfg, shape[0]))
            out.append((bucket, batch))
        return out


def load_conditioning_image(source: str | None, samples: list | None, height: int, width: int):
    """The conditioning image of image-to-video validation, as a PIL image of ``width`` x ``height``.

    ``source`` (``--validation_image``) is cover-resized and centre-cropped as training frames are; without it the
    first frame of the first training clip (``samples[0]``) is taken. Either failure is one paragraph.
    """
    from PIL import Image, ImageOps

    from dit_lora.core.errors import UserError

    if source:
        try:
            with Image.open(source) as im:
                image = im.convert("RGB")
        except (OSError, ValueError) as err:
            raise UserError(f"--validation_image `{source}` cannot be read as an image ({err}).")
        return ImageOps.fit(image, (width, height), Image.BICUBIC)
    if not samples:
        raise UserError("Image-to-video validation needs a conditioning image: set --validation_image.")
    from dit_lora.data.video import VideoDecodeError, decode_clip

    try:
        frame = decode_clip(samples[0].path, 1, height, width)[0]
    except VideoDecodeError as err:
        raise UserError(f"Cannot take the validation image from `{samples[0].key}` ({err}); set --validation_image.")
    array = ((frame.permute(1, 2, 0) + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()
    return Image.fromarray(array)



def run_conditioning_image(family, cfg: TrainConfig, comps=None, samples: list | None = None):
    """The run's image-to-video validation image (:func:`load_conditioning_image` at the first bucket's size), kept in
    ``comps.extras["validation_image"]``: given ``samples`` (the data stage's ``inspect_samples``) it is taken from
    them; otherwise the kept one is returned, or ``--validation_image`` loaded."""
    image = comps.extras.get("validation_image") if comps is not None and samples is None else None
    if image is None:
        _, height, width = family.video_buckets(cfg)[0]
        image = load_conditioning_image(cfg.family_options.validation_image, samples, height, width)
        if comps is not None:
            comps.extras["validation_image"] = image
    return image

#: diffusers model classes given PeftAdapterMixin, one subclass each (see make_peft_capable)
_PEFT_CLASSES: dict[type, type] = {}


def make_peft_capable(model: torch.nn.Module) -> torch.nn.Module:
    """Give a diffusers model without ``PeftAdapterMixin`` (DiT) its methods (``add_adapter``, ``peft_config``...).

    The instance's class is swapped for a subclass that adds the mixin (same name and module, so a
    saved config still names the original class); weights and behaviour are unchanged.
    """
    from diffusers.loaders.peft import PeftAdapterMixin

    if isinstance(model, PeftAdapterMixin):
        return model
    base = type(model)
    if base not in _PEFT_CLASSES:
        _PEFT_CLASSES[base] = type(base.__name__, (base, PeftAdapterMixin), {"__module__": base.__module__,
                                                                             "__doc__": base.__doc__})
    model.__class__ = _PEFT_CLASSES[base]
    return model
