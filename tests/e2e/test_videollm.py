"""Video-LLM LoRA end to end on tiny offline models: both data formats, both architectures, the PEFT
adapter + projector output and its reload, fp16 refusal, and a fault drill skipped as in the diffusion recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import ROOT, read_summary, run_recipe, vlm_batch
from snippets import check_card
from videollm_e2e import train_in_process

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.demo_qwen import build_tiny_qwen2_5_vl
    from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video

    root = tmp_path_factory.mktemp("videollm")
    return {
        "llava": build_tiny_llava_next_video(root / "tiny-llava"),
        "qwen": build_tiny_qwen2_5_vl(root / "tiny-qwen"),
        "videochat2": make_qa_dataset(root / "vc2", n=8, num_frames=8, layout="videochat2", seed=0),
        "chat": make_qa_dataset(root / "chat", n=8, num_frames=8, layout="chat", seed=1),
    }


def _args(model: Path, data: Path, out: Path, **overrides) -> list[str]:
    opts = {
        "pretrained_model_name_or_path": model, "train_data_dir": data, "output_dir": out, "num_frames": 4,
        "rank": 4, "lora_alpha": 8, "train_batch_size": 2, "max_train_steps": 6, "learning_rate": 2e-3,
        "backbone_learning_rate": 1e-3, "checkpointing_steps": 6, "report_to": "none", "skip_doctor": "true",
        "seed": 0, "validation_prompt": "What colour is the square?",
    }
    opts.update(overrides)
    return [x for k, v in opts.items() if v is not None for x in (f"--{k}", str(v))]


@pytest.mark.slow
def test_llava_videochat2_format_trains_saves_peft_adapter_and_reloads_exactly(assets, tmp_path):
    from peft import PeftModel

    from dit_lora import load_adapter
    from dit_lora.families.videollm.spec import architecture_spec as spec_for

    from dit_lora.modeling.block_swap import installed

    out = tmp_path / "out"
    # with the last decoder layer swapped (--blocks_to_swap): the reload below checks what it trained
    summary, trained = train_in_process(_args(assets["llava"], assets["videochat2"], out, family="llava_next_video",
                                                blocks_to_swap=1))
    assert summary["status"] == "completed" and summary["steps"] == 6 and summary["skipped_steps"] == 0
    assert installed(trained) is not None
    groups = {g["name"]: g for g in summary["param_groups"]}
    assert set(groups) == {"lora", "backbone"} and groups["backbone"]["lr"] == 1e-3  # the projector
    for name in ("adapter_model.safetensors", "adapter_config.json", "dit_lora_backbone.safetensors", "README.md"):
        assert (out / name).is_file(), name
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 4  # alpha 8 / rank 4 is folded into lora_B
    assert all(".language_model." in t for t in config["target_modules"])  # never the vision tower
    projector = load_file(str(out / "dit_lora_backbone.safetensors"))
    assert projector and all(k.startswith("model.multi_modal_projector.") for k in projector)
    answer = Path(summary["samples"][0]).read_text().strip()
    assert Path(summary["samples"][0]).suffix == ".txt" and isinstance(answer, str)
    card = (out / "README.md").read_text()
    assert "library_name: peft" in card and "pipeline_tag: video-text-to-text" in card
    assert f"base_model: {assets['llava']}" in card and "load_adapter(model" in card

    # dit_lora.load_adapter restores LoRA and projector: same logits as the trained in-memory model.
    spec = spec_for("llava_next_video")
    batch = vlm_batch(spec, assets["llava"], assets["videochat2"])
    trained.eval()
    fresh = load_adapter(spec.load_model(assets["llava"], torch.bfloat16), out).eval()
    with torch.no_grad():
        want = trained(**batch).logits.float()
        got = fresh(**batch).logits.float()
    assert torch.allclose(got, want, atol=2e-2 * want.abs().max()), (got - want).abs().max()
    fresh_params = dict(fresh.named_parameters())
    for key, value in projector.items():
        assert torch.equal(fresh_params[key], value.to(fresh_params[key].dtype)), key  # fp32 master -> bf16 model
    # The adapter alone loads with PEFT itself, every LoRA weight landing; with the projector copied in, it gives
    # the trained logits (the strength is in lora_B, adapter_config.json says alpha = rank).
    peft_model = PeftModel.from_pretrained(spec.load_model(assets["llava"], torch.bfloat16), str(out))
    saved = load_file(str(out / "adapter_model.safetensors"))
    loaded = {k: v for k, v in peft_model.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(saved) > 0
    peft_model.get_base_model().load_state_dict(projector, strict=False)
    with torch.no_grad():
        got = peft_model.eval()(**batch).logits.float()
    assert torch.allclose(got, want, atol=2e-2 * want.abs().max()), (got - want).abs().max()
    with torch.no_grad():
        untrained = spec.load_model(assets["llava"], torch.bfloat16).eval()(**batch).logits.float()
    assert not torch.allclose(untrained, want, atol=2e-2 * want.abs().max())  # the check can fail


@pytest.mark.slow
def test_qwen_chat_format_through_the_recipe_with_a_fault_drill(assets, tmp_path):
    out = tmp_path / "out"
    proc = run_recipe(_args(assets["qwen"], assets["chat"], out, family="qwen2_5_vl", inject_faults="nan_loss@3",
                            checkpointing_steps=0, blocks_to_swap=1), recipe="videollm", warm=True)  # the drill under the swap
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "block swap: 1 block(s)' frozen weights" in proc.stdout
    summary = read_summary(out)
    assert summary["family"] == "qwen2_5_vl" and summary["status"] == "completed"
    assert summary["skipped_steps"] == 1 and summary["nonfinite_losses"] == 1 and summary["applied_updates"] == 5
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["target_modules"] and all(".language_model." in t for t in config["target_modules"])
    assert (out / "dit_lora_backbone.safetensors").is_file()
    # Qwen2.5-VL has no demo config (its sync-audit run stops in the vision tower): its card runs here
    check_card(out, assets["chat"], tmp_path / "card")


@pytest.mark.slow
def test_fp16_is_refused_in_one_paragraph(assets, tmp_path):
    proc = run_recipe(_args(assets["llava"], assets["videochat2"], tmp_path / "out", mixed_precision="fp16"),
                      recipe="videollm", warm=True)
    assert proc.returncode == 2
    assert "fp16" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_bad_clips_are_quarantined_and_the_demo_config_is_shipped(assets, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(assets["videochat2"].parent, data)
    entries = json.loads((data / "videochat2.json").read_text())
    entries.append({"video": "missing.mp4", "QA": [{"i": "", "q": "What colour is the square?", "a": "red"}]})
    (data / "videochat2.json").write_text(json.dumps(entries))
    out = tmp_path / "out"
    summary, _ = train_in_process(_args(assets["llava"], data / "videochat2.json", out, max_train_steps=2,
                                         max_bad_samples_fraction=0.5, validation_prompt=None,
                                         family="llava_next_video"))
    quarantine = json.loads((out / "quarantine.json").read_text())
    assert [q["key"] for q in quarantine] and "missing.mp4" in json.dumps(quarantine)
    assert summary["status"] == "completed"
    assert (ROOT / "recipes" / "configs" / "videollm" / "demo.yaml").is_file()


@pytest.mark.slow
def test_demo_config_trains_and_answers_with_the_reloaded_adapter(tmp_path):
    demo = tmp_path / "demo"
    proc = run_recipe(["--config", str(ROOT / "recipes" / "configs" / "videollm" / "demo.yaml"),
                       "--pretrained_model_name_or_path", str(demo / "model"),
                       "--train_data_dir", str(demo / "qa" / "videochat2.json"), "--output_dir", str(demo / "out"),
                       "--skip_doctor", "true"], recipe="videollm", timeout=180, warm=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = read_summary(demo / "out")
    assert summary["status"] == "completed" and summary["steps"] == 60 and summary["wall_time_s"] < 180
    losses = [loss for _, loss in summary["loss_history"]]
    assert losses[-1] < 0.25 * losses[0], losses  # measured 7.2 -> 0.74: answers become likely, not just shorter
    qa = Path(summary["samples"][0]).read_text()
    assert "What colour is the square?" in qa and qa.split("A:")[1].strip()  # the reloaded adapter answered
    assert "What colour is the square?" in (demo / "out" / "README.md").read_text()


def test_liger_without_a_gpu_is_a_note_and_the_hidden_state_loss_equals_the_models(assets, tmp_path, capsys):
    from dit_lora.families.videollm.liger import apply_liger, hidden_state_loss, plain_loss
    from dit_lora.families.videollm.spec import architecture_spec as spec_for

    spec = spec_for("llava_next_video")
    model = spec.load_model(assets["llava"], torch.float32)
    notes = []
    assert apply_liger(spec, model, notes.append) is None
    assert "--use_liger_kernel" in notes[0] and "plain PyTorch path" in notes[0]
    batch = vlm_batch(spec, assets["llava"], assets["videochat2"])
    labels = batch["input_ids"].clone()
    labels[:, : labels.shape[1] // 2] = -100  # answer-only style masking
    want = plain_loss(spec, model, batch, labels)
    got = hidden_state_loss(spec, model, batch, labels)  # the computation Liger fuses
    assert torch.allclose(got, want, rtol=1e-5), (got, want)


@pytest.mark.slow
def test_vision_tower_and_loraplus_get_their_own_groups(assets, tmp_path):
    out = tmp_path / "out"
    summary, _ = train_in_process(_args(assets["llava"], assets["videochat2"], out, family="llava_next_video",
                                         max_train_steps=2, validation_prompt=None, train_vision_tower="true",
                                         vision_tower_learning_rate=3e-6, loraplus_lr_ratio=16,
                                         use_liger_kernel="true"))
    groups = {g["name"]: g for g in summary["param_groups"]}
    assert groups["vision_tower"]["lr"] == 3e-6 and groups["backbone"]["lr"] == 1e-3
    assert groups["lora_B"]["lr"] == 16 * groups["lora_A"]["lr"]
    saved = load_file(str(out / "dit_lora_backbone.safetensors"))
    assert any(k.startswith("model.vision_tower.") for k in saved)
    assert any(k.startswith("model.multi_modal_projector.") for k in saved)


def test_long_conversations_drop_late_rounds_and_too_long_first_rounds_stop_clearly(assets):
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family
    from dit_lora.families.videollm.data import QASample
    from dit_lora.families.videollm.media import QADataset, fit_conversation

    family = get_family("llava_next_video")
    processing = family.model.load_components(_cfg(assets), torch.device("cpu")).state.processing
    video = next(iter(load_videos(assets["videochat2"])))
    turns = [{"role": "user", "content": "What colour is the square?"}, {"role": "assistant", "content": "red"},
             {"role": "user", "content": "Which way does the square move? " * 20},
             {"role": "assistant", "content": "left to right"}]
    sample = QASample("long:1", video, turns)
    full = processing.tokenize(turns, 64, None)["input_ids"].numel()
    first = processing.tokenize(turns[:2], 64, None)["input_ids"].numel()
    example, dropped = fit_conversation(processing, sample, 64, (full + first) // 2)
    assert example["input_ids"].numel() == first and dropped == 1  # the long second round dropped, the first kept
    with pytest.raises(UserError, match="--max_sequence_length"):
        fit_conversation(processing, sample, 64, first - 1)
    # The dataset fits its items the same way.
    item = QADataset([sample], processing, num_frames=4, max_length=(full + first) // 2)[(0, False)]
    assert item["labels"].numel() < full


def _cfg(assets):
    from dit_lora.config import parse_config

    return parse_config(_args(assets["llava"], assets["videochat2"], Path("/tmp/unused"), family="llava_next_video"))


def load_videos(annotation: Path):
    from dit_lora.families.videollm.data import load_qa_samples

    return [s.video for s in load_qa_samples(annotation)]


def test_bad_video_llm_inputs_end_in_one_paragraph(assets, tmp_path):
    from dit_lora.config import parse_config
    from dit_lora.core.errors import UserError
    from dit_lora.registry import get_family
    from dit_lora.families.videollm.media import annotation_file

    with pytest.raises(UserError, match="does not exist"):
        annotation_file(str(tmp_path / "nowhere"))
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "b.jsonl").write_text("")
    with pytest.raises(UserError, match=r"exactly one \.json or \.jsonl.*a\.json, b\.jsonl"):
        annotation_file(str(tmp_path))
    assert annotation_file(str(assets["videochat2"].parent)) == assets["videochat2"]

    family = get_family("llava_next_video")
    cfg = parse_config(_args(assets["llava"], assets["videochat2"], tmp_path / "out", family="llava_next_video",
                             validation_video=tmp_path / "missing.mp4"))
    with pytest.raises(UserError, match="--validation_video"):
        family.model.validate_config(cfg)
    cfg = parse_config(_args(assets["llava"], assets["videochat2"], tmp_path / "out", family="llava_next_video",
                             lora_layers="qkv"))
    model = family.model.load_components(cfg, torch.device("cpu")).model
    with pytest.raises(UserError, match="not a projection of the language model"):
        family.model.lora_targets(model, cfg.lora)


@pytest.mark.slow
def test_a_held_out_split_gives_a_validation_loss_without_a_prompt(assets, tmp_path, capsys):
    """--validation_split 0.25: 2 of the 8 conversations held out (never trained on), their answer-token loss before
    the first update and after it, with no --validation_prompt."""
    summary, _ = train_in_process(_args(assets["llava"], assets["videochat2"], tmp_path / "out", max_train_steps=1,
                                         family="llava_next_video", validation_prompt=None, validation_split=0.25,
                                         validation_steps=1, checkpointing_steps=0))
    figures = summary["validation_loss"]
    assert [step for step, _ in figures["evaluations"]] == [0, 1] and figures["samples"] == 2
    assert all(loss is not None and loss > 0 for _, loss in figures["evaluations"])
    assert figures["source"] == "--validation_split 0.25"
    text = capsys.readouterr().out
    assert "validation loss: 2 of 8 usable sample(s) held out" in text and "training: 6 samples" in text
