"""What the quantized-base end-to-end tests share (nf4/int8 in test_quantized_base.py, fp8_scaled in
test_fp8_scaled_base.py): the trainable weights after every update, the guard drill's check, and the adapter
reloaded into the ordinary unquantized model within the base's quantization error."""

from __future__ import annotations

import torch
from safetensors.torch import load_file


def capture_steps():
    """``(seen, on_step)``: ``on_step`` keeps the trained model and a copy of its trainable weights after every
    update in ``seen`` (``seen["model"]``, ``seen["weights"][step]``)."""
    seen: dict = {"weights": {}}

    def on_step(step, model, optimizer):
        seen["model"] = model
        seen["weights"][step] = [p.detach().clone() for p in model.parameters() if p.requires_grad]

    return seen, on_step


def skipped_without_change(seen, step: int) -> None:
    """The drilled update ``step`` left every trainable weight bitwise as it was; the next one moved them."""
    before, at, after = (seen["weights"][s] for s in (step - 1, step, step + 1))
    assert all(torch.equal(a, b) for a, b in zip(before, at))
    assert any(not torch.equal(a, b) for a, b in zip(at, after))


def assert_quantization_error_only(trained_q, reloaded, base_q, base_unq):
    """The reloaded unquantized model + adapter vs the trained quantized one: no further from it than the two
    bases are from each other (plus a little), and the adapter moved the output."""
    err = (trained_q - reloaded).abs().max().item()
    quant = (base_q - base_unq).abs().max().item()
    assert quant > 0  # the base really was quantized
    assert err <= 1.5 * quant + 1e-5, (err, quant)
    assert (reloaded - base_unq).abs().max().item() > 1e-6  # the adapter does something


def check_quantized_outputs(summary, out, scheme: str = "nf4"):
    """The run completed on a ``scheme`` base, its card says so, and its adapter is finite fp32."""
    assert isinstance(summary, dict), summary
    assert summary["config"]["quantize_base"] == scheme
    card = (out / "README.md").read_text()
    assert "Trained on a quantized base" in card and f"--quantize_base {scheme}" in card
    assert all(torch.isfinite(v).all() and v.dtype == torch.float32
               for v in load_file(str(next(out.glob("*.safetensors")))).values())


def reloads_within_quantization_error(model, pipeline_class, model_dir, out, layer: str, **inputs) -> None:
    """The trained model's base layers are ``layer``s (bitsandbytes' or fp8_scaled's) and the adapter, put on the
    unquantized fp32 pipeline by diffusers' load_lora_weights, gives its output up to the base's quantization
    error."""
    model = model.eval()
    first_q = next(m for n, m in model.named_modules() if n.endswith("0.attn1.to_q"))  # transformer_blocks / blocks
    assert type(first_q.base_layer).__name__ == layer
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if p.requires_grad)

    def run(m):
        with torch.no_grad():
            return m(**inputs).sample.float()

    trained_q = run(model)
    model.disable_adapters()
    base_q = run(model)
    model.enable_adapters()
    pipe = pipeline_class.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    base_unq = run(pipe.transformer)
    pipe.load_lora_weights(str(out))  # stock diffusers loader, unquantized fp32 transformer
    assert not getattr(pipe.transformer, "is_quantized", False)
    assert isinstance(pipe.transformer, type(model))
    assert_quantization_error_only(trained_q, run(pipe.transformer), base_q, base_unq)


def dit_reloads_within_quantization_error(model, tiny_dit, out) -> None:
    """A DiT trained on a quantized base with a resized class table: the trained quantized ``model`` against the
    adapter reloaded the way the card says (the resized table prepared, the backbone file, PEFT's own loader) into
    the unquantized pipeline from ``tiny_dit``, within the quantization error."""
    from diffusers import DiTPipeline
    from peft import PeftModel

    from dit_lora.output.names import BACKBONE_FILE
    from dit_lora.registry import get_family

    torch.manual_seed(0)
    x, t, labels = torch.randn(2, 4, 8, 8), torch.tensor([10, 600]), torch.tensor([0, 2])

    def run(m):
        with torch.no_grad():
            return m(x, timestep=t, class_labels=labels).sample.float()

    trained_q = run(model)
    model.disable_adapters()
    base_q = run(model)  # LoRA off, the trained class table still in
    base = DiTPipeline.from_pretrained(str(tiny_dit), torch_dtype=torch.float32)
    get_family("dit").fitting.prepare_pipeline_for_adapter(base, out)  # the resized class table, as the card says
    base.transformer.load_state_dict(load_file(str(out / BACKBONE_FILE)), strict=False)
    base_unq = run(base.transformer)
    reloaded = PeftModel.from_pretrained(base.transformer, str(out)).eval()  # PEFT's own loader
    assert_quantization_error_only(trained_q, run(reloaded), base_q, base_unq)
