"""What every family package's registry entry must hold, checked the same way for each (``check_entry``)."""

from __future__ import annotations

import yaml

from dit_lora.catalogue.files import catalogue_of
from helpers import ROOT


def check_entry(package, classes: dict[str, str]) -> None:
    """``package.ENTRY`` is registered, builds ``classes`` (family name -> its class's name) and names files that exist.

    Its factory is the package's own ``build_spec`` and its options are classes of the package's ``options.py`` (no
    ``"module:attr"`` path), its catalogue lists only its own names, its demo configs exist under
    ``recipes/configs/`` and each trains one of its names, and its recipe script exists and calls ``main`` with
    its default name.
    """
    from dit_lora.registry import entry_for, get_family

    entry = package.ENTRY
    assert entry.names == tuple(classes) and all(entry_for(name) is entry for name in entry.names)
    assert entry.factory is package.build_spec
    for name, cls in classes.items():
        family = get_family(name)
        assert type(family).__name__ == cls and family.name == name
        assert package.ENTRY.build(name) is not family and type(package.ENTRY.build(name)) is type(family)  # a new one each call
        options = entry.options_for(name)
        assert options is None or (isinstance(options, type) and options.__module__ == f"{package.__name__}.options")
    if entry.catalogue:
        listed = {e.family for e in catalogue_of(entry.catalogue).entries}
        assert listed and listed <= set(entry.names), listed
    assert entry.demo_configs
    for config in entry.demo_configs:
        values = yaml.safe_load((ROOT / "recipes" / "configs" / config).read_text())
        assert values.get("demo") and values.get("family") in entry.names, config
    script = ROOT / entry.recipe_script
    assert f'main("{entry.default}")' in script.read_text(), script
