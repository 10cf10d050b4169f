"""Registry of model families. ``get_family(name)`` errors with the list of what exists."""

from __future__ import annotations

from typing import Callable

from ..errors import UserError
from .videochat import registry as vlm_registry
from .base import Components, ModelFamily

_REGISTRY: dict[str, Callable[[], ModelFamily]] = {}


def register_family(name: str, factory: Callable[[], ModelFamily]) -> None:
    """Make a family available under ``name`` (factories are called lazily)."""
    _REGISTRY[name] = factory


def available() -> list[str]:
    """Names of every registered family."""
    return sorted(_REGISTRY)


def get_family(name: str) -> ModelFamily:
    """Instantiate the family called ``name``; unknown names list the valid ones."""
    if name not in _REGISTRY:
        raise UserError(f"Unknown model family `{name}` (--family). Available families: {', '.join(available())}.")
    return _REGISTRY[name]()


def family_for_pipeline(pipe) -> ModelFamily | None:
    """The family whose ``pipeline_class_name`` is ``pipe``'s class (or a base class of it), if any."""
    names = {cls.__name__ for cls in type(pipe).__mro__}
    for name in available():
        family = _REGISTRY[name]()
        if family.pipeline_class_name in names:
            return family
    return None


def family_for_model(cfg) -> str:
    """The family that trains ``cfg.pretrained_model_name_or_path``: its catalogue entry, else its configs' class.

    Reads small config files only; stops naming ``--family`` when neither says.
    """
    from ..catalogue import by_hub_id, match
    from ..catalogue.defaults import config_reader
    from ..errors import UserError

    entry = by_hub_id(str(cfg.pretrained_model_name_or_path or ""))
    if entry is not None:
        return entry.family
    read = config_reader(cfg)
    for name in available():
        if match(name, read) is not None:
            return name
    index, config = read("", "model_index.json") or {}, read("", "config.json") or {}
    for name in available():
        family = _REGISTRY[name]()
        if family.pipeline_class_name in (index.get("_class_name"), *(config.get("architectures") or [])):
            return name
    raise UserError(
        f"Could not tell which family trains `{cfg.pretrained_model_name_or_path}` from its config files. Pass "
        f"--family ({', '.join(available())})."
    )


def _sana() -> ModelFamily:
    from .sana.spec import SanaFamily

    return SanaFamily()


def _dit() -> ModelFamily:
    from .dit.spec import DiTFamily

    return DiTFamily()


def _cogvideox() -> ModelFamily:
    from .cogvideox.spec import CogVideoXFamily

    return CogVideoXFamily()


def _cogvideox_i2v() -> ModelFamily:
    from .cogvideox.i2v import CogVideoXI2VFamily

    return CogVideoXI2VFamily()


def _videochat(name: str) -> Callable[[], ModelFamily]:
    def factory() -> ModelFamily:
        from .videochat.spec import VideoChatFamily

        return VideoChatFamily(vlm_registry.spec_for(name))

    return factory


register_family("sana", _sana)
register_family("dit", _dit)
register_family("cogvideox", _cogvideox)
register_family("cogvideox_i2v", _cogvideox_i2v)
for _name in vlm_registry.names():  # one family per video-LLM architecture in vlm/registry.py
    register_family(_name, _videochat(_name))
del _name

__all__ = ["Components", "ModelFamily", "available", "family_for_pipeline", "get_family", "register_family"]
