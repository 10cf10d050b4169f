"""The conformance suite: every registered family name with a demo config keeps every promise of
:class:`conformance_checks.ConformanceChecks` (each name's demo trained once; see tests/support/conformance.py).

A new family registers and ships a demo config (its registry entry's ``demo_configs``): it is checked here with no
test file of its own. A name without a demo config of its own is named in SHARES_A_DEMO (the name whose run stands
for it, and where its own run is checked), so none is left out silently.

A quantized base and FSDP2 are checked in their own modules over the names whose spec declares them
(tests/conformance/test_quantized_base.py, tests/conformance/test_fsdp2.py; tests/support/conformance_levers.py), each
name's runs in the same pytest-xdist group as its checks here.
"""

from __future__ import annotations

import pytest

from conformance import demo_names, name_params
from conformance_checks import CARD_ON_RUN_OF, ConformanceChecks, demo_run, reloaded  # noqa: F401 - fixtures

#: names with no demo config of their own -> why they are covered without one (and by what)
SHARES_A_DEMO = {
    # the video-LLM entry's other architecture without a demo config: its steps sync inside transformers' vision
    # tower (tests/e2e/test_no_host_sync.py), its runs are tests/e2e/test_videollm.py's
    "qwen2_5_vl": "tests/e2e/test_videollm.py",
    # Edit-Plus's step (one EditLoss); its card is checked on Edit-Plus's demo run (CARD_ON_RUN_OF)
    "qwenimage_edit": "qwenimage_edit_plus",
}


@pytest.fixture(scope="module", params=name_params(demo_names()))
def family_name(request) -> str:
    """Each built-in name with a demo config (the registry's entries)."""
    return request.param


class TestConformance(ConformanceChecks):
    """Every promise, for every built-in name with a demo config."""


def test_every_registered_name_is_checked_here():
    """A registered name either has a demo config (and so every check above) or is in SHARES_A_DEMO, saying why."""
    from dit_lora.registry import available

    assert set(demo_names()) | set(SHARES_A_DEMO) == set(available()), "give the new name a demo config"
    assert not set(demo_names()) & set(SHARES_A_DEMO)
    assert set(CARD_ON_RUN_OF) <= set(SHARES_A_DEMO) and set(CARD_ON_RUN_OF.values()) <= set(demo_names())
    from dit_lora.registry import get_spec

    for name, on in CARD_ON_RUN_OF.items():  # the same step: the same loss and batch path, only caching differs
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
