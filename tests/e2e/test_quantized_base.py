"""--quantize_base nf4 end to end on the CPU (bitsandbytes 0.50 runs Linear4bit forward and backward there).

Train a few steps on a quantized base, then reload the saved adapter into the ordinary unquantized pipeline with
the stock loaders: its output differs from the quantized trained model's by the base's quantization error only.
A guard drill still skips exactly one step, and a killed nf4 run resumes to the same adapter bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from helpers import base_args, read_summary, run_recipe, train_in_process

pytest.importorskip("bitsandbytes")

NF4 = dict(quantize_base="nf4", mixed_precision="no", resolution=32, train_batch_size=2, max_train_steps=4)


def _capture():
    seen = {}

    def on_step(step, model, optimizer):
        seen["model"] = model
    return seen, on_step


def _assert_quantization_error_only(trained_q, reloaded, base_q, base_unq):
    """The reloaded unquantized model + adapter vs the trained quantized one: no further from it than the two
    bases are from each other (plus a little), and the adapter moved the output."""
    err = (trained_q - reloaded).abs().max().item()
    quant = (base_q - base_unq).abs().max().item()
    assert quant > 0  # the base really was quantized
    assert err <= 1.5 * quant + 1e-5, (err, quant)
    assert (reloaded - base_unq).abs().max().item() > 1e-6  # the adapter does something


def _check_outputs(summary, out):
    assert isinstance(summary, dict), summary
    assert summary["config"]["quantize_base"] == "nf4"
    card = (out / "README.md").read_text()
    assert "Trained on a quantized base" in card and "--quantize_base nf4" in card
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32
               for v in load_file(str(next(out.glob("*.safetensors")))).values())


@pytest.mark.slow
def test_sana_nf4_trains_and_reloads_into_an_unquantized_pipeline(tiny_sana, shapes_data, tmp_path):
    from diffusers import SanaPipeline, SanaTransformer2DModel

    seen, on_step = _capture()
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, on_step=on_step, **NF4)
    _check_outputs(summary, out)
    model = seen["model"].eval()
    assert type(model.transformer_blocks[0].attn1.to_q.base_layer).__name__ == "Linear4bit"
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if p.requires_grad)

    torch.manual_seed(0)
    x = torch.randn(2, model.config.in_channels, 2, 2)
    enc = torch.randn(2, 8, model.config.caption_channels)
    t = torch.tensor([100.0, 700.0])

    def run(m):
        with torch.no_grad():
            return m(x, encoder_hidden_states=enc, timestep=t).sample.float()

    trained_q = run(model)
    model.disable_adapters()
    base_q = run(model)
    pipe = SanaPipeline.from_pretrained(str(tiny_sana), torch_dtype=torch.float32)
    base_unq = run(pipe.transformer)
    pipe.load_lora_weights(str(out))  # stock diffusers loader, unquantized fp32 transformer
    assert not getattr(pipe.transformer, "is_quantized", False)
    assert isinstance(pipe.transformer, SanaTransformer2DModel)
    _assert_quantization_error_only(trained_q, run(pipe.transformer), base_q, base_unq)


@pytest.mark.slow
def test_dit_nf4_guard_drill_skips_one_step_and_reloads(tiny_dit, shape_classes, tmp_path):
    """DiT with a resized class embedding (an Embedding: trainable on a quantized base) and a NaN drill at step 2."""
    from diffusers import DiTPipeline
    from peft import PeftModel

    from dit_lora.output.names import BACKBONE_FILE

    seen, on_step = _capture()
    summary, out = train_in_process(tiny_dit, shape_classes, tmp_path, on_step=on_step, family="dit", num_classes=3,
                                    inject_faults="nan_loss@2", **{**NF4, "resolution": 64})
    _check_outputs(summary, out)
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 3
    model = seen["model"].eval()

    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 8)
    t = torch.tensor([10, 600])
    labels = torch.tensor([0, 2])

    def run(m):
        with torch.no_grad():
            return m(x, timestep=t, class_labels=labels).sample.float()

    trained_q = run(model)
    model.disable_adapters()
    base_q = run(model)  # LoRA off, the trained class table still in
    base = DiTPipeline.from_pretrained(str(tiny_dit), torch_dtype=torch.float32)
    from dit_lora.families import get_family

    get_family("dit").prepare_pipeline_for_adapter(base, out)  # the resized class table, as the card says
    base.transformer.load_state_dict(load_file(str(out / BACKBONE_FILE)), strict=False)
    base_unq = run(base.transformer)
    reloaded = PeftModel.from_pretrained(base.transformer, str(out)).eval()  # PEFT's own loader
    _assert_quantization_error_only(trained_q, run(reloaded), base_q, base_unq)


@pytest.mark.slow
def test_nf4_killed_run_resumes_bit_for_bit(tiny_sana, shapes_data, tmp_path):
    opts = dict(NF4, checkpointing_steps=2, lr_scheduler="cosine", lr_warmup_steps=1)
    cache = tmp_path / "cache"
    ref = tmp_path / "ref"
    proc = run_recipe(base_args(tiny_sana, shapes_data, ref, cache, **opts))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "interrupted"
    killed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **opts), env={"DIT_LORA_FAULT": "micro_batch:3"})
    assert killed.returncode == 137, killed.stdout + killed.stderr
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, resume_from_checkpoint="latest", **opts))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "checkpoint-2 at step 2" in resumed.stdout, resumed.stdout
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (ref, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert read_summary(out)["loss_history"] == read_summary(ref)["loss_history"]
