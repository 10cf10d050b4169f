"""families/flux2/__init__.py: the FLUX.2 package's registry entry and factory."""

from __future__ import annotations

from family_entries import check_entry

from dit_lora.families import flux2
from dit_lora.setup.family_inference import check_family_trains_model, entry_pipelines


def test_entry_builds_a_new_spec_each_call_and_names_its_files():
    check_entry(flux2, {"flux2": "FamilySpec"})
    assert flux2.ENTRY.build("flux2") is not flux2.ENTRY.build("flux2")


def test_one_family_trains_both_pipelines():
    from flux2_configs import flux2_cfg

    assert entry_pipelines("flux2") == ("Flux2Pipeline", "Flux2KleinPipeline")
    for cls in entry_pipelines("flux2"):  # a klein folder is accepted with --family flux2
        check_family_trains_model(flux2_cfg().model, lambda sub, name, c=cls: {"_class_name": c} if not sub else None)
