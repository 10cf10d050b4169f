"""dit_lora/modeling/quantize.py: the refusals (one paragraph, before loading), quantized sizes, the plan, the audit, the doctor."""

from __future__ import annotations

import pytest
import torch

from dit_lora.modeling import quantize
from dit_lora.config import TrainConfig
from dit_lora.modeling.quantize import QuantizeError


def _cfg(**kw):
    return TrainConfig(**{"mixed_precision": "no", **kw})


def _check(cfg, device_type, family=None):
    """quantize.check_config on the two sections it reads."""
    quantize.check_config(cfg.model, cfg.training, device_type, family)


def _paragraph(err) -> str:
    text = str(err)
    assert "\n" not in text and "--quantize_base" in text
    return text


def test_nf4_without_bitsandbytes_names_the_flag_and_the_install(monkeypatch):
    monkeypatch.setattr(quantize, "bitsandbytes_status", lambda: "ModuleNotFoundError: no bitsandbytes")
    for scheme in ("nf4", "int8"):
        with pytest.raises(QuantizeError) as err:
            _check(_cfg(quantize_base=scheme), "cpu")
        assert f"--quantize_base {scheme}" in _paragraph(err.value) and "pip install" in str(err.value)
    _check(_cfg(), "cpu")  # none never needs anything


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU refusal")
def test_fp8_on_a_device_without_fp8_is_refused():
    with pytest.raises(QuantizeError) as err:
        _check(_cfg(quantize_base="fp8"), "cpu")
    assert "nf4" in _paragraph(err.value)


def test_fp8_with_allow_fp16_is_refused():
    with pytest.raises(QuantizeError) as err:
        _check(_cfg(quantize_base="fp8", allow_fp16=True), "cuda")
    assert "--allow_fp16" in _paragraph(err.value)


def test_quantize_text_encoder_is_refused_without_a_text_encoder_or_bitsandbytes(monkeypatch):
    from dit_lora.registry import get_family

    for name in ("dit", "llava_next_video"):
        with pytest.raises(QuantizeError) as err:
            _check(_cfg(family=name, quantize_text_encoder=True), "cpu", get_family(name))
        text = str(err.value)
        assert "\n" not in text and "--quantize_text_encoder" in text and f"the {name} family has none" in text
    _check(_cfg(family="sana", quantize_text_encoder=True), "cpu", get_family("sana"))
    monkeypatch.setattr(quantize, "bitsandbytes_status", lambda: "ModuleNotFoundError: no bitsandbytes")
    with pytest.raises(QuantizeError) as err:
        _check(_cfg(family="cogvideox", quantize_text_encoder=True), "cpu", get_family("cogvideox"))
    assert "\n" not in str(err.value) and "pip install" in str(err.value)
    _check(_cfg(family="dit"), "cpu", get_family("dit"))  # off: nothing is needed


def test_quantized_text_encoder_embeddings_differ_by_its_quantization_error_only(tiny_sana):
    """Gemma-2 loaded nf4 by the family: its embeddings are the unquantized encoder's with bitsandbytes' dequantized
    weights, and they are cached apart from the unquantized encoder's."""
    pytest.importorskip("bitsandbytes")
    from helpers import assert_text_encoder_quantization_error_only

    from dit_lora.registry import get_family

    assert_text_encoder_quantization_error_only("sana", tiny_sana, ["a red square", "a blue circle on a grey field"])
    family = get_family("sana")
    plain = _cfg(family="sana", pretrained_model_name_or_path=str(tiny_sana))
    assert family.encoders.cache_identity(plain) != family.encoders.cache_identity(_cfg(**{**plain.__dict__, "quantize_text_encoder": True}))


def test_plan_counts_the_quantized_text_encoder(tiny_sana):
    """Gemma-2's Linear weights at nf4 size, the rest of it as loaded."""
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.registry import get_family
    from dit_lora.plan import make_plan
    from dit_lora.plan.fake import module_bytes
    from dit_lora.plan.report import format_plan

    family = get_family("sana")
    cfg = _cfg(family="sana", pretrained_model_name_or_path=str(tiny_sana), resolution=32, rank=4, train_batch_size=1,
               quantize_text_encoder=True)
    plain = family.plan.plan_components(cfg, config_reader(cfg.model))  # the meta components, unquantized
    encoder = plain.encoders["text_encoder"]
    plan = make_plan(cfg, family, device="cpu", both_settings=False)
    saved = quantize.quantized_weight_savings(encoder, "nf4", quantize.quantized_linears(encoder))
    assert saved > 0 and plan.weights["text_encoder"] == module_bytes(encoder) - saved
    assert "weights: text_encoder (Linear weights nf4-quantized)" in format_plan(plan)


def test_quantized_bytes():
    lin = torch.nn.Linear(128, 64, device="meta")
    assert quantize.quantized_bytes(lin, "nf4") == 8192 // 2 + 4 * 8192 // 64
    assert quantize.quantized_bytes(lin, "int8") == 8192 + 4 * 64


def test_backbone_training_of_quantized_weights_stops_at_the_plan_before_loading(tiny_dit, tmp_path):
    """The start-of-run plan builds the meta model and attaches the trainables: a quantized Linear weight under
    --train_backbone stops there (QuantizeError is never downgraded to a planning note); embeddings may train."""
    from dit_lora.registry import get_family
    from dit_lora.plan import make_plan
    from dit_lora.plan.report import format_plan

    family = get_family("dit")
    cfg = _cfg(family="dit", pretrained_model_name_or_path=str(tiny_dit), resolution=64, rank=4, train_batch_size=1,
               quantize_base="nf4", train_backbone=["attn1\\.to_q"])
    with pytest.raises(QuantizeError) as err:
        make_plan(cfg, family, device="cpu", both_settings=False)
    assert "--train_backbone" in _paragraph(err.value)
    plain = make_plan(_cfg(**{**cfg.__dict__, "quantize_base": "none", "train_backbone": []}), family,
                      device="cpu", both_settings=False)
    nf4 = make_plan(_cfg(**{**cfg.__dict__, "train_backbone": ["class_embedder"]}), family, device="cpu", both_settings=False)
    assert nf4.weights["model"] < plain.weights["model"] and nf4.weights["vae"] == plain.weights["vae"]
    assert "nf4-quantized" in format_plan(nf4)


def test_nf4_model_passes_the_precision_audit(tiny_dit):
    pytest.importorskip("bitsandbytes")
    from diffusers import DiTTransformer2DModel

    from dit_lora.contract.family import Components
    from dit_lora.kit import make_peft_capable
    from dit_lora.training.precision import audit_precision
    from dit_lora.modeling.trainables import add_lora, cast_trainable_to_fp32

    cfg = _cfg(quantize_base="nf4")
    with quantize.diffusers_loading(cfg.model):
        model = DiTTransformer2DModel.from_pretrained(str(tiny_dit), subfolder="transformer", torch_dtype=torch.float32,
                                                      **quantize.diffusers_kwargs(cfg.model, cfg.weight_dtype))
    model = make_peft_capable(model).requires_grad_(False)
    add_lora(model, rank=4, alpha=4, dropout=0.0, targets=["to_q", "to_k", "to_v"], seed=0)
    cast_trainable_to_fp32(model, under_autocast=False)
    assert quantize.quantized_linears(model)  # the base_layers are bitsandbytes Linear4bit
    assert audit_precision(Components(model=model), {"model": torch.float32}, allow_fp16=False) == []


def test_doctor_reports_the_quantization_backends():
    from dit_lora.commands.doctor import run_checks

    (check,) = [c for c in run_checks(import_check=False) if c.name == "quantized base"]
    assert "bitsandbytes" in check.value and "torchao" in check.value
    # a warning only where bitsandbytes' CPU rounding is off (the probe, tested above)
    cpu = not torch.cuda.is_available()
    assert check.status == ("warn" if cpu and quantize.cpu_nf4_problem() else "ok"), check.message
    assert "fp8_scaled run" in check.value  # no library needed: it runs on this device too (listed last)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp8 weights need CUDA")
def test_fp8_loads_a_transformer_with_lora_on_a_capable_gpu(tiny_dit):
    why = quantize.fp8_status("cuda")
    if why is not None:
        pytest.skip(why)
    from diffusers import DiTTransformer2DModel

    from dit_lora.kit import make_peft_capable
    from dit_lora.modeling.trainables import add_lora

    cfg = _cfg(quantize_base="fp8", mixed_precision="bf16")
    model = DiTTransformer2DModel.from_pretrained(str(tiny_dit), subfolder="transformer", torch_dtype=torch.bfloat16,
                                                  **quantize.diffusers_kwargs(cfg.model, cfg.weight_dtype)).to("cuda")
    model = make_peft_capable(model).requires_grad_(False)
    add_lora(model, rank=4, alpha=4, dropout=0.0, targets=["to_q"], seed=0)
    x = torch.randn(1, 4, 8, 8, device="cuda", dtype=torch.bfloat16)
    out = model(x, timestep=torch.tensor([10], device="cuda"), class_labels=torch.tensor([1], device="cuda")).sample
    out.float().pow(2).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("in_features", [32, 128])
def test_an_eval_forward_leaves_the_4bit_weights_as_loaded(in_features):
    """bitsandbytes repacks a Linear4bit in place (bf16 absmax) at its first eval, no-grad forward on an AVX-512 BF16
    CPU; keep_4bit_layout turns that off, so validation or caching cannot change what training computes next. The
    CPU feature is forced on, so the test means the same on every CPU; the control shows the repacking is real."""
    bnb = pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)

    def layer():
        lin = bnb.nn.Linear4bit(in_features, 64, bias=True, compute_dtype=torch.float32, quant_type="nf4")
        lin.load_state_dict(torch.nn.Linear(in_features, 64).state_dict())
        lin = lin.to("cpu")  # quantizes
        lin.support_avx512bf16_for_cpu = True  # as on an AVX-512 BF16 CPU
        return lin.eval()

    x = torch.randn(3, in_features)
    kept = layer()
    quantize.keep_4bit_layout(None, torch.nn.Sequential(kept))
    before, absmax = kept.weight.data.clone(), kept.weight.quant_state.absmax.clone()
    with torch.no_grad():
        y = kept(x)
    assert torch.equal(kept.weight.data, before) and torch.equal(kept.weight.quant_state.absmax, absmax)
    assert not getattr(kept.weight.quant_state, "packing_format_for_cpu", False) and torch.isfinite(y).all()
    if in_features >= quantize.NF4_BLOCK:  # the control: without it the layer is rewritten
        repacked = layer()
        with torch.no_grad():
            repacked(x)
        assert getattr(repacked.weight.quant_state, "packing_format_for_cpu", False)


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_quantized_linears_follow_autocast_like_a_plain_linear(kind):
    """bitsandbytes' Linear4bit returns its input's dtype (Linear8bitLt, the control, already follows autocast); a
    plain Linear under autocast returns the autocast dtype. On a quantized bf16 base an fp32 input (diffusers' timestep
    embedding) then met a bf16 affine LayerNorm, which CPU autocast does not cast: CogVideoX's first step died with
    "mixed dtype (CPU)". After keep_4bit_layout (every family calls it on load) the layer answers in the autocast
    dtype, autocast off it is unchanged, and gradients still flow."""
    bnb = pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)

    def model():
        if kind == "nf4":
            lin = bnb.nn.Linear4bit(64, 64, bias=True, compute_dtype=torch.bfloat16, quant_type="nf4")
        else:
            lin = bnb.nn.Linear8bitLt(64, 64, bias=True, has_fp16_weights=False)
        lin.load_state_dict(torch.nn.Linear(64, 64).state_dict())
        norm = torch.nn.LayerNorm(64).to(torch.bfloat16)  # affine, frozen in the run's bf16 as the model loads it
        return torch.nn.Sequential(lin.to("cpu"), norm)

    x = torch.randn(2, 64, requires_grad=True)  # fp32, as the timestep embedding
    plain = model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        if kind == "nf4":
            with pytest.raises(RuntimeError, match="mixed dtype"):
                plain(x)  # the library's own behaviour is what crashed
        else:
            assert plain(x).dtype == torch.bfloat16

    fixed = model()
    quantize.keep_4bit_layout(fixed, None)
    assert quantize.follow_autocast(fixed) == (kind == "nf4")  # idempotent: still one hook
    assert len(fixed[0]._forward_hooks) == (kind == "nf4")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = fixed(x)
        assert fixed[0](x).dtype == torch.bfloat16 == torch.nn.Linear(64, 64)(x).dtype
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    y.float().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert fixed[0](x).dtype == torch.float32  # autocast off: as before


# ---- fp8_scaled: dit-lora's own fp8 weights (dit_lora/modeling/fp8_scaled.py) ----------------------------------------
def test_fp8_scaled_runs_anywhere_torch_has_float8_and_needs_no_library_config(monkeypatch):
    cfg = _cfg(quantize_base="fp8_scaled")
    _check(cfg, "cpu")
    _check(_cfg(quantize_base="fp8_scaled", mixed_precision="fp16", allow_fp16=True), "cuda")
    assert quantize.what_runs("cpu")["fp8_scaled"] == "runs"
    assert quantize.diffusers_config(cfg.model, cfg.weight_dtype) is None and quantize.diffusers_kwargs(cfg.model, cfg.weight_dtype) == {}
    assert quantize.transformers_config(cfg.model, cfg.weight_dtype, ["lm_head"]) is None
    assert "fp8 e4m3" in quantize.describe(cfg.model) and "fp32" in quantize.describe(cfg.model)
    monkeypatch.setattr(quantize, "fp8_scaled_status", lambda: "torch 2.0 has no float8_e4m3fn dtype")
    with pytest.raises(QuantizeError) as err:
        _check(cfg, "cpu")
    assert "--quantize_base fp8_scaled" in _paragraph(err.value) and "nf4" in str(err.value)


def test_fp8_scaled_bytes_are_one_a_weight_plus_a_scale_per_row_and_block():
    assert quantize.quantized_bytes(torch.nn.Linear(128, 64, device="meta"), "fp8_scaled") == 8192 + 4 * 64 * 2
    assert quantize.quantized_bytes(torch.nn.Linear(37, 5, device="meta"), "fp8_scaled") == 185 + 4 * 5  # per row


def test_after_loading_converts_what_the_plan_counts_and_only_under_fp8_scaled():
    from dit_lora.modeling.fp8_scaled import Fp8ScaledLinear

    def model():
        m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8), torch.nn.Conv2d(3, 3, 1))
        m._keep_in_fp32_modules = ["1"]  # diffusers' convention: stays as loaded
        return m

    for scheme in ("none", "nf4"):
        untouched = model()
        assert quantize.after_loading(_cfg(quantize_base=scheme).model, untouched) == 0
        assert type(untouched[0]) is torch.nn.Linear
    m = model()
    assert quantize.quantized_linears(m) == ["0"]
    assert quantize.after_loading(_cfg(quantize_base="fp8_scaled").model, m, device=torch.device("cpu")) == 1
    assert isinstance(m[0], Fp8ScaledLinear) and type(m[1]) is torch.nn.Linear
    assert quantize.quantized_linears(m) == ["0"]  # still found (an nn.Linear subclass): the audit and refusals see it
    skipped = torch.nn.Sequential(torch.nn.Linear(64, 64))
    assert quantize.after_loading(_cfg(quantize_base="fp8_scaled").model, skipped, ["0"]) == 0


def test_the_plan_predicts_the_fp8_scaled_weights_the_loader_makes(tiny_dit):
    """dit-lora plan (meta model) counts fp8_scaled's Linears at 1 byte a weight plus the scales: exactly the bytes of
    the transformer the DiT loader converts (after_loading), between nf4's and the unquantized size."""
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.modeling.trainables import attach_trainables
    from dit_lora.plan import make_plan
    from dit_lora.plan.fake import module_bytes
    from dit_lora.plan.report import format_plan
    from dit_lora.registry import get_family

    family = get_family("dit")
    base = dict(family="dit", pretrained_model_name_or_path=str(tiny_dit), resolution=64, rank=4, train_batch_size=1)
    plans = {s: make_plan(_cfg(**base, quantize_base=s), family, device="cpu", both_settings=False)
             for s in ("none", "fp8_scaled", "nf4")}
    weights = {s: plan.weights["model"] for s, plan in plans.items()}
    assert weights["nf4"] < weights["fp8_scaled"] < weights["none"]
    assert plans["fp8_scaled"].weights["vae"] == plans["none"].weights["vae"]
    assert "(Linear weights fp8_scaled-quantized)" in format_plan(plans["fp8_scaled"])
    # each Linear is dequantized (fp32 here, --mixed_precision no) while it runs: the largest one is on top of the step
    meta = family.plan.plan_components(_cfg(**base), config_reader(_cfg(**base).model)).model
    largest = max(m.weight.numel() for n, m in meta.named_modules() if n in quantize.quantized_linears(meta))
    assert plans["fp8_scaled"].dequant_bytes == 4 * largest and plans["none"].dequant_bytes == 0
    assert "fp8 weight dequantized while its layer runs" in format_plan(plans["fp8_scaled"])
    cfg = _cfg(**base, quantize_base="fp8_scaled")
    comps = family.model.load_components(cfg, torch.device("cpu"))
    assert any(type(m).__name__ == "Fp8ScaledLinear" for m in comps.model.modules())
    attach_trainables(comps.model, family, cfg)  # the plan's model carries the LoRA weights too
    assert module_bytes(comps.model) == weights["fp8_scaled"]


def test_backbone_training_of_fp8_scaled_weights_stops_at_the_plan(tiny_dit):
    from dit_lora.plan import make_plan
    from dit_lora.registry import get_family

    cfg = _cfg(family="dit", pretrained_model_name_or_path=str(tiny_dit), resolution=64, rank=4, train_batch_size=1,
               quantize_base="fp8_scaled", train_backbone=["attn1\\.to_q"])
    with pytest.raises(QuantizeError) as err:
        make_plan(cfg, get_family("dit"), device="cpu", both_settings=False)
    assert "--quantize_base fp8_scaled" in _paragraph(err.value) and "--train_backbone" in str(err.value)


def test_fp8_scaled_model_with_lora_passes_the_precision_audit():
    from dit_lora.contract.family import Components
    from dit_lora.modeling.fp8_scaled import convert
    from dit_lora.modeling.trainables import cast_trainable_to_fp32
    from dit_lora.training.precision import audit_precision
    from peft import LoraConfig, inject_adapter_in_model

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)).to(torch.bfloat16)
    convert(model.requires_grad_(False), ["0"])
    inject_adapter_in_model(LoraConfig(r=4, target_modules=["0"]), model)
    cast_trainable_to_fp32(model, under_autocast=True)
    assert audit_precision(Components(model=model), {"model": torch.bfloat16}, allow_fp16=False) == []


def test_a_skip_path_names_a_place_not_every_module_of_that_name():
    """``proj_out`` in a skip list keeps the model's own output projection out, not each block's ``proj_out``
    (Chroma's 38 single blocks kept theirs out of fp8_scaled before, the plan counting them as bf16 too)."""
    from torch import nn

    model = nn.Module()
    model.proj_out = nn.Linear(4, 4)
    model.blocks = nn.ModuleList([nn.Module()])
    model.blocks[0].proj_out = nn.Linear(4, 4)
    model.embedder = nn.Sequential(nn.Linear(4, 4))
    assert quantize.quantized_linears(model, ["proj_out", "embedder"]) == ["blocks.0.proj_out"]


def test_the_cpu_nf4_probe_says_what_bitsandbytes_rounding_does_here():
    """A message exactly when bitsandbytes' CPU 4-bit round trip of rows that are not a multiple of 64 is off by more
    than NF4's half gap, measured here afresh on another seed (bitsandbytes 0.50 on AVX-512: off; elsewhere: not)."""
    import bitsandbytes as bnb

    weight = torch.randn(16, 96, generator=torch.Generator().manual_seed(1))
    packed, state = bnb.functional.quantize_4bit(weight, blocksize=64, quant_type="nf4")
    error = (bnb.functional.dequantize_4bit(packed, state) - weight).abs().flatten().view(-1, 64).amax(1)
    off = bool((error / weight.abs().flatten().view(-1, 64).amax(1)).max() > quantize.NF4_HALF_GAP)
    said = quantize.cpu_nf4_problem()
    assert (said is not None) == off, said
    if said:
        assert "not a multiple of 64" in said and "a GPU uses other kernels" in said
