"""FLUX.2 end to end on the tiny offline pipelines: the shipped demo (FLUX.2 [dev], bf16, validation, reload), and on
the klein pipeline the promises in the fewest runs: one drilled run (a NaN update changes nothing; the adapter reloads
into the stock ``Flux2KleinPipeline`` with every LoRA module live and gives the trained model's output), a run killed
mid-step that resumes to the same adapter bytes, ``--blocks_to_swap`` over both block lists (bitwise the run without),
and the quantized bases (``fp8_scaled``, ``nf4``) whose adapters reload into the unquantized model within the base's
quantization error. fp32 where bf16 is not the point (bf16 matmuls are 10x slower on a CPU)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file

from helpers import ROOT, base_args, read_summary, run_recipe, train_in_process
from quantized_reload import assert_quantization_error_only, capture_steps, check_quantized_outputs, \
    skipped_without_change

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]
ADAPTER = "pytorch_lora_weights.safetensors"
#: the klein runs: 4 fp32 updates of batch 2, a checkpoint at 2, the third update a NaN the guard skips
KLEIN = dict(family="flux2", mixed_precision="no", train_batch_size=2, max_train_steps=4, checkpointing_steps=2,
             max_sequence_length=16, inject_faults="nan_loss@3", max_skipped_fraction=0.5, attention_canary="false")


def _file(out: Path) -> tuple[dict, bytes]:
    """The adapter file as (its header as JSON: safetensors orders the metadata keys at random, the bytes after)."""
    raw = (out / ADAPTER).read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


@pytest.fixture(scope="module")
def klein(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny Flux2KleinPipeline (a base model: no guidance embedding, CFG) and 4 captioned 64 px shapes."""
    from dit_lora.data.synthetic.shapes import make_shapes_dataset
    from dit_lora.families.flux2.demo import build_tiny_flux2_pipeline

    root = tmp_path_factory.mktemp("flux2")
    return build_tiny_flux2_pipeline(root / "klein", "klein"), make_shapes_dataset(root / "shapes", n=4, size=64)


@pytest.fixture(scope="module")
def drilled(klein, tmp_path_factory):
    """The reference klein run: ``(summary, output folder, trained model, the weights after every update)``."""
    seen, on_step = capture_steps()
    root = tmp_path_factory.mktemp("flux2-drilled")
    summary, out = train_in_process(*klein, root, on_step=on_step, **KLEIN)
    assert isinstance(summary, dict), summary
    return summary, out, seen


def _inputs(config) -> dict:
    """A 4 x 4 token grid, 16 caption tokens, two timesteps: what the pipeline gives the transformer."""
    from dit_lora.families.flux2.loss import latent_ids, text_ids

    torch.manual_seed(0)
    return dict(hidden_states=torch.randn(2, 16, config.in_channels),
                encoder_hidden_states=torch.randn(2, 16, config.joint_attention_dim),
                timestep=torch.tensor([0.2, 0.9]), img_ids=latent_ids(4, 4, "cpu"), txt_ids=text_ids(16, "cpu"),
                guidance=None, return_dict=False)


def _run(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs)[0].float()


def _lora_modules(model) -> dict[str, torch.nn.Module]:
    return {n: m for n, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A)}


def test_demo_config_trains_validates_and_reloads(tmp_path):
    """The shipped demo.yaml (FLUX.2 [dev]: guidance embedding, Mistral-3) end to end, paths redirected into tmp."""
    cfg = yaml.safe_load((ROOT / "recipes/configs/flux2/demo.yaml").read_text())
    demo = tmp_path / "demo"
    # fp32: the audited bf16 run of this config is tests/conformance's (bf16 matmuls are slow on a CPU)
    args = ["--config", str(ROOT / "recipes/configs/flux2/demo.yaml"), "--skip_doctor", "--mixed_precision", "no"]
    for key, value in {"pretrained_model_name_or_path": demo / "tiny-flux2", "train_data_dir": demo / "shapes",
                       "output_dir": demo / "output", "cache_dir": demo / "cache"}.items():
        args += [f"--{key}", str(value)]
    proc = run_recipe(args, recipe="flux2", timeout=400, warm=True, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = demo / "output"
    summary = read_summary(out)
    assert summary["steps"] == cfg["max_train_steps"] and summary["skipped_steps"] == 0
    losses = [loss for _, loss in summary["loss_history"]]
    assert all(loss is not None for loss in losses)
    weights = load_file(str(out / ADAPTER))
    assert weights and all(k.startswith("transformer.") and torch.isfinite(v).all() for k, v in weights.items())
    assert any(".single_transformer_blocks.1.attn.to_qkv_mlp_proj." in k for k in weights)
    for name in ("step4_0.png", "final_0.png"):  # from the in-memory model, then the reloaded one
        assert Image.open(out / "samples" / name).size == (64, 64)
    card = (out / "README.md").read_text()
    assert "Flux2Pipeline.from_pretrained" in card and "load_lora_weights" in card
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]


def test_klein_drill_changes_nothing_and_the_adapter_reloads_live_at_the_trained_output(klein, drilled):
    from diffusers import Flux2KleinPipeline

    summary, out, seen = drilled
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 3 and summary["status"] == "completed"
    skipped_without_change(seen, 3)
    model = seen["model"].eval()
    inputs = _inputs(model.config)
    trained = _run(model, inputs)
    pipe = Flux2KleinPipeline.from_pretrained(klein[0], torch_dtype=torch.float32)
    base = _run(pipe.transformer, inputs)
    pipe.load_lora_weights(out)  # the stock loader
    reloaded, trained_lora = _lora_modules(pipe.transformer), _lora_modules(model)
    assert reloaded.keys() == trained_lora.keys() and len(reloaded) == 12  # 2 x 4 double + 2 x 2 single modules
    config = summary["config"]
    for name, module in reloaded.items():  # every module live: active, scale 1 (alpha/r folded into lora_B)
        adapter = module.active_adapters[0]
        assert module.scaling[adapter] == 1.0 and module.lora_B[adapter].weight.abs().sum() > 0, name
        expected = trained_lora[name].lora_B["default"].weight * config["lora_alpha"] / config["rank"]
        torch.testing.assert_close(module.lora_B[adapter].weight, expected)
    torch.testing.assert_close(_run(pipe.transformer, inputs), trained, rtol=1e-5, atol=1e-5)
    assert (trained - base).abs().max() > 1e-4  # the adapter does something
    # the run also wrote the ComfyUI-named file (ComfyUI maps no diffusers name of FLUX.2's single blocks), every
    # module of the adapter in it: the double blocks' q/k/v fused into one qkv
    from safetensors.torch import load_file

    comfy = load_file(str(out / "pytorch_lora_weights_comfyui.safetensors"))
    assert comfy and all(k.startswith("diffusion_model.") for k in comfy)
    assert len(comfy) == 2 * (len(reloaded) - 2 * 2)  # lora_A and lora_B of 8 modules: each double block's 3 fused


def test_klein_with_blocks_swapped_in_both_lists_killed_mid_step_resumes_to_the_reference_bytes(klein, drilled,
                                                                                                  tmp_path):
    """One run pair for two promises: ``--blocks_to_swap 1`` (the last block of ``transformer_blocks`` and of
    ``single_transformer_blocks``) changes no value, and a run killed mid-step resumes bit for bit: killed at update
    4, resumed from checkpoint-2, it ends on the drilled reference's (unswapped, uninterrupted) adapter bytes."""
    from dit_lora.modeling.swap_hooks import BlockSwap

    _, reference, _ = drilled
    out, cache = tmp_path / "killed", reference.parent / "cache"
    flags = {**KLEIN, "lr_scheduler": "linear", "lr_warmup_steps": 2}  # what train_in_process runs with
    killed = run_recipe(base_args(*klein, out, cache, blocks_to_swap=1, **flags), recipe="flux2", warm=True,
                        env={"DIT_LORA_FAULT": "micro_batch:4"})
    assert killed.returncode == 137, killed.stdout[-2000:] + killed.stderr[-2000:]
    assert "block swap: 2 block(s)' frozen weights" in killed.stdout  # one of each list
    brought: list[str] = []
    bring = BlockSwap._bring
    with pytest.MonkeyPatch.context() as patch:  # count the copies: the swap must really have run
        patch.setattr(BlockSwap, "_bring", lambda self, state: (brought.append("x"), bring(self, state))[1])
        summary, _ = train_in_process(*klein, tmp_path, output_dir=out, resume_from_checkpoint="latest",
                                      blocks_to_swap=1, **KLEIN)
    assert isinstance(summary, dict) and summary["status"] == "completed", summary
    assert brought and summary["applied_updates"] == 3  # 1, 2 before the kill; 3 the drill skips; 4 after it
    assert _file(out) == _file(reference)


@pytest.mark.parametrize("scheme", ["fp8_scaled", "nf4"])
def test_klein_on_a_quantized_base_skips_the_nan_and_reloads_unquantized(klein, tmp_path, scheme):
    from diffusers import Flux2KleinPipeline

    if scheme == "nf4":
        pytest.importorskip("bitsandbytes")
    seen, on_step = capture_steps()
    summary, out = train_in_process(*klein, tmp_path, on_step=on_step, quantize_base=scheme,
                                    **{**KLEIN, "max_train_steps": 3, "checkpointing_steps": 0,
                                       "inject_faults": "nan_loss@2", "max_skipped_fraction": 0.5})
    check_quantized_outputs(summary, out, scheme)
    skipped_without_change(seen, 2)
    model = seen["model"].eval()
    layer = model.single_transformer_blocks[0].attn.to_qkv_mlp_proj.base_layer
    assert type(layer).__name__ == ("Fp8ScaledLinear" if scheme == "fp8_scaled" else "Linear4bit")
    inputs = _inputs(model.config)
    trained_q = _run(model, inputs)
    model.disable_adapters()
    base_q = _run(model, inputs)
    pipe = Flux2KleinPipeline.from_pretrained(klein[0], torch_dtype=torch.float32)
    base_unq = _run(pipe.transformer, inputs)
    pipe.load_lora_weights(out)
    assert_quantization_error_only(trained_q, _run(pipe.transformer, inputs), base_q, base_unq)


def test_klein_base_4b_layout_is_found_trained_and_reloaded(tmp_path):
    """The Hub layout of FLUX.2-klein-base-4B (tests/support/flux2_layout.py: real widths, one double and one single
    block): ``python -m dit_lora train`` without --family finds the family from the folder, gets the catalogue's
    defaults, plans its memory, trains one step; the adapter reloads into the stock pipeline with every module live.
    The CPU cannot train 1024 px at 3072 wide in a test: the size, caption length and accumulation are the only extra
    flags."""
    from diffusers import Flux2KleinPipeline
    from flux2_layout import klein_pipeline
    from warm import run_script

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    model = klein_pipeline(tmp_path / "models")
    data = make_shapes_dataset(tmp_path / "data", n=2, size=64, seed=0)
    out = tmp_path / "out"
    args = ["train", "--pretrained_model_name_or_path", model, "--train_data_dir", data, "--output_dir", out,
            "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no", "--resolution", "64",
            "--max_sequence_length", "16", "--gradient_accumulation_steps", "1", "--skip_doctor", "true"]
    proc = run_script(ROOT / "dit_lora" / "__main__.py", args, timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    text = " ".join(proc.stdout.split())
    assert "has the published config of black-forest-labs/FLUX.2-klein-base-4B" in text
    assert "except num_layers 1 (published: 5), num_single_layers 1 (published: 20)" in text
    assert "memory plan: predicted peak" in text
    summary = read_summary(out)
    assert summary["config"]["family"] == "flux2" and summary["status"] == "completed"
    assert summary["defaults"]["applied"] == {"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, "train_batch_size": 1,
                                              "validation_inference_steps": 50, "validation_guidance_scale": 4.0}
    # no text encoder (Qwen3 at 2560 wide), which the adapter never touches
    pipe = Flux2KleinPipeline.from_pretrained(model, torch_dtype=torch.bfloat16, text_encoder=None, tokenizer=None)
    pipe.load_lora_weights(out)
    saved = load_file(str(out / ADAPTER))
    live = _lora_modules(pipe.transformer)
    assert 2 * len(live) == len(saved) == 2 * 6  # to_q/k/v/out.0 of the double block, the single block's two
    assert all(m.scaling[m.active_adapters[0]] == 1.0 for m in live.values())


def test_dev_layout_is_the_dev_family_and_plans_both_block_lists(tmp_path):
    """FLUX.2 [dev]'s published configs alone (its 32B transformer cannot be built on a CPU): the folder is found as
    flux2 and its catalogue entry; the planner builds it on the meta device a unit at a time (1 double + 6 single
    blocks), with Mistral-3 as its text encoder."""
    from flux2_layout import DEV, dev_configs

    from dit_lora.catalogue import match
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family
    from dit_lora.setup.family_inference import family_for_model

    folder = dev_configs(tmp_path)
    cfg = TrainConfig.for_family("flux2", pretrained_model_name_or_path=str(folder), train_data_dir="unused")
    assert family_for_model(cfg.model) == "flux2" and match("flux2", config_reader(cfg.model)).hub_id == DEV
    comps = get_family("flux2").plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert len(comps.model.transformer_blocks) == 2 and len(comps.model.single_transformer_blocks) == 12
    assert comps.model.config.guidance_embeds and comps.state.out_layers == (10, 20, 30)
    assert type(comps.encoders["text_encoder"]).__name__ == "Mistral3ForConditionalGeneration"
