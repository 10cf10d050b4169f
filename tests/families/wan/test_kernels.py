"""Wan's patch points against the installed diffusers: the patched block vs diffusers' own, and the fingerprints.

The block is built at small odd sizes (3 heads of 8, 15 video tokens, 7 text tokens; I2V: 5 image tokens before
diffusers' hardcoded 512 text tokens), batch 3, with Wan's RoPE. The patched copy (its forward, its attention
processors, its q/k RMSNorms) must match diffusers' block forward and backward (inputs and every parameter,
frozen ones included) within the kernels' tolerance in fp32, and be as close to the fp32 truth as diffusers' own
bf16 block is in bf16. A fingerprint test fails when diffusers' source changed, so an upgrade forces a re-check.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch

pytest.importorskip("triton")

from dit_lora.families.wan import kernels as wan_kernels
from dit_lora.kernels import kernel_counts, kernel_runtime, patch_model
from dit_lora.kernels.parity import check_block
from dit_lora.kernels.patch_points import drift_note

POINTS = wan_kernels.patch_points()
HEADS, HEAD_DIM, VIDEO, TEXT, IMAGE, BATCH = 3, 8, 15, 7, 5, 3
DIM = HEADS * HEAD_DIM
GRADS = ("hidden_states", "encoder_hidden_states", "temb")


def _block(i2v=False):
    from diffusers.models.transformers.transformer_wan import WanTransformerBlock

    torch.manual_seed(0)
    block = WanTransformerBlock(DIM, 40, HEADS, cross_attn_norm=True, eps=1e-6, added_kv_proj_dim=DIM if i2v else None)
    with torch.no_grad():  # RMSNorm/LayerNorm weights start at one and the table at 1/sqrt(dim): make them matter
        block.scale_shift_table.normal_(0, 0.5)
        for name, p in block.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return block


def _rope(tokens=VIDEO):
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    rope = WanRotaryPosEmbed(HEAD_DIM, (1, 1, 1), 32)
    cos, sin = rope(torch.zeros(1, 1, 3, 1, tokens // 3))  # 3 frames x 1 x 5: t, h and w frequencies all vary
    return cos.float(), sin.float()


def _inputs(i2v=False, per_token=False, dtype=torch.float32):
    gen = torch.Generator().manual_seed(1)
    context = IMAGE + wan_kernels.TEXT_CONTEXT if i2v else TEXT
    temb = torch.randn(BATCH, VIDEO, 6, DIM, generator=gen) if per_token else torch.randn(BATCH, 6, DIM, generator=gen)
    return {"hidden_states": torch.randn(BATCH, VIDEO, DIM, generator=gen).to(dtype),
            "encoder_hidden_states": torch.randn(BATCH, context, DIM, generator=gen).to(dtype),
            "temb": (temb * 0.5).float(),  # timestep_proj: diffusers keeps the time embedder in fp32
            "rotary_emb": _rope()}


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_patched_block_matches_diffusers_forward_and_backward(i2v):
    verdict = check_block(_block(i2v), POINTS, _inputs(i2v), grads=GRADS)
    assert verdict == "", verdict


def test_wan22_per_token_temb_runs_diffusers_block_code_and_matches():
    block = _block()
    verdict = check_block(block, POINTS, _inputs(per_token=True), grads=GRADS)
    assert verdict == "", verdict
    fused = copy.deepcopy(block)
    patch_model(fused, POINTS, kernels="on", attention=False, layernorm=False)  # only the block point
    with torch.no_grad():
        assert torch.equal(fused(**_inputs(per_token=True)), block(**_inputs(per_token=True)))


def _bf16(block):
    """As from_pretrained loads a bf16 checkpoint: bf16, with diffusers' _keep_in_fp32_modules kept in fp32."""
    block = copy.deepcopy(block).to(torch.bfloat16)
    block.scale_shift_table.data = block.scale_shift_table.data.float()
    block.norm2.float()
    return block


def _run(block, inputs):
    leaves = {k: v.detach().clone().requires_grad_(k in GRADS) if isinstance(v, torch.Tensor) else v
              for k, v in inputs.items()}
    out = block(**leaves)
    out.float().backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    grads = {k: leaves[k].grad.float() for k in GRADS}
    grads.update({n: p.grad.float() for n, p in block.named_parameters()})
    return out.detach().float(), grads


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_patched_bf16_block_is_as_close_to_fp32_as_diffusers_bf16(i2v):
    # The fused ops (fp32 inside, one rounding) against the truth, the same block in fp32 on the same
    # bf16-representable values: about as close to it as diffusers' own bf16 block (tests/kernels/test_patch.py).
    block = _block(i2v)
    inputs = _inputs(i2v, dtype=torch.bfloat16)
    true_out, true_grads = _run(block, {k: v.float() if k != "temb" and isinstance(v, torch.Tensor) else v
                                        for k, v in inputs.items()})
    eager = _bf16(block)
    eager_out, eager_grads = _run(eager, inputs)
    fused = _bf16(block)
    patch_model(fused, POINTS, kernels="on", attention_backend="math")
    out, grads = _run(fused, inputs)

    def err(a, b):
        return float((a - b).norm() / b.norm())

    assert err(out, true_out) <= 1.5 * err(eager_out, true_out) + 1e-3
    for name, g in true_grads.items():
        assert err(grads[name], g) <= 1.5 * err(eager_grads[name], g) + 1e-2, name


def test_switched_off_ops_reproduce_diffusers_bf16_bit_for_bit():
    # An op the sampled check switches off (and every op under torch.compile) runs its PyTorch reference: the
    # block must then be diffusers' block exactly, fp32 LayerNorm of the bf16 stream included.
    block = _bf16(_block())
    fused = copy.deepcopy(block)
    patch_model(fused, POINTS, kernels="on", attention=False, layernorm=False)
    rt = kernel_runtime(fused)
    assert "forward" in fused.__dict__ and rt.enabled["modulate"] and rt.enabled["gated_residual"]
    rt.enabled["modulate"] = rt.enabled["gated_residual"] = False
    inputs = _inputs(dtype=torch.bfloat16)
    out, grads = _run(fused, inputs)
    ref_out, ref_grads = _run(block, inputs)
    assert torch.equal(out, ref_out)
    assert all(torch.equal(grads[k], ref_grads[k]) for k in ref_grads)


@pytest.mark.parametrize("i2v", [False, True], ids=["t2v", "i2v"])
def test_every_point_is_used_by_the_block(i2v):
    block = _block(i2v)
    patch_model(block, POINTS, kernels="on", attention_backend="math")
    counts = kernel_counts(block)
    assert counts["modulate"] == counts["gated_residual"] == 1  # wan.block
    assert counts["attention"] == 2  # attn1 and attn2 (wan.attention)
    assert counts["rmsnorm"] == (5 if i2v else 4)  # norm_q and norm_k of both, and I2V's norm_added_k
    assert counts["layernorm"] == 0  # FP32LayerNorm is not the generic nn.LayerNorm point's class
    assert type(block.attn1.processor) is wan_kernels.WanAttentionProcessor


def test_a_block_forward_that_drops_a_gate_fails_the_check():
    import dataclasses

    def ungated(self, rt, hidden_states, encoder_hidden_states, temb, rotary_emb):
        return wan_kernels.block_forward(self, rt, hidden_states, encoder_hidden_states, temb * 0.5, rotary_emb)

    broken = (dataclasses.replace(POINTS[0], forward=ungated), *POINTS[1:])
    assert "disagreed" in check_block(_block(), broken, _inputs(), grads=("hidden_states",))


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
def test_fingerprint_matches_the_installed_source(point):
    # Fails after a diffusers (or torch) upgrade that changed the re-implemented source: re-check the forward
    # against the new one (the tests above), then record the new fingerprint and version in families/wan/kernels.py.
    assert drift_note(point) == ""


def test_a_block_whose_diffusers_forward_changed_stays_eager_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr("dit_lora.kernels.triton_launch._NOTED", set())  # once per process: start afresh
    from diffusers.models.transformers.transformer_wan import WanTransformerBlock

    original = WanTransformerBlock.forward

    def changed_forward(self, *args, **kwargs):  # an upgraded diffusers: same class, different source
        return original(self, *args, **kwargs)

    monkeypatch.setattr(WanTransformerBlock, "forward", changed_forward)
    block = _block()
    with caplog.at_level(logging.WARNING, logger="dit_lora.kernels"):
        counts = patch_model(block, POINTS, kernels="on", attention_backend="math")
    assert "forward" not in block.__dict__  # left on diffusers' own forward
    assert counts["modulate"] == counts["gated_residual"] == 0
    assert counts["attention"] == 2 and counts["rmsnorm"] == 4  # their sources did not change: still fused
    lines = [r.getMessage() for r in caplog.records if "WanTransformerBlock.forward" in r.getMessage()]
    assert len(lines) == 1 and "diffusers 0." in lines[0] and "fused ops are off" in lines[0], lines


def test_a_processor_whose_diffusers_source_changed_is_kept(monkeypatch):
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor

    original = WanAttnProcessor.__call__

    def changed_call(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    monkeypatch.setattr(WanAttnProcessor, "__call__", changed_call)
    block = _block()
    counts = patch_model(block, POINTS, kernels="on", attention_backend="math")
    assert counts["attention"] == 0 and type(block.attn1.processor) is WanAttnProcessor
    assert counts["modulate"] == 1 and counts["rmsnorm"] == 4


def _tiny_model():
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4,
                                  out_channels=4, text_dim=16, freq_dim=16, ffn_dim=32, num_layers=2,
                                  rope_max_seq_len=32)
    with torch.no_grad():
        for block in model.blocks:
            block.scale_shift_table.normal_(0, 0.5)
    gen = torch.Generator().manual_seed(1)
    inputs = {"hidden_states": torch.randn(BATCH, 4, 3, 6, 10, generator=gen),  # 3 x 3 x 5 = 45 tokens
              "timestep": torch.tensor([10.0, 500.0, 990.0]),
              "encoder_hidden_states": torch.randn(BATCH, TEXT, 16, generator=gen)}
    return model, inputs


def _model_run(model, inputs):
    model.zero_grad(set_to_none=True)
    x = inputs["hidden_states"].clone().requires_grad_()
    out = model(**{**inputs, "hidden_states": x}, return_dict=False)[0]
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(2)))
    return out.detach(), {"input": x.grad, **{n: p.grad for n, p in model.named_parameters()}}


def test_kernels_on_a_tiny_wan_model_give_the_same_output_and_grads_fp32():
    model, inputs = _tiny_model()
    ref_out, ref_grads = _model_run(model, inputs)
    counts = patch_model(model, POINTS, kernels="on", attention_backend="math")
    assert counts["modulate"] == counts["gated_residual"] == 2 and counts["attention"] == 4 and counts["rmsnorm"] == 8
    out, grads = _model_run(model, inputs)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    for name, g in ref_grads.items():
        scale = float(g.abs().max()) or 1.0
        torch.testing.assert_close(grads[name], g, rtol=1e-3, atol=1e-4 * scale, msg=lambda m: f"{name}: {m}")


def test_the_family_declares_its_points():
    from dit_lora.registry import get_family

    try:
        family = get_family("wan")
    except Exception as err:  # noqa: BLE001 - the Wan spec lands separately (issue 27)
        pytest.skip(f"the wan family is not registered yet: {err}")
    fused = family.kernels
    assert fused is not None and tuple(fused.kernel_patch_points()) == POINTS

