"""Option reads are typed: ``TrainConfig`` has no flat ``__getattr__``, every read of a run config names its section
(``cfg.lora.rank``), and a misspelt option is caught, by the type checker where ``cfg`` is annotated and by the
scan below everywhere (it finds run configs as ``tools/options_codemod.py`` does)."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import operator
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT

from dit_lora.config.schema import TrainConfig
from dit_lora.config.sections import SECTIONS

_spec = importlib.util.spec_from_file_location("_options_codemod", ROOT / "tools" / "options_codemod.py")
codemod = sys.modules["_options_codemod"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(codemod)

#: each section attribute -> the names its class answers (fields, properties, methods)
SECTION_NAMES = {attr: set(dir(cls)) | {f.name for f in dataclasses.fields(cls)} for cls, attr in SECTIONS.values()}
CONFIG_NAMES = set(dir(TrainConfig)) | {f.name for f in dataclasses.fields(TrainConfig)}


def bad_reads(source: str) -> list[str]:
    """``line: read`` of each read on a run config that names no attribute of ``TrainConfig`` or of the section."""
    found: list[str] = []

    def visit(node: ast.AST, scope) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = codemod._inner(scope, child)
            if isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Load):
                value = child.value
                if codemod.is_config(value, scope) and child.attr not in CONFIG_NAMES:
                    found.append(f"{child.lineno}: {ast.unparse(child)}")
                elif (isinstance(value, ast.Attribute) and value.attr in SECTION_NAMES
                      and codemod.is_config(value.value, scope) and child.attr not in SECTION_NAMES[value.attr]):
                    found.append(f"{child.lineno}: {ast.unparse(child)}")
            visit(child, inner)

    tree = ast.parse(source)
    visit(tree, codemod.scope_of(tree))
    return found


def test_a_flat_or_misspelt_read_is_found():
    snippet = "def f(cfg):\n    return cfg.rank, cfg.lora.rnak, cfg.lora.rank, cfg.family_options.x, cfg.weight_dtype\n"
    assert bad_reads(snippet) == ["2: cfg.rank", "2: cfg.lora.rnak"]


def test_flat_reads_are_gone():
    with pytest.raises(AttributeError, match="no attribute 'rank'"):
        operator.attrgetter("rank")(TrainConfig())  # a flat read (written so the codemod leaves it flat)
    assert TrainConfig(rank=8).lora.rank == 8 and TrainConfig(rank=8).option("rank") == 8


def test_every_option_read_in_the_package_names_a_real_option():
    bad = []
    for path in sorted((ROOT / "dit_lora").rglob("*.py")):
        bad += [f"{path.relative_to(ROOT)}:{read}" for read in bad_reads(path.read_text(encoding="utf-8"))]
    assert bad == [], "reads of a run config that name no option (misspelt, or flat: run tools/options_codemod.py):\n" + "\n".join(bad)


def test_the_type_checker_catches_a_misspelt_option(tmp_path):
    """Where ``cfg`` is annotated, mypy names a misspelt option (a subprocess over a four-line file). With pyproject's
    options, so that a copy of the checkout's own cache, where ``mypy`` has run (CI runs it before the tests), holds
    the package's modules already checked (about 4 s of CPU instead of 25: mypy reads a module's cache only when the
    options it was written under are the run's); without one, mypy checks them first."""
    snippet = tmp_path / "misspelt.py"
    snippet.write_text("from dit_lora.config.schema import TrainConfig\n\n\n"
                       "def rank_of(cfg: TrainConfig) -> int:\n    return cfg.lora.rnak\n")
    cache = tmp_path / "cache"
    if (ROOT / ".mypy_cache").is_dir():  # a copy: the checkout's own is left as it was
        shutil.copytree(ROOT / ".mypy_cache", cache)
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", str(cache), str(snippet)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert '"LoraOptions" has no attribute "rnak"' in out.stdout, out.stdout + out.stderr
