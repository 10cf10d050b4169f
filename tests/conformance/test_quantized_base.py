"""The conformance suite's quantized base: every name whose spec declares a precision policy (what
``--quantize_base`` leaves alone: conformance_levers.quantized_names) trains its demo on an nf4 base once, and that
run keeps every promise of :class:`conformance_levers.QuantizedBaseChecks` (drill, reload into the unquantized
consumer, a bitwise resume from its checkpoint). A new family is checked here by registering. What only some
families do on a quantized base (int8, a quantized text encoder, affine norms in bf16) stays in
tests/e2e/test_quantized_base.py.
"""

from __future__ import annotations

import pytest

from conformance import demo_names, name_params
from conformance_levers import QuantizedBaseChecks, quantized_names, quantized_run  # noqa: F401 - fixtures


@pytest.fixture(scope="module", params=name_params(quantized_names()))
def family_name(request) -> str:
    """Each built-in name with a demo config that declares a precision policy."""
    return request.param


class TestQuantizedBase(QuantizedBaseChecks):
    """The quantized base's promises, for every name that declares one."""


#: names with a demo config whose spec declares no precision policy -> why they train on no quantized base (none yet)
NO_QUANTIZED_BASE: dict[str, str] = {}


def test_which_names_train_on_a_quantized_base_is_what_their_specs_declare():
    """The names checked here are those whose spec has a precision policy; a name without one is named in
    NO_QUANTIZED_BASE with the reason, so none is left out silently (today every built-in name declares one)."""
    from dit_lora.registry import get_spec

    declared = [name for name in demo_names() if get_spec(name).precision is not None]
    assert quantized_names() == declared
    assert set(demo_names()) - set(declared) == set(NO_QUANTIZED_BASE), "name why in NO_QUANTIZED_BASE"
