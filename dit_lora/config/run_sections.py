"""The option sections that say how a run goes: the optimisation (:class:`TrainingOptions`), checkpoints
(:class:`CheckpointOptions`), validation samples and the tracker (:class:`ValidationOptions`), the Hub push
(:class:`HubOptions`), the guards (:class:`GuardOptions`), performance (fused kernels, attention, compile:
:class:`PerformanceOptions`) and the rest (:class:`MiscOptions`). A resume may change their options unless one says otherwise (``SECTION_RESUME``).

Each section is a frozen dataclass of fields declared with :func:`~dit_lora.config.option.opt`, carrying its help
text in ``metadata["help"]``; ``--help``, the documentation's options reference and unknown-key suggestions are all
generated from them (:mod:`dit_lora.config.sections` lists every section in order).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dit_lora.config.optimizers import DEFAULT, OPTIMIZER_HELP, USE_8BIT_ADAM_HELP, OptimizerNames
from dit_lora.config.option import BETA, DIFFUSION_FAMILIES, NON_NEGATIVE, POSITIVE, SEED, Range, opt
from dit_lora.core.errors import UserError

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
    output_name: str | None = opt(
        None,
        "Also write the adapter as NAME.safetensors in output_dir (and its ComfyUI and EMA files as NAME_comfyui, "
        "NAME_ema ...), beside pytorch_lora_weights.safetensors, which diffusers' load_lora_weights(folder) keeps "
        "loading: ComfyUI picks LoRA files by name (sd-scripts' and musubi-tuner's --output_name). A file of that "
        "name that dit-lora did not write is never replaced.",
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
    optimizer: str = opt(
        DEFAULT,
        OPTIMIZER_HELP,
        choices=OptimizerNames(),
        section="training",
        resume="fixed",
    )
    prodigy_beta3: float | None = opt(
        None,
        "Prodigy: the decay of its step-size estimate's running sums (default: the square root of --adam_beta2).",
        section="training",
        valid=Range(0, 1, high_open=True, why="a decay rate of the estimate's sums"),
    )
    prodigy_decouple: bool = opt(
        True, "Prodigy: decoupled weight decay (AdamW's) rather than L2 in the gradient (Adam's).", section="training"
    )
    prodigy_use_bias_correction: bool = opt(
        True, "Prodigy: Adam's bias correction of the step (diffusers' examples' default).", section="training"
    )
    prodigy_safeguard_warmup: bool = opt(
        True,
        "Prodigy: leave the learning rate out of the estimate's denominator, which keeps a warm-up (--lr_warmup_steps) "
        "from inflating it (diffusers' examples' default).",
        section="training",
    )
    adafactor_scale_parameter: bool = opt(
        False,
        "Adafactor: scale each step by the weight's root mean square (transformers' `scale_parameter`). Off, as the "
        "LoRA trainers set it: a LoRA's B matrix starts at zero, and the scale would hold its steps at 1e-3 of the "
        "learning rate.",
        section="training",
    )
    adafactor_beta1: float | None = opt(
        None,
        "Adafactor: keep a first moment with this decay (one fp32 value per trained weight); none by default, as "
        "Adafactor's own.",
        section="training",
        resume="fixed",
        valid=Range(0, 1, high_open=True, why="a first moment's decay"),
    )
    adafactor_clip_threshold: float = opt(
        1.0, "Adafactor: clip each update's root mean square to this.", section="training", valid=POSITIVE
    )
    adafactor_decay_rate: float = opt(
        -0.8,
        "Adafactor: its second moments decay by 1 - step ** this (transformers' `decay_rate`).",
        section="training",
        valid=Range(-1, 0, high_open=True, why="a negative power of the step"),
    )
    came_beta3: float = opt(
        0.9999,
        "CAME: the decay of its instability's running average, the confidence that scales each step (came-pytorch's "
        "third beta; its first two are --adam_beta1 and --adam_beta2).",
        section="training",
        valid=Range(0, 1, high_open=True, why="a decay rate of the instability's average"),
    )
    came_clip_threshold: float = opt(
        1.0, "CAME: clip each update's root mean square to this.", section="training", valid=POSITIVE
    )
    use_8bit_adam: bool = opt(
        False,
        USE_8BIT_ADAM_HELP,
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
    # EMA of the trainable weights (training/ema.py); names from diffusers' examples and EMAModel, SimpleTuner's
    # --ema_device / --ema_update_interval / --ema_validation
    use_ema: bool = opt(
        False,
        "Keep an fp32 exponential moving average (EMA) of the trainable weights (LoRA and any trained backbone "
        "weights, never the frozen base), updated after every applied optimizer update (a step the guard skips "
        "leaves it unchanged), saved in every checkpoint and exported beside the adapter as "
        "<adapter>_ema.safetensors (adapters written as a folder: in ema/). The decay follows diffusers' EMAModel. "
        "Fixed on resume: a resume without it would drop the checkpoint's EMA (--allow_changed_options to do so).",
        section="training",
        resume="fixed",
    )
    ema_decay: float = opt(
        0.9999,
        "The EMA's largest decay (diffusers' EMAModel `decay`): each EMA update keeps this fraction of the average, "
        "so it averages roughly the last 1/(1-decay) updates (0.999: ~1000, 0.9999: ~10000). The decay of EMA update "
        "n is min(decay, (1+n)/(10+n)), or the --ema_warmup curve, so a short run is not stuck near its first weights.",
        section="training",
        valid=Range(0, 1, high_open=True, why="the fraction of the average kept per update; 1 would never move"),
    )
    ema_update_after_step: int = opt(
        0,
        "Copy the weights into the EMA (decay 0) for this many applied updates before averaging begins "
        "(diffusers' EMAModel `update_after_step`).",
        section="training",
        valid=NON_NEGATIVE,
    )
    ema_warmup: bool = opt(
        False,
        "Warm the decay up as 1 - (1 + n/ema_inv_gamma)^-ema_power (diffusers' EMAModel `use_ema_warmup`) instead "
        "of (1+n)/(10+n); capped by --ema_decay either way.",
        section="training",
    )
    ema_inv_gamma: float = opt(
        1.0,
        "Inverse multiplicative factor of the --ema_warmup curve (EMAModel `inv_gamma`).",
        section="training",
        valid=POSITIVE,
    )
    ema_power: float = opt(
        2 / 3,
        "Exponent of the --ema_warmup curve (EMAModel `power`; 2/3 reaches 0.999 after ~31.6K updates, 3/4 after "
        "~10K).",
        section="training",
        valid=POSITIVE,
    )
    ema_device: str = opt(
        "accelerator",
        "Where the EMA lives: `accelerator` (the training device: three foreach ops per update) or `cpu` (host memory: "
        "each update copies the trainable weights into pinned memory without waiting and averages them on the CPU "
        "two updates later; saves the device the EMA's fp32 copy). On a CPU run both are the same.",
        choices=("accelerator", "cpu"),
        section="training",
    )
    ema_update_interval: int = opt(
        1,
        "Update the EMA every this many optimizer updates (the decay then applies per EMA update: it averages "
        "~interval/(1-decay) optimizer updates). Larger values cost less with --ema_device cpu.",
        section="training",
        valid=POSITIVE,
    )
    ema_validation: str = opt(
        "trained",
        "Which weights the validation samples (every --validation_steps and at the end) use with --use_ema: "
        "`trained`, `ema` or `both` (SimpleTuner's --ema_validation none / ema_only / comparison); EMA samples are "
        "named *_ema.",
        choices=("trained", "ema", "both"),
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
        None,
        "Prompt sampled every validation_steps and at the end. Several prompts: the flag given more than once, a "
        "YAML list, or one text split by --validation_prompt_separator (as diffusers' CogVideoX examples); each "
        "is sampled with its own seed (--seed plus its position in the list). Image families also write one grid "
        "per validation with each prompt under its images; video families write the clips of each prompt.",
        section="validation",
        joined_by="validation_prompt_separator",
    )
    validation_prompt_separator: str = opt(
        ":::",
        "The text that separates several prompts in one --validation_prompt (diffusers' CogVideoX examples' flag "
        "and default).",
        section="validation",
    )
    validation_steps: int = opt(
        100,
        "Sample validation images every this many updates (with --validation_prompt), and compute the held-out "
        "validation loss (with --validation_split or --validation_data_dir, prompt or not) at the same steps.",
        section="validation",
        valid=POSITIVE,
    )
    validation_epochs: int | None = opt(
        None,
        "Validate every this many epochs instead (diffusers' flag): --validation_steps becomes this many epochs' "
        "updates once the data's epoch length is known (said in the log).",
        section="validation",
        valid=POSITIVE,
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

    def __post_init__(self) -> None:
        """Several prompts given as a list (the flag more than once, a YAML list) become one text joined by the
        separator, the form a single flag gives them in; a prompt holding the separator is refused (it would be
        split into prompts the user did not write)."""
        given = self.validation_prompt
        if not isinstance(given, (list, tuple)):
            return
        separator = self.validation_prompt_separator
        texts = [str(text).strip() for text in given]
        bad = next((t for t in texts if not t or (separator and separator in t)), None)
        problem = None
        if len(texts) > 1 and not separator:
            problem = "but --validation_prompt_separator is empty"
        elif bad is not None:
            problem = "one of them empty" if not bad else f"one of them ({bad!r}) holding the separator {separator!r}"
        if problem:
            raise UserError(
                f"--validation_prompt was given {len(texts)} prompts, {problem}: several prompts are kept as one "
                "text joined by --validation_prompt_separator. Give each prompt as text (none empty) and set "
                "--validation_prompt_separator to a text none of them holds (default `:::`)."
            )
        object.__setattr__(self, "validation_prompt", separator.join(texts) if texts else None)

    @property
    def prompts(self) -> list[str]:
        """The validation prompts, in order (none without --validation_prompt)."""
        text = self.validation_prompt
        if not text:
            return []
        parts = text.split(self.validation_prompt_separator) if self.validation_prompt_separator else [text]
        return [part.strip() for part in parts if part.strip()]

    def one_prompt(self, prompt: str) -> ValidationOptions:
        """These options with ``prompt`` alone as --validation_prompt: what a family's samples read for one prompt."""
        return replace(self, validation_prompt=prompt)


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
class PerformanceOptions:
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
        "must be less than the model's number of blocks; 0 swaps none. A model with two block lists of unequal "
        "length (FLUX.2's double and single blocks) swaps N of the longer list and the same share of the shorter, "
        "rounded up. Not with --compile or a bitsandbytes/torchao --quantize_base.",
        section="kernels",
        valid=NON_NEGATIVE,
    )
    activation_offloading: bool = opt(
        False,
        "Keep the activations the model's forward saves for its backward in host memory (pinned on CUDA) instead "
        "of on the device: each saved tensor of at least 1 KiB that is not a weight is copied out on a side stream "
        "during the forward and brought back during the backward, the next ones fetched ahead. Saves the device "
        "the saved activations (with --gradient_checkpointing: the checkpointed blocks' inputs); costs host memory "
        "of the same size and two copies of each over the host link per step (step time where they take longer than "
        "the compute). Results are unchanged. Use after --gradient_checkpointing and --quantize_base fp8_scaled; "
        "combines with --blocks_to_swap. Not with --compile.",
        section="kernels",
    )


@dataclass(frozen=True)
class MiscOptions:
    """The rest: the environment check at start."""

    skip_doctor: bool = opt(False, "Skip the environment check at start (not recommended).", section="misc")
