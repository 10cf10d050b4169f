"""The protocols of a family's components: the four required ones and the optional capabilities.

A family fills a :class:`~dit_lora.contract.spec.FamilySpec`: its ``model``, ``data``, ``loss`` and ``adapter``
components implement :class:`ModelLoading`, :class:`DataPath`, :class:`Loss` and :class:`AdapterIO`; each optional
component (``samples``, ``plan``, ``card``, ...) implements the protocol of its field, and the spec's fallbacks
(:mod:`dit_lora.contract.spec`) apply when it is None. :meth:`FamilySpec.__post_init__
<dit_lora.contract.spec.FamilySpec>` checks each component against its protocol's :func:`members`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the registry and `dit-lora --help` read this module without torch
    import torch

    from dit_lora.config.schema import FamilyOptions, LoraOptions, ModelOptions, TrainConfig, ValidationOptions


# ---- the required components (every family fills these four) --------------------------------
@runtime_checkable
class ModelLoading(Protocol):
    """``FamilySpec.model``: config checks that read only small files, loading, and what gets LoRA."""

    def validate_config(self, cfg: TrainConfig) -> None:
        """Family-specific checks that read only small config files (never weights)."""

    def load_components(self, cfg: TrainConfig, device: torch.device):
        """The :class:`~dit_lora.contract.family.Components` of a run on ``device`` (the model frozen, bf16)."""

    def lora_targets(self, model: torch.nn.Module, lora: LoraOptions) -> list[str]:
        """Module names (or name suffixes) that get LoRA layers: ``--lora_layers`` (``lora``: the run's
        ``cfg.lora``) or the family's default."""


@runtime_checkable
class DataPath(Protocol):
    """``FamilySpec.data``: how samples are listed, screened, checked, preprocessed and batched."""

    def data_handler(self, cfg: TrainConfig, spec):
        """A :class:`~dit_lora.data.prepared_data.MediaHandler` for ``spec`` (training and ``check-data`` screen with it)."""

    def build_data(self, cfg: TrainConfig, spec, comps, accelerator):
        """The training data (a :class:`~dit_lora.data.prepared_data.PreparedData`), or None for the standard path,
        :func:`dit_lora.data.prepare.prepare_data` with :meth:`data_handler`, which the training stage then runs."""


@runtime_checkable
class Loss(Protocol):
    """``FamilySpec.loss``: a collated batch as the step's inputs, and the training loss."""

    def prepare_batch(self, comps, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """A collated batch as the step's inputs on ``device`` (the loop and the fault replay both call this)."""

    def compute_loss(
        self, comps, model: torch.nn.Module, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """The scalar loss of one micro-batch (``batch["step"]``: the 1-based update, a host int, when the loop
        built the batch)."""


@runtime_checkable
class AdapterIO(Protocol):
    """``FamilySpec.adapter``: the adapter written by the consumer's own saver and loaded back by its loader."""

    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """Write the adapter so it reloads at the trained strength; return the file."""

    def load_pipeline_with_adapter(self, cfg: TrainConfig, adapter_dir: Path, device: torch.device):
        """A fresh consumer (pipeline or model) from the base model with the saved adapter loaded."""


# ---- per-run state the data path reads ----------------------------------------------------------
@dataclass(frozen=True)
class TextSettings:
    """How a run encodes captions: what the caption-length report (``data/captions.py``) counts against."""

    #: tokens the text encoder keeps (``--max_sequence_length`` or the family's default)
    max_sequence_length: int
    #: the instruction prefixed to every caption (Sana's complex human instruction), or None
    instruction: tuple[str, ...] | None = None
    #: text the pipeline encodes with every caption inside the same token length (Lumina 2's system prompt and its
    #: ``" <Prompt Start> "`` before it, Krea 2's chat-template close after it), or None: the caption-length report
    #: counts it with each caption
    prefix: str | None = None
    #: the pipeline refuses a longer caption rather than cut it (Ideogram 4): a run stops on one before encoding
    refused: bool = False


@runtime_checkable
class PromptText(Protocol):
    """An encoders component that says, without loading a weight, how a run of ``cfg`` encodes captions."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's :class:`TextSettings`."""


@runtime_checkable
class HasTextSettings(Protocol):
    """A family's per-run state (``comps.state``) that holds the run's :class:`TextSettings`."""

    text: TextSettings | None


# ---- setup ----------------------------------------------------------------------------------
@runtime_checkable
class Demo(Protocol):
    """``--demo``: build the tiny offline model and dataset named in the config."""

    def prepare_demo(self, cfg: TrainConfig) -> None:
        """Create the tiny offline model and dataset named in ``cfg`` when missing."""


@runtime_checkable
class ModelDefaults(Protocol):
    """Defaults for a model no catalogue entry matches, derived from its small configs."""

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """``{option: (value, why)}`` for the run's ``cfg.model`` and ``cfg.family_options``; a catalogue entry's
        values replace these, the user's options win over both."""


@runtime_checkable
class RunNotes(Protocol):
    """Lines shown before training: what the family chose and why, and precision warnings."""

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """Lines saying what the family chose from the checkpoint (e.g. a video size) and why."""

    def precision_notes(self, cfg: TrainConfig) -> list[str]:
        """Warnings about the checkpoint's stored precision."""


@runtime_checkable
class Precision(Protocol):
    """The precision policy and what ``--quantize_base`` leaves alone."""

    def expected_dtypes(self, comps, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """The dtype every floating parameter/buffer of each component should have (``"model"`` or an encoder;
        ``weight_dtype``: the run's, ``cfg.weight_dtype``)."""

    def quantize_skip_modules(self) -> list[str]:
        """Modules of the trained model ``--quantize_base`` leaves unquantized (beyond ``_keep_in_fp32_modules``)."""


@runtime_checkable
class RunSetup(Protocol):
    """Hooks once the components are loaded; what they decide goes into the run's state (``comps.state``), never onto
    the family."""

    def configure(self, comps, cfg: TrainConfig) -> None:
        """Record per-run settings (prompt prefixes, lengths, a fused loss) in ``comps.state``."""

    def inspect_samples(self, comps, cfg: TrainConfig, samples: list) -> None:
        """Check the screened samples against the loaded model before anything is encoded (raise ``UserError``)."""


@runtime_checkable
class Trainables(Protocol):
    """Original weights trained besides LoRA, and how activation checkpointing is switched on."""

    def backbone_patterns(self, lora: LoraOptions, family_options: FamilyOptions) -> list[str]:
        """Regexes of original weights trained at ``--backbone_learning_rate`` (``lora``, ``family_options``: the
        run's ``cfg.lora`` and ``cfg.family_options``)."""

    def extra_trainable(self, family_options: FamilyOptions) -> list[tuple[str, list[str], float]]:
        """Further original weights in a group of their own: ``(label, regexes, learning rate)``
        (``family_options``: the run's ``cfg.family_options``)."""

    def enable_gradient_checkpointing(self, model: torch.nn.Module) -> None:
        """Turn on activation checkpointing."""


# ---- data -----------------------------------------------------------------------------------
@runtime_checkable
class Encoders(Protocol):
    """Encode samples once into latents and conditioning (the latent cache) and say what changes the encoding."""

    def cache_identity(self, cfg: TrainConfig, comps=None) -> dict[str, Any]:
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

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """The run's ``(frames, height, width)`` buckets."""


@runtime_checkable
class FrameRate(Protocol):
    """Clips: the frame rate the model generates at (what the log compares ``--frame_sampling``'s rate with)."""

    def model_fps(self, model: ModelOptions) -> float:
        """Frames per second of the checkpoint's videos (e.g. Wan2.1 16, CogVideoX 1.0 8) of the run's model
        (``cfg.model``)."""


@runtime_checkable
class ImageBuckets(Protocol):
    """Images: aspect-ratio buckets (``--aspect_buckets``): the model's stride, or why it takes only squares."""

    def bucket_stride(self, model: ModelOptions) -> int:
        """Pixels per transformer token side (VAE downsampling x patch size) of the run's model (``cfg.model``):
        every bucket side is a multiple."""

    def square_only(self) -> str | None:
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

    def validation_inputs(self, comps, validation: ValidationOptions) -> dict[str, Any]:
        """What :meth:`generate` needs for ``--validation_prompt`` (``validation``: the run's ``cfg.validation``),
        prepared while the encoders are loaded."""

    def generate(self, comps, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int) -> list:
        """Validation samples from the in-memory model."""

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Samples from the consumer with the saved adapter (``comps``: the run's, for what the data stage decided)."""

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """Write one sample as ``stem`` + the family's extension; return the path."""


@runtime_checkable
class MemoryPlan(Protocol):
    """``dit-lora plan``: the components on the meta device, one batch per bucket, and the traced loss."""

    @property
    def depth_key(self) -> tuple[str, str]:
        """``(config file, key)`` counting the model's repeated blocks (read only: a frozen component may hold it)."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None):
        """What ``load_components`` loads, built from configs on the meta device (``depth``: that many blocks)."""

    def plan_batches(self, cfg: TrainConfig, comps) -> list[tuple[str, dict[str, Any]]]:
        """``[(bucket, batch)]``: one micro-batch per bucket, as ``prepare_batch`` hands it to the step."""

    def plan_loss(self, comps, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig) -> torch.Tensor:
        """The loss the planner traces on fake tensors."""


@runtime_checkable
class ModelCard(Protocol):
    """The model card's usage snippet, family rows and base-model license."""

    def usage_snippet(self, cfg: TrainConfig, repo_or_dir: str) -> str:
        """Python code that loads the adapter and generates."""

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """Family-specific rows of the training-settings table."""

    def base_model_license(self, model: ModelOptions) -> str | None:
        """The base model's license, when known (``model``: the run's ``cfg.model``)."""


@runtime_checkable
class AdapterFitting(Protocol):
    """Reshape a consumer to fit a saved adapter before its weights load (e.g. DiT's class table)."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Fit ``pipe`` to the adapter in ``adapter_dir``."""


@runtime_checkable
class AdapterExtras(Protocol):
    """Files beside the adapter that depend on the run (DiT's label map, the base model a PEFT config names)."""

    def save_adapter_extras(self, output_dir: Path, comps, options: FamilyOptions) -> None:
        """Write them into ``output_dir`` (the staging folder the adapter was just saved to; ``options``: the run's
        ``cfg.family_options``)."""


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
ALL = (
    Demo,
    ModelDefaults,
    RunNotes,
    Precision,
    RunSetup,
    Trainables,
    Encoders,
    Captions,
    VideoFrames,
    ImageBuckets,
    VideoQA,
    Samples,
    MemoryPlan,
    ModelCard,
    AdapterFitting,
    AdapterExtras,
    Exports,
    FusedKernels,
)


def members(proto: type) -> list[str]:
    """The names a component implementing ``proto`` must have (its methods, properties and annotated attributes)."""
    names = [n for n, v in vars(proto).items() if (callable(v) or isinstance(v, property)) and not n.startswith("_")]
    names += [n for n in vars(proto).get("__annotations__", {}) if not n.startswith("_")]
    return sorted(set(names))
