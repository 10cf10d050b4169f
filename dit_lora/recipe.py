"""Entry point shared by the thin ``recipes/<family>_lora.py`` scripts."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from .errors import UserError, run_cli


def _default_family(argv: list[str], family: str) -> list[str]:
    """``recipes/<family>_lora.py`` trains ``family`` unless --family or the --config YAML names one."""
    if any(a == "--family" or a.startswith("--family=") for a in argv):
        return argv
    from .config import load_yaml

    for i, arg in enumerate(argv):
        path = (argv[i + 1] if arg == "--config" and i + 1 < len(argv)
                else arg.partition("=")[2] if arg.startswith("--config=") else None)
        if path:
            try:
                if "family" in (load_yaml(path) or {}):
                    return argv  # the check below names a mismatch
            except UserError:
                return argv  # parse_config reports the bad file
    return ["--family", family, *argv]


def run_recipe(family: str, argv: Sequence[str] | None = None, also: Sequence[str] = ()) -> int:
    """Parse options, check the environment, then train ``family`` (or one of ``also``); returns an exit code."""
    from .config import parse_config
    from .families import available, get_family

    argv = _default_family(list(sys.argv[1:] if argv is None else argv), family)
    cfg = parse_config(argv, prog=get_family(family).recipe_script.rsplit("/", 1)[-1])
    if cfg.family != family and cfg.family not in also:
        where = get_family(cfg.family).recipe_script if cfg.family in available() else "the recipe of that family"
        allowed = " or ".join(f"`{name}`" for name in (family, *also))
        raise UserError(
            f"This recipe trains {allowed} but --family/the config sets `{cfg.family}`. Use {where} or remove "
            "`family` from the config."
        )
    if not cfg.skip_doctor:
        from .doctor import ensure_environment

        ensure_environment()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .output.adapter import NonFiniteWeightsError
    from .training.loop import train

    try:
        train(cfg)
    except NonFiniteWeightsError as err:
        raise UserError(
            f"{err} The run diverged; lower --learning_rate, keep --max_grad_norm on, or resume from an earlier "
            "checkpoint with --resume_from_checkpoint."
        )
    return 0


def main(family: str, also: Sequence[str] = ()) -> None:
    """Console entry: run the recipe and turn user errors into one paragraph.

    SIGTERM/SIGINT/SIGHUP are handled from the first line (:mod:`.training.signals`; SIGHUP only when not ignored,
    as under ``nohup``): before training starts they stop the process in one line with 143 / 130 / 129; during
    training the run saves a checkpoint first. The handlers stay until the process exits, so a repeat of the stop
    (a launcher forwarding what the terminal already sent) is never Python's default ``KeyboardInterrupt``.
    """
    from .training import signals

    signals.current()
    run_cli(lambda: run_recipe(family, also=also))
