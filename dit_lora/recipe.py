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
    except UserError:
        raise
    except Exception as err:
        full = _disk_full_error(err, cfg)
        if full is None:
            raise
        raise full from err
    return 0


def _disk_full_error(err: BaseException, cfg) -> UserError | None:
    """A full disk that escaped its writer as a bare library error becomes one paragraph (None: not a full disk).

    The writers that know what they write say so themselves (:mod:`.fileio`); this is the net for the others
    (tracker logs, samples, a library's own files), naming the file the error names, else --output_dir.
    """
    from .fileio import DiskFullError, free_bytes, human_bytes, is_disk_full

    if not is_disk_full(err):
        return None
    chain, seen, where = err, set(), None
    while chain is not None and id(chain) not in seen and where is None:
        seen.add(id(chain))
        where = getattr(chain, "filename", None)
        chain = chain.__cause__ or chain.__context__
    where, said = str(where or cfg.output_dir), " ".join(str(err).split())[:200]
    return DiskFullError(
        f"No space left on device while writing {where} ({type(err).__name__}: {said}). "
        f"{human_bytes(free_bytes(where))} are free on that file system (a disk quota may allow less). Free some "
        "space there, or put --output_dir (and --cache_dir, --logging_dir) on a disk with room, and run again; the "
        "checkpoints already written are whole, and --resume_from_checkpoint latest continues from the newest."
    )


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
