"""The toy family keeps every promise of the conformance suite, checked by registering it: one entry (its demo config
named) and the suite's class, with no shared test file changed (tests/support/conformance_checks.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conformance import demo_names, name_params
from conformance_checks import ConformanceChecks, demo_run, reloaded  # noqa: F401 - fixtures
from conformance_levers import QuantizedBaseChecks, quantized_run  # noqa: F401 - fixtures

from toy_family.pixart import ENTRY

#: the toy entry with its demo config (an absolute path: the registry reads it beside recipes/configs/'s)
DEMO_ENTRY = dataclasses.replace(ENTRY, demo_configs=(str(Path(__file__).with_name("demo.yaml")),))


@pytest.fixture(scope="module", params=name_params(DEMO_ENTRY.names))
def family_name(request):
    """The toy family, registered for this module's checks and removed again afterwards."""
    from dit_lora.registry import register_family, unregister_family

    register_family(DEMO_ENTRY)
    try:
        assert request.param in demo_names()  # the suite finds it from the registry alone
        yield request.param
    finally:
        unregister_family(DEMO_ENTRY)


class TestToyFamilyConformance(ConformanceChecks):
    """Every promise, for the toy family (its pushed card too: the kit's card seeds the call)."""


class TestToyFamilyQuantizedBase(QuantizedBaseChecks):
    """The quantized base's promises, for the toy family (its spec declares the kit's precision policy). FSDP2's
    launch starts new processes, where a family registered by a test is unknown: the built-in names check it."""
