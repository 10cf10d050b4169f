"""A Hub model's files as a local folder: a snapshot in the Hugging Face cache, for loaders that read folders.

diffusers' and transformers' ``from_pretrained`` download a Hub id themselves; a family whose own code reads the
model's files (the video LLMs read the tokenizer, chat template and preprocessor JSONs from the folder) resolves
the id to the cache's snapshot folder first with :func:`model_snapshot`. Only the files loading reads come down
(``allow_patterns``: never a pickle, dit-lora loads safetensors only); ``HF_HUB_OFFLINE`` reads the cache alone;
the token is huggingface_hub's own (``HF_TOKEN`` or ``hf auth login``), never printed. A snapshot that cannot be
had is one paragraph (:func:`snapshot_error`) naming the id, the cause and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.pipeline_files import SAFETENSORS_ONLY, causes, is_local

#: a transformers model's small files: configs (model, generation, preprocessor, processor, the weights' index),
#: tokenizer (fast, SentencePiece, BPE vocab and merges) and chat template
CONFIG_PATTERNS = ("*.json", "*.jinja", "*.model", "*.txt", "*.tiktoken")
#: the weights loading reads beside them (safetensors only: a pickle can run code)
WEIGHT_PATTERNS = ("*.safetensors",)

#: (repo, revision asked) -> (the snapshot folder this process resolved it to, whether with its weights), so every
#: later read (the weights after the configs, the processing after the model) sees the same commit even when the
#: branch moves meanwhile, and asks the Hub once
_RESOLVED: dict[tuple[str, str | None], tuple[Path, bool]] = {}


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it (read here, not from its constants: those are fixed at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def model_snapshot(model: ModelOptions, kind: str, *, weights: bool) -> Path:
    """The local folder of ``model`` (the run's ``cfg.model``): a local path as it is, a Hub id as its snapshot in
    the Hub cache, downloaded when missing (its config, tokenizer and processor files; with ``weights`` its
    safetensors too).

    ``kind`` names the model in a refusal ("video LLM"). A path that is neither a folder nor a Hub id comes back
    as it is, for the loader to refuse in its own words.
    """
    path = str(model.pretrained_model_name_or_path or "")
    if is_local(path):
        return Path(path).expanduser()
    known = _RESOLVED.get((path, model.revision))
    if known is not None and (known[1] or not weights):
        return known[0]
    revision = known[0].name if known is not None else model.revision  # the commit the configs came from
    patterns = [*CONFIG_PATTERNS, *(WEIGHT_PATTERNS if weights else ())]
    try:
        from huggingface_hub import snapshot_download

        folder = Path(
            snapshot_download(path, revision=revision, allow_patterns=patterns, local_files_only=hub_offline())
        )
    except Exception as err:  # huggingface_hub's errors (and the OSError a dead network becomes): one paragraph
        raise snapshot_error(kind, model, err) from err
    if weights:
        check_snapshot_weights(model, folder, kind)
    pin(model, folder, weights)
    return folder


def pin(model: ModelOptions, folder: Path, weights: bool) -> None:
    """Remember that ``model`` is ``folder`` in this process (another rank's download, shared with this one)."""
    _RESOLVED[str(model.pretrained_model_name_or_path), model.revision] = (folder, weights)


def check_snapshot_weights(model: ModelOptions, folder: Path, kind: str) -> None:
    """Refuse a snapshot without safetensors weights: a pickle-only repo, or (offline) one whose configs alone were
    downloaded, where ``from_pretrained`` would fail on a missing file after the run has started."""
    if any(folder.glob("*.safetensors")):
        return
    repo = model.pretrained_model_name_or_path
    if hub_offline():
        raise UserError(
            f"The {kind} `{repo}` is in the Hub cache ({folder}) without its weights (*.safetensors), and "
            f"HF_HUB_OFFLINE=1 forbids downloading them. {_download_fix(model)}"
        )
    raise UserError(
        f"The {kind} `{repo}` has no safetensors weights on the Hub ({folder} holds none). {SAFETENSORS_ONLY}"
    )


def _download_fix(model: ModelOptions) -> str:
    """How to get the model by hand: ``hf download`` into a folder, then that folder as the model."""
    revision = f" --revision {model.revision}" if model.revision else ""
    patterns = " ".join(f'"{p}"' for p in (*CONFIG_PATTERNS, *WEIGHT_PATTERNS))
    return (
        f"Download it where the Hub can be reached (`hf download {model.pretrained_model_name_or_path}{revision} "
        f"--include {patterns} --local-dir DIR`) and pass --pretrained_model_name_or_path DIR, or run where it can "
        "download it."
    )


def snapshot_error(kind: str, model: ModelOptions, err: BaseException) -> UserError:
    """The paragraph for a Hub id whose snapshot could not be had: the id, what huggingface_hub said, the fix."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo = model.pretrained_model_name_or_path
    first = str(err).splitlines()[0] if str(err) else ""
    what = f"Could not get the {kind} `{repo}`{_at(model.revision)} from the Hub ({type(err).__name__}: {first})."
    chain = causes(err)
    if any(isinstance(c, GatedRepoError) for c in chain):
        return UserError(
            f"{what} The repo is gated: accept its license on https://huggingface.co/{repo} with your account, then "
            "give this machine your token (set HF_TOKEN, or `hf auth login`)."
        )
    if any(isinstance(c, RevisionNotFoundError) for c in chain):
        return UserError(f"{what} --revision {model.revision} is not a branch, tag or commit of it: fix or drop it.")
    if any(isinstance(c, RepositoryNotFoundError) for c in chain):
        return UserError(
            f"{what} There is no such repo, or it is private and no token was given: check the id (`dit-lora models` "
            "lists the catalogued ones; a local folder of that name does not exist here), or set HF_TOKEN "
            "(`hf auth login`) for a private repo."
        )
    if hub_offline() or any(isinstance(c, OfflineModeIsEnabled) for c in chain):
        return UserError(
            f"{what} HF_HUB_OFFLINE=1 forbids downloading and it is not in the Hub cache "
            f"({os.environ.get('HF_HUB_CACHE') or 'HF_HUB_CACHE'}). {_download_fix(model)}"
        )
    if any(isinstance(c, (LocalEntryNotFoundError, ConnectionError, TimeoutError)) for c in chain):
        return UserError(f"{what} The Hub could not be reached and it is not in the Hub cache. {_download_fix(model)}")
    return UserError(
        f"{what} Check --pretrained_model_name_or_path and --revision (a Hub id `org/name`, or a local folder). "
        f"{_download_fix(model)}"
    )


def _at(revision: str | None) -> str:
    return f" at revision {revision}" if revision else ""


__all__ = [
    "CONFIG_PATTERNS",
    "WEIGHT_PATTERNS",
    "check_snapshot_weights",
    "hub_offline",
    "model_snapshot",
    "pin",
    "snapshot_error",
]
