"""Which family a model is: the family of a model folder or Hub id (:func:`family_for_model`) or of a loaded
pipeline (:func:`family_for_pipeline`); the pipeline classes of the registered families, the class a model's configs
name, and the one-paragraph refusals for a model no family trains or a ``--family`` that trains another class.

The pipeline classes come from the registry alone: each family's spec declares its ``pipeline_class_name`` (the
diffusers pipeline, or a video LLM's transformers class), so registering a family makes its pipelines supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dit_lora.catalogue import by_hub_id, match, refused_match
from dit_lora.catalogue.defaults import config_reader
from dit_lora.config.schema import ModelOptions
from dit_lora.core.errors import UserError
from dit_lora.registry import available, canonical_name, entries, entry_for, get_spec, pipelines_of

if TYPE_CHECKING:
    from dit_lora.contract.spec import FamilySpec


def pipelines_by_family() -> dict[str, tuple[str, ...]]:
    """Each registered family name and the pipeline classes it trains (:func:`~dit_lora.registry.pipelines_of`: the
    registry entries' declared classes, no spec built)."""
    return {name: pipelines_of(name) for name in available()}


def entry_pipelines(name: str) -> tuple[str, ...]:
    """The pipeline classes ``--family name`` accepts: those of every name of its registry entry (``wan`` and
    ``wan_i2v`` together: which of the two a checkpoint needs is the family's own check, with its own advice), or
    its own alone where the entry's names are distinct models (``FamilyEntry.distinct_models``: the video LLMs)."""
    entry, table = entry_for(name), pipelines_by_family()
    names = (canonical_name(name),) if entry.distinct_models else entry.names
    return tuple(dict.fromkeys(c for n in names for c in table[n]))


def found_class(read: Callable[[str, str], dict | None]) -> tuple[str | None, str]:
    """The class a model's configs name and where: ``model_index.json``'s ``_class_name`` (a diffusers pipeline),
    else ``config.json``'s ``architectures`` (a transformers model) or ``_class_name`` (a transformer-only folder).
    ``(None, "no model_index.json")`` when neither file is readable."""
    index = read("", "model_index.json") or {}
    if index.get("_class_name"):
        return index["_class_name"], "model_index.json"
    config = read("", "config.json") or {}
    if config.get("architectures"):
        return config["architectures"][0], "config.json"
    if config.get("_class_name"):
        return config["_class_name"], "config.json (a transformer-only folder, no model_index.json)"
    return None, "no model_index.json"


def trained_list() -> str:
    """``--family sana: SanaPipeline; --family wan: WanPipeline; ...`` from the registry, one item per entry."""
    table = pipelines_by_family()
    items = []
    for entry in entries():
        classes = ", ".join(dict.fromkeys(c for n in entry.names for c in table[n]))
        items.append(f"--family {'/'.join(entry.names)}: {classes}")
    return "; ".join(items)


def unsupported_model(path: str, read: Callable[[str, str], dict | None]) -> UserError:
    """The paragraph for a model no registered family trains: the class found, what each family trains, what to do."""
    cls, where = found_class(read)
    if cls is None:
        what = (
            f"`{path}` has no model_index.json or config.json dit-lora can read (a local folder, the Hub cache, "
            "or the catalogue's copy; nothing is downloaded to decide), so its pipeline class is unknown"
        )
    else:
        what = f"`{path}` is {_article(cls)} ({where}), which no dit-lora family trains"
    return UserError(
        f"{what}. dit-lora trains these pipelines ({trained_list()}). If the model is one of them, pass its --family "
        f"(or a diffusers folder with its model_index.json); otherwise it is not supported yet: train "
        "it with a trainer that supports it."
    )


def check_not_refused(model: ModelOptions, read: Callable[[str, str], dict | None]) -> None:
    """Stop on a checkpoint the catalogue recognises and refuses (SANA-Sprint: :func:`~dit_lora.catalogue.refused`),
    by its Hub id or its configs, with that entry's own paragraph (why, the source, what to train instead)."""
    entry = refused_match(read, str(model.pretrained_model_name_or_path or ""))
    if entry is not None:
        raise UserError(entry.refusal.format(model=model.pretrained_model_name_or_path))


def check_family_trains_model(model: ModelOptions, read: Callable[[str, str], dict | None]) -> None:
    """Refuse ``model.family`` (``model``: the run's ``cfg.model``) for a model whose configs name a class outside
    its registry entry's pipelines, or a checkpoint the catalogue refuses (:func:`check_not_refused`), before
    anything is built. A model whose class cannot be read is left to the family's own checks."""
    check_not_refused(model, read)
    cls, where = found_class(read)
    trained = entry_pipelines(model.family)
    if cls is None:
        return
    if cls in trained:
        check_task_matches(model, cls, where)
        return
    others = [n for n in available() if cls in pipelines_of(n)]
    advice = (
        f"Use --family {others[0]} for it, or drop --family: dit-lora reads the family from the folder"
        if others
        else f"No dit-lora family trains {cls} (not supported yet). dit-lora trains: {trained_list()}"
    )
    model_type = (read("", "config.json") or {}).get("model_type") if where.startswith("config.json") else None
    kind = f", model_type `{model_type}`" if isinstance(model_type, str) else ""
    raise UserError(
        f"--family {model.family} trains {' and '.join(trained)}; `{model.pretrained_model_name_or_path}` "
        f"is {_article(cls)} ({where}{kind}). {advice}."
    )


def _task_words(spec: FamilySpec) -> str:
    """What a family's pipeline makes, for a refusal: its card's pipeline tag or task tag (``text-to-image``)."""
    tags = [spec.info.pipeline_tag, *spec.info.card_tags]
    return next((t for t in tags if t and "-to-" in t), spec.info.pipeline_class_name)


def _article(words: str) -> str:
    return f"{'an' if words[:1].lower() in 'aeiou' else 'a'} {words}"


def check_task_matches(model: ModelOptions, cls: str, where: str) -> None:
    """Refuse ``model.family`` for a folder of another name of its registry entry (``--family qwenimage`` on a
    Qwen-Image-Edit folder, ``--family cogvideox_i2v`` on a text-to-video one): one paragraph naming what the folder
    is (``cls``, read from ``where``) and the ``--family`` that trains it. A name trains the folders of its own
    pipeline classes and those its ``info.also_trains_folders_of`` lists (Wan I2V on TI2V-5B's ``WanPipeline``)."""
    spec = get_spec(model.family)
    if cls in spec.info.pipeline_classes or cls in spec.info.also_trains_folders_of:
        return
    owner = get_spec(next(n for n in entry_for(model.family).names if cls in pipelines_of(n)))
    raise UserError(
        f"--family {model.family} trains {' and '.join(spec.info.pipeline_classes)} ({_task_words(spec)}), but "
        f"`{model.pretrained_model_name_or_path}` is {_article(cls)} ({where}): {_article(_task_words(owner))} model, which "
        f"--family {model.family} would train as the wrong task or not load. Use --family {owner.name} for it (or "
        f"point --pretrained_model_name_or_path at {_article(spec.info.pipeline_class_name)} folder)."
    )


def family_for_pipeline(pipe) -> FamilySpec | None:
    """The family one of whose ``info.pipeline_classes`` is ``pipe``'s class (or a base class of it), if any."""
    names = {cls.__name__ for cls in type(pipe).__mro__}
    for name in available():
        spec = get_spec(name)
        if names.intersection(spec.info.pipeline_classes):
            return spec
    return None


def family_for_model(model: ModelOptions) -> str:
    """The family that trains ``model.pretrained_model_name_or_path`` (``model``: the run's ``cfg.model``): its
    catalogue entry, else its configs' class.

    Reads small config files only; a checkpoint the catalogue refuses stops with its paragraph
    (:func:`check_not_refused`); when neither says, stops with the class the configs name and the pipelines each
    family trains (:func:`unsupported_model`).
    """
    read = config_reader(model)
    check_not_refused(model, read)  # before the signatures: SANA-Sprint has SANA 1.5's widths
    entry = by_hub_id(str(model.pretrained_model_name_or_path or ""))
    if entry is not None:
        return entry.family
    for name in available():
        if match(name, read) is not None:
            return name
    index, config = read("", "model_index.json") or {}, read("", "config.json") or {}
    for name in available():
        found = (index.get("_class_name"), *(config.get("architectures") or []))
        if any(cls in found for cls in pipelines_of(name)):
            return name
    raise unsupported_model(str(model.pretrained_model_name_or_path), read)
