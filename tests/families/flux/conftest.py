"""The FLUX.1 tests' shared tiny pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory) -> Path:
    """The demo's tiny FluxPipeline."""
    from dit_lora.families.flux.demo import build_tiny_flux_pipeline

    return build_tiny_flux_pipeline(tmp_path_factory.mktemp("flux") / "tiny")


@pytest.fixture(scope="module")
def tiny_kontext(tmp_path_factory) -> Path:
    """The Kontext demo's tiny FluxKontextPipeline."""
    from dit_lora.families.flux.demo import build_tiny_flux_pipeline

    return build_tiny_flux_pipeline(tmp_path_factory.mktemp("kontext") / "tiny", "kontext")
