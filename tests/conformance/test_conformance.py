"""The conformance suite: every registered family name with a demo config keeps every promise of
:class:`conformance_checks.ConformanceChecks` (each name's demo trained once; see tests/support/conformance.py).

A new family registers and ships a demo config (its registry entry's ``demo_configs``): it is checked here with no
test file of its own. A name without a demo config of its own is named by its family (``NO_DEMO`` in its
tests/families/<package>/cases.py: the name whose run stands for it, and where its own run is checked), so none is
left out silently.

A quantized base and FSDP2 are checked in their own modules over the names whose spec declares them
(tests/conformance/test_quantized_base.py, tests/conformance/test_fsdp2.py; tests/support/conformance_levers.py), each
name's runs in the same pytest-xdist group as its checks here.
"""

from __future__ import annotations

import pytest
from helpers import ROOT

from conformance import demo_names, name_params
from conformance_checks import ConformanceChecks, card_on_run_of, demo_run, reloaded  # noqa: F401 - fixtures


def shares_a_demo() -> dict[str, str]:
    """Names with no demo config of their own -> what covers them without one (a name whose run stands for theirs, or
    the test that runs them), as each family states it (``NO_DEMO`` in its cases.py)."""
    from family_cases import case

    from dit_lora.registry import available

    return {name: by for name in available()
            if (by := case(name, "NO_DEMO", "tests/conformance", per_name=True, default=None)) is not None}


@pytest.fixture(scope="module", params=name_params(demo_names()))
def family_name(request) -> str:
    """Each built-in name with a demo config (the registry's entries)."""
    return request.param


class TestConformance(ConformanceChecks):
    """Every promise, for every built-in name with a demo config."""


def test_every_registered_name_is_checked_here():
    """A registered name either has a demo config (and so every check above) or its family says what covers it
    (``NO_DEMO``), naming the name whose run stands for it or the test that runs it."""
    from dit_lora.registry import available

    shared, cards = shares_a_demo(), card_on_run_of()
    missing = sorted(set(available()) - set(demo_names()) - set(shared))
    assert not missing, f"give {missing} a demo config (its entry's demo_configs), or say in NO_DEMO what covers it"
    assert not set(demo_names()) & set(shared)
    assert all(by in demo_names() or (ROOT / by).is_file() for by in shared.values()), shared
    assert set(cards) <= set(shared) and set(cards.values()) <= set(demo_names())
    from dit_lora.registry import get_spec

    for name, on in cards.items():  # the same step: the same loss and batch path, only caching differs
        assert type(get_spec(name).loss) is type(get_spec(on).loss)


def test_every_shipped_demo_config_is_a_registry_entrys():
    """A demo config on disk that no registry entry names would never be trained: it fails here."""
    from conformance import CONFIGS
    from dit_lora.registry import entries

    named = {(CONFIGS / config).resolve() for entry in entries() for config in entry.demo_configs}
    assert {p.resolve() for p in CONFIGS.glob("*/*demo.yaml")} <= named


def test_every_registered_name_builds_its_spec():
    """The entry of every name (with a demo config or not) builds a spec of that name."""
    from dit_lora.contract.spec import FamilySpec
    from dit_lora.registry import available, entry_for

    for name in available():
        spec = entry_for(name).build(name)
        assert isinstance(spec, FamilySpec) and spec.name == name
