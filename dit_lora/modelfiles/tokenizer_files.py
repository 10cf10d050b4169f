"""Which Python packages a model's tokenizer needs, read from the files its folder holds.

A tokenizer folder with a ``tokenizer.json`` loads with the ``tokenizers`` library alone. One with only a
SentencePiece model (CogVideoX's T5 folder holds just ``spiece.model``) needs ``sentencepiece`` to read
it and ``protobuf`` for transformers to convert it into a fast tokenizer; without them transformers 5
falls through to an unrelated "tiktoken is required" error. This module names the package instead,
before any weight loads. It imports nothing heavy, so ``dit-lora doctor`` can use it in a broken
environment.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterable

from dit_lora.core.errors import UserError

#: file names that hold a SentencePiece model
SENTENCEPIECE_FILES = ("spiece.model", "tokenizer.model", "sentencepiece.bpe.model")
#: files that make a folder a tokenizer folder
_TOKENIZER_FILES = ("tokenizer.json", *SENTENCEPIECE_FILES)
#: distribution name -> module to find
_MODULES = {"sentencepiece": "sentencepiece", "protobuf": "google.protobuf"}


def requirements_for_files(files: Iterable[str], where: str) -> list[tuple[str, str]]:
    """``[(package, why)]`` a tokenizer folder holding ``files`` needs beyond ``tokenizers``."""
    names = set(files)
    if "tokenizer.json" in names:
        return []
    model = next((f for f in SENTENCEPIECE_FILES if f in names), None)
    if model is None:
        return []
    return [
        ("sentencepiece", f"{where}/{model} is a SentencePiece model and there is no tokenizer.json beside it"),
        ("protobuf", f"transformers converts {where}/{model} into a fast tokenizer with it"),
    ]


def tokenizer_folders(model: Path) -> list[Path]:
    """The tokenizer folders of a local model: ``tokenizer*/`` of a diffusers pipeline, or the root of a
    transformers model (which keeps its tokenizer files beside ``config.json``)."""
    found = [p for p in sorted(model.iterdir()) if p.is_dir() and p.name.startswith("tokenizer")]
    if any((model / f).is_file() for f in ("tokenizer_config.json", "tokenizer.json", *SENTENCEPIECE_FILES)):
        found.insert(0, model)
    return found


def _cached_folder(repo_id: str, subfolder: str, revision: str | None) -> Path | None:
    """The Hub cache's copy of ``repo_id/subfolder`` when it is already downloaded (no network)."""
    try:
        from huggingface_hub import snapshot_download

        pattern = f"{subfolder}/*" if subfolder else "*"
        root = Path(snapshot_download(repo_id, allow_patterns=[pattern], revision=revision, local_files_only=True))
    except Exception:  # not cached, or huggingface_hub itself is broken: the doctor reports that separately
        return None
    folder = root / subfolder if subfolder else root
    return folder if folder.is_dir() else None


def requirements(model: str, subfolder: str = "tokenizer", revision: str | None = None) -> list[tuple[str, str]] | None:
    """What the tokenizer of ``model`` (a local folder or a Hub id) needs; ``None`` when its files are unknown.

    A Hub id is answered from the Hub cache when downloaded, else from the catalogue's record of that repo's
    tokenizer files.
    """
    where = f"{model}/{subfolder}" if subfolder else model
    local = Path(model)
    if local.is_dir():
        folder = local / subfolder if subfolder else local
        return requirements_for_files((p.name for p in folder.iterdir()), where) if folder.is_dir() else None
    cached = _cached_folder(model, subfolder, revision)
    # A snapshot holding only some files (the configs a run read first) says nothing about the tokenizer.
    if cached is not None and any((cached / f).is_file() for f in ("tokenizer_config.json", *_TOKENIZER_FILES)):
        return requirements_for_files((p.name for p in cached.iterdir()), where)
    from dit_lora.catalogue import by_hub_id

    entry = by_hub_id(model)
    if entry is None or not entry.tokenizer_files:
        return None
    # The catalogue lists the files of one folder: a transformers model's root, a pipeline's tokenizer/.
    if subfolder != ("" if "config.json" in entry.configs else "tokenizer"):
        return None
    return requirements_for_files(entry.tokenizer_files, where)


def missing(reqs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The requirements whose package is not importable here."""
    out = []
    for package, why in reqs:
        module = _MODULES.get(package, package)
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package (google) missing
            found = False
        if not found:
            out.append((package, why))
    return out


def check_tokenizer_packages(model: str, subfolder: str = "tokenizer", revision: str | None = None) -> None:
    """Stop in one paragraph when the tokenizer of ``model`` needs a package that is not installed."""
    gaps = missing(requirements(model, subfolder, revision) or [])
    if not gaps:
        return
    packages = " ".join(p for p, _ in gaps)
    reasons = "; ".join(f"{p}: {why}" for p, why in gaps)
    raise UserError(
        f"The tokenizer of `{model}` needs {', '.join(p for p, _ in gaps)}, which {'is' if len(gaps) == 1 else 'are'} "
        f"not installed ({reasons}). Install {'it' if len(gaps) == 1 else 'them'}: pip install {packages} "
        "(dit-lora's own install includes both; `dit-lora doctor --model` checks a model's tokenizer)."
    )
