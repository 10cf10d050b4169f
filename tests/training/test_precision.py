"""The precision audit and the fp16 refusal (tiny Sana and CogVideoX-2B-style models, CPU)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.registry import get_family
from dit_lora.modeling import trainables
from dit_lora.training.precision import audit_precision, check_fp16_model, format_audit


def test_precision_audit_clean_then_reports_a_cast_norm(tiny_sana):
    family = get_family("sana")
    cfg = TrainConfig(pretrained_model_name_or_path=str(tiny_sana), train_data_dir="unused", resolution=64)
    comps = family.model.load_components(cfg, torch.device("cpu"))
    policy = family.precision.expected_dtypes(comps, cfg.weight_dtype)
    assert policy == {"model": torch.bfloat16, "text_encoder": torch.bfloat16, "vae": torch.float32}
    assert audit_precision(comps, policy, allow_fp16=False) == []
    trainables.add_lora(comps.model, rank=4, alpha=4, dropout=0.0, targets=("to_q",), seed=0)
    lora = [n for n, p in comps.model.named_parameters() if p.requires_grad]
    found = audit_precision(comps, policy, allow_fp16=False)  # PEFT made the LoRA weights bf16
    assert {m["name"] for m in found} == set(lora) and all(m["expected"] == "float32" for m in found)
    trainables.cast_trainable_to_fp32(comps.model, under_autocast=True)
    assert audit_precision(comps, policy, allow_fp16=False) == []
    assert "matches" in format_audit([])

    comps.model.caption_norm.to(torch.float16)
    comps.encoders["text_encoder"].layers[0].input_layernorm.to(torch.float16)
    found = audit_precision(comps, policy, allow_fp16=True)
    assert {(m["component"], m["name"], m["kind"], m["dtype"], m["expected"]) for m in found} == {
        ("model", "caption_norm.weight", "param", "float16", "bfloat16"),
        ("text_encoder", "layers.0.input_layernorm.weight", "param", "float16", "bfloat16"),
    }
    text = format_audit(found)
    assert "caption_norm.weight" in text and "float16" in text


def test_audit_summary_is_grouped():
    mismatches = [{"component": "model", "name": f"transformer_blocks.{i}.norm.weight", "kind": "param",
                   "dtype": "float32", "expected": "bfloat16", "trainable": False} for i in range(500)]
    text = format_audit(mismatches)
    assert len(text.splitlines()) == 2
    assert "500" in text and "and 497 more" in text


def test_fp16_denoiser_refused_without_allow_fp16(sana_model):
    fp16 = sana_model(dtype=torch.float16, lora=False)
    with pytest.raises(UserError) as err:
        check_fp16_model(fp16, allow_fp16=False)
    message = str(err.value)
    assert "--allow_fp16" in message and "--mixed_precision bf16" in message and "BF16" in message
    check_fp16_model(fp16, allow_fp16=True)
    check_fp16_model(fp16.requires_grad_(True), allow_fp16=True)
    with pytest.raises(UserError):  # judged the same before the base is frozen
        check_fp16_model(fp16, allow_fp16=False)
    check_fp16_model(sana_model(lora=True), allow_fp16=False)


def test_a_float64_buffer_cast_at_forward_is_not_a_mismatch(tmp_path):
    """CogVideoX-2B's sin-cos ``pos_embedding`` stays float64 after ``from_pretrained(torch_dtype=bf16)``;
    diffusers casts it at forward, so the audit must not warn. A bf16 model's fp16 buffer still is one."""
    from diffusers import CogVideoXTransformer3DModel

    from dit_lora.contract.family import Components

    config = dict(num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4, num_layers=1,
                  text_embed_dim=16, time_embed_dim=8, sample_width=8, sample_height=8, sample_frames=9,
                  max_text_seq_length=8, use_rotary_positional_embeddings=False)  # the 2B layout
    CogVideoXTransformer3DModel(**config).save_pretrained(tmp_path)
    model = CogVideoXTransformer3DModel.from_pretrained(tmp_path, torch_dtype=torch.bfloat16).requires_grad_(False)
    assert model.patch_embed.pos_embedding.dtype == torch.float64  # what users load
    comps = Components(model=model)
    assert audit_precision(comps, {"model": torch.bfloat16}, allow_fp16=False) == []
    model.patch_embed.pos_embedding = model.patch_embed.pos_embedding.to(torch.float16)
    (found,) = audit_precision(comps, {"model": torch.bfloat16}, allow_fp16=False)
    assert found["name"] == "patch_embed.pos_embedding" and found["dtype"] == "float16"
