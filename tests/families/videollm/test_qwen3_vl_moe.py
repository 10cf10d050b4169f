"""families/videollm/qwen3_vl_moe.py and demo_qwen3_vl_moe.py: the MoE is the dense Qwen3-VL's tower, frames and
timed prompt over a sparse language model; LoRA lands on its attention only (router and fused experts frozen, an
MLP-only name refused in one paragraph), the router's aux loss is off, the tower trains only on request, and Liger's
qwen3_vl_moe patch is taken."""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.processing import QAProcessingLoader
from dit_lora.families.videollm.qwen3_vl import Qwen3VLSpec
from videollm_tiny import QUESTION, tiny_fixtures

SPEC = Qwen3VLSpec(sparse=True)
tiny, model, _ = tiny_fixtures(SPEC, "demo_qwen3_vl_moe:build_tiny_qwen3_vl_moe", "tiny-qwen3-vl-moe")


def test_the_tiny_model_is_sparse_and_the_prompt_is_the_dense_models(tiny, model):
    """Every layer a sparse block (router, fused 3-D experts), and the same prompt ids as the dense spec writes."""
    from transformers import Qwen3VLMoeForConditionalGeneration

    assert isinstance(model, Qwen3VLMoeForConditionalGeneration) and SPEC.name == "qwen3_vl_moe"
    text = model.config.text_config
    assert (text.num_experts, text.num_experts_per_tok) == (4, 2)
    for layer in model.model.language_model.layers:
        assert layer.mlp.experts.gate_up_proj.shape == (4, 2 * text.moe_intermediate_size, text.hidden_size)
        assert layer.mlp.gate.weight.shape == (4, text.hidden_size)
    processing = QAProcessingLoader(SPEC).load_processing(str(tiny), model.config)
    pixels, count = processing.frame_inputs(np.zeros((4, 64, 64, 3), dtype=np.uint8))
    times = [0.3, 1.0, 1.8, 2.5]
    ids = processing.tokenize(QUESTION, count, None, times)["input_ids"]
    dense = Qwen3VLSpec().video_prompt_ids(processing.tokenizer, count, model.config, times)
    assert processing.tokenizer.decode(dense).startswith("<0.7 seconds><|vision_start|><|video_pad|>")
    assert ", ".join(map(str, dense)) in ", ".join(map(str, ids.tolist()))
    with pytest.raises(UserError, match="states no frame rate"):
        processing.tokenize(QUESTION, count, None, None)


def test_lora_targets_the_attention_only_and_the_router_and_experts_stay_frozen(model):
    from dit_lora.config import TrainConfig
    from dit_lora.families.videollm.loading import VideoLLMModel, VideoLLMTrainables

    cfg = TrainConfig.for_family("qwen3_vl_moe")
    targets = VideoLLMModel(SPEC).lora_targets(model, cfg.lora)
    assert sorted({t.rsplit(".", 1)[-1] for t in targets}) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert len(targets) == 4 * model.config.text_config.num_hidden_layers
    trainables = VideoLLMTrainables(SPEC)
    assert trainables.extra_trainable(cfg.family_options) == []
    (pattern,) = trainables.backbone_patterns(cfg.lora, cfg.family_options)
    trained = [n for n, _ in model.named_parameters() if re.fullmatch(pattern, n)]
    assert trained and not any(".mlp." in n for n in trained)  # the projector, never a router or an expert
    with pytest.raises(UserError, match="match no Linear layer"):
        VideoLLMModel(SPEC).lora_targets(model, TrainConfig.for_family("qwen3_vl_moe", lora_layers=["gate_proj"]).lora)
    tower = TrainConfig.for_family("qwen3_vl_moe", train_vision_tower=True)
    ((name, _, _),) = trainables.extra_trainable(tower.family_options)
    assert name == "vision_tower"


def test_the_router_loss_is_off_whatever_the_folder_asks(tiny, tmp_path, model):
    """transformers adds router_aux_loss_coef x aux_loss to loss with output_router_logits; loaded by the spec the
    loss is the answer tokens' cross-entropy alone, the same as the stock model given the switch off."""
    import json
    import shutil

    folder = tmp_path / "asks"
    shutil.copytree(tiny, folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"].update(output_router_logits=True, router_aux_loss_coef=10.0)
    (folder / "config.json").write_text(json.dumps(config))
    from transformers import Qwen3VLMoeForConditionalGeneration

    ids = torch.randint(0, 400, (1, 16))
    kwargs = {"input_ids": ids, "labels": ids, "mm_token_type_ids": torch.zeros_like(ids)}
    stock = Qwen3VLMoeForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    loaded = SPEC.load_model(folder, torch.float32).eval()
    with torch.no_grad():
        with_aux = stock(**kwargs)
        plain = loaded(**kwargs)
    assert with_aux.aux_loss is not None and plain.aux_loss is None
    assert torch.allclose(with_aux.loss - 10.0 * with_aux.aux_loss, plain.loss, atol=1e-5)
    assert not torch.allclose(with_aux.loss, plain.loss, atol=1e-3)  # the check can fail


def test_liger_takes_its_qwen3_vl_moe_patch_without_swiglu(model, monkeypatch):
    """Liger's patch is apply_liger_kernel_to_qwen3_vl_moe (faked: Triton needs a CUDA GPU); the experts are fused
    parameters, so no SwiGLU is claimed."""
    from dit_lora.families.videollm import liger

    seen = {}
    fake = types.ModuleType("liger_kernel.transformers")
    fake.apply_liger_kernel_to_qwen3_vl_moe = lambda **kw: seen.update(kw)  # type: ignore[attr-defined]
    fake.LigerFusedLinearCrossEntropyLoss = lambda ignore_index: "fused"  # type: ignore[attr-defined]
    package = types.ModuleType("liger_kernel")
    package.transformers = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", fake)
    monkeypatch.setattr(liger, "liger_unavailable_reason", lambda device: None)
    notes: list[str] = []
    assert liger.apply_liger(SPEC, model, notes.append) is not None
    assert seen["model"] is model.model.language_model and seen["rms_norm"] and not seen["swiglu"]
    assert notes == ["Liger-Kernel applied to the qwen3_vl_moe language model (RMSNorm, RoPE, fused linear cross-entropy)."]


def test_the_moe_is_the_dense_spec_with_its_own_name_class_and_liger_patch():
    """``Qwen3VLSpec(sparse=True)``: the MoE's name, transformers class and Liger patch; the dense spec is unchanged."""
    from dit_lora.families.videollm import qwen3_vl_moe

    assert (SPEC.name, SPEC.model_class, SPEC.liger_patch, SPEC.sparse) == (
        "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe", True)
    dense = Qwen3VLSpec()
    assert (dense.name, dense.model_class, dense.liger_patch, dense.sparse) == (
        "qwen3_vl", "Qwen3VLForConditionalGeneration", "qwen3_vl", False)
    assert SPEC.liger_swiglu is dense.liger_swiglu is False
    stand_in = types.SimpleNamespace(config=types.SimpleNamespace(text_config=types.SimpleNamespace(
        output_router_logits=True)))
    assert qwen3_vl_moe.without_router_loss(stand_in) is stand_in
    assert stand_in.config.text_config.output_router_logits is False
