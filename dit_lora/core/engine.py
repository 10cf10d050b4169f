"""Which distributed engine a run trains with: DDP (the default) or FSDP2, decided once from the launch.

``dit-lora launch --config_file accelerate_configs/fsdp2.yaml`` (accelerate's ``distributed_type: FSDP`` with
``fsdp_version: 2``) exports ``ACCELERATE_USE_FSDP=true`` and ``FSDP_VERSION=2`` to every training process; any
other launch (one process, ``--multi_gpu``) is DDP, which accelerate applies when there are several processes.
DeepSpeed and FSDP version 1 are refused in one paragraph. This module reads only the environment, so the training
setup and the memory plan (``make_plan(..., engine=...)``) decide alike; it sits in ``core`` for both to import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from dit_lora.core.errors import UserError

#: the engines a run can train with
Engine = Literal["ddp", "fsdp2"]
#: set to true by ``accelerate launch`` for an FSDP config (either version)
USE_FSDP_VAR = "ACCELERATE_USE_FSDP"
#: the FSDP version of an FSDP launch ("1" when the config does not say)
FSDP_VERSION_VAR = "FSDP_VERSION"
#: set to true by ``accelerate launch`` for a DeepSpeed config
USE_DEEPSPEED_VAR = "ACCELERATE_USE_DEEPSPEED"
#: the accelerate config that starts an FSDP2 run
FSDP2_CONFIG = "accelerate_configs/fsdp2.yaml"


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run trains with and why (each reason one sentence, for the start-of-run log)."""

    name: Engine
    reasons: tuple[str, ...]


def _flag(environ: Mapping[str, str], var: str) -> bool:
    return environ.get(var, "").strip().lower() in ("1", "true", "yes")


def decide_engine(environ: Mapping[str, str] | None = None) -> EngineChoice:
    """The engine the launch asks for (``environ``: the process environment by default).

    Raises a :class:`UserError` for a DeepSpeed launch or an FSDP version 1 launch, naming what to use instead.
    """
    env = os.environ if environ is None else environ
    if _flag(env, USE_DEEPSPEED_VAR):
        raise UserError(
            f"This run was launched with DeepSpeed ({USE_DEEPSPEED_VAR}=true), which dit-lora does not support: "
            "DeepSpeed runs the optimizer step inside its backward, so a non-finite step could not be skipped. "
            "Launch with `dit-lora launch --config_file accelerate_configs/multi_gpu.yaml` (DDP: when the model fits "
            f"one GPU) or `--config_file {FSDP2_CONFIG}` (FSDP2: the model and optimizer sharded across the GPUs)."
        )
    if not _flag(env, USE_FSDP_VAR):
        return EngineChoice("ddp", ("the launch asks for no sharding: DDP with several processes, else one process",))
    version = env.get(FSDP_VERSION_VAR, "1").strip() or "1"
    if version != "2":
        raise UserError(
            f"This run was launched with FSDP version {version} ({USE_FSDP_VAR}=true, {FSDP_VERSION_VAR}={version}); "
            "dit-lora shards with FSDP2 only (torch's fully_shard: its sharded gradients are what the finite-step "
            "guard, its rollback snapshot and the sharded checkpoints handle). Launch with `dit-lora launch "
            f"--config_file {FSDP2_CONFIG}` (or set `fsdp_version: 2` in your accelerate config's fsdp_config), or "
            "with accelerate_configs/multi_gpu.yaml (DDP) when the model fits one GPU."
        )
    return EngineChoice(
        "fsdp2",
        (
            f"the launch asks for FSDP2 ({USE_FSDP_VAR}=true, {FSDP_VERSION_VAR}=2)",
            "every transformer block, then the root, is sharded with torch's fully_shard",
        ),
    )


__all__ = ["FSDP2_CONFIG", "Engine", "EngineChoice", "decide_engine"]


#: accelerate reads the device of every process from here when it is set (``PartialState``)
TORCH_DEVICE_VAR = "ACCELERATE_TORCH_DEVICE"


@contextlib.contextmanager
def plain_cpu_device(cuda_available: bool | None = None) -> Iterator[None]:
    """Build the Accelerator inside this on a machine without CUDA: its processes get ``torch.device("cpu")``.

    Without it accelerate places rank ``r`` of a multi-process CPU run on ``cpu:r``, and torch copies every tensor
    moved from ``cpu`` to ``cpu:0`` (another device to ``.to()``, the same memory): each rank's loader copied the
    whole model once more (Sana 600M widths, 2 blocks: +268 MiB per process, benchmarks/RESULTS.md). Nothing is
    changed when CUDA is available or the variable is already set; it is restored on the way out.
    """
    cuda = torch_cuda_available() if cuda_available is None else cuda_available
    if cuda or TORCH_DEVICE_VAR in os.environ:
        yield
        return
    os.environ[TORCH_DEVICE_VAR] = "cpu"
    try:
        yield
    finally:
        os.environ.pop(TORCH_DEVICE_VAR, None)


def torch_cuda_available() -> bool:
    """``torch.cuda.is_available()`` (torch imported here: this module is read before a run needs it)."""
    import torch  # the engine check runs at start-up, before torch is otherwise needed

    return torch.cuda.is_available()
