"""benchmarks/plan/fit_tables.py --update-guides: a guide's fit table gets fresh rows for the checkpoints it lists,
in its order, at the card sizes its own header names, and nothing else in the file changes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("fit_tables", ROOT / "benchmarks" / "plan" / "fit_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_update_guides_rewrites_each_listed_row_and_keeps_the_rest(tmp_path):
    fit = _module()
    guide = tmp_path / "dit.md"
    before = (
        "# DiT\n\nprose stays\n\n"
        f"{fit.HEADER} 16 GB | 80 GB |\n|---|---:|---:|---:|---|---|\n"
        "| `facebook/DiT-XL-2-256` | stale | stale | stale | stale | stale |\n"
        "\nafter the table\n"
    )
    guide.write_text(before)
    (tmp_path / "other.md").write_text("no table here\n")
    assert fit.update_guides(tmp_path) == [str(guide)]
    lines = guide.read_text().splitlines()
    row = next(line for line in lines if line.startswith("| `facebook/DiT-XL-2-256`"))
    assert "stale" not in row and row.count("|") == 7 and "GiB" in row and row.endswith("| fits | fits |")  # two cells: the header's 16 GB and 80 GB
    assert lines[:4] == before.splitlines()[:4] and lines[-1] == "after the table"
    assert fit.update_guides(tmp_path) == []  # a second pass changes nothing
