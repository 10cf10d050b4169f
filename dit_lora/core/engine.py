"""Which distributed engine a run trains with: DDP (the default) or FSDP2, decided once from the launch.

``dit-lora launch --config_file accelerate_configs/fsdp2.yaml`` (accelerate's ``distributed_type: FSDP`` with
``fsdp_version: 2``) exports ``ACCELERATE_USE_FSDP=true`` and ``FSDP_VERSION=2`` to every training process; any
other launch (one process, ``--multi_gpu``) is DDP, which accelerate applies when there are several processes.
DeepSpeed and FSDP version 1 are refused in one paragraph. This module reads only the environment, so the training
setup and the memory plan (``make_plan(..., engine=...)``) decide alike; it sits in ``core`` for both to import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
