"""training/diagnose_advice.py: the advice and the paragraph a diagnosis report turns into (hand-made reports).

The replay that fills a report on a real model is tests/training/test_diagnose.py's.
"""

from __future__ import annotations

from dit_lora.training.diagnose_advice import MAX_NAMES, advice_for, format_paragraph


def report(classification, **changes):
    """A small diagnosis report of the shape :mod:`dit_lora.training.diagnose` writes."""
    base = {
        "step": 5, "classification": classification,
        "observed": {"learning_rate": 0.001, "max_grad_norm": 1.0, "compile": None},
        "replays": {"run_precision": {"precision": "bf16", "autocast_dtype": "bfloat16", "nonfinite": True,
                                      "loss": float("nan")},
                    "fp32": {"precision": "fp32", "nonfinite": False, "loss": 0.25, "grad_norm": 1.5}},
        "first_module": None, "inputs": {"nonfinite": []},
        "nonfinite_parameters": {"count": 0, "names": []}, "samples": [{"name": "cat.png"}],
    }
    base.update(changes)
    return base


def test_data_fault_names_the_samples_and_the_scan():
    bad = {"nonfinite": [{"key": "latents", "samples": ["b.png", "a.png"]}]}
    (advice,) = advice_for(report("data", inputs=bad))
    assert advice.startswith("check sample(s) a.png, b.png: their latents hold NaN/Inf")
    assert "dit-lora check-data" in advice


def test_precision_fault_advice_depends_on_the_dtype_and_the_quantized_base():
    first = {"name": "blocks.0.attn", "type": "Attention"}
    fp16 = report("precision", first_module=first, weights_dtype="float16")
    assert "--mixed_precision bf16" in advice_for(fp16)[0] and "`blocks.0.attn` (Attention)" in advice_for(fp16)[0]
    assert advice_for(fp16)[-1] == "if activations grew during training, lower --learning_rate (now 0.001)."
    bf16 = advice_for(report("precision", first_module=first))
    assert bf16[0].startswith("bfloat16 goes non-finite in module `blocks.0.attn`") and "fp32" in bf16[0]
    nf4 = advice_for(report("precision", quantized_base={"scheme": "nf4", "modules": 12, "compute_dtype": None}))
    assert "--quantize_base nf4, 12 quantized linears" in nf4[0] and "--quantize_base int8" in nf4[0]
    int8 = advice_for(report("precision", quantized_base={"scheme": "int8", "modules": 3}))
    assert "LLM.int8 still quantizes its inputs" in int8[0] and "--quantize_base none" in int8[0]
    scaled = advice_for(report("precision", quantized_base={"scheme": "fp8_scaled", "modules": 4}))
    assert "--quantize_base fp8_scaled, 4 quantized linears" in scaled[0] and "--mixed_precision no" in scaled[0]
    assert "--quantize_base int8" not in scaled[0]  # it computes in the run's precision: int8 is no way out


def test_model_fault_advice_on_weights_clipping_and_the_loss():
    broken = report("model/optimizer", nonfinite_parameters={"count": 2, "names": ["lora_A.weight", "x"]},
                    observed={"learning_rate": 0.01, "max_grad_norm": 0.0, "train_backbone": "norms"})
    advice = advice_for(broken)
    assert "`lora_A.weight`" in advice[0] and "--resume_from_checkpoint latest" in advice[0]
    assert "enable gradient clipping with --max_grad_norm 1.0 (now 0: off)" in advice
    assert advice[-1].endswith("(now norms)")
    unclipped = advice_for(report("model/optimizer", observed={}))
    assert "keep gradient clipping on (--max_grad_norm 1.0; 0 disables it)" in unclipped
    loss_only = report("model/optimizer")
    loss_only["replays"]["run_precision"]["loss_finite"] = False
    assert "look at the loss computation" in advice_for(loss_only)[-1]


def test_transient_failed_replay_and_attention_advice():
    transient = advice_for(report("not reproduced", observed={"loss": float("inf"), "compile": "blocks"}))
    assert "loss=inf" in transient[0] and "transient" in transient[0]
    assert "--compile off" in transient[1]
    failed = report("replay failed")
    failed["replays"]["fp32"]["error"] = "CUDA out of memory"
    assert "(CUDA out of memory)" in advice_for(failed)[0]
    attention = {"name": "a", "type": "Attention", "attention": {"module": "a", "processor": "FusedProc"}}
    assert "processor FusedProc" in advice_for(report("model/optimizer", first_module=attention))[-1]


def test_the_paragraph_reads_in_order_and_caps_long_lists():
    assert format_paragraph({}) == "no non-finite step was diagnosed."
    samples = [{"name": f"s{i}.png"} for i in range(MAX_NAMES + 3)]
    rep = report("data", samples=samples, timesteps=[0.5, 0.25],
                 inputs={"nonfinite": [{"key": "latents", "samples": ["s0.png"]}]})
    rep["advice"] = advice_for(rep)
    text = format_paragraph(rep)
    assert text.startswith("Step 5 went non-finite (the loop saw learning rate 0.001, max grad norm 1); "
                           "diagnosis: data.")
    assert f"s{MAX_NAMES - 1}.png and 3 more at timesteps 0.5, 0.25." in text
    assert "Input `latents` is non-finite in sample(s) s0.png." in text
    assert "Replay fp32: finite (loss 0.25, grad norm 1.5)." in text
    assert text.index("Replay bf16") < text.index("Replay fp32") < text.index("What to do: Check sample(s)")
