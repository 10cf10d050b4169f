"""--masked_loss end to end on the tiny Sana demo model: masks beside the images are cached with the latents and weight
the step, which reads nothing back from the device (the no-host-sync audit, tests/e2e/test_no_host_sync.py)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import train_in_process
from PIL import Image
from safetensors import safe_open


@pytest.mark.slow
def test_sana_trains_two_steps_with_masks_without_a_host_sync(tiny_sana, shapes_data, tmp_path, monkeypatch):
    data = tmp_path / "data"
    shutil.copytree(shapes_data, data)
    for row in map(json.loads, (data / "metadata.jsonl").read_text().splitlines()):
        image = data / row["file_name"]
        with Image.open(image) as opened:
            width, height = opened.size
        mask = np.zeros((height, width), np.uint8)
        mask[:, width // 2 :] = 255  # the right half trains
        Image.fromarray(mask).save(image.with_name(image.stem + "_mask.png"))
    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")
    summary, out = train_in_process(
        tiny_sana, data, tmp_path, max_train_steps=2, resolution=32, train_batch_size=2, masked_loss="true",
        random_flip="true", checkpointing_steps=0,
    )
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert summary["steps"] == 2 and summary["skipped_steps"] == 0 and summary["config"]["masked_loss"] is True
    assert json.loads((out / "quarantine.json").read_text()) == []
    entries = [f for f in (tmp_path / "cache").rglob("*.safetensors") if f.name != "empty_prompt.safetensors"]
    assert len(entries) == 16  # the images only: no mask became a sample
    with safe_open(str(entries[0]), framework="pt") as handle:
        mask, latents, flipped = (handle.get_tensor(k) for k in ("loss_mask", "latents", "loss_mask_flipped"))
    width = latents.shape[-1]
    assert mask.shape == (1, *latents.shape[-2:])  # one channel on the latent grid
    # the left half is out, the right half in (the resize's grey edge pixel is a fraction of its latent pixel)
    assert mask[..., : width // 2].max() < 0.05 and mask[..., width // 2 :].min() > 0.95
    assert (flipped == mask.flip(-1)).all()
