"""``benchmarks/RESULTS.md`` stays the index of ``benchmarks/``: grouped by family and topic, nothing stale, nothing left out.

The scripts live in one folder per family (``sana/``, ``wan/``, ...) or topic (``kernels/``, ``plan/``, ...), each
results file beside the script that wrote it. These checks read files only; running the scripts is
``tests/e2e/test_benchmark_scripts.py``'s.
"""

from __future__ import annotations

import re

from helpers import ROOT

BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "RESULTS.md"
#: a path RESULTS.md names: ``benchmarks/<file>`` in a command or a heading, or ``<folder>/<file>`` in text
NAMED = re.compile(r"(?<![\w/.-])(benchmarks/)?((?:[a-z_]+/)*[\w.-]+\.(?:py|json|sh))")
#: the file table's rows: | `folder/` | `file`, `file` | what |  (a blank folder cell continues the one above)
ROW = re.compile(r"^\| (`[a-z0-9_]+/`)? ?\| ((?:`[\w.-]+`(?:, )?)+) \|", re.MULTILINE)


def _files() -> set[str]:
    """Every script and results file under benchmarks/, relative to it (package markers left out)."""
    return {str(path.relative_to(BENCHMARKS)) for suffix in ("*.py", "*.json", "*.sh") for path in BENCHMARKS.rglob(suffix)
            if path.name != "__init__.py" and "__pycache__" not in path.parts}


def _table() -> set[str]:
    """The files RESULTS.md's file table lists, relative to benchmarks/."""
    listed, folder = set(), None
    for match in ROW.finditer(RESULTS.read_text()):
        folder = match.group(1).strip("`") if match.group(1) else folder
        listed.update(folder + name.strip("`") for name in match.group(2).split(", "))
    return listed


def test_nothing_lies_loose_at_the_top():
    """Every script and results file is in a family's or a topic's folder."""
    assert sorted(name for name in _files() if "/" not in name) == []


def test_every_path_results_md_names_exists():
    """The commands, headings and text of RESULTS.md name only files that are there (a renamed one fails here)."""
    folders = {path.name for path in BENCHMARKS.iterdir() if path.is_dir()}
    named = {m.group(2) for m in NAMED.finditer(RESULTS.read_text())
             if m.group(1) or m.group(2).split("/")[0] in folders}  # other repositories' and folders' files left out
    missing = sorted(name for name in named if not (BENCHMARKS / name).is_file())
    assert missing == [], f"RESULTS.md names files benchmarks/ does not hold: {missing}"


def test_the_file_table_lists_every_file_and_only_those():
    listed, present = _table(), _files()
    assert sorted(present - listed) == [], "benchmarks/ files missing from RESULTS.md's file table"
    assert sorted(listed - present) == [], "RESULTS.md's file table lists files benchmarks/ does not hold"


def test_every_results_file_lies_beside_a_script():
    """A results file sits in the folder of the script that wrote it (a folder of results alone is a leftover)."""
    for name in _files():
        if name.endswith(".json"):
            folder = (BENCHMARKS / name).parent
            assert any(folder.glob("*.py")), f"{name}: no script beside it"
