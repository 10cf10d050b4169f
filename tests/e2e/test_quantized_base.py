"""--quantize_base nf4 end to end on the CPU (bitsandbytes 0.50 runs Linear4bit forward and backward there).

Every family trains a few steps on a quantized base, then the saved adapter reloads into the ordinary unquantized
model with the stock loaders (diffusers' ``load_lora_weights``, PEFT's ``PeftModel.from_pretrained``): its output
differs from the quantized trained model's by the base's quantization error only. A guard drill still skips
exactly one step, and a killed nf4 run (Sana: SIGKILL-like exit in a subprocess; the video LLM: the same crash
point in process) resumes to the same adapter bit for bit. CogVideoX also caches with an nf4 T5
(--quantize_text_encoder), and int8 (LLM.int8, bitsandbytes' CPU path) trains and reloads.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import (assert_text_encoder_quantization_error_only, base_args, read_summary, run_recipe,
                     train_in_process, vlm_batch)
from quantized_reload import assert_quantization_error_only as _assert_quantization_error_only
from quantized_reload import capture_steps as _capture
from quantized_reload import check_quantized_outputs as _check_outputs
from quantized_reload import dit_reloads_within_quantization_error
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


@pytest.mark.slow
def test_dit_nf4_guard_drill_skips_one_step_and_reloads(tiny_dit, shape_classes, tmp_path):
    """DiT with a resized class embedding (an Embedding: trainable on a quantized base) and a NaN drill at step 2."""
    seen, on_step = _capture()
    summary, out = train_in_process(tiny_dit, shape_classes, tmp_path, on_step=on_step, family="dit", num_classes=3,
                                    inject_faults="nan_loss@2", **{**NF4, "resolution": 64})
    _check_outputs(summary, out)
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 3
    _skipped_without_change(seen, 2)
    model = seen["model"].eval()
    dit_reloads_within_quantization_error(model, tiny_dit, out)


@pytest.mark.slow
def test_nf4_killed_run_resumes_bit_for_bit(tiny_sana, shapes_data, tmp_path):
    opts = dict(NF4, checkpointing_steps=2, lr_scheduler="cosine", lr_warmup_steps=1)
    cache = tmp_path / "cache"
    ref = tmp_path / "ref"
    proc = run_recipe(base_args(tiny_sana, shapes_data, ref, cache, **opts), warm=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "interrupted"
    killed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, **opts), env={"DIT_LORA_FAULT": "micro_batch:3"},
                        warm=True)
    assert killed.returncode == 137, killed.stdout + killed.stderr
    resumed = run_recipe(base_args(tiny_sana, shapes_data, out, cache, resume_from_checkpoint="latest", **opts),
                         warm=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "checkpoint-2 at step 2" in resumed.stdout, resumed.stdout
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (ref, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert read_summary(out)["loss_history"] == read_summary(ref)["loss_history"]


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


@pytest.mark.slow
def test_cogvideox_i2v_nf4_skips_a_nan_and_reloads_into_the_unquantized_i2v_pipeline(four_clips, tmp_path):
    """The image-to-video family: its transformer takes the first-frame latents as 16 more input channels, and
    the adapter goes back into an ordinary CogVideoXImageToVideoPipeline."""
    from diffusers import CogVideoXImageToVideoPipeline

    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    model_dir = build_tiny_cogvideox_pipeline(tmp_path / "tiny-i2v", task="i2v", version="1.0-5b")
    seen, on_step = _capture()
    opts = dict(NF4, family="cogvideox_i2v", resolution=None, center_crop=None, max_num_frames=9, height=64,
                width=64, max_train_steps=3, gradient_checkpointing="false", inject_faults="nan_loss@2")
    summary, out = train_in_process(model_dir, four_clips, tmp_path, on_step=on_step, **opts)
    _check_outputs(summary, out)
    assert summary["family"] == "cogvideox_i2v"
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    _skipped_without_change(seen, 2)

    model = seen["model"]
    c = model.config
    assert c.in_channels == 2 * c.out_channels  # noisy latents + the image latents
    torch.manual_seed(0)
    _reloads_within_quantization_error(model, CogVideoXImageToVideoPipeline, model_dir, out, "Linear4bit",
                                       hidden_states=torch.randn(2, 3, c.in_channels, 8, 8),
                                       encoder_hidden_states=torch.randn(2, c.max_text_seq_length, c.text_embed_dim),
                                       timestep=torch.tensor([100, 700]))


@pytest.fixture(scope="module")
def tiny_wan(tmp_path_factory):
    """The tiny Wan 2.1 text-to-video pipeline (fp32, 9 x 64 x 64)."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    return build_tiny_wan_pipeline(tmp_path_factory.mktemp("wan-nf4") / "tiny-wan", variant="2.1-t2v")


@pytest.mark.slow
def test_wan_nf4_skips_a_nan_and_reloads_into_the_unquantized_pipeline(tiny_wan, four_clips, tmp_path):
    """Wan 2.1 T2V on an nf4 transformer: a NaN drill skips its update without a change, and the adapter goes back
    into an ordinary fp32 WanPipeline (diffusers' load_lora_weights) within the base's quantization error."""
    from diffusers import WanPipeline

    seen, on_step = _capture()
    opts = dict(NF4, family="wan", resolution=None, center_crop=None, max_num_frames=9, height=64, width=64,
                max_train_steps=3, gradient_checkpointing="false", inject_faults="nan_loss@2")
    summary, out = train_in_process(tiny_wan, four_clips, tmp_path, on_step=on_step, **opts)
    _check_outputs(summary, out)
    assert summary["family"] == "wan" and summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    _skipped_without_change(seen, 2)

    model = seen["model"]
    c = model.config
    torch.manual_seed(0)
    # 3 latent frames of 8 x 8 (9 x 64 x 64 through the 2.1 VAE); 16 text tokens of UMT5's width
    _reloads_within_quantization_error(model, WanPipeline, tiny_wan, out, "Linear4bit",
                                       hidden_states=torch.randn(2, c.in_channels, 3, 8, 8),
                                       encoder_hidden_states=torch.randn(2, 16, c.text_dim),
                                       timestep=torch.tensor([100, 700]))


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    """The tiny LLaVA-NeXT-Video model and 4 video QA samples (VideoChat2 layout)."""
    from dit_lora.families.videollm.demo_clips import make_qa_dataset
    from dit_lora.families.videollm.demo_llava import build_tiny_llava_next_video

    root = tmp_path_factory.mktemp("llava-nf4")
    return (build_tiny_llava_next_video(root / "llava"),
            make_qa_dataset(root / "qa", n=4, num_frames=8, layout="videochat2", seed=0))


class _Killed(BaseException):
    """The in-process stand-in for the SIGKILL of a crash point (nothing after it runs)."""


def _die(code):
    raise _Killed(code)


@pytest.mark.slow
def test_video_llm_nf4_skips_a_nan_reloads_with_peft_and_a_killed_run_resumes_bit_for_bit(tiny_llava, tmp_path,
                                                                                         monkeypatch):
    """LLaVA-NeXT-Video with its language model nf4 (vision tower and projector not): a 3-step run with a NaN drill at
    step 2 and a checkpoint at step 2 is the reference; PeftModel.from_pretrained puts its adapter on the unquantized
    model; the same run killed after micro-batch 3 resumes from checkpoint-2 (the skip and the guard's counters in
    it) and ends bit for bit equal."""
    from peft import PeftModel

    from dit_lora.output.names import BACKBONE_FILE
    from dit_lora.training import drills as hooks
    from dit_lora.families.videollm import architecture_spec as spec_for

    model_dir, annotation = tiny_llava
    opts = dict(NF4, family="llava_next_video", num_frames=4, resolution=None, center_crop=None, cache_dir=None,
                learning_rate=2e-3, backbone_learning_rate=1e-3, max_train_steps=3, checkpointing_steps=2,
                gradient_checkpointing="false", inject_faults="nan_loss@2")
    seen, on_step = _capture()
    summary, out = train_in_process(model_dir, annotation, tmp_path / "ref", on_step=on_step, **opts)
    assert isinstance(summary, dict), summary
    assert summary["config"]["quantize_base"] == "nf4" and "--quantize_base nf4" in (out / "README.md").read_text()
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == 2
    _skipped_without_change(seen, 2)
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert saved and all(torch.isfinite(v).all() for v in saved.values())
    fault = json.loads((out / "nonfinite_report.json").read_text())["first_fault"]  # the drill, on the nf4 base
    assert fault["classification"] == "model/optimizer" and fault["quantized_base"]["scheme"] == "nf4"
    assert "fp32 (the nf4 weights, computed in fp32)" in fault["paragraph"]

    model = seen["model"].eval()
    assert type(model.model.language_model.layers[0].self_attn.q_proj.base_layer).__name__ == "Linear4bit"
    spec = spec_for("llava_next_video")
    batch = vlm_batch(spec, model_dir, annotation)

    def run(m):
        with torch.no_grad():
            return m(**batch).logits.float()

    trained_q = run(model)
    model.disable_adapters()
    base_q = run(model)  # LoRA off, the trained projector still in
    base = spec.load_model(model_dir, torch.float32)
    base.load_state_dict(load_file(str(out / BACKBONE_FILE)), strict=False)
    base_unq = run(base.eval())
    reloaded = PeftModel.from_pretrained(base, str(out)).eval()  # PEFT's own loader, unquantized base
    _assert_quantization_error_only(trained_q, run(reloaded), base_q, base_unq)

    monkeypatch.setenv(hooks.CRASH_VAR, "micro_batch:3")
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(model_dir, annotation, tmp_path / "killed", **opts)
    monkeypatch.delenv(hooks.CRASH_VAR)
    resumed, again = train_in_process(model_dir, annotation, tmp_path / "killed", resume_from_checkpoint="latest", **opts)
    assert isinstance(resumed, dict), resumed
    assert resumed["steps_this_run"] == 1 and resumed["skipped_steps"] == 1  # from checkpoint-2, which kept the skip
    ref = load_file(str(out / "adapter_model.safetensors"))
    got = load_file(str(again / "adapter_model.safetensors"))
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    projector = load_file(str(out / BACKBONE_FILE))
    assert all(torch.equal(v, load_file(str(again / BACKBONE_FILE))[k]) for k, v in projector.items())
    assert resumed["loss_history"] == summary["loss_history"]


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
