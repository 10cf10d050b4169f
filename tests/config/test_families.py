"""The option layer's port to the family registry (``config/families.py``): config imports no registry, and is told
of the families by the registry, installed by ``import dit_lora``."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT
from spec_parts import tiny_spec

from dit_lora import registry
from dit_lora.config import families
from dit_lora.config.families import RegisteredFamilies
from dit_lora.config.owners import options_class


def test_the_installed_source_answers_as_the_registry():
    table = families.source()
    assert table.available() == registry.available()
    assert table.canonical_name("z-image") == "zimage" == registry.canonical_name("z-image")
    assert table.pipelines_of("wan") == registry.pipelines_of("wan")
    assert table.recipe_script("sana") == registry.recipe_script("sana")
    assert "VideoFrames" in table.capabilities("wan") and "VideoFrames" not in table.capabilities("sana")
    names = table.options_classes()
    assert names["wan"] == registry.entry_for("wan").options_for("wan")


def test_importing_the_config_alone_installs_the_registry_without_torch():
    """``import dit_lora.config.schema`` runs ``dit_lora/__init__.py``, which imports the registry: the families are
    known with no import of the registry written in config, and nothing loads torch."""
    code = (
        "import sys; from dit_lora.config.schema import TrainConfig; "
        "print(type(TrainConfig.for_family('wan').family_options).__name__, 'dit_lora.registry' in sys.modules, "
        "'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["WanOptions", "True", "False"], out.stderr


class _Table:
    """A source of two made-up families (a stand-in for the registry)."""

    def available(self):
        return ["alpha", "beta"]

    def canonical_name(self, name):
        return {"a": "alpha"}.get(name, name)

    def options_classes(self):
        return {}

    def pipelines_of(self, name):
        return ("APipeline",)

    def recipe_script(self, name):
        return f"recipes/{name}_lora.py"

    def capabilities(self, name):
        return frozenset()


def test_family_choices_read_whatever_source_is_installed():
    before = families.source()
    families.install(_Table())
    try:
        assert list(RegisteredFamilies()) == ["alpha", "beta"] and RegisteredFamilies().canonical("a") == "alpha"
    finally:
        families.install(before)
    assert list(RegisteredFamilies()) == registry.available()


def test_a_registration_and_a_removal_are_announced():
    """The registry announces the names it built and checked now (none for a lazy entry) and a removal (None)."""
    from dit_lora.families.wan.options import WanOptions

    seen: list = []
    families.on_change(seen.append)
    entry = registry.FamilyEntry(names=("tiny_port",), factory=tiny_spec, options=WanOptions)
    try:
        registry.register_family(entry)
        assert seen == [("tiny_port",)] and options_class("tiny_port") is options_class("wan")
        registry.unregister_family(entry)
        assert seen == [("tiny_port",), None] and "tiny_port" not in families.source().options_classes()
        registry.register_family(entry, lazy=True)  # a built-in family's way: nothing built, nothing checked yet
        assert seen == [("tiny_port",), None, ()] and families.source().options_classes()["tiny_port"] is WanOptions
        registry.unregister_family(entry)
    finally:
        families._WATCHERS.remove(seen.append)
        if "tiny_port" in registry.available():
            registry.unregister_family(entry)
