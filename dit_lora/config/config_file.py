"""The ``--config`` file: a flat YAML mapping of option: value, read and checked for a run of one family.

Another trainer's file given as ``--config`` is named as such (musubi-tuner's dataset TOML, SimpleTuner's or
OneTrainer's dataset file, an ai-toolkit job) with what to do instead; a ``datasets:`` list in the file is read as
its ``--dataset_config``. Unknown keys are refused all at once, each with its closest option or peer hint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dit_lora.config import families, owners
from dit_lora.config.dataset_file import DATASETS_KEY
from dit_lora.config.peer_ai_toolkit import ai_toolkit_message, is_ai_toolkit
from dit_lora.config.peer_datasets import toml_config_message
from dit_lora.config.peer_files import flavour_of
from dit_lora.config.schema import DEFAULT_FAMILY
from dit_lora.config.values import coerce, unknown_options_message
from dit_lora.core.errors import UserError


def load_yaml(path: str | Path, family: str | None = None, chosen_by: str | None = None) -> dict[str, Any]:
    """Read a YAML config for a run of ``family`` (default: the file's own ``family:``, else the schema's);
    errors name the file and the closest valid key, or the family that owns another family's option.
    ``chosen_by`` says what set the family, for that message."""
    data = read_yaml(path)
    path = Path(path)
    if family is None:
        family, chosen_by = named_in_file(data, path) or (DEFAULT_FAMILY, "the default family")
    return yaml_values(data, path, family, chosen_by)


def yaml_values(
    data: dict, path: Path, family: str, chosen_by: str | None, skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The keys of a YAML mapping checked for a run of ``family`` (another family's key names its owner; every
    unknown key at once), then coerced, except those in ``skip`` (coerced already)."""
    valid = [*owners.common_names(), *(f.name for f in owners.family_fields(family))]
    unknown = []
    for key in data:
        if key not in valid:
            foreign = owners.foreign_option_message(str(key), family, str(path), chosen_by or "--family")
            if foreign:
                raise UserError(foreign)
            unknown.append(str(key))
    if unknown:
        raise UserError(unknown_options_message(unknown, valid, f"in {path}", data.get("network_args")))
    return {k: coerce(k, v, str(path)) for k, v in data.items() if k not in skip}


def named_in_file(data: dict, path: Path) -> tuple[str, str] | None:
    """The family a YAML mapping names (``family:``, an alias read as its family) and what chose it; None when it
    names none."""
    if isinstance(data.get("family"), str) and data["family"]:
        return families.source().canonical_name(data["family"]), f"`family:` in {path}"
    return None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file, unchecked; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"The config file `{path}` (from --config) does not exist. Check the path.")
    text = path.read_text()
    toml = toml_config_message(path, text, suffix_only=True)  # musubi-tuner's dataset TOML: --dataset_config's
    if toml:
        raise UserError(toml)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UserError(
            toml_config_message(path, text, suffix_only=False)
            or f"The config file `{path}` is not valid YAML ({err}). Fix the syntax at the position shown."
        ) from None
    peer = flavour_of(data)  # SimpleTuner's backends, OneTrainer's concepts (or its config holding them)
    if peer or not isinstance(data, dict):
        raise UserError(
            f"The config file `{path}` is {peer}'s dataset file, not a run config: pass it as --dataset_config {path} "
            "(its sets are read as they are), with the run's options as flags or in a YAML --config."
            if peer
            else f"The config file `{path}` must be a mapping of option: value, not {type(data).__name__}."
        )
    if is_ai_toolkit(data):
        raise UserError(ai_toolkit_message(path))
    if DATASETS_KEY in data:  # the sets listed in the run config itself: read as --dataset_config of this file
        if data.get("dataset_config"):
            raise UserError(
                f"The config file `{path}` has both a `datasets:` list and `dataset_config: "
                f"{data['dataset_config']}`; both name the run's data sets. Keep one of them."
            )
        # `general:` beside it is the sets' defaults, read with them (the run's own options are defaults too)
        data = {**{k: v for k, v in data.items() if k not in (DATASETS_KEY, "general")}, "dataset_config": str(path)}
    return data


def yaml_of(yaml_path: str | None, data: dict | None) -> dict[str, Any]:
    """The mapping of the ``--config`` YAML at ``yaml_path``: ``data`` when it was read already, else read now (its
    errors raised)."""
    if not yaml_path:
        return {}
    return data if data is not None else read_yaml(yaml_path)
