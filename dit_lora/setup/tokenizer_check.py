"""Whether this environment has the packages a model's tokenizer needs, judged before any weight loads.

A local folder is read (:mod:`dit_lora.modelfiles.tokenizer_files` names the packages its files need); a Hub id
from the Hub cache when downloaded, else from the catalogue's record of that repo's tokenizer files. The families'
checks call :func:`check_tokenizer_packages`; ``dit-lora doctor --model`` calls :func:`requirements`. Imports
nothing heavy.
"""

from __future__ import annotations

from pathlib import Path

from dit_lora.catalogue import by_hub_id
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.tokenizer_files import TOKENIZER_FILES, cached_folder, missing, requirements_for_files


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
    cached = cached_folder(model, subfolder, revision)
    # A snapshot holding only some files (the configs a run read first) says nothing about the tokenizer.
    if cached is not None and any((cached / f).is_file() for f in ("tokenizer_config.json", *TOKENIZER_FILES)):
        return requirements_for_files((p.name for p in cached.iterdir()), where)
    entry = by_hub_id(model)
    if entry is None or not entry.tokenizer_files:
        return None
    # The catalogue lists the files of one folder: a transformers model's root, a pipeline's tokenizer/.
    if subfolder != ("" if "config.json" in entry.configs else "tokenizer"):
        return None
    return requirements_for_files(entry.tokenizer_files, where)


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
