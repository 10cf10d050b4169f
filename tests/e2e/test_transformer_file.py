"""--transformer_file end to end: a 2-step Wan run whose transformer comes from a single file (original Wan key
names, and ComfyUI's prefixed layout) writes the same adapter, bit for bit, as the run from the diffusers folder,
and its card records the file's base name."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from dit_lora.modelfiles.single_file import COMFY_PREFIX
from helpers import train_in_process
from wan_single_file import write_original_wan_file

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]

WAN = dict(family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64,
           train_batch_size=2, mixed_precision="no", max_train_steps=2, lr_warmup_steps=0)


def test_single_file_run_equals_the_folder_run_bit_for_bit(tmp_path):
    from dit_lora.data.synthetic.clips import make_moving_square_dataset
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    model = build_tiny_wan_pipeline(tmp_path / "tiny-wan", variant="2.1-t2v")
    data = make_moving_square_dataset(tmp_path / "squares", n=2, num_frames=9, fps=16, seed=3)
    runs = {"folder": {}}
    for prefix in ("", COMFY_PREFIX):
        name = "comfy" if prefix else "original"
        runs[name] = {"transformer_file": write_original_wan_file(model / "transformer",
                                                                  tmp_path / f"wan2.1_{name}.safetensors", prefix)}
    adapters = {}
    for name, extra in runs.items():
        (tmp_path / name).mkdir()
        summary, out = train_in_process(model, data, tmp_path / name, **WAN, **extra)
        assert not isinstance(summary, Exception), summary
        adapters[name] = load_file(str(out / "pytorch_lora_weights.safetensors"))
        if extra:
            card = (out / "README.md").read_text()
            assert f"`wan2.1_{name}.safetensors`" in card and str(extra["transformer_file"]) not in card
    for name in ("original", "comfy"):
        assert adapters[name].keys() == adapters["folder"].keys() and adapters[name]
        assert all(torch.equal(adapters[name][k], adapters["folder"][k]) for k in adapters[name])
