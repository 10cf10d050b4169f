"""What ``dit-lora launch`` tells the run it starts about precision: the launch options' ``--mixed_precision``.

The launcher (:mod:`dit_lora.commands.launch`) sets :data:`LAUNCH_PRECISION_VAR`; the run's start
(:mod:`dit_lora.training.run_start`) compares it with its own ``--mixed_precision`` (:func:`check_launch_precision`). Both
sides meet here, below the commands, so the training package never imports a command.
"""

from __future__ import annotations

import os

from dit_lora.core.errors import UserError

#: the launch options' own ``--mixed_precision`` (accelerate's, before the script), passed to the run, which trains
#: in its own --mixed_precision and says so when the two differ (:func:`check_launch_precision`)
LAUNCH_PRECISION_VAR = "DIT_LORA_LAUNCH_MIXED_PRECISION"


def check_launch_precision(run_precision: str, log) -> None:
    """Compare the launcher's ``--mixed_precision`` (kohya users pass it to ``accelerate launch``) with the run's:
    accelerate's value never reaches the run (dit-lora's Accelerator takes the run's --mixed_precision), so a
    difference is said in one line at start, or, for fp16 (refused without --allow_fp16), refused in one
    paragraph instead of training in another precision than the one asked for."""
    given = os.environ.get(LAUNCH_PRECISION_VAR)
    if not given or given == run_precision:
        return
    if given == "fp16":
        raise UserError(
            f"`dit-lora launch --mixed_precision fp16` is accelerate's launch option and does not set the run's "
            f"precision: dit-lora trains in its own --mixed_precision, {run_precision} for this run. To train in "
            "fp16, pass `--mixed_precision fp16 --allow_fp16` after the script path (fp16 needs --allow_fp16: its "
            f"range ends at 65504, where diffusion transformers overflow); to train in {run_precision}, drop "
            "--mixed_precision from the launch options."
        )
    log(
        f"mixed precision: {run_precision}, the run's --mixed_precision; the launch option --mixed_precision "
        f"{given} is accelerate's and not used (pass --mixed_precision after the script path to change the run's)"
    )


__all__ = ["LAUNCH_PRECISION_VAR", "check_launch_precision"]
