"""--quantize_base nf4 end to end on the CPU (bitsandbytes 0.50 runs Linear4bit forward and backward there): what
only some families do on a quantized base.

Every family's nf4 run (a guard drill, the adapter reloaded into the unquantized consumer at the trained strength, a
resume from its checkpoint ending bit for bit) is the conformance suite's (tests/conformance/test_quantized_base.py,
for every name whose spec declares a precision policy). Here: Sana and CogVideoX cache with a quantized text encoder
(--quantize_text_encoder) and reload into the whole unquantized pipeline within the base's quantization error, int8
(LLM.int8, bitsandbytes' CPU path) trains and reloads, and each family's affine norms train in bf16 and fp32.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import assert_text_encoder_quantization_error_only, train_in_process
from quantized_reload import capture_steps as _capture
from quantized_reload import check_quantized_outputs as _check_outputs
from quantized_reload import reloads_within_quantization_error as _reloads_within_quantization_error
from quantized_reload import skipped_without_change as _skipped_without_change

pytest.importorskip("bitsandbytes")

NF4 = dict(quantize_base="nf4", mixed_precision="no", resolution=32, train_batch_size=2, max_train_steps=4)


def _sana_reloads_within_quantization_error(model, tiny_sana, out, layer: str) -> None:
    from diffusers import SanaPipeline

    torch.manual_seed(0)
    c = model.config
    _reloads_within_quantization_error(model, SanaPipeline, tiny_sana, out, layer,
                                       hidden_states=torch.randn(2, c.in_channels, 2, 2),
                                       encoder_hidden_states=torch.randn(2, 8, c.caption_channels),
                                       timestep=torch.tensor([100.0, 700.0]))


@pytest.mark.slow
def test_sana_nf4_with_an_nf4_gemma_trains_and_reloads_into_an_unquantized_pipeline(tiny_sana, shapes_data, tmp_path):
    seen, on_step = _capture()
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, on_step=on_step, quantize_text_encoder="true",
                                    **NF4)
    _check_outputs(summary, out)
    assert summary["config"]["quantize_text_encoder"] is True and "`--quantize_text_encoder`" in (out / "README.md").read_text()
    assert len(list((tmp_path / "cache").rglob("*.safetensors"))) == 16  # cached with the nf4 Gemma-2
    _sana_reloads_within_quantization_error(seen["model"], tiny_sana, out, "Linear4bit")


@pytest.mark.slow
def test_sana_int8_trains_on_the_cpu_and_reloads(tiny_sana, shapes_data, tmp_path):
    """--quantize_base int8 (bitsandbytes LLM.int8, Linear8bitLt) runs forward and backward on the CPU too."""
    seen, on_step = _capture()
    summary, out = train_in_process(tiny_sana, shapes_data, tmp_path, on_step=on_step,
                                    **{**NF4, "quantize_base": "int8", "max_train_steps": 2})
    assert isinstance(summary, dict), summary
    assert summary["config"]["quantize_base"] == "int8" and summary["applied_updates"] == 2
    assert "--quantize_base int8" in (out / "README.md").read_text()
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert all(torch.isfinite(v).all() for v in saved.values())
    assert any(".lora_B." in k and v.abs().max() > 0 for k, v in saved.items())  # it trained (lora_B starts at 0)
    _sana_reloads_within_quantization_error(seen["model"], tiny_sana, out, "Linear8bitLt")


@pytest.fixture(scope="module")
def four_clips(tmp_path_factory):
    """4 captioned 9-frame 64 px clips."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "squares", n=4, num_frames=9, seed=3)


@pytest.mark.slow
def test_cogvideox_nf4_with_an_nf4_t5_caches_skips_a_nan_and_reloads(tiny_cogvideox, four_clips, tmp_path):
    from diffusers import CogVideoXPipeline

    model_dir, clips = tiny_cogvideox, four_clips
    seen, on_step = _capture()
    opts = dict(NF4, family="cogvideox", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64,
                max_train_steps=3, quantize_text_encoder="true", gradient_checkpointing="false",
                inject_faults="nan_loss@2")
    summary, out = train_in_process(model_dir, clips, tmp_path, on_step=on_step, **opts)
    _check_outputs(summary, out)
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    _skipped_without_change(seen, 2)
    assert summary["config"]["quantize_text_encoder"] is True and "`--quantize_text_encoder`" in (out / "README.md").read_text()
    # The cache holds the nf4 T5's embeddings (its quantization error only), not the unquantized T5's.
    captions = [json.loads(line)["text"] for line in (clips / "metadata.jsonl").read_text().splitlines()]
    quant, plain = assert_text_encoder_quantization_error_only("cogvideox", model_dir, captions)
    cached = [load_file(str(f))["prompt_embeds"].float() for f in (tmp_path / "cache").rglob("*.safetensors")]
    assert len(cached) == len(captions)
    for embeds in cached:
        assert min((embeds - q).abs().max().item() for q in quant) <= 1e-5 * quant.abs().max().item()
        assert min((embeds - p).abs().max().item() for p in plain) > 1e-3 * quant.abs().max().item()

    model = seen["model"]
    torch.manual_seed(0)
    c = model.config
    _reloads_within_quantization_error(model, CogVideoXPipeline, model_dir, out, "Linear4bit",
                                       hidden_states=torch.randn(2, 3, c.in_channels, 8, 8),
                                       encoder_hidden_states=torch.randn(2, c.max_text_seq_length, c.text_embed_dim),
                                       timestep=torch.tensor([100, 700]))


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory):
    """The tiny Wan 2.1 text-to-video pipeline (fp32, 9 x 64 x 64)."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    return build_tiny_wan_pipeline(tmp_path_factory.mktemp("wan-nf4") / "tiny-wan", variant="2.1-t2v")


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    """The tiny LLaVA-NeXT-Video model and 4 video QA samples (VideoChat2 layout)."""
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video

    root = tmp_path_factory.mktemp("llava-nf4")
    return (build_tiny_llava_next_video(root / "llava"),
            make_qa_dataset(root / "qa", n=4, num_frames=8, layout="videochat2", seed=0))


# ---- every family's quantized base under the default --mixed_precision (bf16) and fp32 -------------------------------
def _rebuilt_transformer(src, dst, **config):
    """A copy of the pipeline folder ``src`` whose transformer is rebuilt (seed 0, same stored dtype) with ``config``
    changes: the real checkpoints' affine norms where the tiny demo model leaves them out."""
    import shutil

    import diffusers
    from safetensors import safe_open

    shutil.copytree(src, dst)
    folder = dst / "transformer"
    stored = json.loads((folder / "config.json").read_text())
    with safe_open(str(next(folder.glob("*.safetensors"))), framework="pt") as f:
        dtype = f.get_tensor(next(iter(f.keys()))).dtype
    kwargs = {k: v for k, v in stored.items() if not k.startswith("_")}
    torch.manual_seed(0)
    model = getattr(diffusers, stored["_class_name"]).from_config({**kwargs, **config}).to(dtype)
    shutil.rmtree(folder)
    model.save_pretrained(str(folder), safe_serialization=True)
    return dst


@pytest.fixture(scope="module")
def affine_bases(tmp_path_factory, tiny_sana, tiny_dit, tiny_cogvideox, shapes_data, shape_classes, four_clips,
                 tiny_llava, tiny_wan):
    """family -> (model folder, data, flags) for one model per family whose norms are affine as in the real checkpoints:
    Sana 1.5's RMS q/k norms (``qk_norm: rms_norm_across_heads``) and caption RMSNorm; CogVideoX's LayerNorm q/k norms
    and LayerNormZero (``norm_elementwise_affine: true``, the tiny demo model as it is); DiT with affine LayerNorms
    (``norm_elementwise_affine: true``; the real DiT-XL-2 has none, so this is the harder case); the video LLMs'
    RMSNorms (and LLaVA's CLIP LayerNorms in the unquantized vision tower); Wan's RMS q/k norms and affine
    cross-attention FP32LayerNorm (``qk_norm: rms_norm_across_heads``, ``cross_attn_norm: true``, the tiny demo model
    as it is)."""
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline
    from dit_lora.families.videollm.demo_qwen import build_tiny_qwen2_5_vl

    root = tmp_path_factory.mktemp("affine-bases")
    video = dict(resolution=None, center_crop=None, max_num_frames=9, height=64, width=64)
    llm = dict(num_frames=4, resolution=None, center_crop=None, cache_dir=None, learning_rate=2e-3,
               backbone_learning_rate=1e-3)
    llava, qa = tiny_llava
    return {
        "sana": (_rebuilt_transformer(tiny_sana, root / "sana15", qk_norm="rms_norm_across_heads"), shapes_data, {}),
        "dit": (_rebuilt_transformer(tiny_dit, root / "dit", norm_elementwise_affine=True), shape_classes,
                dict(num_classes=3, resolution=64)),
        "cogvideox": (tiny_cogvideox, four_clips, video),
        "cogvideox_i2v": (build_tiny_cogvideox_pipeline(root / "i2v", task="i2v", version="1.0-5b"), four_clips, video),
        "wan": (tiny_wan, four_clips, video),
        "llava_next_video": (llava, qa, llm),
        "qwen2_5_vl": (build_tiny_qwen2_5_vl(root / "qwen"),
                       make_qa_dataset(root / "chat", n=4, num_frames=8, layout="chat", seed=1), llm),
    }


def _affine_norms(model) -> list[str]:
    """Names of the norm modules of ``model`` that carry a weight (LayerNorm, RMSNorm and the like)."""
    return [n for n, m in model.named_modules()
            if "norm" in type(m).__name__.lower() and isinstance(getattr(m, "weight", None), torch.Tensor)]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "no"])
@pytest.mark.parametrize("family", ["sana", "cogvideox", "cogvideox_i2v", "dit", "llava_next_video", "qwen2_5_vl",
                                    "wan"])
def test_every_family_trains_on_an_nf4_base_with_affine_norms_in_bf16_and_fp32(affine_bases, tmp_path, family,
                                                                                 precision):
    """--quantize_base nf4 with the default --mixed_precision (bf16) and with fp32 (no): bitsandbytes' layers return
    their input's dtype, so without care an fp32 timestep embedding kept CogVideoX's stream fp32 while its bf16
    LayerNorm weights met it (CPU autocast does not cast layer_norm): a crash at the first step."""
    model_dir, data, flags = affine_bases[family]
    seen, on_step = _capture()
    summary, _ = train_in_process(model_dir, data, tmp_path, on_step=on_step, family=family, quantize_base="nf4",
                                  mixed_precision=precision, train_batch_size=2, max_train_steps=2,
                                  gradient_checkpointing="false", **flags)
    assert isinstance(summary, dict), summary
    assert summary["applied_updates"] == 2 and summary["config"]["mixed_precision"] == precision
    losses = torch.tensor([loss for _, loss in summary["loss_history"]])
    assert len(losses) and torch.isfinite(losses).all() and summary["final_loss"] is not None
    model = seen["model"]
    assert any(type(m).__name__ == "Linear4bit" for m in model.modules())
    weight = torch.bfloat16 if precision == "bf16" else torch.float32
    affine = _affine_norms(model)
    assert affine and all(dict(model.named_modules())[n].weight.dtype in (weight, torch.float32) for n in affine)
    assert any(dict(model.named_modules())[n].weight.dtype == weight for n in affine)  # frozen norms in the run's dtype
