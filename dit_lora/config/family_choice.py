"""Which family a run is for, read before its options: ``--family``, else the ``--config`` YAML's ``family:``.

A family's options are known only once its family is, so the parse peeks at these two first (an alias read as its
family); with neither, the caller infers the family from the common options (:func:`.parser.parse_config`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from dit_lora.config import families
from dit_lora.config.command_line import accept_negative_numbers
from dit_lora.config.config_file import named_in_file, read_yaml
from dit_lora.config.values import coerce
from dit_lora.core.errors import UserError


def named_family(argv: Sequence[str]) -> str | None:
    """The family ``--family`` or the ``--config`` YAML's ``family:`` names (None: neither), as
    :func:`.parser.parse_config` reads it; for an entry point that checks the name before the whole parse (e.g. a
    recipe script's)."""
    return family_of(list(argv))[0]


def family_of(argv: list[str]) -> tuple[str | None, str, str | None, dict | None]:
    """(family, what chose it, --config path, the YAML's mapping) from ``--family`` or the YAML's ``family:``
    (family None: neither; mapping None: no readable YAML, whose error the parse reports in its turn)."""
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--family", default=None)
    peek.add_argument("--config", default=None)
    accept_negative_numbers(peek)
    try:
        known, _ = peek.parse_known_args(argv)
    except SystemExit:  # e.g. `--family` without a value: the full parser says so
        return None, "--family", None, None
    data = None
    if known.config and Path(known.config).is_file():
        try:
            data = read_yaml(known.config)
        except UserError:
            data = None  # the parse reports the bad file
    if known.family is not None:
        family = families.source().canonical_name(known.family)
        return str(coerce("family", family, "--family")), "--family", known.config, data
    named = named_in_file(data, Path(known.config)) if data is not None else None
    if named is not None:
        return named[0], named[1], known.config, data
    return None, "", known.config, data
