"""The option sections of the training config: every common option, its default, its type and its documentation.

Each section (model, data, video, lora, ...) is a frozen dataclass of fields declared with :func:`opt`, carrying its
help text in ``metadata["help"]``; ``--help``, the documentation's options reference and unknown-key suggestions are
all generated from here. :class:`FamilyOptions` is the base of a family's own options. The config that gathers the
sections, :class:`dit_lora.config.schema.TrainConfig`, sits above :mod:`dit_lora.config.owners` (which reads the
sections and looks up each family's options class), so this module imports neither.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, cast

from dit_lora.registry import available


@dataclass(frozen=True)
class Range:
    """The values a numeric option accepts: always finite, then between ``low`` and ``high`` (each optional).

    ``low_open``/``high_open`` exclude the bound itself; ``why`` says what the value does, for the error message.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def __contains__(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high or (self.high_open and value == self.high))

    def __str__(self) -> str:
        """The rule as the docs and messages write it: ``> 0``, ``>= 0``, ``in (0, 1]`` or ``finite``."""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return "finite"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
FINITE = Range()  # any finite number
PROBABILITY = Range(0, 1, high_open=True)
BETA = Range(0, 1, high_open=True, why="AdamW's moment decay; 0.9 and 0.999 are the usual values")
#: numpy's seed (which accelerate's set_seed calls) takes 0 <= seed < 2**32
SEED = Range(0, 2**32 - 1, why="numpy's random seed takes 0 to 2**32 - 1")


@dataclass(frozen=True)
class Applies:
    """The families an option means something to, by the capabilities they declare (``contract/capabilities.py``).

    A family applies when it declares any capability of ``any_of`` and none of ``none_of`` (protocol names, so this
    module imports no family). ``kind`` names those families in messages (``video families``); ``instead`` says
    what the other families use. An option given explicitly to a family it does not apply to is refused
    (:mod:`dit_lora.config.applies`): that family would ignore it.
    """

    any_of: tuple[str, ...]
    kind: str
    instead: str = ""
    none_of: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.kind


#: clips: frame counts, buckets and the video column (CogVideoX, Wan: their media read these)
VIDEO_FAMILIES = Applies(
    ("VideoFrames",), "video families", "an image family's size is --resolution; a video LLM's frames are --num_frames"
)
#: a clip's height and width: the video families' media, and the video LLMs' memory plan
VIDEO_SIZE = Applies(
    ("VideoFrames", "VideoQA"), "video families and video LLMs", "an image family's size is --resolution"
)
#: images (not clips): the image families' media
IMAGE_FAMILIES = Applies(
    ("Encoders",),
    "image families",
    "a video family's size is --height/--width or --frame_buckets; a video LLM's clips are "
    "--num_frames of --height x --width",
    none_of=("VideoFrames",),
)
#: latents, the latent cache and sampled images or clips: every diffusion family
DIFFUSION_FAMILIES = Applies(
    ("Encoders",),
    "diffusion families",
    "a video LLM reads its clips through the model's own processor and validates by answering --validation_prompt",
)
#: the demo models whose size --demo_size picks (Sana, DiT); the video families pick theirs by version or variant
IMAGE_DEMOS = Applies(
    ("Encoders",),
    "the image families' demos",
    "CogVideoX's demo is --demo_cogvideox_version, Wan's --demo_wan_variant",
    none_of=("VideoFrames",),
)


def opt(
    default: Any,
    help: str,
    *,
    choices: Sequence[str] | None = None,
    section: str = "",
    valid: Range | None = None,
    resume: str | None = None,
    applies: Applies | None = None,
) -> Any:
    """Declare a config field with its help text, allowed values for string choices, ``valid``: the range of
    a numeric option (checked at parse time, whichever way the value was given, and listed in the docs), and
    ``resume``: whether a resumed run may change it (``"free"``) or not (``"fixed"``: it changes what the saved
    state means); unset, the section's class in :data:`SECTION_RESUME` applies (:func:`resume_class`). ``applies``:
    the families the option means something to (None: every family); given to another family, it is refused."""
    if resume not in (None, *RESUME_CLASSES):
        raise ValueError(f"resume must be one of {RESUME_CLASSES}, not {resume!r}")
    meta = {"help": help, "choices": choices, "section": section, "valid": valid, "resume": resume, "applies": applies}
    if isinstance(default, list):
        return field(default_factory=default.copy, metadata=meta)  # a fresh list per config
    return field(default=default, metadata=meta)


#: ``fixed``: a resume refuses a change (it changes what the checkpoint's weights, optimizer state or data position
#: mean); ``free``: a resume takes the new value and records the change (:mod:`dit_lora.training.resume_options`)
RESUME_CLASSES = ("fixed", "free")
#: the class of a common option that names none. No section default for a family's options: each declares its own,
#: and tests/config/test_schema.py fails for one that does not.
SECTION_RESUME = {
    "model": "fixed",
    "data": "fixed",
    "video": "fixed",
    "lora": "fixed",
    "training": "free",
    "checkpoints": "free",
    "validation": "free",
    "hub": "free",
    "guards": "free",
    "kernels": "free",
    "misc": "free",
}


def resume_class(f) -> str | None:
    """``"fixed"`` or ``"free"`` for a config field (:func:`opt`'s ``resume``, else its section's), or None when
    the declaration classifies it nowhere (a resume then treats it as fixed: the safe side)."""
    return f.metadata.get("resume") or SECTION_RESUME.get(f.metadata.get("section", ""))


@dataclass(frozen=True)
class FamilyOptions:
    """Base of a family's own options (``families/<name>/options.py``): fields declared with :func:`opt`, in a
    ``@dataclass(frozen=True)`` (frozen as the rest of the resolved config; Python refuses a non-frozen subclass).

    ``TITLE`` names the section its flags are listed under in ``--help`` and the options reference. A family without
    options of its own gets this class, empty.
    """

    TITLE: ClassVar[str] = ""


class RegisteredFamilies(Sequence):
    """``--family``'s choices: the names in the family registry (:mod:`dit_lora.families`), read when asked, so
    the help, the options reference and the check list every registered family, one registered later too."""

    def _names(self) -> list[str]:
        return available()

    def __getitem__(self, index):
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())


WEIGHTING_SCHEMES = ("none", "logit_normal", "mode", "sigma_sqrt", "cosmap")
LR_SCHEDULERS = (
    "constant",
    "constant_with_warmup",
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
)
MIXED_PRECISIONS = ("bf16", "fp16", "no")
REPORT_TO = ("tensorboard", "wandb", "none")


@dataclass(frozen=True)
class ModelOptions:
    """The model to fine-tune and how it loads."""

    family: str = opt(
        "sana",
        "Model family (its registry entry: dit_lora/families/<package>/__init__.py). `dit-lora train` reads "
        "it from the model when neither this nor the config names it.",
        choices=RegisteredFamilies(),
        section="model",
    )
    pretrained_model_name_or_path: str | None = opt(
        None, "Hub id or local folder of the diffusers pipeline to fine-tune.", section="model"
    )
    revision: str | None = opt(None, "Hub revision (branch, tag or commit) of the pretrained model.", section="model")
    variant: str | None = opt(None, "Weight variant to load, e.g. `bf16` for repos that ship one.", section="model")
    transformer_file: str | None = opt(
        None,
        "A single .safetensors file holding the transformer (original or ComfyUI key names): loaded with diffusers' from_single_file, configured by the diffusers "
        "folder or Hub id of --pretrained_model_name_or_path, which still gives the VAE, text encoder and scheduler. "
        "For the transformer classes diffusers loads from one file (each family's page says whether it has one).",
        section="model",
        applies=DIFFUSION_FAMILIES,
    )
    quantize_base: str = opt(
        "none",
        "Load the model that gets LoRA (the diffusion transformer; a video LLM's language model) quantized through "
        "the libraries' own configs: `nf4` (bitsandbytes 4-bit, also on a CPU), `int8` (bitsandbytes LLM.int8) or "
        "`fp8` (torchao fp8 weights: CUDA GPUs of compute capability 8.9+); or `fp8_scaled` (dit-lora's own: fp8 "
        "weights with a scale per 64 inputs, computed in the run's precision: near-bf16 quality at about half the "
        "weight memory, on any GPU or CPU, no extra library; prefer it to nf4 when it fits). LoRA goes on the "
        "quantized linears and "
        "trains in fp32; the adapter loads into the ordinary unquantized pipeline. Quantized weights cannot be "
        "trained in full (--train_backbone).",
        choices=("none", "nf4", "int8", "fp8", "fp8_scaled"),
        section="model",
    )
    quantize_text_encoder: bool = opt(
        False,
        "Load the text encoder nf4-quantized through transformers' "
        "`BitsAndBytesConfig`, so the cache can be built on a small GPU (with --cache_latents, the default, the "
        "encoder is released after caching; without it, it stays loaded and encodes every step). The embeddings then "
        "carry its quantization error, and cached ones are kept apart from unquantized ones. Needs bitsandbytes; a model without a text encoder "
        "has nothing to quantize.",
        section="model",
    )
    demo: bool = opt(
        False,
        "Build a tiny randomly initialised pipeline at pretrained_model_name_or_path and a generated "
        "shapes dataset at train_data_dir when they are missing (offline demo and tests).",
        section="model",
    )
    demo_size: str = opt(
        "tiny",
        "Size of the demo model built by --demo.",
        choices=("tiny", "small"),
        section="model",
        applies=IMAGE_DEMOS,
    )
    demo_num_images: int = opt(
        32, "Number of generated images (or clips) in the demo dataset.", section="model", valid=POSITIVE
    )


@dataclass(frozen=True)
class DataOptions:
    """The training data: where it is, how it is read, cropped, captioned and cached."""

    train_data_dir: str | None = opt(
        None,
        "Folder of images with captions in metadata.jsonl/metadata.csv (`file_name` + caption column) "
        "or a .txt file beside each image.",
        section="data",
        resume="free",
    )
    instance_data_dir: str | None = opt(
        None,
        "Another name for --train_data_dir, as diffusers' DreamBooth scripts call it (give one of the two).",
        section="data",
        resume="free",
    )
    instance_prompt: str | None = opt(
        None,
        "One caption for every image (or clip) of the data, e.g. `a photo of sks dog`, as diffusers' DreamBooth "
        "scripts use it: per-image captions (caption files, metadata, the caption column) are then not read.",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    caption_extension: str = opt(
        ".txt",
        "Extension of the caption file beside each image or clip in --train_data_dir (`.txt`; kohya's sd-scripts "
        "use `.caption`).",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    dataset_name: str | None = opt(
        None,
        "A Hub dataset id, a local folder `datasets` opens (one written by `save_to_disk` too), or a single "
        ".parquet/.csv/.json/.jsonl file.",
        section="data",
        resume="free",
    )
    dataset_split: str = opt(
        "train", "The split of --dataset_name to train on.", section="data", resume="free", applies=DIFFUSION_FAMILIES
    )
    dataset_config_name: str | None = opt(
        None, "Config name passed to `datasets.load_dataset`.", section="data", resume="free"
    )
    image_column: str = opt(
        "image", "Dataset column holding the images.", section="data", resume="free", applies=IMAGE_FAMILIES
    )
    caption_column: str = opt("text", "Dataset/metadata column holding the captions.", section="data", resume="free")
    max_train_samples: int | None = opt(
        None, "Use at most this many samples (deterministic prefix).", section="data", resume="free", valid=POSITIVE
    )
    max_bad_samples_fraction: float = opt(
        0.05,
        "Stop when more than this fraction of samples cannot be read (they are skipped and named).",
        section="data",
        resume="free",
        valid=Range(0, 1, high_open=True),
    )
    resolution: int = opt(
        1024,
        "Training resolution in pixels (square); must be divisible by the model's latent stride.",
        section="data",
        valid=POSITIVE,
        applies=IMAGE_FAMILIES,
    )
    max_image_pixels: int | None = opt(
        None,
        "Images with more pixels than this are left out (quarantined, named) from their header, before decoding: "
        "a small file can hold a huge image. Default: 64 times the --resolution's pixels (8 times its size on "
        "each side), at least 8192x8192 (67 MP). Raise it to train on larger images; decoding threads are sized by it.",
        section="data",
        resume="free",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    aspect_buckets: str = opt(
        "auto",
        "Image sizes (image families): `auto` puts each image in the aspect-ratio bucket nearest its shape, "
        "about --resolution squared pixels in the model's stride (kohya's --enable_bucket); `square` crops every "
        "image to the --resolution square; `WIDTHxHEIGHT` (e.g. 768x512, multiples of the stride) crops every "
        "image to that one size. Images are resized to cover their size, then cropped.",
        section="data",
        applies=IMAGE_FAMILIES,
    )
    center_crop: bool = opt(
        False,
        "Center-crop after resizing; otherwise a random crop, fixed per image.",
        section="data",
        applies=IMAGE_FAMILIES,
    )
    random_flip: bool = opt(
        False,
        "Randomly flip images horizontally (reproducible per epoch and sample).",
        section="data",
        applies=DIFFUSION_FAMILIES,
    )
    caption_dropout_probability: float = opt(
        0.0,
        "Train this share of samples on the empty caption (decided per seed, epoch and sample, so a resume drops "
        "the same ones), which keeps the unconditional prediction of classifier-free guidance trained. The empty "
        "caption is encoded once, into the latent cache. 0 (the default) never drops; 0.05 to 0.1 is usual. "
        "A class-conditional family that drops its class labels itself refuses it (its page says so).",
        section="data",
        valid=Range(0, 1, high_open=True, why="the share of samples trained on the empty caption"),
        resume="fixed",
        applies=DIFFUSION_FAMILIES,
    )
    cache_latents: bool = opt(
        True,
        "Precompute latents and text embeddings once into a disk cache keyed by content, model and "
        "resolution; the VAE and text encoder leave memory afterwards.",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    cache_dir: str | None = opt(
        None,
        "Where the latent cache lives (default: $HF_HOME/dit-lora/cache or ~/.cache/dit-lora/cache).",
        section="data",
        resume="free",
        applies=DIFFUSION_FAMILIES,
    )
    dataloader_num_workers: int = opt(
        0,
        "Worker processes for data loading (0: load in the main process).",
        section="data",
        resume="free",
        valid=NON_NEGATIVE,
    )
    max_sequence_length: int | None = opt(
        None,
        "Maximum caption length in tokens. Default: the family's, from the model's configs (a family whose "
        "transformer has a fixed text length requires exactly that; its page and `dit-lora models` give the values).",
        section="data",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class VideoOptions:
    """Clips: frames per clip, their size and buckets, and the video column."""

    video_column: str | None = opt(
        None,
        "Videos: with --caption_column prompts.txt, the file listing one clip per line (e.g. videos.txt; the "
        "finetrainers layout); with --dataset_name, the column holding the videos (default `video`).",
        section="video",
        resume="free",
        applies=VIDEO_FAMILIES,
    )
    max_num_frames: int | None = opt(
        None,
        "Frames per training clip, of the form 4k+1. Default: the frame count the checkpoint was trained at "
        "(`dit-lora models` lists it per checkpoint); latent frames are padded as the model's pipeline pads them.",
        section="video",
        valid=POSITIVE,
        applies=VIDEO_FAMILIES,
    )
    height: int | None = opt(
        None,
        "Video height in pixels (multiple of 16). Default: the height the checkpoint was trained at "
        "(`dit-lora models` lists it per checkpoint).",
        section="video",
        valid=POSITIVE,
        applies=VIDEO_SIZE,
    )
    width: int | None = opt(
        None,
        "Video width in pixels (multiple of 16). Default: the width the checkpoint was trained at "
        "(`dit-lora models` lists it per checkpoint).",
        section="video",
        valid=POSITIVE,
        applies=VIDEO_SIZE,
    )
    frame_buckets: str | None = opt(
        None,
        "Comma-separated FRAMESxHEIGHTxWIDTH buckets, e.g. `49x480x720,49x480x480,25x480x720`: each clip goes to "
        "the bucket with the most frames it can fill, then the nearest aspect ratio; a batch never mixes "
        "buckets. Replaces --max_num_frames/--height/--width.",
        section="video",
        applies=VIDEO_FAMILIES,
    )
    frame_sampling: str = opt(
        "uniform",
        "Which frames of a longer clip are used: `uniform` (evenly spread over the whole clip, like the diffusers "
        "video trainers) or `first` (consecutive frames from the start, keeping the clip's speed).",
        choices=("uniform", "first"),
        section="video",
        applies=VIDEO_FAMILIES,
    )


@dataclass(frozen=True)
class LoraOptions:
    """What trains: the LoRA adapters and any backbone weights unfrozen beside them."""

    rank: int = opt(16, "LoRA rank.", section="lora", valid=POSITIVE)
    lora_alpha: float | None = opt(
        None,
        "LoRA alpha (scale = alpha / rank). Default: equal to rank. The exported adapter has the "
        "scale folded into lora_B and stores alpha = rank, so diffusers' load_lora_weights, PEFT and a loader "
        "that reads no alpha (taking alpha = rank) all apply it at scale 1.0.",
        section="lora",
        valid=POSITIVE,
    )
    lora_dropout: float = opt(
        0.0, "Dropout probability on the LoRA input.", section="lora", valid=PROBABILITY, resume="free"
    )
    lora_layers: list[str] = opt(
        [],
        "Module names (or suffixes) that get LoRA, space- or comma-separated (`to_q to_k` or diffusers' "
        "`to_q,to_k`). Default: the family's attention projections.",
        section="lora",
    )
    train_backbone: list[str] = opt(
        [],
        "Regex patterns of original parameters to unfreeze and train in full (e.g. `norm`, `time_embed`, "
        "`caption_projection`); saved to dit_lora_backbone.safetensors.",
        section="lora",
    )
    backbone_learning_rate: float = opt(
        1e-5,
        "Learning rate for the parameters unfrozen by --train_backbone.",
        section="lora",
        resume="free",
        valid=POSITIVE,
    )
    loraplus_lr_ratio: float | None = opt(
        None,
        "LoRA+ (PEFT): learning-rate ratio of lora_B to lora_A; e.g. 16. Off when unset.",
        section="lora",
        resume="free",
        valid=Range(1, why="LoRA+ trains lora_B this many times faster than lora_A; typical: 4 to 16"),
    )

    @property
    def effective_alpha(self) -> float:
        """LoRA alpha with the documented default (alpha = rank)."""
        return float(self.rank if self.lora_alpha is None else self.lora_alpha)


@dataclass(frozen=True)
class TrainingOptions:
    """The optimisation: output folder, seed, batches, schedule, optimizer, precision."""

    output_dir: str = opt(
        "dit-lora-output", "Where the adapter, model card, samples and checkpoints go.", section="training"
    )
    overwrite_output_dir: bool = opt(
        False,
        "Allow replacing a finished run's adapter in output_dir; without --resume_from_checkpoint it also "
        "removes an earlier run's checkpoint folders at start (a run still using the folder is never overridden).",
        section="training",
    )
    seed: int = opt(
        0, "Seed for initialisation, data order, noise and timesteps.", section="training", resume="fixed", valid=SEED
    )
    train_batch_size: int = opt(4, "Batch size per process.", section="training", resume="fixed", valid=POSITIVE)
    gradient_accumulation_steps: int = opt(
        1, "Micro-batches accumulated per optimizer update.", section="training", resume="fixed", valid=POSITIVE
    )
    num_train_epochs: int = opt(1, "Epochs to train when max_train_steps is unset.", section="training", valid=POSITIVE)
    max_train_steps: int | None = opt(
        None, "Optimizer updates to run; overrides num_train_epochs.", section="training", valid=POSITIVE
    )
    learning_rate: float = opt(1e-4, "Learning rate of the LoRA adapters.", section="training", valid=POSITIVE)
    scale_lr: bool = opt(
        False,
        "Multiply learning rates by gradient_accumulation_steps * train_batch_size * num_processes.",
        section="training",
    )
    lr_scheduler: str = opt(
        "constant", "Learning-rate schedule (diffusers `get_scheduler`).", choices=LR_SCHEDULERS, section="training"
    )
    lr_warmup_steps: int = opt(
        0, "Warm-up updates of the learning-rate schedule.", section="training", valid=NON_NEGATIVE
    )
    lr_num_cycles: int = opt(1, "Number of restarts for cosine_with_restarts.", section="training", valid=Range(1))
    lr_power: float = opt(1.0, "Power of the polynomial schedule.", section="training", valid=POSITIVE)
    max_grad_norm: float = opt(
        1.0,
        "Clip the total gradient norm to this value (0 disables clipping).",
        section="training",
        valid=Range(0, why="0 disables clipping"),
    )
    adam_beta1: float = opt(0.9, "AdamW beta1.", section="training", valid=BETA)
    adam_beta2: float = opt(0.999, "AdamW beta2.", section="training", valid=BETA)
    adam_weight_decay: float = opt(1e-4, "AdamW weight decay.", section="training", valid=NON_NEGATIVE)
    adam_epsilon: float = opt(1e-8, "AdamW epsilon.", section="training", valid=POSITIVE)
    use_8bit_adam: bool = opt(
        False,
        "Use bitsandbytes' 8-bit AdamW (the `quant` extra; bitsandbytes >= 0.49 also runs it on a CPU).",
        section="training",
        resume="fixed",
    )
    mixed_precision: str = opt(
        "bf16",
        "Compute precision. fp16 is refused unless --allow_fp16.",
        choices=MIXED_PRECISIONS,
        section="training",
        resume="fixed",
    )
    allow_fp16: bool = opt(
        False,
        "Permit --mixed_precision fp16 (with a GradScaler); fp16's overflow (65504 at most) is the usual cause of "
        "NaN losses in attention and large text encoders.",
        section="training",
    )
    allow_tf32: bool = opt(True, "Allow TF32 matmuls on Ampere+ GPUs.", section="training")
    gradient_checkpointing: bool | None = opt(
        None,
        "Recompute activations in backward to save memory. Default: the family's (its page and `dit-lora "
        "models` say which; the start-of-run defaults block shows the value taken).",
        section="training",
    )


@dataclass(frozen=True)
class CheckpointOptions:
    """When checkpoints are written and how a run resumes from one."""

    checkpointing_steps: int = opt(
        500,
        "Write checkpoint-<step>/ every this many updates (0: never).",
        section="checkpoints",
        valid=Range(0, why="0 writes no checkpoints"),
    )
    checkpoints_total_limit: int | None = opt(
        None,
        "Keep at most this many checkpoints; older ones are pruned only after a new one is complete.",
        section="checkpoints",
        valid=POSITIVE,
    )
    resume_from_checkpoint: str | None = opt(
        None, "`latest` or a checkpoint folder to continue from.", section="checkpoints"
    )
    allow_changed_options: bool = opt(
        False,
        "Resume even though options that change what the checkpoint means differ from the ones it was trained with "
        "(--rank, --lora_alpha, --train_batch_size, --seed, the model, the resolution, the data set, ...), which is "
        "refused otherwise. The changes are recorded in train_summary.json and the model card either way.",
        section="checkpoints",
    )


@dataclass(frozen=True)
class ValidationOptions:
    """Validation samples and the experiment tracker."""

    validation_prompt: str | None = opt(
        None, "Prompt sampled every validation_steps and at the end.", section="validation"
    )
    validation_steps: int = opt(
        100, "Sample validation images every this many updates.", section="validation", valid=POSITIVE
    )
    num_validation_images: int = opt(
        2, "Images per validation run.", section="validation", valid=POSITIVE, applies=DIFFUSION_FAMILIES
    )
    validation_inference_steps: int = opt(
        20,
        "Sampler steps for validation images.",
        section="validation",
        valid=POSITIVE,
        applies=DIFFUSION_FAMILIES,
    )
    validation_guidance_scale: float = opt(
        4.5,
        "Classifier-free guidance scale for validation images.",
        section="validation",
        valid=NON_NEGATIVE,
        applies=DIFFUSION_FAMILIES,
    )
    report_to: str = opt("tensorboard", "Experiment tracker.", choices=REPORT_TO, section="validation")
    logging_dir: str = opt("logs", "Tracker folder, relative to output_dir.", section="validation")
    tracker_project_name: str = opt("dit-lora", "Project name for the tracker.", section="validation")


@dataclass(frozen=True)
class HubOptions:
    """The push of the adapter to the Hugging Face Hub at the end."""

    push_to_hub: bool = opt(
        False, "Upload adapter, model card and samples (never checkpoints) at the end.", section="hub"
    )
    hub_model_id: str | None = opt(None, "Hub repository to push to, e.g. `me/my-lora`.", section="hub")
    hub_private: bool = opt(False, "Create the Hub repository as private.", section="hub")
    push_later_ok: bool = opt(
        False,
        "With --push_to_hub: when the start-of-run check finds that the push cannot happen (no or invalid token, Hub "
        "unreachable or offline, repository not writable), train anyway after a warning instead of stopping; the end "
        "of the run then prints the `dit-lora push` command to upload the adapter later.",
        section="hub",
    )


@dataclass(frozen=True)
class GuardOptions:
    """The non-finite guard, its rollbacks and verdict, the memory plan's gate, the fault drills."""

    finite_guard: bool = opt(
        True,
        "Skip any optimizer step whose loss or total gradient norm is non-finite on any process; parameters, "
        "optimizer moments, step count and LR schedule stay exactly as they were.",
        section="guards",
    )
    max_consecutive_skips: int = opt(
        8,
        "Roll back to the last good in-memory snapshot after this many skipped steps in a row.",
        section="guards",
        valid=POSITIVE,
    )
    rollback_lr_factor: float = opt(
        0.5,
        "Multiply every learning rate by this factor at each rollback.",
        section="guards",
        valid=Range(
            0, 1, low_open=True, why="each rollback multiplies the learning rates by it (0.5 halves them, 1 keeps them)"
        ),
    )
    max_rollbacks: int = opt(
        3,
        "Stop (exit code 3) after this many rollbacks, keeping the last finite adapter and the diagnosis.",
        section="guards",
        valid=NON_NEGATIVE,
    )
    max_skipped_fraction: float = opt(
        0.5,
        "A run that skipped more than this fraction of its updates (or whose last check window applied none) ends "
        "with exit code 3 and the diagnosis instead of `finished`; its last finite adapter is still written and "
        "labelled as such in train_summary.json and the model card. 1.0 turns the verdict off.",
        section="guards",
        valid=Range(
            0,
            1,
            low_open=True,
            why="e.g. 0.5 calls a run that skipped more than half of its updates a failure; 1 turns that verdict off",
        ),
    )
    skip_loss_spikes: float | None = opt(
        None,
        "Also skip steps whose loss or gradient norm is more than this many standard deviations above its recent "
        "running mean (e.g. 6). Off when unset.",
        section="guards",
        valid=POSITIVE,
    )
    ignore_memory_plan: bool = opt(
        False,
        "Start even when the memory plan (`dit-lora plan`, run at start without loading weights) predicts more "
        "than the device holds; also skips the plan.",
        section="guards",
    )
    attention_canary: bool = opt(
        True,
        "At start, run a tiny forward and backward through the run's attention on adversarial inputs; fall back "
        "to PyTorch's math attention if it returns NaN/Inf.",
        section="guards",
    )
    inject_faults: str | None = opt(
        None,
        "Fault drill (off by default): comma-separated KIND@STEP[-END][:rankR] with KIND one of nan_loss, "
        "inf_loss, nan_grad, inf_grad, nan_batch, inf_batch, overflow; plus `broken_attention` (a non-math "
        "attention kernel that returns NaN) and `broken_kernel` (a fused modulate kernel that mixes up samples; "
        "needs --kernels on). E.g. `nan_loss@3,inf_grad@5-12:rank1`.",
        section="guards",
    )


@dataclass(frozen=True)
class KernelOptions:
    """Fused kernels, attention backend, torch.compile and the CPU's memory reuse."""

    cpu_reuse_memory: bool = opt(
        True,
        "On a CPU (Linux), from the first training step: keep the memory a step frees for the next one (glibc's "
        "mallopt: tensors up to 32 MiB from the heap, the heap not trimmed) instead of page-faulting fresh pages "
        "every step; loading and caching run with glibc's defaults and hand back what they freed. 1.25x faster "
        "steps on a small demo model on a 2-core CPU (0.717 -> 0.572 s; CHANGELOG.md, Benchmark history); the "
        "training phase then holds its working set between steps. No effect on CUDA runs.",
        section="kernels",
    )
    kernels: str = opt(
        "auto",
        "Fused Triton ops (LayerNorm + adaLN modulation, gated residual, LayerNorm/RMSNorm, ReLU linear "
        "attention) and attention processors. `auto`: each op only where benchmarks/kernels/ops_gpu.py measured it "
        ">= 1.5x faster than eager on this kind of device (see benchmarks/RESULTS.md), plus the attention backend; "
        "`on`: every Triton op wherever Triton runs (CUDA, or TRITON_INTERPRET=1 on a CPU); `off`: diffusers' own "
        "modules and processors, untouched.",
        choices=("auto", "on", "off"),
        section="kernels",
    )
    disable_modulate_kernel: bool = opt(
        False,
        "Keep PyTorch for the LayerNorm + adaLN modulation (scale/shift) and the gated residual adds.",
        section="kernels",
    )
    disable_layernorm_kernel: bool = opt(
        False, "Keep PyTorch for plain LayerNorm and RMSNorm modules (e.g. q/k norms).", section="kernels"
    )
    disable_linear_attention_kernel: bool = opt(
        False, "Keep diffusers' processor for ReLU linear self-attention.", section="kernels"
    )
    disable_flashattn: bool = opt(
        False,
        "Never call the flash-attn package (FA2/FA3), even with --attention_backend flash or auto.",
        section="kernels",
    )
    attention_backend: str = opt(
        "auto",
        "Softmax attention backend in the patched processors: `auto` (CUDA: FA3 if installed, else cuDNN SDPA; "
        "CPU: PyTorch's choice), `flash` (flash-attn, else SDPA flash), `cudnn`, `efficient`, `sdpa` (PyTorch's "
        "choice) or `math`. Ignored with --kernels off.",
        choices=("auto", "flash", "cudnn", "efficient", "sdpa", "math"),
        section="kernels",
    )
    kernel_check_interval: int = opt(
        500,
        "Compare each patched op against its PyTorch reference on the live batch (forward and backward) at the "
        "first step and then every this many updates; an op that returns non-finite values where the reference "
        "does not, or disagrees beyond tolerance, is switched off for the rest of the run (the step is skipped). "
        "0: only at the first step.",
        section="kernels",
        valid=Range(0, why="0 checks only at the first step"),
    )
    compile: str = opt(
        "off",
        "torch.compile: `blocks` compiles each repeated transformer block (regional compilation: one graph shared "
        "by all blocks, one per bucket shape), `full` the whole model, `off` runs eagerly. Kernel-check steps, "
        "the diagnosis replay and validation samples run eagerly; train_summary.json reports graphs, graph breaks "
        "and recompiles after warm-up. Off by default until benchmarks/RESULTS.md shows it faster on a device.",
        choices=("off", "blocks", "full"),
        section="kernels",
    )
    blocks_to_swap: int = opt(
        0,
        "Keep the frozen weights of the model's last N transformer blocks in host memory (pinned on CUDA) and copy "
        "each block to the device for its forward and its backward (or its recomputation under "
        "--gradient_checkpointing), the next block's copy made on a side stream while the current one computes. The "
        "device then holds N blocks' frozen weights less (up to three blocks are in flight); LoRA weights and their "
        "optimizer state stay on the device and results are unchanged. The cost: host memory for the swapped "
        "weights, and step time where the copies take longer than a block's compute (small batches, a slow link). N "
        "must be less than the model's number of blocks; 0 swaps none. Not with --compile or a bitsandbytes/torchao "
        "--quantize_base.",
        section="kernels",
        valid=NON_NEGATIVE,
    )


@dataclass(frozen=True)
class MiscOptions:
    """The rest: the environment check at start."""

    skip_doctor: bool = opt(False, "Skip the environment check at start (not recommended).", section="misc")


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
    "kernels": (KernelOptions, "performance"),
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
