"""Small reads of a diffusers pipeline folder or Hub repo that every family needs before loading weights."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import cast

from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.single_file import check_model_path

_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def is_local(path: str) -> bool:
    """True for a local folder, or anything that cannot be a Hub id (so it must be local)."""
    return os.path.isdir(path) or not _HUB_ID.match(path)


def _model_path(model: ModelOptions) -> str:
    """``--pretrained_model_name_or_path`` of ``model`` (the run's ``cfg.model``) for the readers below: they run once
    the config's checks refused a missing one (``config.checks.validate_static``); a None still fails in ``os.path``."""
    return cast(str, model.pretrained_model_name_or_path)


#: set once the Hub was found unreachable (offline, or no connection): later small-file reads of this process use
#: the local cache only
_HUB_UNREACHABLE = False
#: whether the Hub was probed yet in this process (:func:`_probe_hub`)
_HUB_PROBED = False


def _probe_hub() -> None:
    """Once per process, before the first small-file read from the Hub: a single request without retries (through
    huggingface_hub's own session: its endpoint and proxies), waiting as long as huggingface_hub waits for a file's
    answer (``HF_HUB_ETAG_TIMEOUT``, 10 s by default: a slow proxy is not taken for no Hub). Its own requests would
    retry five times with backoff, about 30 s. Unreachable or ``HF_HUB_OFFLINE``: reads use the cache, and what needs
    the Hub falls back (the catalogue's configs) in seconds, said once."""
    global _HUB_PROBED, _HUB_UNREACHABLE
    if _HUB_PROBED:
        return
    _HUB_PROBED = True
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        _HUB_UNREACHABLE = True
        return
    try:
        from huggingface_hub.utils import get_session

        get_session().head(constants.ENDPOINT, timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except Exception as err:  # any transport error (DNS, refused, timeout, proxy): no answer
        _HUB_UNREACHABLE = True
        from dit_lora.core.progress import say

        reason = " ".join(str(err).split())[:120] or type(err).__name__
        say(
            f"note: the Hub ({constants.ENDPOINT}) gave no answer within {constants.HF_HUB_ETAG_TIMEOUT} s ({reason}): "
            "model configs are read from the Hub cache, else from dit-lora's catalogue (HF_HUB_ETAG_TIMEOUT waits "
            "longer; HF_HUB_OFFLINE=1 skips this check)"
        )


def read_component_config(model: ModelOptions, subfolder: str, filename: str = "config.json") -> dict | None:
    """Read a small JSON config of the pipeline ``model`` (the run's ``cfg.model``: a local folder or the Hub cache);
    ``None`` if unreachable."""
    path = _model_path(model)
    if is_local(path):
        file = Path(path) / subfolder / filename
        return _parsed(file, where=str(file)) if file.is_file() else None
    global _HUB_UNREACHABLE
    name = "/".join(p for p in (subfolder, filename) if p)
    _probe_hub()
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        fetched = hf_hub_download(path, name, revision=model.revision, local_files_only=_HUB_UNREACHABLE)
    except LocalEntryNotFoundError:  # no connection (after huggingface_hub's retries) and not in the cache
        _HUB_UNREACHABLE = True  # the next small files come from the cache only: one wait, not one per file
        return None
    except Exception:  # gated, missing: the full load later reports it properly
        return None
    return _parsed(Path(fetched), where=f"{name} of {path} in the Hub cache ({fetched})")


def _parsed(file: Path, where: str) -> dict:
    """``file``'s JSON, or one paragraph naming it: a damaged config (an interrupted copy, a merge marker, an
    edited file) must not become a traceback, nor be taken as missing (its defaults would train another model)."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{where} is not valid JSON ({err}): the file is damaged (an interrupted download or copy, or an "
            "edit). Restore it from the model's source (for a Hub "
            "model: delete the file from the cache and run again to download it), then rerun."
        ) from None


def check_pipeline_folder(model: ModelOptions, model_kind: str, example_id: str, components: str) -> None:
    """Refuse a local --pretrained_model_name_or_path (``model``: the run's ``cfg.model``) that is missing or not a
    diffusers pipeline folder."""
    path = _model_path(model)
    if not is_local(path):
        return
    if os.path.isfile(path):  # what the file is and what to pass instead (one paragraph)
        check_model_path(model)
    if not os.path.isdir(path):
        raise UserError(
            f"--pretrained_model_name_or_path `{path}` does not exist. Give a local diffusers {model_kind} folder "
            f"(with model_index.json) or a Hub id such as {example_id}."
        )
    if not (Path(path) / "model_index.json").is_file():
        raise UserError(
            f"--pretrained_model_name_or_path `{path}` has no model_index.json, so it is not a diffusers "
            f"pipeline folder. Point it at the folder that contains {components}."
        )


def model_stamp(model: ModelOptions, subfolders: tuple[str, ...]) -> str | None:
    """A cheap fingerprint of a local model (``model``: the run's ``cfg.model``): changes when the weights in
    ``subfolders`` are rewritten."""
    path = _model_path(model)
    if not is_local(path):
        return None
    parts = []
    for sub in subfolders:
        for f in sorted((Path(path) / sub).glob("*.safetensors")):
            st = f.stat()
            parts.append(f"{sub}/{f.name}:{st.st_size}:{int(st.st_mtime)}")
    return "|".join(parts)


#: the names users give a dtype (--variant, the catalogue's stored dtype) -> safetensors dtype names
SAFETENSORS_DTYPES = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}


def weight_files(folder: Path, variant: str | None = None) -> list[Path]:
    """A component folder's safetensors files that ``from_pretrained`` reads: the variant's with ``--variant``
    (Sana repos keep fp32 main files beside an fp16 or bf16 variant), else the main ones (sharded or not)."""
    files = sorted(folder.glob("*.safetensors"))
    if variant:
        return [f for f in files if f".{variant}." in f.name or f".{variant}-" in f.name] or files
    main = [
        f
        for f in files
        if len(f.name.split(".")) == 2 or f.name.split(".")[-2].split("-")[0] in ("diffusion_pytorch_model", "model")
    ]
    return main or files


def header_bytes(file: Path) -> dict[str, int]:
    """Bytes per dtype of the tensors in one safetensors file, read from its header alone (never a tensor)."""
    with open(file, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    out: dict[str, int] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]  # exact, whatever the dtype (no table of item sizes needed)
        out[info["dtype"]] = out.get(info["dtype"], 0) + int(end) - int(begin)
    return out


def stored_dtype(model: ModelOptions) -> str | None:
    """The dtype the transformer weights of ``model`` (the run's ``cfg.model``) are stored in, read from a
    safetensors header (no weights).

    With ``--variant`` the variant's files are read; a Hub id answers with the variant's name alone.
    """
    path = _model_path(model)
    if not is_local(path):
        return SAFETENSORS_DTYPES.get((model.variant or "").lower())
    files = weight_files(Path(path) / "transformer", model.variant)
    if not files:
        return None
    dtypes = set(header_bytes(files[0]))
    return dtypes.pop() if len(dtypes) == 1 else ",".join(sorted(dtypes))


#: weight files that are Python pickles (reading one can run code)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SAFETENSORS_ONLY = (
    "dit-lora loads weights from safetensors files only, because reading a pickle (.bin, .pt) can run code. "
    "Use a revision that has safetensors files (for facebook/DiT-XL-2-256 the Hub's open pull request "
    "--revision refs/pr/1 adds them), or convert once in an environment you trust: load the component with "
    "diffusers' from_pretrained(..., use_safetensors=False) and save_pretrained it to a local folder, then "
    "point --pretrained_model_name_or_path there."
)


def check_safetensors(model: ModelOptions, subfolders: tuple[str, ...], kind: str) -> None:
    """Refuse a local pipeline folder (``model``: the run's ``cfg.model``) whose component holds pickle weights only
    (before anything loads)."""
    path = _model_path(model)
    if not os.path.isdir(path):
        return
    for sub in subfolders:
        folder = Path(path) / sub
        files = [f.name for f in folder.iterdir()] if folder.is_dir() else []
        pickled = sorted(f for f in files if f.endswith(PICKLE_SUFFIXES))
        if pickled and not any(f.endswith(".safetensors") for f in files):
            where = f"{sub}/ weights" if sub else "its weights"
            raise UserError(
                f"The {kind} model `{path}` stores {where} only as pickle files "
                f"({', '.join(pickled[:3])}). {SAFETENSORS_ONLY}"
            )


def causes(err: BaseException | None) -> list[BaseException]:
    """``err`` and the exceptions it was raised from (``__cause__`` / ``__context__``), nearest first."""
    chain: list[BaseException] = []
    while err is not None and err not in chain and len(chain) < 8:
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


def load_error(kind: str, model: ModelOptions, err: BaseException) -> UserError:
    """The paragraph for a pipeline (``model``: the run's ``cfg.model``) that failed to load, naming the cause that
    applies.

    A local folder is never "offline"; a Hub id is only called not downloaded when huggingface_hub says so
    (offline mode, nothing cached, a gated or missing repo); a message that asks for a package is passed on
    as a missing package.
    """
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    path = _model_path(model)
    first = str(err).splitlines()[0] if str(err) else ""
    what = f"Could not load the {kind} pipeline from `{path}` ({type(err).__name__}: {first})."
    chain = causes(err)  # diffusers and transformers re-raise huggingface_hub's errors as a plain OSError
    if isinstance(err, ImportError) or "pip install" in first:
        return UserError(
            f"{what} A package the pipeline needs is missing: install it as the message says, then "
            "run `dit-lora doctor --model` on the model to check the rest."
        )
    lowered = first.lower()
    if ".safetensors" in lowered and ("file named" in lowered or "not found" in lowered):
        if model.variant and f".{model.variant}." in lowered:
            return UserError(
                f"{what} The model has no `{model.variant}` variant of these weights: drop --variant or "
                "name one it has (`fp16`, `bf16`: the suffix of its weight files)."
            )
        if not os.path.isdir(path):  # a local folder's pickle-only weights were refused before loading
            return UserError(f"{what} {SAFETENSORS_ONLY}")
    if any(isinstance(c, (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError)) for c in chain):
        return UserError(
            f"{what} The Hub repo or --revision is not accessible: check the id (`dit-lora models` "
            "lists the catalogued ones), the revision, and that you are logged in for a gated repo."
        )
    if os.path.isdir(path):
        return UserError(
            f"{what} The local folder is incomplete or not a diffusers-format {kind} pipeline: check "
            "that every component folder has its config and weights, and that --variant names weights "
            "it has."
        )
    offline = any(isinstance(c, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for c in chain)
    if offline or os.environ.get("HF_HUB_OFFLINE") == "1":
        return UserError(
            f"{what} It is not in the Hub cache and this process may not download it "
            "(HF_HUB_OFFLINE or no network): download it first (`hf download <id>`) or pass a local "
            "folder."
        )
    return UserError(
        f"{what} Check --pretrained_model_name_or_path, --revision and --variant, and that the repo "
        f"is a diffusers-format {kind} pipeline."
    )


def read_once(cache: dict, model: ModelOptions, files: tuple[str, ...], read):
    """``read(model)``, memoised in ``cache`` by model path, revision and (local folders) the modification times of
    ``files`` (paths inside the model folder), so a rebuilt model is read again (``model``: the run's
    ``cfg.model``). For what a family derives from a checkpoint's small configs: Hub reads cost a request each, and a
    family spec holds no state."""
    path = model.pretrained_model_name_or_path
    if path is None:  # `dit-lora check-data --family wan` without a model: this was a TypeError traceback
        raise UserError(
            f"--family {model.family} reads its frame rule, default size and size multiple from the model's configs, "
            f"and no model was given. Pass --pretrained_model_name_or_path (a diffusers folder or Hub id: only its "
            f"config files are read, no weights), or --config with the run's YAML."
        )
    stamp: tuple[int | None, ...] = ()
    if is_local(path):
        stamp = tuple(
            os.stat(f).st_mtime_ns if os.path.exists(f) else None for f in (os.path.join(path, name) for name in files)
        )
    key = (path, model.revision, stamp)
    if key not in cache:
        cache[key] = read(model)
    return cache[key]
