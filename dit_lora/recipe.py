"""Entry point shared by ``dit-lora train`` (``python -m dit_lora train``) and the three-line
``recipes/<family>_lora.py`` scripts."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from .errors import UserError, run_cli


_UNREADABLE = object()  # the --config YAML could not be read: parse_config reports it


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` in ``argv`` (None: absent)."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.partition("=")[2]
    return found


def _named(argv: Sequence[str], name: str):
    """Option ``name`` as the run will see it: its flag, else the --config YAML's key (None: neither sets it).

    The YAML is read as it is (not checked: that needs the family); a file that cannot be read gives
    ``_UNREADABLE`` and parse_config reports it.
    """
    flag = _flag_value(argv, f"--{name}")
    if flag is not None:
        return flag
    path = _flag_value(argv, "--config")
    if not path:
        return None
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return _UNREADABLE
    return data.get(name) if isinstance(data, dict) else _UNREADABLE


def choose_family(argv: Sequence[str], recipe: str | None = None) -> list[str]:
    """``argv`` with the family it trains named, decided the same way for every entry point.

    The family is ``--family``, else the config's ``family:``, else (a recipe script) the recipe's own default,
    else (``dit-lora train``) the family of the model (:func:`~dit_lora.families.family_for_model`). ``recipe`` is
    the family a ``recipes/<...>_lora.py`` script was started for: it trains every name of that family's registry
    entry, and a family of another entry is refused, naming the script that trains it.
    """
    from .families import entry_for, family_for_model

    argv = list(argv)
    named = _named(argv, "family")
    if named is _UNREADABLE:
        return argv  # parse_config reports the bad file
    if named is not None:
        named = str(named)
        where = entry_for(named).recipe_script  # an unknown name: one paragraph listing the known ones
        if recipe is not None and named not in entry_for(recipe).names:
            allowed = " or ".join(f"`{name}`" for name in entry_for(recipe).names)
            raise UserError(
                f"This recipe trains {allowed} but --family/the config sets `{named}`. Use {where} (or `dit-lora "
                "train`) or remove `family` from the config."
            )
        return argv
    if recipe is not None:
        return ["--family", entry_for(recipe).default, *argv]
    if "-h" in argv or "--help" in argv:
        return argv
    return ["--family", family_for_model(_model_config(argv)), *argv]


def _model_config(argv: Sequence[str]):
    """A config holding just what :func:`~dit_lora.families.family_for_model` reads (the model and revision)."""
    from .config import TrainConfig

    model, revision = _named(argv, "pretrained_model_name_or_path"), _named(argv, "revision")
    if model in (None, _UNREADABLE, ""):
        from .families import available

        raise UserError(
            "dit-lora train needs to know which model family it trains: pass --family "
            f"({', '.join(available())}), put `family:` in the --config YAML, or name the model with "
            "--pretrained_model_name_or_path (its config files tell the family)."
        )
    return TrainConfig(pretrained_model_name_or_path=str(model),
                       revision=None if revision in (None, _UNREADABLE) else str(revision))


def run_recipe(family: str | None, argv: Sequence[str] | None = None) -> int:
    """Parse options, check the environment, then train; returns an exit code.

    ``family``: the family a recipe script trains (it also trains the other names of that family's registry
    entry); None for ``dit-lora train``, which trains the family :func:`choose_family` finds.
    """
    from .config import parse_config
    from .families import entry_for

    argv = choose_family(list(sys.argv[1:] if argv is None else argv), family)
    prog = "dit-lora train" if family is None else entry_for(family).recipe_script.rsplit("/", 1)[-1]
    cfg = parse_config(argv, prog=prog)
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


def main(family: str | None = None) -> None:
    """Console entry: train (``family``: the recipe script's family; None: ``dit-lora train``), turning user
    errors into one paragraph.

    SIGTERM/SIGINT/SIGHUP are handled from the first line (:mod:`.training.signals`; SIGHUP only when not ignored,
    as under ``nohup``): before training starts they stop the process in one line with 143 / 130 / 129; during
    training the run saves a checkpoint first. The handlers stay until the process exits, so a repeat of the stop
    (a launcher forwarding what the terminal already sent) is never Python's default ``KeyboardInterrupt``.
    """
    from .training import signals

    signals.current()
    run_cli(lambda: run_recipe(family))
