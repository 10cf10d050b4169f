"""The step diagnosis: a faulty step replayed in fp32 and classified as data, precision or model (tiny Sana, CPU)."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch

from dit_lora.output.names import NONFINITE_REPORT_FILE
from dit_lora.core.fileio import write_json_atomic
from dit_lora.training.diagnose import diagnose_step, format_paragraph

ROWS = ["data/red_circle.png", "data/blue_square.png"]


def _diagnose(model, loss_fn, batch, **kw):
    noise = torch.Generator().manual_seed(7)
    args = dict(model=model, loss_fn=loss_fn, batch=batch, generator_state=noise.get_state(),
                autocast_ctx=lambda: torch.autocast("cpu", dtype=torch.bfloat16), sample_names=ROWS, step=5,
                observed={"loss": float("nan"), "grad_norm": float("inf"), "nonfinite_loss": True,
                          "nonfinite_grad": True, "learning_rate": 1e-3})
    args.update(kw)
    return diagnose_step(**args)


def _strict_json(report) -> dict:
    def no_constant(name):
        raise AssertionError(f"non-finite JSON constant {name}")

    return json.loads(json.dumps(report, allow_nan=False), parse_constant=no_constant)


def _overflow_under_autocast(module, args, output):
    if not torch.is_autocast_enabled("cpu"):
        return None
    return output.float().mul(1e6).half()


# ---------------------------------------------------------------------------------------------
# diagnosis
# ---------------------------------------------------------------------------------------------
def test_nonfinite_input_is_data_and_names_the_sample(sana_step, tmp_path):
    model, loss_fn, batch = sana_step
    batch["latents"][1, 2, 3, 4] = float("nan")
    report = _diagnose(model, loss_fn, batch)
    assert report["classification"] == "data"
    assert report["inputs"]["nonfinite"][0]["key"] == "latents"
    assert report["inputs"]["nonfinite"][0]["samples"] == [ROWS[1]]
    assert "fp32" not in report["replays"]  # not needed to classify bad data
    assert ROWS[1] in report["advice"][0] and "dit-lora check-data" in report["advice"][0]
    assert report["timesteps"] and len(report["timesteps"]) == 2
    assert report["samples"][1] == {"row": 1, "name": ROWS[1], "sample_index": 11}
    assert ROWS[1] in report["paragraph"] and "\n" not in report["paragraph"]
    path = write_json_atomic(tmp_path / NONFINITE_REPORT_FILE, report)  # as the recovery writes it
    on_disk = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"NaN constant {c} in report"))
    assert on_disk["classification"] == "data" and on_disk["observed"]["loss"] == "nan"
    assert not list(path.parent.glob(".*.tmp"))


def test_overflow_only_under_autocast_is_precision(sana_step):
    model, loss_fn, batch = sana_step
    target = "transformer_blocks.0.attn1"
    handle = model.get_submodule(target).register_forward_hook(_overflow_under_autocast)
    params = list(model.parameters())
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    lora = next(p for n, p in model.named_parameters() if p.requires_grad)
    old_grad = torch.full_like(lora, 0.25)
    lora.grad = old_grad
    cpu_rng = torch.get_rng_state()
    try:
        report = _diagnose(model, loss_fn, batch)
    finally:
        handle.remove()
    assert report["classification"] == "precision", report["paragraph"]
    run, fp32 = report["replays"]["run_precision"], report["replays"]["fp32"]
    assert run["first_nonfinite_module"]["name"] == target
    assert run["first_nonfinite_module"]["output_dtype"] == "float16"
    assert run["first_nonfinite_module"]["output"]["output"]["inf"] > 0
    assert run["first_nonfinite_module"]["inputs_finite"] is True
    assert run["autocast_dtype"] == "bfloat16"
    assert fp32["nonfinite"] is False and fp32["first_nonfinite_module"] is None
    assert report["first_module"]["attention"]["processor"] == "SanaLinearAttnProcessor2_0"
    assert any("--attention_canary" in a for a in report["advice"])
    assert target in report["paragraph"]
    _strict_json(report)
    # nothing of the run changed: values bitwise, dtypes, identity, grads, modes, global RNG
    assert list(model.parameters()) == params and all(a is b for a, b in zip(model.parameters(), params))
    for n, p in model.named_parameters():
        assert p.dtype == dtypes[n], n
        assert torch.equal(p.detach(), before[n]), n
        assert p.grad is None or p is lora, n
    assert lora.grad is old_grad and torch.all(old_grad == 0.25)
    assert model.training and all(m.training for m in model.modules())
    assert torch.equal(torch.get_rng_state(), cpu_rng)


def test_nan_in_fp32_too_is_model_or_optimizer_and_fault_context_is_used(sana_step):
    model, loss_fn, batch = sana_step
    target = model.get_submodule("transformer_blocks.1.ff")
    entered = []

    class Drill:
        def __enter__(self):
            entered.append(1)
            self.handle = target.register_forward_hook(lambda m, a, out: out + float("nan"))

        def __exit__(self, *exc):
            self.handle.remove()

    report = _diagnose(model, loss_fn, batch, fault_context=Drill)
    assert len(entered) == 2  # once per replay
    assert report["classification"] == "model/optimizer"
    for key in ("run_precision", "fp32"):
        assert report["replays"][key]["first_nonfinite_module"]["name"] == "transformer_blocks.1.ff"
        assert report["replays"][key]["loss"] == "nan"
    assert any("--learning_rate (now 0.001)" in a for a in report["advice"])
    assert not any("--attention_canary" in a for a in report["advice"])
    assert not target._forward_hooks
    _strict_json(report)


def test_clean_replay_is_not_reproduced(sana_step):
    model, loss_fn, batch = sana_step
    report = _diagnose(model, loss_fn, batch)
    assert report["classification"] == "not reproduced"
    assert report["replays"]["run_precision"]["nonfinite"] is False
    assert isinstance(report["replays"]["fp32"]["grad_norm"], float)
    assert "transient" in report["advice"][0]
    assert format_paragraph(report).startswith("Step 5 went non-finite")
    assert not any("--compile off" in a for a in report["advice"])


def test_a_fault_not_reproduced_by_the_eager_replay_of_a_compiled_step_names_compile_off(sana_step):
    from dit_lora.training.diagnose_advice import advice_for

    model, loss_fn, batch = sana_step
    report = _diagnose(model, loss_fn, batch)
    report["observed"]["compile"] = "blocks"
    assert any("--compile blocks" in a and "--compile off" in a for a in advice_for(report))


def _quantized_linear_model(compute_dtype: torch.dtype):
    """A frozen bitsandbytes nf4 linear (weights all 1, computing in ``compute_dtype``) and a trainable fp32 head."""
    bnb = pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)
    proj = bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=compute_dtype, quant_type="nf4")
    proj.weight = bnb.nn.Params4bit(torch.ones(64, 64), requires_grad=False, quant_type="nf4")
    model = torch.nn.Sequential(proj.to("cpu"), torch.nn.Linear(64, 1))  # .to() quantizes the weight
    model[0].weight.requires_grad_(False)
    return model


def test_a_precision_fault_of_the_quantized_base_names_quantize_base():
    """A non-finite step on an nf4 base whose fp32 replay (same nf4 weights, fp32 compute) is finite is a precision
    fault of the quantized base: a real fp16 overflow (64 x 2000 > 65504), and a bf16 fault (a hook on the linear
    that fires unless it computes in fp32). The compute dtype is restored afterwards."""
    def loss_fn(model, batch, generator):
        return model(batch["x"]).float().pow(2).mean()

    batch = {"x": torch.full((2, 64), 2000.0), "sample_index": torch.tensor([0, 1])}
    model = _quantized_linear_model(torch.float16)
    report = _diagnose(model, loss_fn, batch, autocast_ctx=contextlib.nullcontext)
    assert report["classification"] == "precision", report["paragraph"]
    assert report["quantized_base"] == {"scheme": "nf4", "modules": 1, "compute_dtype": "float16"}
    assert report["replays"]["fp32"]["nonfinite"] is False and model[0].compute_dtype == torch.float16
    assert "precision fault of the quantized base (--quantize_base nf4" in report["paragraph"]
    assert "--mixed_precision bf16" in report["advice"][0] and "--quantize_base int8 or none" in report["advice"][0]
    assert "fp32 (the nf4 weights, computed in fp32): finite" in report["paragraph"]
    _strict_json(report)

    model = _quantized_linear_model(torch.bfloat16)
    model[0].register_forward_hook(lambda m, args, out: out * float("inf") if m.compute_dtype != torch.float32 else None)
    report = _diagnose(model, loss_fn, {**batch, "x": torch.randn(2, 64)}, autocast_ctx=contextlib.nullcontext)
    assert report["classification"] == "precision" and report["quantized_base"]["compute_dtype"] == "bfloat16"
    assert "--quantize_base int8" in report["advice"][0] and "--mixed_precision no" in report["advice"][0]
    assert any("--learning_rate" in a for a in report["advice"]) and model[0].compute_dtype == torch.bfloat16


def test_a_fp8_scaled_base_is_named_and_replayed_in_fp32_with_the_same_weights():
    """fp8_scaled's linears compute in their input's dtype without autocast, so the fp32 replay runs them in fp32
    with the same fp8 weights; the report names the scheme (a hook makes bf16 compute overflow)."""
    from dit_lora.modeling.fp8_scaled import convert

    def loss_fn(model, batch, generator):
        return model(batch["x"]).float().pow(2).mean()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1))
    model[0].to(torch.bfloat16).requires_grad_(False)
    convert(model, ["0"])
    model[0].register_forward_hook(lambda m, args, out: out * float("inf") if out.dtype != torch.float32 else None)
    batch = {"x": torch.randn(2, 64, dtype=torch.bfloat16), "sample_index": torch.tensor([0, 1])}
    model[1].to(torch.bfloat16)
    report = _diagnose(model, loss_fn, batch, autocast_ctx=contextlib.nullcontext)
    assert report["classification"] == "precision", report["paragraph"]
    assert report["quantized_base"] == {"scheme": "fp8_scaled", "modules": 1, "compute_dtype": None}
    assert "fp32 (the fp8_scaled weights, computed in fp32): finite" in report["paragraph"]
    assert model[0].weight_dtype == torch.bfloat16
