"""A stand-in for a run config in unit tests: a namespace with the options given, each in its section as
``TrainConfig`` holds it (``stand_in(rank=4).lora.rank``), so code that reads ``cfg.<section>.<option>`` reads it;
other names (``weight_dtype``, ``family_options``) stay at the top."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from dit_lora.config.sections import SECTION_OF


def stand_in(**values: Any) -> SimpleNamespace:
    """The namespace of ``values``: a common option under its section, anything else as given."""
    sections: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for name, value in values.items():
        if name in SECTION_OF:
            sections.setdefault(SECTION_OF[name], {})[name] = value
        else:
            top[name] = value
    if "pretrained_model_name_or_path" in sections.get("model", {}):  # ModelOptions.path, as a run reads it
        sections["model"]["path"] = sections["model"]["pretrained_model_name_or_path"]
    return SimpleNamespace(**{attr: SimpleNamespace(**own) for attr, own in sections.items()}, **top)
