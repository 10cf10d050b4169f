"""The conformance suite's FSDP2: every name whose spec names its lists of repeated blocks (FSDP2's sharding units:
conformance_levers.fsdp2_names) launches its demo once on 2 CPU processes (gloo) under
``accelerate_configs/fsdp2.yaml``, and that launch keeps every promise of :class:`conformance_levers.Fsdp2Checks`.
A new family is checked here by registering. What only some families do under FSDP2 (Sana's bitwise resume from
shards, validation and DDP equivalence; Wan A14B's expert on an fp8_scaled base) stays in tests/e2e/test_fsdp2.py.
"""

from __future__ import annotations

import pytest

from conformance import demo_names, name_params
from conformance_levers import Fsdp2Checks, fsdp2_launch, fsdp2_names  # noqa: F401 - fixtures


@pytest.fixture(scope="module", params=name_params(fsdp2_names()))
def family_name(request) -> str:
    """Each built-in name with a demo config that names its repeated blocks."""
    return request.param


class TestFsdp2(Fsdp2Checks):
    """FSDP2's promises, for every name that declares block lists."""


#: names with a demo config whose spec names no block lists -> why they are not launched under FSDP2 (none yet)
NO_FSDP2: dict[str, str] = {}


def test_which_names_train_under_fsdp2_is_what_their_specs_declare():
    """The names checked here are those whose spec names block lists; a name without them is named in NO_FSDP2 with
    the reason, so none is left out silently; every built-in registry entry has a name checked here."""
    from dit_lora.registry import BUILT_IN_PACKAGE, entries, entry_for, get_spec

    declared = [name for name in demo_names() if get_spec(name).info.block_lists]
    assert fsdp2_names() == declared
    assert set(demo_names()) - set(declared) == set(NO_FSDP2), "name why in NO_FSDP2"
    built_in = {e.default for e in entries() if e.factory.__module__.startswith(BUILT_IN_PACKAGE + ".")}
    assert {entry_for(name).default for name in [*declared, *NO_FSDP2]} == built_in  # no family left out
