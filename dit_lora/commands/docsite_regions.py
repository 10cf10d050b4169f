"""The generated parts of hand-written pages: the family list, the layer order and the family sizes.

A page (``README.md``, ``ARCHITECTURE.md``, ``docs/index.md``, ``docs/contributing.md``) marks a part it does not
write by hand as ``<!-- generated: NAME -->`` ... ``<!-- end generated: NAME -->``; ``python -m
dit_lora.commands.docsite --write`` fills it from the code and ``--check`` names a page whose part is stale, as for the
generated reference pages. What each part is built from:

* ``families``: the registry (each entry's guide, names and trained classes), so a new family appears with its
  registry line and its guide page, and a removed one leaves;
* ``real-use``: the README's block of one training command per family, each its guide's main example (the block
  after its ``<!-- test: main-example -->`` marker; tests/test_guides.py runs them);
* ``layers`` and ``layer-order``: pyproject.toml's ``[tool.importlinter]`` layers contract (its order, and the comment
  on each layer's line), the built-in family packages from the registry;
* ``family-sizes``: the Python lines of each built-in family's folder, smallest first.
"""

from __future__ import annotations

import os
import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path

from dit_lora import registry

#: the checkout: pyproject.toml and the pages with generated parts
ROOT = Path(__file__).resolve().parents[2]
#: the hand-written pages that hold generated parts, relative to the checkout
PAGES = ("README.md", "ARCHITECTURE.md", "docs/index.md", "docs/contributing.md")
_REGION = re.compile(
    r"(?P<open><!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(?P<close><!-- end generated: (?P=name) -->)",
    re.DOTALL,
)
#: where a layer's description starts in the ``layers`` diagram, and how wide it is
NAME_WIDTH, LINE_WIDTH = 48, 118


def guide_title(entry: registry.FamilyEntry, root: Path = ROOT) -> str:
    """The title of a family's guide page (its first ``# `` heading), else its default name."""
    page = root / entry.docs if entry.docs else None
    if page is None or not page.is_file():
        return entry.default
    first = next((line for line in page.read_text().splitlines() if line.startswith("# ")), "")
    return first.removeprefix("# ").strip() or entry.default


def families_table(root: Path, page: Path) -> str:
    """One row per registry entry: its guide (linked from ``page``), its ``--family`` names and the classes each
    trains."""
    rows = ["| family | `--family` | trains |", "|---|---|---|"]
    for entry in registry.entries():
        title = guide_title(entry, root)
        if entry.docs:
            title = f"[{title}]({os.path.relpath(root / entry.docs, (root / page).parent)})"
        names = ", ".join(f"`{name}`" for name in entry.names)
        classes = ", ".join(dict.fromkeys(f"`{c}`" for name in entry.names for c in registry.pipelines_of(name)))
        rows.append(f"| {title} | {names} | {classes} |")
    return "\n".join(rows)


#: the marker above a guide's main example, and above the README's block of them
MAIN_EXAMPLE, REAL_USE = "<!-- test: main-example -->", "<!-- test: real-use -->"


def main_example(page: Path) -> str | None:
    """The fenced block (fences included) after a guide's main-example marker; None when it has none."""
    lines = page.read_text().splitlines()
    if MAIN_EXAMPLE not in lines:
        return None
    start = next(i for i in range(lines.index(MAIN_EXAMPLE) + 1, len(lines)) if lines[i].strip())
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    return "\n".join(lines[start + 1 : end])


def real_use(root: Path, page: Path) -> str:
    """The README's real-use block: every registry entry's guide's main example, in registry order."""
    examples = [main_example(root / entry.docs) for entry in registry.entries() if entry.docs]
    commands = [example for example in examples if example]
    return "\n".join([REAL_USE, "```bash", *commands, "```"])


def _layers(root: Path) -> list[tuple[str, str]]:
    """pyproject.toml's layers, top first, each with the comment on its line (its description)."""
    text = (root / "pyproject.toml").read_text()
    config = tomllib.loads(text)["tool"]["importlinter"]["contracts"]
    layers = next(c for c in config if c.get("type") == "layers")["layers"]
    comments = dict(re.findall(r'^\s*"([^"]+)",\s*#\s*(.*?)\s*$', text, re.MULTILINE))
    return [(layer, comments.get(layer, "")) for layer in layers]


def layers_diagram(root: Path, page: Path) -> str:
    """The layer stack as a text block: each layer (``a | b``: may not import each other) and its description; the
    families' layer lists the built-in family packages."""
    lines = ["```"]
    for layer, about in _layers(root):
        if layer == f"{registry.BUILT_IN_PACKAGE}":
            about = f"{about}: {' | '.join(registry.BUILT_IN)} (independent of each other)"
        wrapped = textwrap.wrap(about, LINE_WIDTH - NAME_WIDTH) or [""]
        lines.append(f"{layer:<{NAME_WIDTH}}{wrapped[0]}".rstrip())
        lines += [" " * NAME_WIDTH + more for more in wrapped[1:]]
    return "\n".join(lines + ["```"])


def layer_order(root: Path, page: Path) -> str:
    """The layers in one sentence, top first, as pyproject.toml orders them."""
    names = [
        " and ".join(f"`{p.strip().removeprefix('dit_lora.')}`" for p in layer.split("|")) for layer, _ in _layers(root)
    ]
    return textwrap.fill(f"Imports run one way, down a stack of layers, top first: {', '.join(names)}.", LINE_WIDTH)


def folder_lines(package: str, root: Path = ROOT) -> int:
    """The Python lines of a built-in family's folder (``dit_lora/families/<package>/``, its subfolders too)."""
    folder = root / "dit_lora" / "families" / package
    return sum(len(path.read_text().splitlines()) for path in folder.rglob("*.py"))


def family_sizes(root: Path, page: Path) -> str:
    """Each built-in family folder's size, to the nearest 100 Python lines (so an edit rarely changes it), smallest
    first."""
    sizes = {package: round(folder_lines(package, root), -2) for package in registry.BUILT_IN}
    rows = ["| family folder | Python lines (about) |", "|---|---|"]
    for package in sorted(sizes, key=lambda p: (sizes[p], p)):
        rows.append(f"| `families/{package}/` | {sizes[package]} |")
    return "\n".join(rows)


#: each part's name -> what builds it, from the checkout's root and the page's path relative to it
REGIONS: dict[str, Callable[[Path, Path], str]] = {
    "families": families_table,
    "real-use": real_use,
    "layers": layers_diagram,
    "layer-order": layer_order,
    "family-sizes": family_sizes,
}


def render(text: str, root: Path, page: Path) -> str:
    """``text`` with each generated part rebuilt (an unknown part's name is a ValueError naming the page)."""

    def rebuilt(match: re.Match) -> str:
        name = match.group("name")
        if name not in REGIONS:
            raise ValueError(f"{page}: no generated part is called `{name}` (known: {', '.join(REGIONS)})")
        return f"{match.group('open')}{REGIONS[name](root, page)}\n{match.group('close')}"

    return _REGION.sub(rebuilt, text)


def regions_of(text: str) -> list[str]:
    """The names of the generated parts of a page's text, in order."""
    return [match.group("name") for match in _REGION.finditer(text)]


def stale_regions(root: Path = ROOT) -> list[str]:
    """The pages of :data:`PAGES` under ``root`` whose generated parts differ from what the code builds now (a page
    missing under ``root`` is skipped: a folder of generated pages only)."""
    return [
        page
        for page in PAGES
        if (root / page).is_file() and render((root / page).read_text(), root, Path(page)) != (root / page).read_text()
    ]


def write_regions(root: Path = ROOT) -> list[str]:
    """Rebuild the generated parts of every page under ``root``; returns the pages that changed."""
    changed = stale_regions(root)
    for page in changed:
        (root / page).write_text(render((root / page).read_text(), root, Path(page)))
    return changed
