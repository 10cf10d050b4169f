"""The optimizers: one entry each in :data:`TABLE`, which owns every fact about them.

An entry (:class:`Optimizer`) says:

- its name (``--optimizer``'s value), the peers' spellings of it (``aliases``) and how messages name it (``title``);
- the state it keeps for a run's trainable tensors (``state_bytes``, from :mod:`.optimizer_state`) and the memory
  plan's row for it (``plan_label``);
- the pip package it needs (:class:`Package`: the parser's check and the builder's paragraph when it is missing);
- its checks: the options only it reads (``own_options``), the ``--adam_*`` options it does not
  (``unread_adam_options``), whether ``--learning_rate`` is a multiplier of its own step (``learning_rate_multiplier``,
  :func:`learning_rate_warning`) and why FSDP2 refuses it (``fsdp2_refusal``);
- whether the finite guard skips its step on the device (``guard_skip``) and its default learning rate.

bitsandbytes' 8-bit AdamW has an entry too, asked for by ``--use_8bit_adam`` instead of a name (``option``): with
``--optimizer adamw`` it is the one built (:func:`chosen`).

Building an optimizer needs torch and dit-lora's own Prodigy, Adafactor and CAME, in the training layer:
:data:`dit_lora.training.optim.BUILDERS` maps each entry to its builder (tests hold both to the same entries). The
parser (choices, :func:`check_options`, :func:`check_packages`, ``--help``), the plan, FSDP2's checks and the
catalogue's defaults read this table; none of them names an optimizer. It stays torch-free: ``--help`` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from dit_lora.config import optimizer_state
from dit_lora.core.errors import UserError


class Training(Protocol):
    """What the table reads of a run's ``training`` section (``cfg.training``)."""

    @property
    def optimizer(self) -> str: ...
    @property
    def use_8bit_adam(self) -> bool: ...
    @property
    def learning_rate(self) -> float: ...
    @property
    def mixed_precision(self) -> str: ...
    @property
    def adafactor_beta1(self) -> float | None: ...


#: the bytes of state an optimizer keeps for trainable tensors of these shapes, under these options
StateBytes = Callable[[list[tuple[int, ...]], Training], int]


@dataclass(frozen=True)
class Package:
    """A pip package an optimizer needs (the ``quant`` extra). ``missing`` (the parser's paragraph, before anything
    loads) and ``unimportable`` (the builder's) are templates of ``{flag}`` (the option that asked for it) and
    ``{error}`` (what the import raised)."""

    module: str  #: imported to prove the package works here ...
    names: tuple[str, ...]  #: ... with these names from it
    needs_cuda: bool  #: the parser's check also wants a CUDA device
    missing: str
    unimportable: str

    def check(self, flag: str) -> None:
        """Import the package as the optimizer will (and see a CUDA device where it must); one paragraph if not."""
        try:
            module = __import__(self.module, fromlist=list(self.names))
            for name in self.names:
                if not hasattr(module, name):
                    raise ImportError(f"cannot import name {name!r} from {self.module!r}")
            if self.needs_cuda:
                import torch

                if not torch.cuda.is_available():
                    raise ImportError("no CUDA device")
        except Exception as err:  # bitsandbytes raises various errors without CUDA
            raise UserError(self.missing.format(flag=flag, error=f"{type(err).__name__}: {err}"))

    def unimportable_message(self, flag: str, err: BaseException) -> str:
        """The builder's paragraph when the import failed with ``err``."""
        return self.unimportable.format(flag=flag, error=err)


@dataclass(frozen=True, eq=False)
class Optimizer:
    """One optimizer dit-lora builds (the module docstring says what each field is for)."""

    name: str  #: --optimizer's value
    title: str  #: its name in messages
    plan_label: str  #: the memory plan's row: which optimizer, in what precision
    state_bytes: StateBytes
    #: True: the guard skips its step on the device (found_inf, no host sync); False: it reads the skip flag on the
    #: host once a step; None: on the device where torch's fused kernel runs (AdamW; the builder says)
    guard_skip: bool | None
    aliases: tuple[str, ...] = ()  #: the peers' spellings, lower case
    package: Package | None = None
    own_options: tuple[str, ...] = ()  #: options only this optimizer reads
    unread_adam_options: tuple[str, ...] = ()  #: --adam_* options it does not read (refused when given) ...
    unread_adam_message: str = ""  #: ... and the paragraph refusing them (``{given}``: those given)
    fsdp2_refusal: str | None = None  #: why FSDP2 does not take it (None: it does)
    learning_rate_multiplier: bool = False  #: --learning_rate multiplies a step it finds itself (else it is the step)
    default_learning_rate: tuple[float, str] | None = None  #: (rate, why) where the run gives none
    moment_bits: int = 32  #: bits per moment value (torchao's quantized AdamW: 8 or 4)
    option: str | None = None  #: the flag that asks for it when --optimizer does not (then it is no choice)

    @property
    def flag(self) -> str:
        """How the command line asks for it: ``--optimizer NAME``, or its own flag."""
        return self.option or f"--optimizer {self.name}"

    @property
    def offered(self) -> bool:
        """One of --optimizer's choices."""
        return self.option is None


def _numels(shapes: list[tuple[int, ...]]) -> list[int]:
    return [math.prod(shape) for shape in shapes]


def _adamw_state(shapes: list[tuple[int, ...]], training: Training) -> int:
    return optimizer_state.adam_moment_bytes(_numels(shapes), eight_bit=False)


def _bitsandbytes_state(shapes: list[tuple[int, ...]], training: Training) -> int:
    return optimizer_state.adam_moment_bytes(_numels(shapes), eight_bit=True)


def _prodigy_state(shapes: list[tuple[int, ...]], training: Training) -> int:
    return optimizer_state.prodigy_state_bytes(_numels(shapes))


def _adafactor_state(shapes: list[tuple[int, ...]], training: Training) -> int:
    return optimizer_state.adafactor_state_bytes(shapes, first_moment=training.adafactor_beta1)


def _came_state(shapes: list[tuple[int, ...]], training: Training) -> int:
    return optimizer_state.came_state_bytes(shapes)


def _lowbit_state(bits: int) -> StateBytes:
    def state(shapes: list[tuple[int, ...]], training: Training) -> int:
        return optimizer_state.lowbit_adam_state_bytes(_numels(shapes), bits=bits)

    return state


_TORCHAO = Package(
    module="torchao.optim",
    names=("AdamW4bit", "AdamW8bit"),
    needs_cuda=False,
    missing="{flag} needs torchao's low-bit AdamW ({error}). Install the `quant` extra (`pip install 'dit-lora[quant]' "
    "-c constraints.txt`: torchao 0.18), or use --optimizer adamw.",
    unimportable="{flag} could not import torchao ({error}). Install it with `pip install 'dit-lora[quant]' -c "
    "constraints.txt` (torchao 0.18; its AdamW runs on CUDA and on a CPU).",
)
_BITSANDBYTES = Package(
    module="bitsandbytes",
    names=(),
    needs_cuda=True,
    missing="{flag} needs bitsandbytes on a CUDA GPU ({error}). Install the `quant` extra (`pip install "
    "dit-lora[quant]`) on a GPU machine, or drop {flag}.",
    unimportable="{flag} could not import bitsandbytes ({error}). Install it with `pip install 'dit-lora[quant]' -c "
    "constraints.txt` (bitsandbytes >= 0.49 runs on CUDA and on a CPU).",
)
#: FSDP2's reason for refusing the torchao entries
_TORCHAO_SHARDS = (
    "torchao's quantized moments are kept as plain tensors beside each parameter, not as DTensor shards: use adamw"
)

ADAMW = Optimizer(
    "adamw",
    "AdamW",
    "AdamW, fp32",
    _adamw_state,
    guard_skip=None,
    aliases=("adamw_torch", "adamw_torch_fused", "torch-adamw"),
)
PRODIGY = Optimizer(
    "prodigy",
    "Prodigy",
    "Prodigy, fp32",
    _prodigy_state,  # exp_avg, exp_avg_sq, s and p0 (training/prodigy.py)
    guard_skip=True,
    own_options=("prodigy_beta3", "prodigy_decouple", "prodigy_use_bias_correction", "prodigy_safeguard_warmup"),
    fsdp2_refusal="its step-size estimate sums over whole tensors, not verified on DTensor shards: use adamw",
    learning_rate_multiplier=True,
    default_learning_rate=(
        1.0,  # a multiplier of its own step-size estimate
        "--optimizer prodigy: Prodigy finds its own step size and --learning_rate multiplies it (1.0, as diffusers' "
        "examples and its authors advise; the documented 1e-4 would train at a ten-thousandth of it)",
    ),
)
ADAFACTOR = Optimizer(
    "adafactor",
    "Adafactor",
    "Adafactor, fp32",
    _adafactor_state,
    guard_skip=True,
    own_options=("adafactor_scale_parameter", "adafactor_beta1", "adafactor_clip_threshold", "adafactor_decay_rate"),
    unread_adam_options=("adam_beta1", "adam_beta2", "adam_epsilon"),
    unread_adam_message="{given} with --optimizer adafactor: Adafactor has no Adam betas or epsilon (of the --adam_* "
    "options it reads only --adam_weight_decay). Drop them; --adafactor_beta1 gives it a first moment, "
    "--adafactor_decay_rate sets how its second moments decay.",
    fsdp2_refusal="its factored moments are means over whole rows and columns, not verified on DTensor shards: "
    "use adamw",
)
CAME = Optimizer(
    "came",
    "CAME",
    "CAME, fp32",
    _came_state,
    guard_skip=True,
    aliases=("came_pytorch.came",),
    own_options=("came_beta3", "came_clip_threshold"),
    unread_adam_options=("adam_epsilon",),  # its two floors are its own
    unread_adam_message="{given} with --optimizer came: CAME has no Adam epsilon; its two floors (1e-30 under the "
    "squared gradients, 1e-16 under the instability) are came-pytorch's defaults, not options. Drop it; "
    "--adam_beta1, --adam_beta2 and --came_beta3 are its betas.",
    fsdp2_refusal="its factored moments and instabilities are means over whole rows and columns, not verified on "
    "DTensor shards: use adamw",
)
ADAMW8BIT = Optimizer(
    "adamw8bit",
    "torchao's 8-bit AdamW",
    "8-bit AdamW, torchao",
    _lowbit_state(8),
    guard_skip=True,
    aliases=("adamw_8bit", "ao-adamw8bit"),
    package=_TORCHAO,
    fsdp2_refusal=_TORCHAO_SHARDS,
    moment_bits=8,
)
ADAMW4BIT = Optimizer(
    "adamw4bit",
    "torchao's 4-bit AdamW",
    "4-bit AdamW, torchao",
    _lowbit_state(4),
    guard_skip=True,
    aliases=("ao-adamw4bit",),
    package=_TORCHAO,
    fsdp2_refusal=_TORCHAO_SHARDS,
    moment_bits=4,
)
#: bitsandbytes' AdamW8bit (--use_8bit_adam with --optimizer adamw): it takes its learning rate and step count as
#: host numbers, so the guard reads its skip flag on the host
BITSANDBYTES_ADAMW8BIT = Optimizer(
    "bitsandbytes-adamw8bit",
    "bitsandbytes' 8-bit AdamW",
    "8-bit AdamW, bitsandbytes",
    _bitsandbytes_state,
    guard_skip=False,
    package=_BITSANDBYTES,
    fsdp2_refusal="bitsandbytes' optimizer is not verified on DTensor parameters: drop it",
    moment_bits=8,
    option="--use_8bit_adam",
)

#: every optimizer, --optimizer's choices in the order --help and the messages list them
TABLE: tuple[Optimizer, ...] = (ADAMW, PRODIGY, ADAFACTOR, CAME, ADAMW8BIT, ADAMW4BIT, BITSANDBYTES_ADAMW8BIT)
#: --optimizer's default
DEFAULT = ADAMW.name


def offered() -> tuple[Optimizer, ...]:
    """--optimizer's choices, in :data:`TABLE`'s order."""
    return tuple(entry for entry in TABLE if entry.offered)


def named(name: str) -> Optimizer:
    """The entry --optimizer ``name`` asks for (its canonical spelling, as the parser leaves it)."""
    for entry in offered():
        if entry.name == name:
            return entry
    raise UserError(f"--optimizer {name} is not one of dit-lora's optimizers: {', '.join(OptimizerNames())}.")


def chosen(name: str, use_8bit_adam: bool) -> Optimizer:
    """The optimizer a run builds: --optimizer ``name``'s, or bitsandbytes' 8-bit AdamW for AdamW with
    --use_8bit_adam (the parser refuses that flag with any other optimizer)."""
    entry = named(name)
    return BITSANDBYTES_ADAMW8BIT if use_8bit_adam and entry is ADAMW else entry


def in_use(training: Training) -> tuple[Optimizer, ...]:
    """Every optimizer the options ask for, each option's once: --use_8bit_adam's, then --optimizer's."""
    entry = named(training.optimizer)
    return (BITSANDBYTES_ADAMW8BIT, entry) if training.use_8bit_adam else (entry,)


#: a learning rate this low is no Prodigy multiplier, and one this high is no step size of the other optimizers (a
#: LoRA's usual AdamW rate is 1e-4 to 1e-3; Prodigy's multiplier is about 1)
MULTIPLIER_LOWEST, STEP_HIGHEST = 0.1, 0.1


def learning_rate_warning(training: Training) -> str | None:
    """One line when --learning_rate is on the wrong scale for --optimizer, as diffusers' examples warn of Prodigy's:
    Prodigy's multiplier far below 1 trains at that fraction of the step it finds; 0.1 or more for an optimizer
    whose learning rate is the step (AdamW's variants, Adafactor, CAME) is Prodigy's scale and diverges."""
    rate, entry = training.learning_rate, named(training.optimizer)
    if entry.learning_rate_multiplier and rate < MULTIPLIER_LOWEST:
        return (
            f"{entry.flag} with --learning_rate {rate:g}: {entry.title} finds its own step size and --learning_rate "
            f"multiplies it, so this trains at {rate:g} of the step it finds. Its authors and diffusers' examples use "
            f"--learning_rate 1.0 (left out, that is the default with {entry.name})."
        )
    if not entry.learning_rate_multiplier and rate >= STEP_HIGHEST:
        return (
            f"--learning_rate {rate:g} with {entry.flag}: that is Prodigy's scale (a multiplier of its own "
            f"estimate), but {entry.name} takes it as the step itself, 100 to 10,000 times a LoRA's usual 1e-4 to "
            "1e-3: the weights blow up in a few steps (the guard then rolls back and stops). Use --learning_rate 1e-4, "
            f"or {PRODIGY.flag}."
        )
    return None


def check_options(training: Training, is_set: Callable[[str], bool]) -> None:
    """The options that go with --optimizer (``is_set``: whether the run gave an option): an optimizer's own options
    (the --prodigy_*, --adafactor_* and --came_* ones) need it, the --adam_* options an optimizer that reads them
    (never accepted and then ignored); --use_8bit_adam goes with AdamW only, and an optimizer the guard skips on the
    device never with fp16's gradient scaler (which steps an optimizer by reading its inf check on the host)."""
    name, entry = training.optimizer, named(training.optimizer)
    for owner in TABLE:
        given = [f"--{o}" for o in owner.own_options if is_set(o)]
        if owner is not entry and given:
            one = len(given) == 1
            raise UserError(
                f"{', '.join(given)} set{'s' if one else ''} {owner.title}, but the optimizer is {name}, which never "
                f"reads {'it' if one else 'them'}. Add {owner.flag}, or drop {'the option' if one else 'them'}."
            )
    unread = [f"--{o}" for o in entry.unread_adam_options if is_set(o)]
    if unread:
        raise UserError(entry.unread_adam_message.format(given=", ".join(unread)))
    if training.use_8bit_adam and entry is not ADAMW:
        fix = (
            f"Drop --use_8bit_adam: {entry.title} is the 8-bit AdamW the guard skips on the device without a host sync"
            if entry is ADAMW8BIT
            else f"Drop --use_8bit_adam to train with {entry.title}, or {ADAMW8BIT.flag} for the 8-bit AdamW"
        )
        raise UserError(
            f"--use_8bit_adam and --optimizer {name} ask for two optimizers: --use_8bit_adam is bitsandbytes' 8-bit "
            f"AdamW. {fix}."
        )
    if training.mixed_precision == "fp16" and entry.guard_skip:
        raise UserError(
            f"--optimizer {name} with --mixed_precision fp16: fp16's gradient scaler decides each step on the host, "
            f"which {entry.title}'s device-side skip does not go through (not verified). Use bf16 (the default) or no."
        )


def check_packages(training: Training) -> None:
    """The packages the optimizers in use need (bitsandbytes, torchao), imported to prove they work here."""
    for entry in in_use(training):
        if entry.package is not None:
            entry.package.check(entry.flag)


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


class OptimizerNames(Sequence):
    """``--optimizer``'s choices (:func:`offered`'s names, read from the table at each use), read in any case
    (diffusers' examples take ``AdamW`` and ``prodigy``) and in the peers' spellings (an entry's ``aliases``)."""

    def canonical(self, value: str) -> str:
        """``AdamW`` as ``adamw``, ``Prodigy`` as ``prodigy``, ``AdamW8bit`` as ``adamw8bit``, a peer's alias as its
        name; a peer's optimizer dit-lora does not offer refused in one paragraph saying what to use; any other value
        as it is (then refused by name)."""
        lowered = value.lower()
        for entry in offered():
            if lowered == entry.name or lowered in entry.aliases:
                return entry.name
        squashed = lowered.replace("_", "").replace("-", "")
        for key, advice in NOT_OFFERED.items():
            plain = key.replace("-", "").replace("_", "")
            # a family of names by its part (AdamWScheduleFree, lion8bit, PagedAdamW8bit); plain Adam by itself only
            if (squashed == plain) if key == "adam" else (plain in squashed):
                raise UserError(
                    f"--optimizer {value} is not offered: {advice}. dit-lora's optimizers: {', '.join(self)}."
                )
        return value

    def __getitem__(self, index):
        return tuple(entry.name for entry in offered())[index]

    def __len__(self) -> int:
        return len(offered())


#: --optimizer's help (every offered name appears in it as `name`: tests/config/test_optimizers.py)
OPTIMIZER_HELP = (
    "The optimizer: `adamw` (torch's fused AdamW; --use_8bit_adam for bitsandbytes' 8-bit one), `adamw8bit` or "
    "`adamw4bit` (torchao's 8-bit or 4-bit AdamW, the `quant` extra: each of its two moments a byte or half a "
    "byte per trained weight plus an fp32 scale per block, where AdamW's takes 4 bytes; the --adam_* options "
    "apply), `prodigy` "
    "(Prodigy, which estimates its own step size: --learning_rate is its multiplier, 1.0 as diffusers' examples "
    "advise and the default with prodigy; a rate on the wrong scale for the optimizer is a warning at start; the "
    "--adam_* options are its betas, epsilon and weight decay), `adafactor` (transformers' "
    "Adafactor with a fixed learning rate, as sd-scripts, ai-toolkit and SimpleTuner configure it for a LoRA: "
    "--learning_rate and its schedule, --adam_weight_decay its weight decay (1e-4 unless set: transformers' and "
    "sd-scripts' default is 0), the --adafactor_* options) or `came` (came-pytorch's CAME, as OneTrainer offers "
    "it: --learning_rate and its schedule, --adam_beta1 and --adam_beta2 its first two betas, --came_beta3 its "
    "third, --adam_weight_decay its weight decay (1e-4 unless set: came-pytorch's default is 0, OneTrainer's "
    "1e-2)). dit-lora's Prodigy, Adafactor and CAME are those packages' updates with their counts and estimates "
    "kept on the device, so the guard skips a step without a host sync (the packages read them back every "
    "step); torchao's AdamW is its own compiled update (one torch.compile per trained tensor shape at the first "
    "step) with its count on the device and a skipped step undone there, so it needs no sync either "
    "(bitsandbytes' needs one a step); Prodigy keeps four fp32 values per trained weight (AdamW: two), Adafactor "
    "a row and a column per weight matrix (and one value per weight with --adafactor_beta1), CAME one value per "
    "weight and two rows and two columns per weight matrix. Written `AdamW` or `Prodigy` as diffusers' examples "
    "take them (`AdamW8bit` as sd-scripts writes it is torchao's here, not bitsandbytes')."
)
#: --use_8bit_adam's help
USE_8BIT_ADAM_HELP = (
    "Use bitsandbytes' 8-bit AdamW (the `quant` extra; bitsandbytes >= 0.49 also runs it on a CPU), diffusers' "
    "flag. It takes its learning rate and step count as host numbers, so the guard reads its skip flag on the "
    "host once a step; `--optimizer adamw8bit` is torchao's 8-bit AdamW, which the guard skips on the device "
    "without that sync."
)

__all__ = [
    "ADAFACTOR",
    "ADAMW",
    "ADAMW4BIT",
    "ADAMW8BIT",
    "BITSANDBYTES_ADAMW8BIT",
    "CAME",
    "DEFAULT",
    "NOT_OFFERED",
    "OPTIMIZER_HELP",
    "PRODIGY",
    "TABLE",
    "USE_8BIT_ADAM_HELP",
    "Optimizer",
    "OptimizerNames",
    "Package",
    "Training",
    "check_options",
    "check_packages",
    "chosen",
    "in_use",
    "learning_rate_warning",
    "named",
]
