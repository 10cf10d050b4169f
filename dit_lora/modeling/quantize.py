"""Quantized base models (``--quantize_base nf4|int8|fp8|fp8_scaled``): the checks, the configs, the sizes.

For nf4, int8 and fp8 the model that gets LoRA is loaded quantized by the libraries themselves: diffusers' and
transformers' ``BitsAndBytesConfig`` (nf4: ``bitsandbytes.nn.Linear4bit``, int8: ``Linear8bitLt``) or
``TorchAoConfig`` (fp8 weights) passed as ``quantization_config=`` to ``from_pretrained``.
PEFT puts LoRA on the quantized linears (its bnb and torchao layers); the LoRA weights stay fp32 masters.

``fp8_scaled`` is dit-lora's own (:mod:`dit_lora.modeling.fp8_scaled`): the model loads in the run's weight dtype
and :func:`after_loading` (called by every family's loader before the model goes to the device) replaces the same
Linears nf4 would quantize by fp8 e4m3 ones with per-block scales, computed in the compute dtype on any device.

diffusers' bitsandbytes quantizers refuse to run without a GPU (their ``validate_environment``), although
bitsandbytes >= 0.48 runs nf4/int8 on a CPU and transformers' quantizers accept it. On a machine without a
GPU :func:`diffusers_loading` maps the two bitsandbytes methods to subclasses of diffusers' own quantizers
that only drop that GPU check and place the model on the CPU, for the duration of one ``from_pretrained``.

bitsandbytes' ``Linear4bit`` returns its input's dtype where an ``nn.Linear`` under autocast returns the autocast dtype;
:func:`keep_4bit_layout` (called by every family after loading) makes them follow autocast, so a quantized base runs
in the dtypes the unquantized one does under the default --mixed_precision bf16.

``--quantize_text_encoder`` loads the caching phase's text encoder (T5-XXL, Gemma-2) nf4 through transformers'
``BitsAndBytesConfig`` (:func:`text_encoder_kwargs`); the family says whether it has one
(``FamilyInfo.text_encoder_label``).

The bad inputs stop in :func:`check_config` (before anything loads) with one paragraph naming the flag
and the fix; backbone training of quantized weights stops in :func:`check_trainable` (on the memory plan's
meta-device model, before loading, and again on the loaded model).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.modeling import fp8_scaled

if TYPE_CHECKING:
    from dit_lora.config.schema import LoraOptions, TrainingOptions

SCHEMES = ("none", "nf4", "int8", "fp8", "fp8_scaled")
#: bitsandbytes' nf4 block size: one fp32 absmax per 64 weights (no double quantization)
NF4_BLOCK = 64


class QuantizeError(UserError):
    """A --quantize_base request that cannot run; never downgraded to a note (the memory plan re-raises it)."""


def enabled(model: ModelOptions) -> bool:
    """Whether ``--quantize_base`` quantizes the base (``model``: the run's ``cfg.model``)."""
    return model.quantize_base not in (None, "none")


def bitsandbytes_status() -> str | None:
    """None when bitsandbytes imports, else why not."""
    try:
        import bitsandbytes  # noqa: F401
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def torchao_status() -> str | None:
    try:
        import torchao  # noqa: F401
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def fp8_status(device_type: str | None = None) -> str | None:
    """None when fp8 weights (torchao) can run here, else why not."""
    why = torchao_status()
    if why is not None:
        return f"torchao is not importable ({why})"
    if not torch.cuda.is_available() or (device_type not in (None, "cuda")):
        return "there is no CUDA device (torchao's fp8 weights need one)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        return f"this GPU (compute capability {major}.{minor}) has no fp8 support (Ada/Hopper, 8.9 or newer, has)"
    return None


def fp8_scaled_status() -> str | None:
    """None when fp8_scaled weights can run here (any device: only torch's float8_e4m3fn dtype is needed)."""
    if not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn dtype (torch 2.1 or newer has)"
    return None


#: the largest NF4 rounding error, as a share of a block's absmax: half the widest gap between two of its 16 levels
#: (-1 to -0.6962), with a little room
NF4_HALF_GAP = 0.16


@functools.cache
def cpu_nf4_problem() -> str | None:
    """Why bitsandbytes' 4-bit quantization on this CPU is not to be trusted, or None: a seeded 8 x 96 weight (rows
    that are not a multiple of the 64-wide block) quantized and dequantized, each block's error against NF4's half
    gap. bitsandbytes 0.50's CPU kernel gets such rows wrong on AVX-512 machines (measured up to the block's whole
    absmax); rows of a multiple of 64, what most real layers have, round correctly there."""
    if bitsandbytes_status() is not None:
        return None
    import bitsandbytes as bnb

    weight = torch.randn(8, 96, generator=torch.Generator().manual_seed(0))
    packed, state = bnb.functional.quantize_4bit(weight, blocksize=64, quant_type="nf4")
    error = (bnb.functional.dequantize_4bit(packed, state) - weight).abs().flatten().view(-1, 64).amax(1)
    worst = float((error / weight.abs().flatten().view(-1, 64).amax(1)).max())
    if worst <= NF4_HALF_GAP:
        return None
    return (
        f"bitsandbytes {getattr(bnb, '__version__', '?')} rounds 4-bit weights wrongly on this CPU for layers whose "
        f"input width is not a multiple of 64 (error {worst:.2f} of a block's largest value, NF4's own is at most "
        f"{NF4_HALF_GAP}): nf4 on the CPU is unreliable here (a GPU uses other kernels)"
    )


def what_runs(device_type: str) -> dict[str, str]:
    """Each scheme: `runs` or why it does not, on ``device_type`` (the doctor prints it)."""
    bnb = bitsandbytes_status()
    fp8 = fp8_status(device_type)
    scaled = fp8_scaled_status()
    return {
        "nf4": "runs" if bnb is None else f"no: bitsandbytes is not importable ({bnb})",
        "int8": "runs" if bnb is None else f"no: bitsandbytes is not importable ({bnb})",
        "fp8": "runs" if fp8 is None else f"no: {fp8}",
        "fp8_scaled": "runs" if scaled is None else f"no: {scaled}",
    }


def runnable_schemes(device_type: str) -> set[str]:
    """The ``--quantize_base`` schemes a lever may propose for a run on ``device_type``: those that run there, and on a
    CPU where bitsandbytes rounds 4-bit weights wrongly (:func:`cpu_nf4_problem`, what ``doctor`` warns of) not nf4.
    A device this machine does not have (planning for a GPU from a laptop) is not judged here: every scheme."""
    if device_type != "cpu" and not (device_type == "cuda" and torch.cuda.is_available()):
        return {"nf4", "int8", "fp8", "fp8_scaled"}
    runs = {scheme for scheme, how in what_runs(device_type).items() if how == "runs"}
    if device_type == "cpu" and "nf4" in runs and cpu_nf4_problem():
        runs.discard("nf4")
    return runs


def check_config(model: ModelOptions, training: TrainingOptions, device_type: str, family=None) -> None:
    """Refuse a --quantize_base or --quantize_text_encoder request that cannot run, before anything loads."""
    check_text_encoder(model, family)
    scheme = model.quantize_base
    if scheme in (None, "none"):
        return
    if scheme not in SCHEMES:
        raise QuantizeError(
            f"--quantize_base {scheme} is not a scheme dit-lora knows. Use one of {', '.join(SCHEMES)}."
        )
    if scheme in ("nf4", "int8"):
        why = bitsandbytes_status()
        if why is not None:
            raise QuantizeError(
                f"--quantize_base {scheme} loads the model with bitsandbytes, which is not importable here ({why}). "
                'Install it (`pip install -e ".[quant]" -c constraints.txt`, or `pip install bitsandbytes`; '
                "bitsandbytes >= 0.48 also runs on a CPU), or train without --quantize_base."
            )
        return
    if scheme == "fp8_scaled":
        why = fp8_scaled_status()
        if why is not None:
            raise QuantizeError(
                f"--quantize_base fp8_scaled cannot run here: {why}. Upgrade torch "
                "(`pip install -e . -c constraints.txt`), or use --quantize_base nf4, or train without --quantize_base."
            )
        return
    if training.allow_fp16 or training.mixed_precision == "fp16":
        raise QuantizeError(
            "--quantize_base fp8 was combined with fp16 (--allow_fp16 / --mixed_precision fp16): fp8 weights "
            "dequantize into the compute dtype, and fp16's range turns their large values into Inf. Drop "
            "--allow_fp16 and train with --mixed_precision bf16 (the default), or use --quantize_base nf4."
        )
    why = fp8_status(device_type)
    if why is not None:
        raise QuantizeError(
            f"--quantize_base fp8 cannot run on this machine: {why}. fp8 weights need torchao and a CUDA GPU of "
            "compute capability 8.9 or newer (Ada, Hopper). Use --quantize_base nf4 (bitsandbytes; runs on any "
            "GPU and on a CPU) or int8, or train without --quantize_base."
        )


def check_text_encoder(model: ModelOptions, family=None) -> None:
    """Refuse --quantize_text_encoder for a family without a text encoder, or without bitsandbytes."""
    if not model.quantize_text_encoder:
        return
    if family is not None and family.info.text_encoder_label is None:
        raise QuantizeError(
            f"--quantize_text_encoder quantizes the text encoder of the caching phase, and the {family.name} family "
            "has none (DiT is class-conditional; a video LLM reads its prompts with the language model that gets LoRA, "
            "which --quantize_base quantizes). Drop --quantize_text_encoder, or use --quantize_base nf4."
        )
    why = bitsandbytes_status()
    if why is not None:
        raise QuantizeError(
            f"--quantize_text_encoder loads the text encoder nf4-quantized with bitsandbytes, which is not importable "
            f'here ({why}). Install it (`pip install -e ".[quant]" -c constraints.txt`, or `pip install '
            "bitsandbytes`; bitsandbytes >= 0.48 also runs on a CPU), or drop --quantize_text_encoder."
        )


# ---- the libraries' configs -----------------------------------------------------------------
def diffusers_config(model: ModelOptions, dtype: torch.dtype):
    """diffusers' quantization config for --quantize_base, or None."""
    scheme = model.quantize_base
    if scheme in (None, "none", "fp8_scaled"):  # fp8_scaled: converted by after_loading, not by the library
        return None
    if scheme == "fp8":
        from diffusers import TorchAoConfig

        return TorchAoConfig("float8wo_e4m3")
    from diffusers import BitsAndBytesConfig

    if scheme == "nf4":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
    return BitsAndBytesConfig(load_in_8bit=True)


def diffusers_kwargs(model: ModelOptions, dtype: torch.dtype) -> dict:
    """``{"quantization_config": ...}`` for a diffusers ``from_pretrained``, or ``{}`` without --quantize_base."""
    config = diffusers_config(model, dtype)
    return {} if config is None else {"quantization_config": config}


def transformers_config(model: ModelOptions, dtype: torch.dtype, skip_modules: Iterable[str] = ()):
    """transformers' quantization config for --quantize_base (``skip_modules`` stay unquantized), or None."""
    scheme = model.quantize_base
    if scheme in (None, "none", "fp8_scaled"):  # fp8_scaled: converted by after_loading, not by the library
        return None
    skip = list(skip_modules) or None
    if scheme == "fp8":
        from torchao.quantization import Float8WeightOnlyConfig
        from transformers import TorchAoConfig

        return TorchAoConfig(Float8WeightOnlyConfig(), modules_to_not_convert=skip)
    from transformers import BitsAndBytesConfig

    if scheme == "nf4":
        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=dtype,
            llm_int8_skip_modules=skip,
        )
    return BitsAndBytesConfig(load_in_8bit=True, llm_int8_skip_modules=skip)


def text_encoder_kwargs(model: ModelOptions, dtype: torch.dtype) -> dict:
    """``{"quantization_config": ...}`` for the text encoder's transformers ``from_pretrained`` under
    --quantize_text_encoder (nf4, computing in the run's weight dtype; transformers keeps the model's own
    ``_keep_in_fp32_modules``, e.g. T5's ``wo``, unquantized), else ``{}``."""
    if not model.quantize_text_encoder:
        return {}
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
    }


@contextlib.contextmanager
def diffusers_loading(model: ModelOptions):
    """Around a diffusers ``from_pretrained(..., quantization_config=diffusers_config(cfg.model, ...))`` (``model``: the run's
    ``cfg.model``, whose --quantize_base it reads).

    With a GPU, or without bitsandbytes quantization, it does nothing. Without one, diffusers' bitsandbytes
    quantizers would refuse ("No GPU found"); their CPU subclasses below are used instead, for this load only.
    """
    if model.quantize_base not in ("nf4", "int8") or torch.cuda.is_available():
        yield
        return
    from diffusers.quantizers import auto

    saved = dict(auto.AUTO_QUANTIZER_MAPPING)
    auto.AUTO_QUANTIZER_MAPPING.update(_cpu_quantizers())
    try:
        yield
    finally:
        auto.AUTO_QUANTIZER_MAPPING.clear()
        auto.AUTO_QUANTIZER_MAPPING.update(saved)


def after_loading(
    model: ModelOptions, module: torch.nn.Module, skip: Iterable[str] = (), device: torch.device | None = None
) -> int:
    """Under ``--quantize_base fp8_scaled`` (``model``: the run's ``cfg.model``), convert the just-loaded ``module``'s
    quantizable Linears (:func:`quantized_linears` with the family's ``skip`` list, as the memory plan counts them)
    to fp8 with per-block scales; returns how many (0 under any other scheme, which the libraries quantize).

    Every family calls it right after loading and before moving the model to ``device``, so a model never sits on
    the device in its load dtype; on a CUDA ``device`` the quantization math runs there, a layer at a time. When
    the model stays on the CPU, what is left of the memory-mapped files is copied out of them
    (:func:`fp8_scaled.release_mapped_files`), so the original weights the conversion read leave memory.
    """
    if model.quantize_base != "fp8_scaled":
        return 0
    work = device if device is not None and device.type == "cuda" else None
    count = fp8_scaled.convert(module, quantized_linears(module, skip), work_device=work)
    if device is None or device.type == "cpu":  # on an accelerator, .to(device) lets the mapping go
        fp8_scaled.release_mapped_files(module)
    return count


def keep_out_of_ddp(model: torch.nn.Module) -> int:
    """Keep fp8_scaled's weight buffers out of DDP's buffer broadcast (:func:`fp8_scaled.keep_out_of_ddp`); call it
    on the module handed to ``accelerator.prepare``. Does nothing for a model without them."""
    return fp8_scaled.keep_out_of_ddp(model)


def keep_4bit_layout(*modules: torch.nn.Module | None) -> None:
    """Make every bitsandbytes linear in ``modules`` (a just-loaded quantized model) compute as training needs.

    Called by every family right after loading; two things, both on the layers themselves:

    1. The 4-bit layout stays as loaded. On a CPU with AVX-512 BF16, bitsandbytes (0.49+) rewrites a ``Linear4bit``
       weight in place into a packed inference layout, with its absmax rounded to bf16, the first time the layer runs
       in eval mode on an input without grad: a validation sample, the attention canary, caching through an nf4 text
       encoder. The weights training uses next would then depend on whether (and on which CPU) such a forward ran, so
       validation would change the run and a resume on another machine would not be exact; the repacking also fails
       outright for layers narrower than one quantization block (in_features < 64). The switch is the layer's own
       ``support_avx512bf16_for_cpu`` attribute.
    2. Under autocast a 4-bit layer's output is in the autocast dtype, as a plain ``nn.Linear``'s is (see
       :func:`_autocast_output`).
    """
    for module in modules:
        if not isinstance(module, torch.nn.Module):
            continue
        for layer in module.modules():
            if hasattr(layer, "support_avx512bf16_for_cpu"):
                cast(Any, layer).support_avx512bf16_for_cpu = False  # a plain flag; Module's types take tensors
        follow_autocast(module)


def _bitsandbytes_linears() -> tuple[type, ...]:
    """The bitsandbytes layer classes that need :func:`_autocast_output` (none when bitsandbytes is not loaded)."""
    bnb = sys.modules.get("bitsandbytes")  # a model holding its layers has imported it; never import it here
    if bnb is None:
        return ()
    # Linear8bitLt already answers in the autocast dtype (its matmul is autocast-aware); Linear4bit does not.
    return (bnb.nn.Linear4bit,) if hasattr(bnb.nn, "Linear4bit") else ()


def _autocast_output(layer: torch.nn.Module, args, output):
    """Forward hook: a bitsandbytes 4-bit linear's output in the autocast dtype while autocast is on (else unchanged).

    ``Linear4bit`` computes in its compute dtype and then casts the result back to its *input's* dtype, where an
    ``nn.Linear`` under autocast returns the autocast dtype whatever it was given. So on a quantized
    base an fp32 input (a timestep embedding: diffusers makes it fp32) keeps everything after it fp32 while the
    model's frozen norms are bf16; CUDA's autocast runs ``layer_norm`` in fp32 and hides it, the CPU's does not cast
    ``layer_norm`` at all (CogVideoX's q/k LayerNorm stopped the first step with "mixed dtype (CPU)"), and on a GPU the
    activations after such a layer stay fp32 (by reading the code: twice the bytes of the unquantized model's bf16
    ones). With the hook the quantized base runs in the dtypes the unquantized one does.
    """
    if not isinstance(output, torch.Tensor) or not output.is_floating_point():
        return None
    device = output.device.type
    if not torch.is_autocast_enabled(device):
        return None
    dtype = torch.get_autocast_dtype(device)
    return output.to(dtype) if output.dtype != dtype else None


def follow_autocast(*modules: torch.nn.Module | None) -> int:
    """Give every bitsandbytes 4-bit linear in ``modules`` the :func:`_autocast_output` hook (once); returns how many
    layers have it. Idempotent; a model without quantized layers is left alone."""
    kinds = _bitsandbytes_linears()
    count = 0
    for module in modules:
        if not isinstance(module, torch.nn.Module) or not kinds:
            continue
        for layer in module.modules():
            if not isinstance(layer, kinds):
                continue
            if not getattr(layer, "_dit_lora_follows_autocast", False):
                layer.register_forward_hook(_autocast_output)
                cast(Any, layer)._dit_lora_follows_autocast = True  # a plain flag; Module's types take tensors
            count += 1
    return count


def _cpu_quantizers() -> dict:
    from diffusers.quantizers.bitsandbytes.bnb_quantizer import BnB4BitDiffusersQuantizer, BnB8BitDiffusersQuantizer

    def validate_environment(self, *args, **kwargs):  # the parents' checks, less "a GPU is needed"
        if bitsandbytes_status() is not None:
            raise ImportError("bitsandbytes is not importable")

    def update_device_map(self, device_map):
        return device_map or {"": "cpu"}

    made = {}
    for key, parent in (
        ("bitsandbytes_4bit", BnB4BitDiffusersQuantizer),
        ("bitsandbytes_8bit", BnB8BitDiffusersQuantizer),
    ):
        made[key] = type(
            f"Cpu{parent.__name__}",
            (parent,),
            {"validate_environment": validate_environment, "update_device_map": update_device_map},
        )
    return made


# ---- which weights are quantized ----------------------------------------------------------------
def _skipped(name: str, skip: Iterable[str]) -> bool:
    """Whether the module ``name`` lies in one of the ``skip`` paths (the path itself or below it). A path names a
    place in the model, not every module of that name: Chroma's ``proj_out`` is its output projection, not each single
    block's ``proj_out`` (which a match on the last name also skipped, leaving 38 of Chroma's largest Linears out of
    ``fp8_scaled``)."""
    return any(name == s or name.startswith(s + ".") or name == s.rsplit(".", 1)[-1] for s in skip)


def quantized_linears(model: torch.nn.Module, skip_modules: Iterable[str] = ()) -> list[str]:
    """Names of the Linear modules --quantize_base quantizes: every ``nn.Linear`` (bitsandbytes' layers are
    subclasses) outside ``skip_modules`` and the model's ``_keep_in_fp32_modules``. Works on a meta-device
    model (the plan) and on a loaded one."""
    keep = list(getattr(model, "_keep_in_fp32_modules", None) or [])
    skip = list(skip_modules)
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if _skipped(name, skip) or any(k in name.split(".") for k in keep):
            continue
        if ".lora_" in name:  # PEFT's own layers (after add_lora): fp32, never quantized
            continue
        names.append(name)
    return names


def check_trainable(
    model: ModelOptions, lora: LoraOptions, trained_names: Iterable[str], quantized: Iterable[str]
) -> None:
    """Refuse full training (--train_backbone, a family's extra groups) of weights that are quantized."""
    if not enabled(model):
        return
    weights = {q + ".weight" for q in quantized} | {q + ".base_layer.weight" for q in quantized}
    hit = [n for n in trained_names if n in weights]
    if hit:
        raise QuantizeError(
            f"--quantize_base {model.quantize_base} stores the base model's Linear weights quantized, and the run would "
            f"also train {len(hit)} of them in full (e.g. `{hit[0]}`, chosen by --train_backbone "
            f"{' '.join(lora.train_backbone) or '(the family default)'}). Quantized weights cannot be trained: narrow "
            "--train_backbone to non-Linear weights (norms, biases, embeddings), or drop --quantize_base to train them."
        )


def quantized_bytes(module: torch.nn.Linear, scheme: str) -> int:
    """Bytes ``module``'s weight takes once quantized: nf4 half a byte a weight plus one fp32 absmax per 64,
    int8 one byte a weight plus one fp32 scale per output row, fp8 one byte plus one fp32 scale per row,
    fp8_scaled one byte plus one fp32 scale per row and block of 64 inputs (per row when not a multiple of 64)."""
    weight = module.weight
    n = weight.numel()
    if scheme == "nf4":
        return n // 2 + n % 2 + 4 * -(-n // NF4_BLOCK)
    rows = weight.shape[0]
    if scheme == "fp8_scaled":
        return n + 4 * rows * (module.in_features // fp8_scaled.block_size(module.in_features))
    return n + 4 * rows


def quantized_weight_savings(model: torch.nn.Module, scheme: str, names: Iterable[str]) -> int:
    """Bytes the quantized Linear weights ``names`` save against their unquantized storage in ``model``."""
    modules = dict(model.named_modules())
    saved = 0
    for name in names:
        module = modules[name]
        w = module.weight
        saved += w.numel() * w.element_size() - quantized_bytes(module, scheme)
    return saved


def dequantized_peak_bytes(model: torch.nn.Module, scheme: str, names: Iterable[str], dtype: torch.dtype) -> int:
    """fp8_scaled dequantizes each Linear weight into the compute ``dtype`` while the layer runs (forward, backward,
    a checkpointed recomputation): the largest of them, alive on top of the step's other tensors. 0 otherwise."""
    if scheme != "fp8_scaled":
        return 0
    modules = dict(model.named_modules())
    return max((fp8_scaled.dequantized_bytes(modules[n].weight.numel(), dtype) for n in names), default=0)


def describe(model: ModelOptions) -> str | None:
    """One line for logs and the model card (``model``: the run's ``cfg.model``), or None when the base is not
    quantized."""
    if not enabled(model):
        return None
    kind = {
        "nf4": "bitsandbytes nf4 (4-bit)",
        "int8": "bitsandbytes LLM.int8 (8-bit)",
        "fp8": "torchao fp8 weights",
        "fp8_scaled": "fp8 e4m3 weights with a scale per 64 inputs, computed in the compute dtype",
    }[model.quantize_base]
    return f"{kind}; the LoRA weights trained in fp32"


def describe_text_encoder(model: ModelOptions) -> str | None:
    """One line for logs and the model card under --quantize_text_encoder (``model``: the run's ``cfg.model``), else
    None."""
    if not model.quantize_text_encoder:
        return None
    return (
        "the text encoder ran bitsandbytes nf4 (4-bit) while the embeddings were cached, so the adapter learned "
        "from embeddings with its quantization error"
    )


__all__ = [
    "SCHEMES",
    "QuantizeError",
    "after_loading",
    "check_config",
    "check_text_encoder",
    "check_trainable",
    "describe",
    "describe_text_encoder",
    "diffusers_config",
    "dequantized_peak_bytes",
    "diffusers_loading",
    "enabled",
    "follow_autocast",
    "fp8_scaled_status",
    "keep_4bit_layout",
    "keep_out_of_ddp",
    "quantized_bytes",
    "quantized_linears",
    "text_encoder_kwargs",
    "transformers_config",
    "what_runs",
]
