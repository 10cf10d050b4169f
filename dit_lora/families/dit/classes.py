"""Which rows of a pretrained DiT's class table a dataset's classes are, decided before any weight loads.

ImageNet DiTs (``facebook/DiT-XL-2-*``) index their 1000 classes in the sorted order of the ImageNet wnid
folders (DiT trains with ``ImageFolder``), and their ``model_index.json`` maps each id to its synonyms
(``id2label``: ``"tench, Tinca tinca"``), which ``DiTPipeline.get_label_ids`` accepts one by one. A dataset
whose class names are all wnids (a subset of ImageNet's train folders) or all such synonyms reuses those
rows as they are: no resize, the pretrained class embedding stays. Any other set of names whose count is
not the model's needs ``--num_classes`` (a resized, trained table).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.modelfiles.pipeline_files import read_component_config
from dit_lora.output.names import CLASSES_FILE

#: the 1000 ImageNet-1k wnids in class-index order (sorted), as DiT's ImageFolder numbers them
WNIDS_FILE = Path(__file__).resolve().parent / "imagenet_wnids.txt"
IMAGENET_CLASSES = 1000


@lru_cache(maxsize=1)
def imagenet_wnids() -> tuple[str, ...]:
    """The ImageNet-1k wnids, index = class id (``n01440764`` is 0, tench)."""
    return tuple(line.strip() for line in WNIDS_FILE.read_text().splitlines() if line.strip())


def pretrained_labels(cfg: TrainConfig, model_classes: int | None) -> dict[str, int]:
    """Every name the model's own files give a class row: ``id2label`` synonyms, and wnids for a 1000-class model.

    Synonyms shared by two classes (ImageNet has a few, e.g. "crane") go to the later id, as in
    ``DiTPipeline.__init__``, so training and sampling agree on them.
    """
    known: dict[str, int] = {}
    index = read_component_config(cfg.model, "", "model_index.json") or {}
    for key, value in (index.get("id2label") or {}).items():
        for name in str(value).split(","):
            if name.strip():
                known[name.strip()] = int(key)
    if model_classes == IMAGENET_CLASSES:
        known.update({wnid: i for i, wnid in enumerate(imagenet_wnids())})
    return known


def map_to_pretrained(classes: list[str], known: dict[str, int]) -> dict[str, int] | None:
    """``{class name: pretrained row}`` when every name is known and no two share a row; else None."""
    if not classes or any(c not in known for c in classes):
        return None
    mapping = {c: known[c] for c in classes}
    return mapping if len(set(mapping.values())) == len(mapping) else None


def pretrained_rows(cfg: TrainConfig, classes: list[str], model_classes: int) -> dict[str, int] | None:
    """``{class name: pretrained row}`` when the names are the model's own (:func:`map_to_pretrained`), else None;
    refused (:func:`class_count_error`) when they are not and their count is not the model's."""
    known = pretrained_labels(cfg, model_classes)
    mapping = map_to_pretrained(classes, known)
    if mapping is None and len(classes) != model_classes:
        raise class_count_error(classes, model_classes, cfg.model.path, known)
    return mapping


def class_count_error(classes: list[str], model_classes: int, model: str, known: dict[str, int]) -> UserError:
    """The paragraph for a dataset whose classes neither match the model's count nor map onto its rows."""
    shown = ", ".join(classes[:8]) + (", ..." if len(classes) > 8 else "")
    unknown = [c for c in classes if c not in known]
    mapping_hint = ""
    if known and unknown and len(unknown) < len(classes):
        mapping_hint = (
            f" {len(classes) - len(unknown)} of the names are the model's own class names (ImageNet wnids "
            f"or id2label synonyms), but {', '.join(unknown[:5])} {'is' if len(unknown) == 1 else 'are'} "
            "not; rename those folders to reuse the pretrained rows without resizing."
        )
    return UserError(
        f"The dataset has {len(classes)} classes ({shown}) but the model's class embedding has {model_classes} "
        f"classes (num_embeds_ada_norm of `{model}`), and the names are not the model's own class names. Training "
        f"a {len(classes)}-class dataset on a {model_classes}-class embedding silently reuses unrelated classes. "
        f"Pass --num_classes {len(classes)} to resize the class embedding (the null class for guidance is kept; the "
        "embedding trains at --backbone_learning_rate), or check that the class folders / --caption_column are what "
        f"you meant.{mapping_hint}"
    )


def read_classes(adapter_dir: str | Path) -> dict | None:
    """The label map a DiT run saved (``dit_lora_classes.json``), or None."""
    path = Path(adapter_dir) / CLASSES_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def split_class_names(prompt: str, known) -> list[str]:
    """Class names in a validation prompt: the whole string if it is a class, else comma-separated names."""
    prompt = prompt.strip()
    if prompt in known:
        return [prompt]
    return [p.strip() for p in prompt.split(",") if p.strip()]
