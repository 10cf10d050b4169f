"""Lumina-Image 2.0's Hub layout (tests/support/lumina2_layout.py: real widths, one joint and one block of each
refiner) trained from its transformer as the original single file behind ComfyUI's prefix."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]


def test_the_hub_layout_from_a_single_file_is_found_trained_and_reloaded(tmp_path):
    """The single file is the original checkpoint's layout (diffusers' own converter takes it back to the folder's
    tensors); ``python -m dit_lora train`` without --family finds the family and the catalogue entry, plans its
    memory and trains one step from the file; the adapter reloads into the stock Lumina2Pipeline with every module
    live at scale 1."""
    from diffusers import Lumina2Pipeline
    from diffusers.loaders.single_file_utils import convert_lumina2_to_diffusers
    from flux_layout import live_lora_modules
    from lumina2_layout import lumina2_pipeline, write_native_file
    from safetensors.torch import load_file
    from warm import run_script

    from helpers import ROOT, read_summary

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.modelfiles.single_file import COMFY_PREFIX

    model = lumina2_pipeline(tmp_path / "models")
    file = write_native_file(model / "transformer", tmp_path / "lumina_2.safetensors", COMFY_PREFIX)
    folder = load_file(str(model / "transformer" / "diffusion_pytorch_model.safetensors"))
    # diffusers' own converter (0.42.1 fails on the prefix itself: dit-lora hands it the file's tensors without it)
    converted = convert_lumina2_to_diffusers({k.removeprefix(COMFY_PREFIX): v for k, v in load_file(str(file)).items()})
    assert sorted(converted) == sorted(folder) and all(torch.equal(converted[k], folder[k]) for k in folder)
    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)  # one update of the catalogue's 1 x 4
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--transformer_file", file, "--train_data_dir", data,
            "--output_dir", out, "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--resolution", "64", "--max_sequence_length", "64", "--skip_doctor", "true"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text = " ".join(proc.stdout.split())
    assert "has the published config of Alpha-VLLM/Lumina-Image-2.0" in text
    assert "except num_layers 1 (published: 26), num_refiner_layers 1 (published: 2)" in text
    assert "memory plan: predicted peak" in text
    summary = read_summary(out)
    assert summary["config"]["family"] == "lumina2" and summary["status"] == "completed"
    assert summary["defaults"]["applied"]["rank"] == 4 and summary["defaults"]["applied"]["validation_guidance_scale"] == 4.0
    pipe = Lumina2Pipeline.from_pretrained(model, torch_dtype=torch.bfloat16)
    assert len(live_lora_modules(pipe, out)) == 4 * 3  # to_q/k/v and to_out.0 of the joint block and both refiners
