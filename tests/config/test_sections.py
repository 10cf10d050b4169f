"""dit_lora.config.sections: the sections gathered in listing order, below config.owners, so owners and schema make no
circle."""

import ast
from dataclasses import fields
from pathlib import Path

from dit_lora.config import schema, sections


def imported_modules(module) -> set[str]:
    """The modules ``module``'s source imports (``from x import`` and ``import x``)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return imported | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_sections_imports_neither_owners_nor_schema():
    """The sections module names no module above it in config/ (owners reads it; schema reads owners)."""
    assert not imported_modules(sections) & {"dit_lora.config.owners", "dit_lora.config.schema", "dit_lora.config"}


def test_schema_re_exports_the_sections_names():
    """Callers keep importing the sections' names from the schema: the same objects."""
    for name in ("SECTIONS", "config_fields", "DEFAULT_FAMILY", "section_fields", "SECTION_OF"):
        assert getattr(schema, name) is getattr(sections, name)


def test_config_fields_lists_every_section_field_once():
    """config_fields() holds each section's fields, each once, and every one has a section attribute."""
    names = [f.name for f in sections.config_fields()]
    assert len(names) == len(set(names))
    declared = {f.name for cls, _ in sections.SECTIONS.values() for f in fields(cls)}
    assert set(names) == declared
    assert set(sections.SECTION_OF) == declared
