"""No function in ``dit_lora/`` is over 80 lines (issue 46: split long functions into named stages).

A function's length runs from its ``def`` line (decorators not counted) to its last line, nested functions
included in their parent's length and also checked on their own. The scan reads the source with :mod:`ast` and
imports nothing from the package, so it runs in well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "dit_lora"
#: the longest a function may be, from ``def`` to its last line
MAX_LINES = 80


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
