"""The layering contract (pyproject's ``[tool.importlinter]``: ARCHITECTURE.md's picture of the layers) holds on the
package, and fails, naming the import, when one goes up a layer or from one family package into another.

Each check runs ``lint-imports`` (import-linter, which reads imports inside functions too) in a subprocess, with no
cache, on the real package or on a copy of it in ``tmp_path`` with imports planted in it: a second or so each.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from helpers import ROOT

from dit_lora.registry import BUILT_IN, BUILT_IN_PACKAGE

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with ``root``'s pyproject.toml, on the ``dit_lora`` package found under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--config", str(root / "pyproject.toml")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml (the contract) under ``tmp_path``."""
    shutil.copytree(ROOT / "dit_lora", tmp_path / "dit_lora", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n\n" + text.strip() + "\n")


def test_the_package_keeps_the_contract():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_the_families_contract_covers_every_family_package_without_a_list():
    """pyproject's ``families`` contract keeps every package under ``dit_lora.families`` independent of the others by
    wildcard (adding a family edits no list there), and ``dit_lora/families/`` holds family packages only: each
    folder is a registered built-in family (the kit lives in ``dit_lora.kit``)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    contract = next(c for c in contracts if c["id"] == "families")
    assert contract["type"] == "independence" and contract["modules"] == [BUILT_IN_PACKAGE + ".*"], contract
    folders = {p.parent.name for p in (ROOT / "dit_lora" / "families").glob("*/__init__.py")}
    assert folders == set(BUILT_IN), "a package under dit_lora/families/ that is not a registered family"


def test_a_planted_upward_import_fails_naming_it(tmp_path):
    root = _copy(tmp_path)
    # config (low) importing a family package (high), at module level
    _append(root / "dit_lora/config/schema.py", "import dit_lora.families.sana  # planted")
    # the option layer importing the registry above it (it is told of the families: config/families.py)
    _append(root / "dit_lora/config/option.py",
            "def _planted_registry():\n    from dit_lora.registry import available  # planted\n\n    return available")
    # the data path importing the training loop, inside a function (import-linter reads those too)
    _append(root / "dit_lora/data/aspect.py",
            "def _planted():\n    from dit_lora.training import loop  # planted\n\n    return loop")
    # one family package importing another
    _append(root / "dit_lora/families/wan/demo.py", "from dit_lora.families.sana import demo as _planted  # planted")
    # an import only a type checker reads goes nowhere at run time: allowed
    _append(root / "dit_lora/core/errors.py",
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import dit_lora.training.run  # planted")
    result = _lint(root)
    out = result.stdout
    assert result.returncode != 0 and "Contracts: 0 kept, 2 broken." in out, out + result.stderr
    assert "dit_lora.config is not allowed to import dit_lora.families" in out
    assert "dit_lora.config.schema -> dit_lora.families.sana" in out
    assert "dit_lora.config is not allowed to import dit_lora.registry" in out
    assert "dit_lora.config.option -> dit_lora.registry" in out
    assert "dit_lora.data is not allowed to import dit_lora.training" in out
    assert "dit_lora.data.aspect -> dit_lora.training.loop" in out
    assert "dit_lora.families.wan is not allowed to import dit_lora.families.sana" in out
    assert "dit_lora.core.errors -> dit_lora.training.run" not in out


def test_the_kit_imports_no_family(tmp_path):
    """dit_lora.kit sits below the family packages (the "layers" contract): the kit importing a family it serves
    fails, naming the import."""
    root = _copy(tmp_path)
    _append(root / "dit_lora/kit/components.py",
            "def _planted():\n    from dit_lora.families.sana import spec  # planted\n\n    return spec")
    result = _lint(root)
    out = result.stdout
    # both contracts: the layers (kit below families), and the families' independence (each reaches sana via the kit)
    assert result.returncode != 0 and "Contracts: 0 kept, 2 broken." in out, out + result.stderr
    assert "dit_lora.kit is not allowed to import dit_lora.families" in out
    assert "dit_lora.kit.components -> dit_lora.families.sana.spec" in out


def _structure():
    """``tools/structure.py`` (the figures' script: not a package module), imported from its file."""
    spec = importlib.util.spec_from_file_location("_structure", ROOT / "tools" / "structure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_circle_even_counting_type_checking_imports():
    """No import circle in the package, counting the imports under ``if TYPE_CHECKING:`` too (the type checker
    follows them; a circle among them says two layers each lean on the other). The figure is
    ``tools/structure.py``'s "import circles counting TYPE_CHECKING imports"; a failure names each circle's modules."""
    groups = _structure().circles(type_checking=True)
    assert groups == [], "import circles counting TYPE_CHECKING imports:\n" + "\n".join(", ".join(g) for g in groups)
