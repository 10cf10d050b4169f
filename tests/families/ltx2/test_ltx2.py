"""families/ltx2/__init__.py: the LTX-2 package's registry entry and its factory, ``build_spec``."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import ltx2
from dit_lora.families.ltx2.options import LTX2I2VOptions, LTX2ICOptions, LTX2Options


def test_entry_builds_each_name_anew_refuses_another_and_names_its_files_and_options():
    check_entry(
        ltx2,
        {"ltx2": "FamilySpec", "ltx2_i2v": "FamilySpec", "ltx2_ic": "FamilySpec"},
        {"ltx2": LTX2Options, "ltx2_i2v": LTX2I2VOptions, "ltx2_ic": LTX2ICOptions},
    )
