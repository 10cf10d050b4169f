"""Qwen3-VL MoE LoRA end to end on the tiny offline model (4 experts, 2 per token): one run is the fault drill, the
adapter reloaded by dit-lora's loader and by PEFT into the stock ``Qwen3VLMoeForConditionalGeneration`` (the trained
model's logits, the router and experts untouched), and a resume from the middle that ends on the same adapter bit
for bit; the 30B-A3B repo's layout (one layer, 8 of its 128 experts) is found from its folder with no --family and
trains one step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.demo_qwen3_vl_moe import build_tiny_qwen3_vl_moe

    root = tmp_path_factory.mktemp("qwen3vlmoe")
    return {"model": build_tiny_qwen3_vl_moe(root / "tiny-qwen3-vl-moe"),
            "data": make_qa_dataset(root / "chat", n=6, num_frames=8, size=32, layout="chat", seed=0)}


def _args(assets, out: Path, **overrides) -> list[str]:
    opts = {"family": "qwen3_vl_moe", "pretrained_model_name_or_path": assets["model"],
            "train_data_dir": assets["data"], "output_dir": out, "num_frames": 2, "rank": 4, "lora_alpha": 8,
            "train_batch_size": 2, "max_train_steps": 4, "checkpointing_steps": 2, "learning_rate": 2e-3,
            "backbone_learning_rate": 1e-3, "inject_faults": "nan_loss@3", "report_to": "none",
            "skip_doctor": "true", "seed": 0, "attention_canary": "false",
            "validation_prompt": "What colour is the square?"}
    opts.update(overrides)
    return [x for k, v in opts.items() if v is not None for x in (f"--{k}", str(v))]


def _train(args: list[str]):
    """Train in this process; returns (summary, the trained in-memory model)."""
    from accelerate.state import AcceleratorState

    from dit_lora.config import parse_config
    from dit_lora.training.loop import train

    seen = {}
    AcceleratorState._reset_state(True)
    try:
        summary = train(parse_config(args), on_step=lambda step, model, opt: seen.update(model=model))
    finally:
        AcceleratorState._reset_state(True)
    return summary, seen["model"]


def _batch(spec, assets) -> dict:
    """The first conversation with its 2 frames as the run builds it, with the modality types the stock class needs."""
    from dit_lora.families.videollm.data import load_qa_samples, read_clip
    from dit_lora.families.videollm.processing import QAProcessingLoader

    processing = QAProcessingLoader(spec).load_processing(str(assets["model"]))
    sample = load_qa_samples(assets["data"])[0]
    clip = read_clip(sample.video, 2)
    pixels, count = processing.frame_inputs(clip.frames, clip.fps)
    ids = processing.tokenize(sample.messages, count, None, clip.times)["input_ids"][None]
    return {"input_ids": ids, "mm_token_type_ids": spec.mm_token_type_ids(ids, processing.model_config),
            **spec.collate_pixels([pixels])}


@pytest.mark.slow
def test_drill_reload_into_the_stock_model_and_exact_resume(assets, tmp_path):
    from peft import PeftModel
    from transformers import Qwen3VLMoeForConditionalGeneration

    from dit_lora import load_adapter
    from dit_lora.families.videollm import architecture_spec

    out = tmp_path / "out"
    summary, trained = _train(_args(assets, out))
    assert summary["status"] == "completed" and summary["steps"] == 4
    assert summary["skipped_steps"] == 1 and summary["nonfinite_losses"] == 1  # the drill's step changed nothing
    assert {g["name"] for g in summary["param_groups"]} == {"lora", "backbone"}
    targets = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    assert targets and all(".self_attn." in t for t in targets)  # attention only: no router, no expert
    extras = load_file(str(out / "dit_lora_backbone.safetensors"))
    assert extras and all(k.startswith("model.visual.merger.") for k in extras)
    qa = Path(summary["samples"][0]).read_text()
    assert "Q: What colour is the square?" in qa and "A:" in qa

    spec = architecture_spec("qwen3_vl_moe")
    batch = _batch(spec, assets)
    trained.eval()
    with torch.no_grad():
        want = trained(**batch).logits.float()

    def stock():
        return Qwen3VLMoeForConditionalGeneration.from_pretrained(assets["model"], dtype=torch.bfloat16).eval()

    tolerance = 2e-2 * want.abs().max()
    with torch.no_grad():
        by_dit_lora = load_adapter(stock(), out).eval()(**batch).logits.float()
        peft_model = PeftModel.from_pretrained(stock(), str(out))
        peft_model.get_base_model().load_state_dict(extras, strict=False)  # the projector beside the LoRA
        by_peft = peft_model.eval()(**batch).logits.float()
        untrained = stock()(**batch).logits.float()
    assert torch.allclose(by_dit_lora, want, atol=tolerance), (by_dit_lora - want).abs().max()
    assert torch.allclose(by_peft, want, atol=tolerance), (by_peft - want).abs().max()
    assert not torch.allclose(untrained, want, atol=tolerance)  # the check can fail

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(out / "checkpoint-2", resumed / "checkpoint-2")
    again, _ = _train(_args(assets, resumed, resume_from_checkpoint="latest"))
    assert again["status"] == "completed" and again["skipped_steps"] == 1
    for name in ("adapter_model.safetensors", "dit_lora_backbone.safetensors"):
        a, b = load_file(str(out / name)), load_file(str(resumed / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.slow
def test_the_30b_a3b_layout_is_found_from_its_folder_and_trains(tmp_path):
    """The Qwen3-VL-30B-A3B repo's layout at its widths and vocabulary (one language-model layer with 8 of its 128
    experts at the published size, one ViT block), no --family (``dit-lora train``): the folder's config matches the
    catalogue's entry with the layer and expert counts the differences, and one step trains the attention's LoRA."""
    from helpers import ROOT, read_summary
    from qwen3_vl_layout import qwen3_vl_folder
    from warm import run_script

    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    hub_id = "Qwen/Qwen3-VL-30B-A3B-Instruct"
    model = qwen3_vl_folder(tmp_path / "models", hub_id, experts=8)
    data = make_qa_dataset(tmp_path / "data", n=2, num_frames=4, size=32, seed=0).parent
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir",
            str(out), "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--gradient_accumulation_steps", "1", "--num_frames", "2", "--ignore_memory_plan", "true", "--skip_doctor"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)  # `dit-lora train`
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text, summary = " ".join(proc.stdout.split()), read_summary(out)
    assert summary["family"] == "qwen3_vl_moe" and summary["defaults"]["catalogue_entry"] == hub_id
    assert f"has the published config of {hub_id}" in text
    assert "text_config.num_hidden_layers 1 (published: 48)" in text and "num_experts 8 (published: 128)" in text
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["target_modules"] and all(".self_attn." in t for t in config["target_modules"])
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained: B left zero
