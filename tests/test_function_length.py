"""No function in ``dit_lora/`` is over 80 lines (issue 46: split long functions into named stages), and no module is
over 600 lines (issue 77: split a long module by purpose).

A function's length runs from its ``def`` line (decorators not counted) to its last line, nested functions
included in their parent's length and also checked on their own. A module's length is its number of lines, as
``wc -l`` counts them. The scans read the source with :mod:`ast` (or as text) and import nothing from the package,
so they run in well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "dit_lora"
#: the longest a function may be, from ``def`` to its last line
MAX_LINES = 80
#: the longest a module may be, in lines
MAX_MODULE_LINES = 600


def long_functions(package: Path = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` for every function under ``package`` longer than ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    where = path.relative_to(package.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_over_80_lines():
    too_long = long_functions()
    assert not too_long, (
        f"{len(too_long)} function(s) over {MAX_LINES} lines; split each into named stages (helpers whose names "
        "say what each stage does and returns):\n" + "\n".join(too_long)
    )


def test_the_scan_on_a_made_up_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "short.py").write_text("def fine():\n" + "    x = 1\n" * 79)
    (package / "sub" / "long.py").write_text("\n\nasync def too_long():\n" + "    x = 1\n" * 80)
    assert long_functions(package) == ["pkg/sub/long.py:3 too_long (81 lines)"]


def long_modules(package: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path (N lines)`` for every module under ``package`` longer than ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        length = len(path.read_text().splitlines())
        if length > limit:
            found.append(f"{path.relative_to(package.parent)} ({length} lines)")
    return found


def test_no_module_is_over_600_lines():
    too_long = long_modules()
    assert not too_long, (
        f"{len(too_long)} module(s) over {MAX_MODULE_LINES} lines; split each by purpose into modules of its package "
        "(their tests moved to the mirrored test files):\n" + "\n".join(too_long)
    )


def test_the_module_scan_on_a_made_up_package(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "short.py").write_text("x = 1\n" * 600)
    (package / "sub" / "long.py").write_text("x = 1\n" * 601)
    assert long_modules(package) == ["pkg/sub/long.py (601 lines)"]
