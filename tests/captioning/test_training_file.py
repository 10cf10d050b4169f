"""A folder's own captions as a captioner's training data, and the loop it is for: a video-LLM LoRA trained by
dit-lora on five captions changes what ``dit-lora caption --adapter`` writes, toward those captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dit_lora.captioning.options import DEFAULT_PROMPTS, CaptionOptions
from dit_lora.captioning.run import caption_folder
from dit_lora.captioning.training_file import write_training_file
from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.clips import write_moving_square_clip
from dit_lora.families.videollm.spec import build_demo_model

from videollm_e2e import train_in_process

STYLE = "zorblax"


def _captioned_folder(root: Path) -> Path:
    rng = np.random.default_rng(1)
    root.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / f"img{i}.png")
        (root / f"img{i}.txt").write_text(f"{STYLE} picture {i}")
    for i, color in enumerate(("red", "green")):
        write_moving_square_clip(root / f"clip{i}.mp4", color=color, direction="top to bottom", num_frames=8, size=32)
        (root / f"clip{i}.txt").write_text(f"{STYLE} {color} square falling")
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / "uncaptioned.png")
    return root


def test_the_training_file_asks_each_file_the_caption_prompt(tmp_path):
    folder = _captioned_folder(tmp_path / "data")
    target, count, missing = write_training_file(CaptionOptions(path=folder, training_file="own.jsonl").resolved())
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert target == folder / "own.jsonl" and count == 5 and missing == ["uncaptioned.png"]
    assert rows[0] == {"video": "clip0.mp4", "messages": [
        {"role": "user", "content": DEFAULT_PROMPTS["video"]},
        {"role": "assistant", "content": f"{STYLE} red square falling"}]}
    assert rows[2]["messages"][0]["content"] == DEFAULT_PROMPTS["image"]
    with pytest.raises(UserError, match="exists already; it is never overwritten"):
        write_training_file(CaptionOptions(path=folder, training_file="own.jsonl").resolved())
    with pytest.raises(UserError, match="ending in .jsonl"):
        write_training_file(CaptionOptions(path=folder, training_file="../out.jsonl").resolved())


def test_a_folder_without_captions_is_one_paragraph(tmp_path):
    (tmp_path / "a.png").write_bytes(b"x")
    with pytest.raises(UserError, match="no file of .* has a caption"):
        write_training_file(CaptionOptions(path=tmp_path, training_file="own.jsonl").resolved())


@pytest.mark.slow
def test_an_adapter_trained_on_five_captions_changes_what_caption_writes(tmp_path):
    tiny = build_demo_model("qwen2_5_vl", tmp_path / "tiny")
    folder = _captioned_folder(tmp_path / "own")
    target, _, _ = write_training_file(CaptionOptions(path=folder, training_file="own.jsonl").resolved())
    out = tmp_path / "captioner"
    train_in_process(["--family", "qwen2_5_vl", "--pretrained_model_name_or_path", str(tiny), "--train_data_dir",
                      str(target), "--output_dir", str(out), "--num_frames", "2", "--max_train_steps", "30",
                      "--learning_rate", "1e-2", "--rank", "8", "--lora_alpha", "8", "--report_to", "none",
                      "--mixed_precision", "no", "--skip_doctor", "true", "--seed", "0"])
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for name in ("img0.png", "clip1.mp4"):
        (fresh / name).write_bytes((folder / name).read_bytes())
    common = {"path": fresh, "max_new_tokens": 8, "num_frames": 2, "mixed_precision": "no", "device": "cpu",
              "dry_run": 2}
    base = caption_folder(CaptionOptions(model=str(tiny), **common).resolved()).written
    styled = caption_folder(CaptionOptions(adapter=str(out), **common).resolved()).written  # --model from it
    assert base.keys() == styled.keys() == {"img0.png", "clip1.mp4"}
    assert all(styled[k] != base[k] for k in base)
    assert all(text.startswith(STYLE) for text in styled.values()), styled  # the style it learned
    assert not any(text.startswith(STYLE) for text in base.values())
