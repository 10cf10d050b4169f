"""Shared fixtures of the LTX-2 unit tests: the tiny pipeline's components and folder, built once per worker."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny():
    """The tiny LTX2Pipeline components (fp32, eval): transformer, vae, audio_vae, connectors, vocoder,
    text_encoder, tokenizer, scheduler."""
    from dit_lora.families.ltx2.demo import build_tiny_ltx2_components

    return build_tiny_ltx2_components(seed=0)


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    """The tiny LTX2Pipeline saved as a diffusers folder."""
    from dit_lora.families.ltx2.demo import build_tiny_ltx2_pipeline

    return build_tiny_ltx2_pipeline(tmp_path_factory.mktemp("ltx2") / "tiny-ltx2", seed=0)

