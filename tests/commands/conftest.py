"""Fixtures of the doctor's tests (tests/commands/test_doctor*.py)."""

from __future__ import annotations

import pytest

from dit_lora.commands import doctor_combinations, doctor_device, doctor_versions


@pytest.fixture
def fake_versions(monkeypatch):
    """Override installed_version for some distributions; the rest stay real (in every doctor module that asks)."""
    overrides: dict[str, str | None] = {}
    real = doctor_versions.installed_version

    def fake(dist):
        return overrides[dist] if dist in overrides else real(dist)

    for module in (doctor_versions, doctor_combinations, doctor_device):
        monkeypatch.setattr(module, "installed_version", fake)
    # Version-table tests do not need the (slow, already covered) import of every package.
    monkeypatch.setattr(doctor_versions, "IMPORT_CHECKED", ())
    return overrides
