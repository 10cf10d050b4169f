"""commands/docsite_regions.py: the family list, the README's real-use commands, the layer order and the family sizes
in the hand-written pages are generated from the registry, the guides, pyproject.toml and the tree, current, and rebuilt by ``docsite --write``; the pages'
opening paragraphs, which stay prose, name every family."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from dit_lora.commands import docsite, docsite_regions
from dit_lora.commands.docsite_regions import (PAGES, REGIONS, family_sizes, families_table, folder_lines,
                                               guide_title, layer_order, layers_diagram, regions_of, render,
                                               stale_regions, write_regions)
from dit_lora.registry import BUILT_IN, entries
from helpers import ROOT

#: which generated parts each page holds
EXPECTED = {"README.md": ["real-use", "families"], "ARCHITECTURE.md": ["layers", "family-sizes"], "docs/index.md": ["families"],
            "docs/contributing.md": ["family-sizes", "layer-order"]}


def test_every_page_holds_its_generated_parts_and_they_are_current():
    assert set(EXPECTED) == set(PAGES)
    for page, names in EXPECTED.items():
        assert regions_of((ROOT / page).read_text()) == names, page
    assert stale_regions(ROOT) == [], "regenerate with `python -m dit_lora.commands.docsite --write`"


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in config if c["type"] == "layers")["layers"]


def test_the_layers_are_pyprojects_in_its_order_with_every_family_package():
    diagram = layers_diagram(ROOT, Path("ARCHITECTURE.md"))
    starts = [line.split("  ")[0] for line in diagram.splitlines()[1:-1] if not line.startswith(" ")]
    assert starts == _layers()
    assert all(f" {package} " in diagram.replace("\n", " ").replace("|", " ") for package in BUILT_IN)
    sentence = layer_order(ROOT, Path("docs/contributing.md")).replace("\n", " ")
    spelled = [layer.replace("dit_lora.", "").replace(" | ", " and ") for layer in _layers()]
    found = [m.replace("`", "") for m in re.findall(r"`[^`]+`(?: and `[^`]+`)*", sentence.split(": ", 1)[1])]
    assert found == spelled


def test_a_reordered_pyproject_reorders_the_pages(tmp_path):
    text = (ROOT / "pyproject.toml").read_text()
    moved = text.replace('    "dit_lora.plan",', "").replace('    "dit_lora.core",', '    "dit_lora.plan",\n    "dit_lora.core",')
    assert moved != text
    (tmp_path / "pyproject.toml").write_text(moved)
    assert "`output`, `catalogue` and" in layer_order(tmp_path, Path("x.md"))
    assert layer_order(tmp_path, Path("x.md")).replace("\n", " ").endswith("`plan`, `core`.")


def test_the_family_table_has_one_row_per_entry_linking_its_guide():
    table = families_table(ROOT, Path("docs/index.md"))
    rows = table.splitlines()[2:]
    assert len(rows) == len(entries())
    for entry, row in zip(entries(), rows):
        assert f"]({Path(entry.docs).relative_to('docs').as_posix()})" in row, row
        assert all(f"`{name}`" in row for name in entry.names), row
    readme = families_table(ROOT, Path("README.md"))
    assert "](docs/guides/sana.md)" in readme


def test_a_registered_family_joins_the_table_and_leaves_with_its_entry():
    from dit_lora.registry import FamilyEntry, register_family, unregister_family

    entry = FamilyEntry(names=("table_toy",), factory="toy.spec:make", docs="docs/guides/sana.md",
                        pipelines=("ToyPipeline",))
    register_family(entry)
    try:
        assert "| `table_toy` | `ToyPipeline` |" in families_table(ROOT, Path("README.md"))
    finally:
        unregister_family(entry)
    assert "table_toy" not in families_table(ROOT, Path("README.md"))


def test_the_real_use_block_is_each_guides_main_example_in_registry_order(tmp_path):
    from dit_lora.commands.docsite_regions import REAL_USE, main_example, real_use

    block = real_use(ROOT, Path("README.md"))
    assert block.startswith(REAL_USE + "\n```bash\n") and block.endswith("\n```")
    examples = [main_example(ROOT / e.docs) for e in entries() if e.docs]
    assert all(examples) and block.index(examples[0]) < block.index(examples[-1])
    assert all(example in block for example in examples)
    page = tmp_path / "guide.md"
    page.write_text("# A guide\n\n<!-- test: main-example -->\n\n```bash\ndit-lora launch x\n```\n")
    assert main_example(page) == "dit-lora launch x"
    page.write_text("# A guide without one\n")
    assert main_example(page) is None


def test_the_sizes_are_each_folders_lines_smallest_first():
    rows = family_sizes(ROOT, Path("ARCHITECTURE.md")).splitlines()[2:]
    shown = [(re.search(r"families/(\w+)/", r).group(1), int(r.rsplit("|", 2)[1])) for r in rows]
    assert sorted(p for p, _ in shown) == sorted(BUILT_IN)
    assert [n for _, n in shown] == sorted(n for _, n in shown)
    for package, lines in shown:
        assert abs(folder_lines(package) - lines) <= 50, package


def test_write_rebuilds_a_stale_part_and_check_names_the_page(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    for page in PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    for name in ("pyproject.toml", *(e.docs for e in entries() if e.docs)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "dit_lora" / "families", tmp_path / "dit_lora" / "families")
    docsite.write_pages(tmp_path / "docs")
    assert docsite.main(["--check", "--docs", str(tmp_path / "docs")]) == 0
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text().replace("| `zimage` |", "| `z_image` |"))
    capsys.readouterr()
    assert docsite.main(["--check", "--docs", str(tmp_path / "docs")]) == 1
    assert "index.md is not current" in capsys.readouterr().err
    assert write_regions(tmp_path) == ["docs/index.md"] and stale_regions(tmp_path) == []


def test_an_unknown_part_is_refused_naming_the_page():
    text = "<!-- generated: nope -->\n<!-- end generated: nope -->\n"
    with pytest.raises(ValueError, match="x.md: no generated part is called `nope`"):
        render(text, ROOT, Path("x.md"))
    assert set(REGIONS) == {"families", "real-use", "layers", "layer-order", "family-sizes"}


def _opening(page: str) -> str:
    """The page's first paragraph after its title, without emphasis, on one line."""
    text = (ROOT / page).read_text().split("\n\n")[1]
    return " ".join(text.replace("**", "").split()).lower()


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_the_opening_paragraph_names_every_family(page):
    """The prose list of families a reader meets first names each registry entry by its guide's title (up to a
    colon or parenthesis): a new family's guide title must be added there, or this fails naming it."""
    opening = _opening(page)
    titles = [re.split(r":| \(", guide_title(entry))[0] for entry in entries()]
    missing = [title for title in titles if title.lower() not in opening]
    assert not missing, f"{page}'s first paragraph does not name {missing}"
    assert docsite_regions.ROOT == ROOT


@pytest.mark.parametrize("page", ["ARCHITECTURE.md", "docs/contributing.md"])
def test_the_family_the_prose_calls_the_largest_diffusion_family_is(page):
    """Beside the generated sizes the prose names the largest diffusion family's folder: it must be the largest."""
    from family_cases import entry_defaults, package_of

    from dit_lora.kit.components import DiffusionModel
    from dit_lora.registry import get_spec

    named = re.findall(r"`families/(\w+)/`\)?,? the largest diffusion family", (ROOT / page).read_text())
    assert len(named) == 1, page
    diffusion = {package_of(n) for n in entry_defaults() if isinstance(get_spec(n).model, DiffusionModel)}
    assert named[0] == max(diffusion, key=folder_lines)
