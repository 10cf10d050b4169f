"""Render the options table for the README from the config schema.

``python -m dit_lora.config.docs`` prints it; ``--write README.md`` replaces the table in place.
"""

from __future__ import annotations

from dataclasses import MISSING
from pathlib import Path

from .schema import config_fields


def valid_text(f) -> str:
    """The range of a numeric option as the table writes it: ``integer > 0``, ``number in [0, 1)``, ``finite``."""
    rule = f.metadata["valid"]
    kind = "integer" if f.type in ("int", "int | None") else "number"
    return f"finite {kind}" if str(rule) == "finite" else f"{kind} {rule}"


def options_markdown() -> str:
    """A markdown table of every option with its default and documentation."""
    rows = ["| option | default | description |", "|---|---|---|"]
    for f in config_fields():
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        doc = f.metadata["help"]
        if f.metadata.get("choices"):
            doc += f" Choices: {', '.join(f.metadata['choices'])}."
        if f.metadata.get("valid") is not None:  # checked at parse time (config/parser.py: check_value)
            doc += f" Valid: {valid_text(f)}."
        rows.append(f"| `--{f.name}` | `{default}` | {doc.replace('|', '/')} |")
    return "\n".join(rows)


def rewrite_table(readme: Path) -> None:
    """Replace the options table in ``readme`` with the current one."""
    lines = readme.read_text().splitlines()
    start = lines.index("| option | default | description |")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    readme.write_text("\n".join(lines[:start] + options_markdown().splitlines() + lines[end:]) + "\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        rewrite_table(Path(sys.argv[2]))
    else:
        print(options_markdown())
