"""Chroma1-HD's Hub layout trained from a single file in lodestones' layout (its levers:
tests/e2e/test_packed_levers.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]


def test_the_hd_layout_from_a_single_file_is_found_trained_and_reloaded(tmp_path):
    """Chroma1-HD's Hub layout (tests/support/flux_layout.py: real widths, one double and one single block), its
    transformer also as one file in lodestones' layout behind ComfyUI's prefix: ``python -m dit_lora train`` without
    --family finds the family and the catalogue entry, plans its memory and trains one step from the file; the adapter
    reloads into the stock pipeline with every module live at scale 1."""
    from diffusers import ChromaPipeline
    from flux_layout import chroma_pipeline, live_lora_modules, train_from_single_file

    model = chroma_pipeline(tmp_path / "models")
    text, summary, out = train_from_single_file(model, tmp_path)
    assert "has the published config of lodestones/Chroma1-HD" in text
    assert summary["config"]["family"] == "chroma" and summary["status"] == "completed"
    assert summary["defaults"]["applied"]["rank"] == 16 and summary["defaults"]["applied"]["validation_guidance_scale"] == 5.0
    pipe = ChromaPipeline.from_pretrained(model, torch_dtype=torch.bfloat16, text_encoder=None, tokenizer=None)
    assert len(live_lora_modules(pipe, out)) == 12 + 3  # the double block's 12 targets, the single's q/k/v
