"""Entry point shared by ``dit-lora train`` (``python -m dit_lora train``) and the three-line
``recipes/<family>_lora.py`` scripts."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from dit_lora.catalogue.defaults import config_reader
from dit_lora.commands.doctor import ensure_environment
from dit_lora.config.family_choice import named_family
from dit_lora.config.parser import parse_config
from dit_lora.config.schema import ModelOptions
from dit_lora.core import quiet
from dit_lora.core.errors import UserError, run_cli
from dit_lora.core.fileio import DiskFullError, free_bytes, human_bytes, is_disk_full
from dit_lora.modelfiles.single_file import check_model_path, check_transformer_file
from dit_lora.registry import available, entry_for
from dit_lora.setup.family_inference import check_family_trains_model, family_for_model
from dit_lora.training import signals


def choose_family(recipe: str | None = None):
    """The ``infer_family`` hook of :func:`~dit_lora.config.parse_config` for an entry point: what trains when
    neither ``--family`` nor the config's ``family:`` names a family (those two win, in that order).

    A recipe script (``recipe``: the family it was started for) trains its registry entry's default name; ``dit-lora
    train`` (``recipe`` None) trains the model's family (:func:`~dit_lora.setup.family_inference.family_for_model`).
    """

    def infer(model: ModelOptions) -> tuple[str, str]:  # the model's options
        if recipe is not None:
            return entry_for(recipe).default, f"the family of {entry_for(recipe).recipe_script.rsplit('/', 1)[-1]}"
        if model.pretrained_model_name_or_path and not model.demo:
            check_model_path(model)  # a file: say what it is, not "could not tell the family"
        if not model.pretrained_model_name_or_path:  # e.g. `dit-lora train --help`
            raise UserError(
                "dit-lora train needs to know which model family it trains: pass --family "
                f"({', '.join(available())}), put `family:` in the --config YAML, or name the model with "
                "--pretrained_model_name_or_path (its config files tell the family). `dit-lora train --family "
                "NAME --help` lists the options of that family."
            )
        return family_for_model(model), "the model's family"

    return infer


def check_family(family: str, recipe: str | None = None) -> None:
    """Refuse a family that is not registered (one paragraph listing those that are), and for a recipe script one
    that its registry entry does not train, naming the script (or ``dit-lora train``) that does."""
    where = entry_for(family).recipe_script
    if recipe is not None and family not in entry_for(recipe).names:
        allowed = " or ".join(f"`{name}`" for name in entry_for(recipe).names)
        raise UserError(
            f"This recipe trains {allowed} but --family/the config sets `{family}`. Use {where} (or `dit-lora "
            "train`) or remove `family` from the config."
        )


def parse_run(argv: Sequence[str], recipe: str | None = None):
    """``argv`` parsed into the run's config, the family decided the same way for every entry point.

    The family is ``--family``, else the config's ``family:``, else :func:`choose_family`'s (the recipe script's
    own, or the model's for ``dit-lora train``); then :func:`check_family`.
    """
    argv = list(argv)
    named = named_family(argv)
    if named is not None:  # before the options are checked: they depend on the family
        check_family(named, recipe)
    prog = "dit-lora train" if recipe is None else entry_for(recipe).recipe_script.rsplit("/", 1)[-1]
    cfg = parse_config(argv, prog=prog, infer_family=choose_family(recipe))
    check_family(cfg.model.family, recipe)
    check_model(cfg.model)
    return cfg


def check_model(model: ModelOptions) -> None:
    """Before anything is built: a file given as the model folder, a --family that trains another pipeline class
    than the model's, and --transformer_file's refusals (:mod:`.single_file`), each one paragraph. A --demo run's
    model is built later, so its folder is not judged."""
    if not model.pretrained_model_name_or_path or model.demo:
        return
    check_model_path(model)
    read = config_reader(model)
    check_family_trains_model(model, read)
    check_transformer_file(model, read)


def run_recipe(family: str | None, argv: Sequence[str] | None = None) -> int:
    """Parse options, check the environment, then train; returns an exit code.

    ``family``: the family a recipe script trains (it also trains the other names of that family's registry
    entry); None for ``dit-lora train``, which trains the family :func:`parse_run` finds.
    """
    quiet.install()  # before the doctor or the run imports PEFT (and with it bitsandbytes)
    cfg = parse_run(sys.argv[1:] if argv is None else argv, family)
    if not cfg.misc.skip_doctor:
        ensure_environment(cfg=cfg)  # the warnings that concern this run
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # here, not at the top: a recipe's --help and the doctor run before torch, quiet.install() before PEFT loads
    from dit_lora.output.adapter import NonFiniteWeightsError
    from dit_lora.training.loop import train
    from dit_lora.training.run_start import resolve_for_training

    try:
        train(resolve_for_training(cfg))  # the config resolved once (demo, defaults, checks), then the run
    except NonFiniteWeightsError as err:
        raise UserError(
            f"{err} The run diverged; lower --learning_rate, keep --max_grad_norm on, or resume from an earlier "
            "checkpoint with --resume_from_checkpoint."
        )
    except UserError:
        raise
    except Exception as err:
        full = _disk_full_error(err, cfg.training.output_dir)
        if full is None:
            raise
        raise full from err
    return 0


def _disk_full_error(err: BaseException, output_dir: str) -> UserError | None:
    """A full disk that escaped its writer as a bare library error becomes one paragraph (None: not a full disk).

    The writers that know what they write say so themselves (:mod:`.fileio`); this is the net for the others
    (tracker logs, samples, a library's own files), naming the file the error names, else --output_dir.
    """
    if not is_disk_full(err):
        return None
    chain: BaseException | None = err
    seen, where = set(), None
    while chain is not None and id(chain) not in seen and where is None:
        seen.add(id(chain))
        where = getattr(chain, "filename", None)
        chain = chain.__cause__ or chain.__context__
    where, said = str(where or output_dir), " ".join(str(err).split())[:200]
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
    signals.current()
    run_cli(lambda: run_recipe(family))
