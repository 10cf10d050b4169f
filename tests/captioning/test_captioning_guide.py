"""The captioning guide's loop, as a new user runs it: caption a folder of images and clips of several sizes, then
train on it, the two commands of docs/guides/captioning.md with only the Hub ids (tiny offline models of the same
architectures stand in), the run's length and the demo sizes changed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dit_lora.commands.cli import main
from dit_lora.data.synthetic.clips import write_moving_square_clip
from dit_lora.families.videollm.spec import build_demo_model
from dit_lora.families.wan.demo import build_tiny_wan_pipeline

from helpers import ROOT
from videollm_e2e import train_in_process

GUIDE = ROOT / "docs" / "guides" / "captioning.md"
GUIDE_CAPTIONER = "Qwen/Qwen2.5-VL-7B-Instruct"


def _block(name: str) -> list[list[str]]:
    text = GUIDE.read_text()
    block = re.search(rf"<!-- test: {name} -->\n```bash\n(.*?)```", text, re.S)
    assert block, f"docs/guides/captioning.md: no {name} block"
    return [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]


def _loop() -> list[list[str]]:
    return _block("caption-loop")


def _swap(words: list[str], old: str, new: str) -> list[str]:
    assert old in words, f"{old} is not in {shlex.join(words)}"
    return [new if w == old else w for w in words]


def test_the_loop_is_two_commands_caption_then_train():
    caption, train = _loop()
    assert caption[:2] == ["dit-lora", "caption"] and train[:3] == ["dit-lora", "launch", "recipes/wan_lora.py"]
    assert caption[2] == train[train.index("--train_data_dir") + 1]  # trains on the folder it captioned


@pytest.mark.slow
def test_the_guides_two_commands_caption_a_mixed_folder_and_train_on_it(tmp_path, capsys):
    caption, train = _loop()
    data = tmp_path / "my_data"
    rng = np.random.default_rng(0)
    (data / "stills").mkdir(parents=True)
    for i, size in enumerate(((40, 64), (64, 40), (48, 48))):  # landscape, portrait, square
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(data / "stills" / f"s{i}.jpg")
    for i, color in enumerate(("red", "blue")):
        write_moving_square_clip(data / f"clip{i}.mp4", color=color, direction="left to right", num_frames=12,
                                 size=48)
    # the tiny Qwen3-VL decodes random byte tokens: control characters among them (the issue: training refused the
    # captions it wrote); its family is read from the folder, so it stands in for the guide's Qwen2.5-VL
    captioner = build_demo_model("qwen3_vl", tmp_path / "qwen")
    words = _swap(_swap(caption, caption[2], str(data)), GUIDE_CAPTIONER, str(captioner))
    with pytest.raises(SystemExit) as done:
        main([*words[1:], "--max_new_tokens", "8", "--num_frames", "2"])
    said = capsys.readouterr()
    assert done.value.code == 0, said
    assert "cleaned: " in said.out  # the model's text held control characters, removed and said
    captions = sorted(data.rglob("*.txt"))
    assert len(captions) == 5 and all(p.read_text().startswith("sks, ") for p in captions)

    model = build_tiny_wan_pipeline(tmp_path / "wan")
    (check,) = _block("caption-check")  # check-data as the guide gives it, the sizes as the training run's below
    check = _swap(_swap(check, "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", str(model)), "my_data", str(data))
    with pytest.raises(SystemExit) as checked:
        main([*check[1:], "--height", "32", "--width", "32", "--max_num_frames", "5"])
    assert checked.value.code == 0, capsys.readouterr()
    args = _swap(_swap(train[3:], "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", str(model)), "my_data", str(data))
    args = _swap(args, "my_lora", str(tmp_path / "my_lora"))
    summary, _ = train_in_process(["--family", "wan", *args, "--max_train_steps", "1", "--height", "32", "--width",
                                   "32", "--max_num_frames", "5", "--report_to", "none", "--skip_doctor", "true",
                                   "--validation_prompt", ""])
    assert summary["status"] == "completed" and Path(summary["adapter"]).is_file()
    assert summary["quarantine"] == []  # every captioned file was trained on, none left out
