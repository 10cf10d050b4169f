"""Optional capabilities of a model family: what a family may offer beyond the required contract.

:class:`~dit_lora.contract.family.ModelFamily` holds the handful of methods the training loop cannot run without.
Everything else is a capability here: a runtime-checkable ``Protocol`` a family *declares* in its
``capabilities`` class attribute (``capabilities = (Samples, MemoryPlan, ...)``) and implements.
:func:`check_capabilities` verifies the declaration when the family registers, naming any missing member;
callers ask :func:`capability` (the family, or None when it does not declare the protocol) and fall back to
the behaviour a family without it gets. The ``*_or_default`` style helpers below keep those fallbacks in one
place, so a caller never re-states a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from dit_lora.core.errors import UserError

P = TypeVar("P")


# ---- setup ----------------------------------------------------------------------------------
@runtime_checkable
class Demo(Protocol):
    """``--demo``: build the tiny offline model and dataset named in the config."""

    def prepare_demo(self, cfg) -> None:
        """Create the tiny offline model and dataset named in ``cfg`` when missing."""


@runtime_checkable
class ModelDefaults(Protocol):
    """Defaults for a model no catalogue entry matches, derived from its small configs."""

    def generic_defaults(self, cfg) -> dict[str, tuple[Any, str]]:
        """``{option: (value, why)}``; a catalogue entry's values replace these, the user's options win over both."""


@runtime_checkable
class RunNotes(Protocol):
    """Lines shown before training: what the family chose and why, and precision warnings."""

    def start_notes(self, cfg) -> list[str]:
        """Lines saying what the family chose from the checkpoint (e.g. a video size) and why."""

    def precision_notes(self, cfg) -> list[str]:
        """Warnings about the checkpoint's stored precision."""


@runtime_checkable
class Precision(Protocol):
    """The precision policy and what ``--quantize_base`` leaves alone."""

    def expected_dtypes(self, comps, cfg) -> dict[str, torch.dtype]:
        """The dtype every floating parameter/buffer of each component should have (``"model"`` or an encoder)."""

    def quantize_skip_modules(self, cfg) -> list[str]:
        """Modules of the trained model ``--quantize_base`` leaves unquantized (beyond ``_keep_in_fp32_modules``)."""


@runtime_checkable
class RunSetup(Protocol):
    """Hooks once the components are loaded; what they decide goes into ``comps.extras``, never onto the family."""

    def configure(self, comps, cfg) -> None:
        """Record per-run settings (prompt prefixes, lengths, a fused loss) in ``comps.extras``."""

    def inspect_samples(self, comps, cfg, samples: list) -> None:
        """Check the screened samples against the loaded model before anything is encoded (raise ``UserError``)."""


@runtime_checkable
class Trainables(Protocol):
    """Original weights trained besides LoRA, and how activation checkpointing is switched on."""

    def backbone_patterns(self, cfg) -> list[str]:
        """Regexes of original weights trained at ``--backbone_learning_rate``."""

    def extra_trainable(self, cfg) -> list[tuple[str, list[str], float]]:
        """Further original weights in a group of their own: ``(label, regexes, learning rate)``."""

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Turn on activation checkpointing."""


# ---- data -----------------------------------------------------------------------------------
@runtime_checkable
class Encoders(Protocol):
    """Encode samples once into latents and conditioning (the latent cache) and say what changes the encoding."""

    def cache_identity(self, cfg, comps=None) -> dict[str, Any]:
        """Everything besides the sample that changes the encoding (``comps``: what the data stage decided)."""

    def encode_images(self, comps, pixel_values: torch.Tensor):
        """Pixels in [-1, 1] -> scaled latents in fp32 (a tensor, or a dict with ``"latents"``)."""

    def encode_prompts(self, comps, captions: list[str], *, with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> conditioning tensors (batched along dim 0); ``with_negative`` adds the CFG negative."""


@runtime_checkable
class Captions(Protocol):
    """Where a sample's caption comes from and whether one is required (image and video media read these)."""

    caption_source: str  #: "captions" (metadata/.txt/column) or "class_folders" (the sub-folder's name)
    requires_captions: bool  #: whether a sample with an empty caption is unusable


@runtime_checkable
class VideoFrames(Protocol):
    """Clips: the ``(frames, height, width)`` buckets the video media decode to."""

    def video_buckets(self, cfg) -> list[tuple[int, int, int]]:
        """The run's ``(frames, height, width)`` buckets."""


@runtime_checkable
class FrameRate(Protocol):
    """Clips: the frame rate the model generates at (what the log compares ``--frame_sampling``'s rate with)."""

    def model_fps(self, cfg) -> float:
        """Frames per second of the checkpoint's videos (e.g. Wan2.1 16, CogVideoX 1.0 8)."""


@runtime_checkable
class ImageBuckets(Protocol):
    """Images: aspect-ratio buckets (``--aspect_buckets``): the model's stride, or why it takes only squares."""

    def bucket_stride(self, cfg) -> int:
        """Pixels per transformer token side (VAE downsampling x patch size): every bucket side is a multiple."""

    def square_only(self, cfg) -> str | None:
        """Why the transformer takes only square inputs (its images keep the ``--resolution`` square), or None."""


@runtime_checkable
class VideoQA(Protocol):
    """Video question answering (the video LLMs): clips read through the model's own processor, not as latents."""

    def load_processing(self, path: str, model_config=None):
        """The tokenizer, frame preprocessing and model config of the model at ``path``, without its weights."""


# ---- samples, plan, card, adapter, kernels ----------------------------------------------------
@runtime_checkable
class Samples(Protocol):
    """Validation samples during training and from the reloaded adapter at the end."""

    def validation_inputs(self, comps, cfg) -> dict[str, Any]:
        """What :meth:`generate` needs for ``--validation_prompt``, prepared while the encoders are loaded."""

    def generate(self, comps, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Validation samples from the in-memory model."""

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Samples from the consumer with the saved adapter (``comps``: the run's, for what the data stage decided)."""

    def save_sample(self, sample: Any, stem: Path, cfg) -> Path:
        """Write one sample as ``stem`` + the family's extension; return the path."""


@runtime_checkable
class MemoryPlan(Protocol):
    """``dit-lora plan``: the components on the meta device, one batch per bucket, and the traced loss."""

    depth_key: tuple[str, str]  #: ``(config file, key)`` counting the model's repeated blocks

    def plan_components(self, cfg, read, depth: int | None = None):
        """What ``load_components`` loads, built from configs on the meta device (``depth``: that many blocks)."""

    def plan_batches(self, cfg, comps) -> list[tuple[str, dict[str, Any]]]:
        """``[(bucket, batch)]``: one micro-batch per bucket, as ``prepare_batch`` hands it to the step."""

    def plan_loss(self, comps, batch: dict[str, Any], generator: torch.Generator, cfg) -> torch.Tensor:
        """The loss the planner traces on fake tensors."""


@runtime_checkable
class ModelCard(Protocol):
    """The model card's usage snippet, family rows and base-model license."""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """Python code that loads the adapter and generates."""

    def card_settings(self, cfg) -> dict[str, Any]:
        """Family-specific rows of the training-settings table."""

    def base_model_license(self, cfg) -> str | None:
        """The base model's license, when known."""


@runtime_checkable
class AdapterFitting(Protocol):
    """Reshape a consumer to fit a saved adapter before its weights load (e.g. DiT's class table)."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Fit ``pipe`` to the adapter in ``adapter_dir``."""


@runtime_checkable
class AdapterExtras(Protocol):
    """Files beside the adapter that depend on the run (DiT's label map, the base model a PEFT config names)."""

    def save_adapter_extras(self, output_dir: Path, comps, cfg) -> None:
        """Write them into ``output_dir`` (the staging folder the adapter was just saved to)."""


@runtime_checkable
class Exports(Protocol):
    """``dit-lora export``: the adapter rewritten for other consumers (e.g. ComfyUI's key names)."""

    def export_formats(self) -> dict[str, str]:
        """``{format: one-line description}`` of what :meth:`export_adapter` writes."""

    def export_adapter(self, output_dir: Path, fmt: str) -> list[Path]:
        """Write the finished run's adapter in ``output_dir`` as ``fmt`` next to it; return the files written.

        Each file's path comes from :func:`dit_lora.output.export.export_target` (inside the folder, never a user's
        own file) and carries :func:`dit_lora.output.export.export_metadata`.
        """


@runtime_checkable
class FusedKernels(Protocol):
    """The family's fused-kernel patch points (``families/<name>/kernels.py``)."""

    def kernel_patch_points(self) -> list:
        """The blocks the fused kernels patch, and how."""


#: every capability, for messages and checks
ALL = (Demo, ModelDefaults, RunNotes, Precision, RunSetup, Trainables, Encoders, Captions, VideoFrames, ImageBuckets,
       VideoQA, Samples, MemoryPlan, ModelCard, AdapterFitting, AdapterExtras, Exports, FusedKernels)


def members(proto: type) -> list[str]:
    """The names a class declaring ``proto`` must have (its methods and annotated attributes)."""
    names = [n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")]
    names += [n for n in vars(proto).get("__annotations__", {}) if not n.startswith("_")]
    return sorted(set(names))


def _family_name(family_or_cls) -> str:
    cls = family_or_cls if isinstance(family_or_cls, type) else type(family_or_cls)
    name = getattr(family_or_cls, "name", "") or ""
    return f"`{name}` ({cls.__name__})" if name else cls.__name__


def check_capabilities(family_or_cls) -> None:
    """Refuse a family whose ``capabilities`` declare a protocol it does not implement, naming the missing member.

    Also refuses an entry of ``capabilities`` that is not a capability protocol.
    """
    declared = tuple(getattr(family_or_cls, "capabilities", ()) or ())
    who = _family_name(family_or_cls)
    for proto in declared:
        if not (isinstance(proto, type) and getattr(proto, "_is_protocol", False)):
            raise UserError(f"Model family {who} declares {proto!r} as a capability; capabilities are the protocols "
                            f"of dit_lora.contract.capabilities ({', '.join(p.__name__ for p in ALL)}).")
        missing = [m for m in members(proto) if not hasattr(family_or_cls, m)]
        if missing:
            raise UserError(
                f"Model family {who} declares the {proto.__name__} capability but does not implement "
                f"{', '.join(missing)} (every member of {proto.__name__}: {', '.join(members(proto))}). Implement "
                f"{'them' if len(missing) > 1 else 'it'}, or drop {proto.__name__} from its `capabilities`."
            )


def capability(family, proto: type[P]) -> P | None:
    """``family`` when it declares ``proto`` in its ``capabilities``, else None (the caller's fallback applies)."""
    return family if proto in tuple(getattr(family, "capabilities", ()) or ()) else None


# ---- the fallbacks of optional hooks, in one place ----------------------------------------------
def backbone_patterns(family, cfg) -> list[str]:
    """The family's backbone regexes (:class:`Trainables`), else ``--train_backbone``."""
    found = capability(family, Trainables)
    return found.backbone_patterns(cfg) if found else list(cfg.train_backbone)


def extra_trainable(family, cfg) -> list[tuple[str, list[str], float]]:
    """The family's further trained groups (:class:`Trainables`), else none."""
    found = capability(family, Trainables)
    return found.extra_trainable(cfg) if found else []


def enable_gradient_checkpointing(family, model: torch.nn.Module) -> None:
    """The family's way (:class:`Trainables`), else diffusers' ``enable_gradient_checkpointing``."""
    found = capability(family, Trainables)
    if found:
        found.enable_gradient_checkpointing(model)
    else:
        model.enable_gradient_checkpointing()


def expected_dtypes(family, comps, cfg) -> dict[str, torch.dtype]:
    """The family's precision policy (:class:`Precision`), else the model in the run's weight dtype."""
    found = capability(family, Precision)
    return found.expected_dtypes(comps, cfg) if found else {"model": cfg.weight_dtype}


def quantize_skip_modules(family, cfg) -> list[str]:
    """Modules ``--quantize_base`` leaves alone (:class:`Precision`), else none."""
    found = capability(family, Precision)
    return found.quantize_skip_modules(cfg) if found else []


def generic_defaults(family, cfg) -> dict[str, tuple[Any, str]]:
    """The family's defaults for an uncatalogued model (:class:`ModelDefaults`), else none."""
    found = capability(family, ModelDefaults)
    return found.generic_defaults(cfg) if found else {}


def start_notes(family, cfg) -> list[str]:
    """:meth:`RunNotes.start_notes`, else none."""
    found = capability(family, RunNotes)
    return found.start_notes(cfg) if found else []


def precision_notes(family, cfg) -> list[str]:
    """:meth:`RunNotes.precision_notes`, else none."""
    found = capability(family, RunNotes)
    return found.precision_notes(cfg) if found else []


def configure(family, comps, cfg) -> None:
    """:meth:`RunSetup.configure` when declared."""
    found = capability(family, RunSetup)
    if found:
        found.configure(comps, cfg)


def inspect_samples(family, comps, cfg, samples: list) -> None:
    """:meth:`RunSetup.inspect_samples` when declared."""
    found = capability(family, RunSetup)
    if found:
        found.inspect_samples(comps, cfg, samples)


def requires_captions(family) -> bool:
    """Whether an empty caption makes a sample unusable (:class:`Captions`; True without it)."""
    found = capability(family, Captions)
    return bool(found.requires_captions) if found else True


def caption_source(family) -> str:
    """Where captions come from (:class:`Captions`; ``"captions"`` without it)."""
    found = capability(family, Captions)
    return found.caption_source if found else "captions"


def bucket_stride(family, cfg) -> tuple[int | None, str | None]:
    """``(stride, None)`` for a family whose images take aspect-ratio buckets (:class:`ImageBuckets`), else
    ``(None, why only squares)``: its own reason, or that it declares no buckets."""
    found = capability(family, ImageBuckets)
    if found is None:
        return None, f"the `{family.name}` family declares no aspect-ratio buckets (ImageBuckets)"
    reason = found.square_only(cfg)
    return (None, reason) if reason else (int(found.bucket_stride(cfg)), None)


def require(family, proto: type[P], what: str) -> P:
    """``family`` as ``proto``, or a ``UserError`` saying ``what`` needs that capability."""
    found = capability(family, proto)
    if found is None:
        raise UserError(f"{what} needs the {proto.__name__} capability, which the `{family.name}` family does not "
                        f"declare ({', '.join(members(proto))}).")
    return found
