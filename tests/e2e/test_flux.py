"""FLUX.1 [dev]'s Hub layout trained from a single file (its levers: tests/e2e/test_packed_levers.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]


def test_the_dev_layout_from_a_single_file_is_found_trained_and_reloaded(tmp_path):
    """FLUX.1 [dev]'s Hub layout (tests/support/flux_layout.py: real widths, one double and one single block), its
    transformer also as a BFL single file behind ComfyUI's prefix: ``python -m dit_lora train`` without --family finds
    the family and the catalogue entry, plans its memory and trains one step from the file; the adapter reloads into
    the stock pipeline with every module live at scale 1."""
    from diffusers import FluxPipeline
    from flux_layout import dev_pipeline, live_lora_modules, train_from_single_file

    model = dev_pipeline(tmp_path / "models")
    text, summary, out = train_from_single_file(model, tmp_path)
    assert "has the published config of black-forest-labs/FLUX.1-dev" in text
    assert summary["config"]["family"] == "flux" and summary["status"] == "completed"
    assert summary["defaults"]["applied"]["rank"] == 4 and summary["defaults"]["applied"]["validation_guidance_scale"] == 3.5
    pipe = FluxPipeline.from_pretrained(model, torch_dtype=torch.bfloat16, text_encoder_2=None, tokenizer_2=None)
    assert len(live_lora_modules(pipe, out)) == 12 + 3  # the double block's 12 targets, the single's q/k/v
