"""docsite.py and the documentation site: the generated reference pages are current, the nav and docs/ agree, and
``mkdocs build --strict`` builds the site offline (a broken link, a missing page or one left out of the nav fails)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from helpers import ROOT
from dit_lora.commands import docsite

DOCS = ROOT / "docs"


def _nav_pages(nav) -> list[str]:
    """Every page path the mkdocs nav names (entries are ``{title: path}`` or ``{title: [entries]}``)."""
    out = []
    for item in nav:
        for value in (item.values() if isinstance(item, dict) else [item]):
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def _config() -> dict:
    # mkdocs.yml holds no python tags; safe_load reads it (mkdocs' own !ENV tags would need its loader)
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_generated_pages_are_current():
    stale = docsite.stale_pages(DOCS)
    assert not stale, f"regenerate with `python -m dit_lora.commands.docsite --write`: {stale}"


def test_check_names_a_stale_page_and_write_fixes_it(tmp_path, capsys):
    assert docsite.main(["--write", "--docs", str(tmp_path)]) == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.md")) == sorted(docsite.PAGES)
    assert docsite.main(["--check", "--docs", str(tmp_path)]) == 0
    page = tmp_path / "reference" / "options.md"
    page.write_text(page.read_text().replace("`--rank`", "`--rank_renamed`"))
    capsys.readouterr()
    assert docsite.main(["--check", "--docs", str(tmp_path)]) == 1
    assert "reference/options.md is not current" in capsys.readouterr().err
    assert docsite.write_pages(tmp_path) == ["reference/options.md"]


def test_pages_cover_every_option_checkpoint_and_command():
    from dit_lora.catalogue import entries
    from dit_lora.commands.cli import _build_parser
    from dit_lora.config import owners
    from dit_lora.config.schema import config_fields

    options = docsite.options_page()
    names = [f.name for f in config_fields()]
    names += [f.name for family in owners.known_families() for f in fields(owners.options_class(family))]
    for name in names:
        assert f"| `--{name}` |" in options, name
    for family in owners.known_families():
        assert f"`--family {family}`" in options, family
    catalogue = docsite.catalogue_page()
    for entry in entries():
        assert f"| `{entry.hub_id}` |" in catalogue, entry.hub_id
    cli = docsite.cli_page()
    sub = next(a for a in _build_parser()._actions if hasattr(a, "_choices_actions"))
    for command in sub.choices:
        assert f"## dit-lora {command}\n" in cli, command


def test_cli_help_does_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = docsite.cli_page()
    monkeypatch.setenv("COLUMNS", "250")
    assert docsite.cli_page() == narrow
    assert max(len(line) for block in narrow.split("```text")[1:] for line in block.split("```")[0].splitlines()) \
        <= docsite.HELP_WIDTH


def test_md_text_keeps_angle_brackets_and_stars_literal_outside_code():
    assert docsite.md_text("checkpoint-<step>/ a * b * c `x<y*z` a|b") == \
        r"checkpoint-&lt;step>/ a \* b \* c `x<y*z` a\|b"
    assert docsite.md_text("families/__init__.py") == r"families/\_\_init\_\_.py"


def test_nav_lists_every_page_and_every_entry_exists():
    nav = _nav_pages(_config()["nav"])
    assert len(nav) == len(set(nav)), "a page is listed twice in mkdocs.yml's nav"
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert not set(nav) - on_disk, f"nav entries without a page: {sorted(set(nav) - on_disk)}"
    assert not on_disk - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(on_disk - set(nav))}"
    assert set(docsite.PAGES) <= set(nav)


def test_every_family_docs_page_exists():
    from dit_lora.registry import entries

    for entry in entries():
        if entry.docs:  # a path from the repository root, e.g. docs/guides/wan.md
            assert (ROOT / entry.docs).is_file() and entry.docs.startswith("docs/"), (entry.names, entry.docs)
            assert str(Path(entry.docs).relative_to("docs")) in _nav_pages(_config()["nav"]), entry.docs


@pytest.mark.skipif(shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists(),
                    reason="mkdocs is not installed (the dev and docs extras install it)")
def test_site_builds_strictly_offline(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1",
           # no proxy that works: a build that reached for the network would fail rather than pass here
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    site = tmp_path / "site"
    done = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(site)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for page in _nav_pages(_config()["nav"]):
        html = site / (page.removesuffix(".md").removesuffix("index") + "/index.html").lstrip("/")
        assert html.is_file(), page
    # Material with font: false fetches nothing when read either: no Google Fonts, no CDN
    assert "fonts.googleapis.com" not in (site / "index.html").read_text()
