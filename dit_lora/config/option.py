"""How a config option is declared: :func:`opt` (a dataclass field carrying its help text, choices, range, resume
class and the families it applies to), the :class:`Range` of a numeric option, the :class:`Applies` of an option some
families never read, the resume classes (:func:`resume_class`), and :class:`FamilyOptions`, the base of a family's
own options.

The option sections themselves (:mod:`dit_lora.config.input_sections`, :mod:`dit_lora.config.run_sections`) and a
family's ``options.py`` declare their fields with these; the module imports no other config module (``--family``'s
choices, which the registry supplies, are :class:`.families.RegisteredFamilies`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dit_lora.core.errors import UserError


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
#: a side in pixels: the largest any family trains or generates natively is 4096 (Sana 4K); past twice that a size is
#: a typo, and its aspect buckets and memory plan would take minutes before saying so
SIDE = Range(
    0,
    8192,
    low_open=True,
    why="pixels a side; the largest size any family here generates natively is 4096 (Sana 4K), so a larger one is "
    "most likely a typo",
)
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
#: the loss masks of images (``--masked_loss``): the image families' data and losses
MASKED_IMAGES = Applies(
    ("Encoders",),
    "image families",
    "masks weight an image family's loss; clips and video LLMs train unmasked",
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
    joined_by: str | None = None,
) -> Any:
    """Declare a config field with its help text, allowed values for string choices, ``valid``: the range of
    a numeric option (checked at parse time, whichever way the value was given, and listed in the docs), and
    ``resume``: whether a resumed run may change it (``"free"``) or not (``"fixed"``: it changes what the saved
    state means); unset, the section's class in :data:`SECTION_RESUME` applies (:func:`resume_class`). ``applies``:
    the families the option means something to (None: every family); given to another family, it is refused.
    ``joined_by``: a text option that takes several values (the flag given more than once, a YAML list), kept as one
    text joined by the option this names (the section's ``__post_init__`` joins them)."""
    if resume not in (None, *RESUME_CLASSES):
        raise ValueError(f"resume must be one of {RESUME_CLASSES}, not {resume!r}")
    meta = {
        "help": help,
        "choices": choices,
        "section": section,
        "valid": valid,
        "resume": resume,
        "applies": applies,
        "joined_by": joined_by,
    }
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
    options of its own gets this class, empty. A group of options several classes read
    (``modeling/timestep_options.py``, LTX-2's sound options) is a frozen dataclass built on nothing, listed beside
    this class among a family's bases; a family's class stands on at most two levels of dit_lora classes
    (``tests/config/test_option_depth.py``).
    """

    TITLE: ClassVar[str] = ""


class OptimizerNames(Sequence):
    """``--optimizer``'s choices, read in any case (diffusers' examples take ``AdamW`` and ``prodigy``)."""

    NAMES = ("adamw", "prodigy", "adafactor", "came", "adamw8bit", "adamw4bit")
    #: the peers' spellings of the same optimizers (SimpleTuner's ``ao-adamw8bit``, transformers' ``adamw_torch``)
    ALIASES = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "torch-adamw": "adamw",
               "adamw_8bit": "adamw8bit", "ao-adamw8bit": "adamw8bit", "ao-adamw4bit": "adamw4bit",
               "came_pytorch.came": "came"}  # fmt: skip
    #: optimizers users bring from the peers that dit-lora does not offer, and what to use instead
    NOT_OFFERED = {
        "schedule-free": "schedule-free AdamW keeps its step count and weight averages as Python numbers (so the "
        "guard could not skip its step without a host sync) and trains other weights than it evaluates and saves; "
        "use --optimizer adamw with --lr_scheduler cosine, or --optimizer prodigy for no learning rate to tune",
        "lion": "Lion is not offered (its update is not one dit-lora has tested the guard's skip with); use --optimizer "
        "adamw, or --optimizer adamw8bit / adamw4bit for small optimizer state",
        "adamw_bf16": "SimpleTuner's adamw_bf16 keeps bf16 weights; dit-lora trains fp32 LoRA masters, so use "
        "--optimizer adamw",
        "adam": "plain Adam (L2 weight decay) is AdamW with --adam_weight_decay 0: use --optimizer adamw "
        "--adam_weight_decay 0",
        "paged": "bitsandbytes' paged AdamW is not offered: its 8-bit one unpaged is --use_8bit_adam, and "
        "--optimizer adamw8bit / adamw4bit (torchao's, skipped by the guard without a host sync) keep the state small",
        "bnb": "transformers' adamw_bnb_8bit is bitsandbytes' AdamW8bit: --use_8bit_adam (or --optimizer adamw8bit, "
        "torchao's, which the guard skips without a host sync)",
        "dadapt": "D-Adaptation is not offered; Prodigy, its successor by the same authors, is: --optimizer prodigy",
    }

    def canonical(self, value: str) -> str:
        """``AdamW`` as ``adamw``, ``Prodigy`` as ``prodigy``, ``AdamW8bit`` as ``adamw8bit``, a peer's alias as its
        name; a peer's optimizer dit-lora does not offer refused in one paragraph saying what to use; any other value
        as it is (then refused by name)."""
        lowered = value.lower()
        if lowered in self.NAMES:
            return lowered
        if lowered in self.ALIASES:
            return self.ALIASES[lowered]
        squashed = lowered.replace("_", "").replace("-", "")
        for key, advice in self.NOT_OFFERED.items():
            plain = key.replace("-", "").replace("_", "")
            # a family of names by its part (AdamWScheduleFree, lion8bit, PagedAdamW8bit); plain Adam by itself only
            if (squashed == plain) if key == "adam" else (plain in squashed):
                raise UserError(
                    f"--optimizer {value} is not offered: {advice}. dit-lora's optimizers: {', '.join(self.NAMES)}."
                )
        return value

    def __getitem__(self, index):
        return self.NAMES[index]

    def __len__(self) -> int:
        return len(self.NAMES)


class AdapterTypes(Sequence):
    """``--lora_type``'s choices (``lora``, ``dora``, ``lokr``, ``loha``: :mod:`dit_lora.config.adapter_types`), and
    SimpleTuner's spellings read: its ``standard`` is ``lora``; its ``lycoris`` (the algorithm in a JSON file) is
    refused naming dit-lora's types."""

    NAMES = ("lora", "dora", "lokr", "loha")

    def canonical(self, value: str) -> str:
        """SimpleTuner's ``standard`` as ``lora``; ``lycoris`` refused in one paragraph; any other value as it is."""
        if value == "standard":
            return "lora"
        if value == "lycoris":
            raise UserError(
                "--lora_type lycoris is SimpleTuner's, which reads the algorithm from --lycoris_config (a JSON file). "
                "dit-lora names the algorithm itself: --lora_type lokr or --lora_type loha (PEFT's LoKr/LoHa; "
                "--lokr_factor for the JSON's `factor`, --rank for `linear_dim`), or dora / lora."
            )
        return value

    def __getitem__(self, index):
        return self.NAMES[index]

    def __len__(self) -> int:
        return len(self.NAMES)


#: ``--weighting_scheme``'s choices (a flow-matching family's own option: :mod:`dit_lora.modeling.timestep_options`)
WEIGHTING_SCHEMES = ("none", "logit_normal", "mode", "sigma_sqrt", "cosmap")
