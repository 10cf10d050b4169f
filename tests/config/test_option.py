"""dit_lora.config.option: how an option is declared (opt, Range, Applies, the resume classes, FamilyOptions)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from dit_lora.config import option, schema
from dit_lora.config.families import RegisteredFamilies
from dit_lora.config.option import POSITIVE, FamilyOptions, Range, opt, resume_class


def test_option_imports_no_other_config_module():
    """The declaration helpers sit at the bottom of config/: the sections, owners and schema all read them."""
    tree = ast.parse(Path(option.__file__).read_text(encoding="utf-8"))
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m == "dit_lora.config" or m.startswith("dit_lora.config.")}


def test_schema_re_exports_the_declaration_helpers():
    """Callers (a family's options.py) keep importing them from the schema: the same objects."""
    for name in ("Range", "Applies", "opt", "FamilyOptions", "POSITIVE", "resume_class", "SECTION_RESUME"):
        assert getattr(schema, name) is getattr(option, name)


def test_range_membership_and_text():
    assert 1 in POSITIVE and 0 not in POSITIVE and float("nan") not in Range() and float("inf") not in Range()
    assert str(Range(0, 1, high_open=True)) == "in [0, 1)" and str(POSITIVE) == "> 0" and str(Range()) == "finite"


def test_an_unknown_resume_class_is_refused_at_declaration():
    with pytest.raises(ValueError, match="resume must be"):
        opt(1, "x", resume="sometimes")


def test_resume_class_is_the_options_own_else_its_sections():
    @dataclass(frozen=True)
    class Declared(FamilyOptions):
        own: int = opt(1, "x", section="training", resume="fixed")
        inherited: int = opt(1, "x", section="training")
        nowhere: int = opt(1, "x")

    classes = {f.name: resume_class(f) for f in fields(Declared)}
    assert classes == {"own": "fixed", "inherited": "free", "nowhere": None}


def test_a_list_default_is_a_fresh_list_per_config():
    @dataclass(frozen=True)
    class Declared(FamilyOptions):
        names: list[str] = opt([], "x")

    assert Declared().names == [] and Declared().names is not Declared().names


def test_registered_families_are_read_from_the_registry_when_asked():
    from dit_lora.registry import available

    assert list(RegisteredFamilies()) == available() and "sana" in RegisteredFamilies()
