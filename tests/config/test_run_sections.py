"""dit_lora.config.run_sections: how a run goes (training, checkpoints, validation, hub, guards, kernels, misc)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from dit_lora.config import run_sections, schema
from dit_lora.config.option import SECTION_RESUME
from dit_lora.config.sections import SECTIONS


def imported_modules(module) -> set[str]:
    """The modules ``module``'s source imports (``from x import`` and ``import x``)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return imported | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


RUN_SECTIONS = ("training", "checkpoints", "validation", "hub", "guards", "kernels", "misc")


def test_run_sections_import_only_the_declaration_helpers_of_config():
    config = {m for m in imported_modules(run_sections) if m.startswith("dit_lora.config")}
    assert config == {"dit_lora.config.option"}


def test_schema_re_exports_the_run_sections():
    for name in RUN_SECTIONS:
        cls = SECTIONS[name][0]
        assert getattr(schema, cls.__name__) is cls
    assert schema.LR_SCHEDULERS is run_sections.LR_SCHEDULERS and schema.REPORT_TO is run_sections.REPORT_TO


def test_each_field_names_its_own_section_and_the_section_a_resume_class():
    for name in RUN_SECTIONS:
        cls = SECTIONS[name][0]
        assert cls.__module__ == run_sections.__name__
        assert {f.metadata["section"] for f in fields(cls)} == {name}
        assert SECTION_RESUME[name] == "free"
