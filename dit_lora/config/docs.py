"""Render the options tables from the config schema: the common options, then one table per family.

:mod:`dit_lora.commands.docsite` puts them on the documentation's reference page (``docs/reference/options.md``).
``python -m dit_lora.config.docs`` prints them; ``--write FILE.md`` replaces them in place in a Markdown file (between the
``<!-- options:start -->`` and ``<!-- options:end -->`` markers; a README without them has its first options
table replaced and the markers added).
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path

from dit_lora.config import owners
from dit_lora.config.schema import config_fields

HEADER = "| option | default | description |"
START, END = "<!-- options:start -->", "<!-- options:end -->"


def valid_text(f) -> str:
    """The range of a numeric option as the table writes it: ``integer > 0``, ``number in [0, 1)``, ``finite``."""
    rule = f.metadata["valid"]
    kind = "integer" if f.type in ("int", "int | None") else "number"
    return f"finite {kind}" if str(rule) == "finite" else f"{kind} {rule}"


def _row(f) -> str:
    default = f.default if f.default is not MISSING else f.default_factory()
    doc = f.metadata["help"]
    if f.metadata.get("choices"):
        doc += f" Choices: {', '.join(f.metadata['choices'])}."
    if f.metadata.get("valid") is not None:  # checked at parse time (config/values.py: check_value)
        doc += f" Valid: {valid_text(f)}."
    return f"| `--{f.name}` | `{default}` | {doc.replace('|', '/')} |"


def table(option_fields) -> str:
    """A markdown table of ``option_fields`` with their defaults and documentation."""
    return "\n".join([HEADER, "|---|---|---|", *(_row(f) for f in option_fields)])


def family_tables() -> list[tuple[str, str]]:
    """(heading, table) per family options class: each class once, naming every family that uses it; a class
    built on another family's lists only what it adds."""
    by_class: dict[type, list[str]] = {}
    for family in owners.known_families():
        cls = owners.options_class(family)
        if fields(cls):
            by_class.setdefault(cls, []).append(family)
    out = []
    for cls, families in by_class.items():
        base = next((b for b in cls.__mro__[1:] if b in by_class), None)
        inherited = {f.name for f in fields(base)} if base is not None else set()
        names = " or ".join(f"`--family {name}`" for name in families)
        heading = f"Options of {names}" + (f" (and every option of `--family {by_class[base][0]}`)" if base else "")
        out.append((heading, table([f for f in fields(cls) if f.name not in inherited])))
    return out


def options_markdown() -> str:
    """The common options' table, then one table per family (a heading line before each)."""
    parts = ["Common to every family:", "", table(config_fields())]
    for heading, family_table in family_tables():
        parts += ["", f"{heading}:", "", family_table]
    return "\n".join(parts)


def rewrite_table(readme: Path) -> None:
    """Replace the options tables in ``readme`` with the current ones."""
    lines = readme.read_text().splitlines()
    if START in lines and END in lines:
        start, end = lines.index(START) + 1, lines.index(END)
    else:  # the first options table, from before the markers
        start = end = lines.index(HEADER)
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[start:end] = [START, *lines[start:end], END]
        start, end = start + 1, end + 1
    readme.write_text("\n".join(lines[:start] + options_markdown().splitlines() + lines[end:]) + "\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        rewrite_table(Path(sys.argv[2]))
    else:
        print(options_markdown())
