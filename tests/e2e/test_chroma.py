"""Chroma's levers on the tiny offline pipeline, in the fewest runs: ``--blocks_to_swap`` over both block lists and
``--activation_offloading`` each write the reference run's adapter bit for bit (and really ran; gradient checkpointing
on, with the mask handed to the single blocks), and an ``fp8_scaled`` base (the modulation network left in bf16)
skips a NaN update without a change and reloads into the unquantized pipeline within the base's quantization error.
Then Chroma1-HD's Hub layout from a single file. fp32 where bf16 is not the point (bf16 matmuls are 10x slower on a
CPU)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process
from quantized_reload import assert_quantization_error_only, capture_steps, check_quantized_outputs, \
    skipped_without_change

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]
ADAPTER = "pytorch_lora_weights.safetensors"
RUN = dict(family="chroma", mixed_precision="no", train_batch_size=2, max_train_steps=3, max_sequence_length=32,
           checkpointing_steps=0, gradient_checkpointing="true")


@pytest.fixture(scope="module")
def model_and_data(tmp_path_factory):
    """The demo's tiny ChromaPipeline and 4 captioned 64 px shapes."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.families.chroma.demo import build_tiny_chroma_pipeline

    root = tmp_path_factory.mktemp("chroma-levers")
    return build_tiny_chroma_pipeline(root / "tiny"), make_shapes_dataset(root / "shapes", n=4, size=64)


@pytest.fixture(scope="module")
def reference(model_and_data, tmp_path_factory):
    """The plain run's adapter tensors."""
    root = tmp_path_factory.mktemp("chroma-reference")
    summary, out = train_in_process(*model_and_data, root, **RUN)
    assert isinstance(summary, dict), summary
    return load_file(str(out / ADAPTER))


@pytest.mark.parametrize("lever", [{"blocks_to_swap": 1}, {"activation_offloading": "true"}], ids=["swap", "offload"])
def test_a_memory_lever_changes_no_bit(model_and_data, reference, tmp_path, lever, capsys):
    summary, out = train_in_process(*model_and_data, tmp_path, **RUN, **lever)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    said = capsys.readouterr().out
    if "blocks_to_swap" in lever:  # the last block of transformer_blocks and of single_transformer_blocks
        assert "block swap: 2 block(s)' frozen weights" in said, said[-3000:]
    else:
        assert "activation offloading" in said, said[-3000:]
    assert "caption tokens: the longest cached caption uses 16 of 32 padded tokens" in said  # --trim_text_padding
    got = load_file(str(out / ADAPTER))
    assert got.keys() == reference.keys() and all(torch.equal(got[k], reference[k]) for k in got)


def test_an_fp8_scaled_base_skips_the_nan_and_reloads_unquantized(model_and_data, tmp_path):
    from diffusers import ChromaPipeline

    seen, on_step = capture_steps()
    summary, out = train_in_process(*model_and_data, tmp_path, on_step=on_step, quantize_base="fp8_scaled",
                                    **{**RUN, "inject_faults": "nan_loss@2", "max_skipped_fraction": 0.5})
    check_quantized_outputs(summary, out, "fp8_scaled")
    skipped_without_change(seen, 2)
    model = seen["model"].eval()
    assert type(model.single_transformer_blocks[0].proj_mlp).__name__ == "Fp8ScaledLinear"
    assert type(model.distilled_guidance_layer.in_proj).__name__ == "Linear"  # kept out of quantization
    pipe = ChromaPipeline.from_pretrained(model_and_data[0], torch_dtype=torch.float32)
    inputs = _inputs(model.config)
    trained_q = _run(model, inputs)
    model.disable_adapters()
    base_q = _run(model, inputs)
    base_unq = _run(pipe.transformer, inputs)
    pipe.load_lora_weights(out)
    assert_quantization_error_only(trained_q, _run(pipe.transformer, inputs), base_q, base_unq)


def _inputs(config) -> dict:
    """A 4 x 4 token grid, 8 caption tokens (the second caption 3 long), two timesteps: what the pipeline gives the
    transformer, the mask boolean."""
    from dit_lora.families.chroma.loss import transformer_mask
    from dit_lora.families.diffusion.packed import latent_ids

    g = torch.Generator().manual_seed(0)
    caption_mask = torch.arange(8).expand(2, 8) <= torch.tensor([[7], [3]])
    return dict(hidden_states=torch.randn(2, 16, config.in_channels, generator=g),
                encoder_hidden_states=torch.randn(2, 8, config.joint_attention_dim, generator=g),
                timestep=torch.tensor([0.3, 0.8]), txt_ids=torch.zeros(8, 3),
                img_ids=latent_ids(4, 4, "cpu", torch.float32), attention_mask=transformer_mask(caption_mask, 16),
                return_dict=False)


def _run(transformer, inputs) -> torch.Tensor:
    with torch.no_grad():
        return transformer(**inputs)[0].float()


def test_the_hd_layout_from_a_single_file_is_found_trained_and_reloaded(tmp_path):
    """Chroma1-HD's Hub layout (tests/support/flux_layout.py: real widths, one double and one single block), its
    transformer also as one file in lodestones' layout behind ComfyUI's prefix: ``python -m dit_lora train`` without
    --family finds the family and the catalogue entry, plans its memory and trains one step from the file; the adapter
    reloads into the stock pipeline with every module live at scale 1. The CPU cannot train 1024 px at 3072 wide in
    a test: the size, caption length and precision are the only extra flags."""
    from diffusers import ChromaPipeline
    from flux_layout import chroma_pipeline
    from flux_single_file import write_bfl_flux_file
    from warm import run_script

    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.modelfiles.single_file import COMFY_PREFIX
    from helpers import ROOT, read_summary

    model = chroma_pipeline(tmp_path / "models")
    file = write_bfl_flux_file(model / "transformer", tmp_path / "Chroma1-HD.safetensors", COMFY_PREFIX)
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--transformer_file", file, "--train_data_dir", data,
            "--output_dir", out, "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--resolution", "64", "--max_sequence_length", "16", "--skip_doctor", "true"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text = " ".join(proc.stdout.split())
    assert "has the published config of lodestones/Chroma1-HD" in text
    assert "except num_layers 1 (published: 19), num_single_layers 1 (published: 38)" in text
    assert "memory plan: predicted peak" in text
    summary = read_summary(out)
    assert summary["config"]["family"] == "chroma" and summary["status"] == "completed"
    assert summary["defaults"]["applied"]["rank"] == 16 and summary["defaults"]["applied"]["validation_guidance_scale"] == 5.0
    pipe = ChromaPipeline.from_pretrained(model, torch_dtype=torch.bfloat16, text_encoder=None, tokenizer=None)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / ADAPTER))
    live = {n: m for n, m in pipe.transformer.named_modules() if hasattr(m, "lora_A") and m.active_adapters}
    assert len(live) == 12 + 3 and 2 * len(live) == len(saved)  # the double block's 12 targets, the single's q/k/v
    assert all(m.scaling[m.active_adapters[0]] == 1.0 for m in live.values())
