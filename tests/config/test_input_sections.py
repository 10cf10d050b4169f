"""dit_lora.config.input_sections: what a run trains (model, data, video, lora)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from dit_lora.config import input_sections, schema
from dit_lora.config.input_sections import DataOptions, LoraOptions, ModelOptions, VideoOptions
from dit_lora.config.sections import SECTIONS


def imported_modules(module) -> set[str]:
    """The modules ``module``'s source imports (``from x import`` and ``import x``)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return imported | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}



def test_input_sections_import_only_the_declaration_helpers_of_config():
    config = {m for m in imported_modules(input_sections) if m.startswith("dit_lora.config")}
    assert config == {"dit_lora.config.option", "dit_lora.config.families"}  # families: --family's choices


def test_schema_re_exports_the_input_sections():
    for cls in (ModelOptions, DataOptions, VideoOptions, LoraOptions):
        assert getattr(schema, cls.__name__) is cls


def test_each_field_names_its_own_section():
    """``opt(section=...)`` is how --help and the reference group a field: it names the class it is declared in."""
    for name in ("model", "data", "video", "lora"):
        cls = SECTIONS[name][0]
        assert cls.__module__ == input_sections.__name__
        assert {f.metadata["section"] for f in fields(cls)} == {name}


def test_effective_alpha_defaults_to_the_rank():
    assert LoraOptions(rank=8).effective_alpha == 8.0 and LoraOptions(rank=8, lora_alpha=32).effective_alpha == 32.0
