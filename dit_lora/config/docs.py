"""Render the options table for the README from the config schema: `python -m dit_lora.config.docs`."""

from __future__ import annotations

from dataclasses import MISSING

from .schema import config_fields


def options_markdown() -> str:
    """A markdown table of every option with its default and documentation."""
    rows = ["| option | default | description |", "|---|---|---|"]
    for f in config_fields():
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        doc = f.metadata["help"]
        if f.metadata.get("choices"):
            doc += f" Choices: {', '.join(f.metadata['choices'])}."
        rows.append(f"| `--{f.name}` | `{default}` | {doc.replace('|', '/')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(options_markdown())
