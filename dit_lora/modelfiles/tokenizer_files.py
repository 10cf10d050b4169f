"""Which Python packages a model's tokenizer needs, read from the files its folder holds.

A tokenizer folder with a ``tokenizer.json`` loads with the ``tokenizers`` library alone. One with only a
SentencePiece model (CogVideoX's T5 folder holds just ``spiece.model``) needs ``sentencepiece`` to read
it and ``protobuf`` for transformers to convert it into a fast tokenizer; without them transformers 5
falls through to an unrelated "tiktoken is required" error. This module names the package instead,
before any weight loads. It imports nothing heavy, so ``dit-lora doctor`` can use it in a broken
environment. What a model (a folder or a Hub id, answered from the catalogue when not cached) needs is
:mod:`dit_lora.setup.tokenizer_check`, a layer above the catalogue this module sits below.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

#: file names that hold a SentencePiece model
SENTENCEPIECE_FILES = ("spiece.model", "tokenizer.model", "sentencepiece.bpe.model")
#: files that make a folder a tokenizer folder
TOKENIZER_FILES = ("tokenizer.json", *SENTENCEPIECE_FILES)
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


def cached_folder(repo_id: str, subfolder: str, revision: str | None) -> Path | None:
    """The Hub cache's copy of ``repo_id/subfolder`` when it is already downloaded (no network)."""
    try:
        from huggingface_hub import snapshot_download

        pattern = f"{subfolder}/*" if subfolder else "*"
        root = Path(snapshot_download(repo_id, allow_patterns=[pattern], revision=revision, local_files_only=True))
    except Exception:  # not cached, or huggingface_hub itself is broken: the doctor reports that separately
        return None
    folder = root / subfolder if subfolder else root
    return folder if folder.is_dir() else None


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
