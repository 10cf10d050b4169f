"""tests/support/family_cases.py: the shared tests read what only a family knows from its own test folder
(``tests/families/<package>/cases.py``), and a family lacking a case fails naming itself, the file and the case."""

from __future__ import annotations

from types import ModuleType

import pytest
from family_cases import KNOWN_CASES, case, cases, cases_path, entry_defaults, has_case, package_of

from dit_lora.registry import BUILT_IN


def test_a_name_finds_its_package_and_cases_file():
    assert package_of("llava_next_video") == "videollm" and package_of("qwenimage_edit") == "qwenimage"
    assert cases_path("wan_i2v").as_posix().endswith("tests/families/wan/cases.py")
    assert {package_of(name) for name in entry_defaults()} == set(BUILT_IN)


def test_a_missing_case_fails_naming_the_family_the_file_and_the_case():
    with pytest.raises(pytest.fail.Exception) as failed:
        case("sana", "NO_SUCH_CASE", "a test of this file")
    text = str(failed.value)
    assert "`sana`" in text and "tests/families/sana/cases.py" in text and "NO_SUCH_CASE" in text
    assert "a test of this file" in text
    assert case("sana", "NO_SUCH_CASE", "a test", default=None) is None and not has_case("sana", "NO_SUCH_CASE")


def test_a_per_name_case_is_the_names_value_or_one_for_every_name():
    assert "validation_image" in case("qwenimage_edit", "SHARED_OPTIONS", "a test", per_name=True)
    assert "validation_image" not in case("qwenimage", "SHARED_OPTIONS", "a test", per_name=True)
    assert case("wan", "ALSO_TRAINS_FOLDERS_OF", "a test", per_name=True, default=None) is None
    assert has_case("wan_i2v", "ALSO_TRAINS_FOLDERS_OF", per_name=True)
    assert not has_case("wan", "ALSO_TRAINS_FOLDERS_OF", per_name=True)
    assert case("zimage", "SHARED_OPTIONS", "a test", per_name=True) == {"logit_mean"}  # one value, every name


def test_a_family_registered_elsewhere_has_no_cases_file():
    from dit_lora.registry import FamilyEntry, register_family, unregister_family

    entry = FamilyEntry(names=("cases_toy",), factory="toy.module:spec")
    register_family(entry)
    try:
        assert package_of("cases_toy") is None and cases("cases_toy") is None
        assert case("cases_toy", "UPSTREAM_SYNCS", "a test", default="none") == "none"
    finally:
        unregister_family(entry)


#: the cases keyed by the family's own names where they differ between them
PER_NAME = ("SHARED_OPTIONS", "MASKED_LOSS_SAME", "ALSO_TRAINS_FOLDERS_OF", "NO_DEMO", "CARD_ON_RUN_OF", "UPSTREAM_SYNCS")


@pytest.mark.parametrize("family", entry_defaults())
def test_every_case_a_family_states_is_one_a_shared_test_reads(family):
    """A misspelt case, or a case keyed by a misspelt name, would be read by no test: every public name a cases.py
    defines is a known case, and a per-name case's keys are the family's own names."""
    import loss_probe

    from dit_lora.registry import entry_for

    module = cases(family)
    imported = set(vars(loss_probe)) | {"annotations", "Components"}
    stated = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, ModuleType)} - imported
    assert stated <= KNOWN_CASES, sorted(stated - KNOWN_CASES)
    for name in PER_NAME:
        value = getattr(module, name, None)
        if isinstance(value, dict):
            assert set(value) <= set(entry_for(family).names), (name, sorted(set(value) - set(entry_for(family).names)))
