"""LTX-2 pointed at a checkpoint folder laid out as the Hub has it (tests/support/ltx2_layout.py: every published config
of ``diffusers/LTX-2.3-Diffusers``, the transformer at its real widths and heads, gated attention and cross-attention
modulation included, one block deep, random weights; the connectors one of their 8 blocks a modality): with minimal
flags it trains the frames and their sound, and the adapter reloads into the stock ``LTX2Pipeline`` with every LoRA module
live."""

from __future__ import annotations

import pytest
import torch
from ltx2_layout import ltx2_pipeline
from safetensors.torch import load_file

from dit_lora.data.synthetic.clips import make_moving_square_dataset
from helpers import read_summary, run_recipe

pytestmark = pytest.mark.slow


def test_the_2_3_layout_is_found_trains_its_sound_and_reloads(tmp_path):
    from diffusers import LTX2Pipeline

    # one block deep, the connectors one block a modality (they build the cache, never run in a step)
    model = ltx2_pipeline(tmp_path / "models", "diffusers/LTX-2.3-Diffusers", layers=1, connector_layers=1)
    data = make_moving_square_dataset(tmp_path / "clips", n=2, num_frames=9, size=64, fps=24, sound="tones")
    out = tmp_path / "out"
    # fp32 compute (--mixed_precision no): bf16 matmuls at these widths are several times slower on a CPU
    proc = run_recipe(["--family", "ltx2", "--pretrained_model_name_or_path", str(model), "--train_data_dir",
                       str(data), "--output_dir", str(out), "--max_num_frames", "9", "--height", "64", "--width", "64",
                       "--max_sequence_length", "128", "--rank", "4", "--max_train_steps", "2", "--report_to", "none",
                       "--checkpointing_steps", "0", "--mixed_precision", "no", "--skip_doctor"],
                      recipe="ltx2", timeout=900, env={"OMP_NUM_THREADS": "1"}, warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sound: all 2 clips have an audio track" in proc.stdout
    summary = read_summary(out)
    assert summary["steps"] == 2 and summary["skipped_steps"] == 0
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert any(".audio_attn1." in k for k in saved)  # both streams' attentions trained
    # the layout writes no Gemma3Processor (prompt enhancement only): the stock pipeline loads without it
    pipe = LTX2Pipeline.from_pretrained(model, processor=None, torch_dtype=torch.float32)
    pipe.load_lora_weights(out)
    live = {n.removesuffix(".lora_A.default_0.weight") for n, _ in pipe.transformer.named_parameters()
            if n.endswith(".lora_A.default_0.weight")}
    trained = {k.removeprefix("transformer.").removesuffix(".lora_A.weight") for k in saved if ".lora_A." in k}
    assert trained and live == trained  # every saved module loaded, nothing else adapted
    for key in (k for k in saved if ".lora_B." in k):
        module = key.removeprefix("transformer.").removesuffix(".lora_B.weight")
        got = pipe.transformer.get_submodule(module).lora_B["default_0"].weight
        assert torch.equal(got.float(), saved[key].float()), key  # alpha/rank folded in: strength 1 is the trained
