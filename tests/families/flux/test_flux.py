"""families/flux/__init__.py: the FLUX.1 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import flux
from dit_lora.families.flux.options import FluxOptions, KontextOptions


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        flux,
        {"flux": "FamilySpec", "flux_kontext": "FamilySpec"},
        {"flux": FluxOptions, "flux_kontext": KontextOptions},
    )
