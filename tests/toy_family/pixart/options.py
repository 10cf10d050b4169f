"""The toy PixArt family's own options: one typed section, read as ``cfg.family_options.<name>``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt

DEFAULT_TEXT_LENGTH = 16  # where a run carries no options of its own (a config built by hand)


@dataclass(frozen=True)
class PixArtOptions(FamilyOptions):
    """Options only the PixArt family reads (flat flags on the command line, as every option)."""
    TITLE = "pixart_toy options (--family pixart_toy)"

    pixart_text_length: int = opt(
        DEFAULT_TEXT_LENGTH, "Tokens every caption is padded or cut to for the T5 encoder (PixArt-alpha: 120, "
        "PixArt-sigma: 300; the toy model's captions need 16).", section="pixart_toy", valid=POSITIVE,
        resume="fixed",
    )


def text_length(cfg) -> int:
    """``--pixart_text_length`` of the run (the default when ``cfg`` carries no family options)."""
    return options_text_length(getattr(cfg, "family_options", None))


def options_text_length(options) -> int:
    """``--pixart_text_length`` of the run's family options (the default when they are not this family's)."""
    return int(getattr(options, "pixart_text_length", DEFAULT_TEXT_LENGTH))
