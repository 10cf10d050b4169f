"""families/flux/__init__.py: the FLUX.1 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

import pytest
from family_entries import check_entry

from dit_lora.families import flux
from dit_lora.families.flux.options import FluxOptions, KontextOptions


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(flux, {"flux": "FamilySpec", "flux_kontext": "FamilySpec"})


def test_build_spec_builds_each_name_and_refuses_another():
    assert flux.build_spec("flux").name == "flux"
    assert flux.build_spec("flux_kontext").name == "flux_kontext"
    assert flux.build_spec("flux") is not flux.build_spec("flux")  # a new spec each call
    with pytest.raises(KeyError):
        flux.ENTRY.build("not_flux")  # the entry refuses a name it does not register


def test_the_entry_holds_its_options_classes():
    assert flux.ENTRY.options_for("flux") is FluxOptions
    assert flux.ENTRY.options_for("flux_kontext") is KontextOptions
