"""What every family package's registry entry must hold, checked the same way for each (``check_entry``)."""

from __future__ import annotations

import pytest
import yaml

from dit_lora.catalogue.files import catalogue_of
from helpers import ROOT


def check_entry(package, classes: dict[str, str], option_classes: dict[str, type] | None = None) -> None:
    """``package.ENTRY`` is registered, builds ``classes`` (family name -> its class's name) and names files that exist;
    ``option_classes``: each name's options class, where the test states it.

    ``package.build_spec`` builds each name (a new spec each call) and the entry refuses a name it does not register.

    Its factory is the package's own ``build_spec`` and its options are classes of the package's ``options.py`` (no
    ``"module:attr"`` path), its catalogue lists only its own names, its demo configs exist under
    ``recipes/configs/`` and each trains one of its names, and its recipe script exists and calls ``main`` with
    its default name.
    """
    from dit_lora.registry import entry_for, get_family

    entry = package.ENTRY
    assert entry.names == tuple(classes) and all(entry_for(name) is entry for name in entry.names)
    assert entry.factory is package.build_spec
    with pytest.raises(KeyError):
        entry.build("not_" + entry.default)  # a name it does not register
    for name, cls in classes.items():
        family = get_family(name)
        assert type(family).__name__ == cls and family.name == name
        assert package.ENTRY.build(name) is not family and type(package.ENTRY.build(name)) is type(family)  # a new one each call
        assert package.build_spec(name).name == name and package.build_spec(name) is not package.build_spec(name)
        options = entry.options_for(name)
        if option_classes is not None:
            assert options is option_classes[name], (name, options)
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
