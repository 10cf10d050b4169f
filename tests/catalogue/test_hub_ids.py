"""Every Hub id of a base model that the project names (README, shipped configs, code, docs) is a catalogued
checkpoint, whose existence and sources the catalogue records (a refused one, SANA-Sprint, included: the catalogue
records it too): a stranger copying an id from anywhere gets one that exists."""

from __future__ import annotations

import re

from helpers import ROOT

from dit_lora.catalogue import by_hub_id, refused

#: organisations whose repos are base models dit-lora trains
_BASE_ORGS = ("Efficient-Large-Model", "THUDM", "zai-org", "facebook", "llava-hf", "Qwen")
_ID = re.compile(r"\b(?:%s)/[A-Za-z0-9][\w.\-]*[A-Za-z0-9]" % "|".join(_BASE_ORGS))
#: ids named on purpose that are not base models of a recipe
_OTHER = {"Efficient-Large-Model/gemma-2-2b-it", "facebook/DiT"}


def _files():
    yield ROOT / "README.md"
    yield ROOT / "ARCHITECTURE.md"
    yield from (ROOT / "recipes").rglob("*.yaml")
    yield from (ROOT / "recipes").glob("*.py")
    yield from (p for p in (ROOT / "dit_lora").rglob("*.py") if "catalogue" not in p.parts and p.name != "catalogue.py")
    yield from (ROOT / "benchmarks").rglob("*.md")
    yield from (ROOT / "benchmarks").rglob("*.py")


def test_every_named_base_model_id_is_catalogued():
    unknown, refused_ids = {}, {e.hub_id for e in refused()}
    for path in _files():
        text = path.read_text(errors="replace")
        for found in _ID.finditer(text):
            hub_id = found.group()
            if any(c in text[found.end():found.end() + 2] for c in "*{"):
                continue  # a pattern such as Qwen/Qwen2.5-VL-*-Instruct, not an id
            if hub_id not in _OTHER | refused_ids and by_hub_id(hub_id) is None:
                unknown.setdefault(hub_id, []).append(str(path.relative_to(ROOT)))
    assert not unknown, unknown


def test_the_check_would_catch_the_id_that_did_not_exist():
    assert _ID.findall("use Efficient-Large-Model/Sana_600M_1024px_BF16_diffusers here") == [
        "Efficient-Large-Model/Sana_600M_1024px_BF16_diffusers"]
    assert by_hub_id("Efficient-Large-Model/Sana_600M_1024px_BF16_diffusers") is None
