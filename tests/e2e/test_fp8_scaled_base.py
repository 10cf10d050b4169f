"""--quantize_base fp8_scaled end to end on the CPU (dit-lora's own fp8 weights: no library, any device).

Every family's tiny model trains on an fp8_scaled base (each Linear the memory plan counts converted at load, before
the device) with a NaN drill that skips exactly one update and changes nothing; the saved adapter reloads into the
ordinary unquantized fp32 model with the stock loaders (diffusers' ``load_lora_weights``, ``dit_lora.load_adapter``
for Wan 2.2 A14B's two experts, PEFT's ``PeftModel.from_pretrained``) and gives the trained model's output up to the
base's quantization error. Sana trains under the default bf16 autocast with the host-sync audit on; the others in
fp32 (bf16 matmuls are slow on a CPU; the unit tests run the layer under autocast). A killed run resumes bit for
bit. No bitsandbytes needed, unlike test_quantized_base.py (whose reload helpers are shared: quantized_reload.py).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from helpers import train_in_process, vlm_batch
from quantized_reload import (assert_quantization_error_only, capture_steps, check_quantized_outputs,
                              dit_reloads_within_quantization_error, reloads_within_quantization_error,
                              skipped_without_change)
from dit_lora.modeling import quantize
from dit_lora.modeling.fp8_scaled import Fp8ScaledLinear

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

#: 3 updates, the second a NaN the guard skips; fp32 compute, no checkpointing (the backward re-dequantizes)
FP8 = dict(quantize_base="fp8_scaled", mixed_precision="no", train_batch_size=2, max_train_steps=3,
           inject_faults="nan_loss@2", gradient_checkpointing="false")
VIDEO = dict(resolution=None, center_crop=None, max_num_frames=9, height=64, width=64)
LAYER = "Fp8ScaledLinear"


def _trained(model_dir, data, tmp_path, **flags):
    """Train with FP8 (+ ``flags``); the drill skipped update 2 without a change. Returns (model, output folder)."""
    seen, on_step = capture_steps()
    summary, out = train_in_process(model_dir, data, tmp_path, on_step=on_step, **{**FP8, **flags})
    check_quantized_outputs(summary, out, "fp8_scaled")
    opts = {**FP8, **flags}
    drill = int(str(opts["inject_faults"]).rsplit("@", 1)[1])
    assert summary["skipped_steps"] == 1 and summary["applied_updates"] == opts["max_train_steps"] - 1
    skipped_without_change(seen, drill)
    return seen["model"], out


def _all_converted(model: torch.nn.Module, skip=()) -> None:
    """Every Linear the plan counts as quantized (``quantized_linears``: PEFT's base layers included) is fp8."""
    layers = dict(model.named_modules())
    names = quantize.quantized_linears(model, skip)
    assert names and all(isinstance(layers[n], Fp8ScaledLinear) for n in names), names


@pytest.mark.slow
def test_sana_fp8_scaled_in_bf16_skips_a_nan_without_a_host_sync_and_reloads(tiny_sana, shapes_data, tmp_path,
                                                                             monkeypatch):
    """The default --mixed_precision bf16: the fp8 layers compute under autocast in bf16 (their load dtype), and no
    micro-batch reads the device (DIT_LORA_SYNC_DEBUG raises on a host sync). Compared in fp32 afterwards: the
    model's cast leaves the fp8 bits and makes the layers compute like fp32 ones."""
    from diffusers import SanaPipeline

    monkeypatch.setenv("DIT_LORA_SYNC_DEBUG", "1")
    model, out = _trained(tiny_sana, shapes_data, tmp_path, mixed_precision="bf16", resolution=32)
    _all_converted(model)
    assert {m.weight_dtype for m in model.modules() if isinstance(m, Fp8ScaledLinear)} == {torch.bfloat16}
    model.to(torch.float32)
    torch.manual_seed(0)
    c = model.config
    reloads_within_quantization_error(model, SanaPipeline, tiny_sana, out, LAYER,
                                      hidden_states=torch.randn(2, c.in_channels, 2, 2),
                                      encoder_hidden_states=torch.randn(2, 8, c.caption_channels),
                                      timestep=torch.tensor([100.0, 700.0]))


@pytest.mark.slow
def test_dit_fp8_scaled_trains_a_resized_class_table_skips_a_nan_and_reloads_with_peft(tiny_dit, shape_classes,
                                                                                       tmp_path):
    """DiT with a resized class embedding (an Embedding: it trains in full beside LoRA on an fp8 base)."""
    model, out = _trained(tiny_dit, shape_classes, tmp_path, family="dit", num_classes=3, resolution=64)
    model = model.eval()
    _all_converted(model)
    dit_reloads_within_quantization_error(model, tiny_dit, out)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """4 captioned 9-frame 64 px clips at 16 fps (CogVideoX and Wan read them alike)."""
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    return make_moving_square_dataset(tmp_path_factory.mktemp("clips") / "squares", n=4, num_frames=9, fps=16, seed=3)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["cogvideox", "cogvideox_i2v"])
def test_cogvideox_fp8_scaled_skips_a_nan_and_reloads(family, tiny_cogvideox, clips, tmp_path):
    """Text-to-video and image-to-video (its transformer takes the first-frame latents as more input channels)."""
    from diffusers import CogVideoXImageToVideoPipeline, CogVideoXPipeline

    from dit_lora.families.cogvideox.demo import build_tiny_cogvideox_pipeline

    i2v = family == "cogvideox_i2v"
    model_dir = build_tiny_cogvideox_pipeline(tmp_path / "i2v", task="i2v", version="1.0-5b") if i2v else tiny_cogvideox
    model, out = _trained(model_dir, clips, tmp_path, family=family, **VIDEO)
    _all_converted(model)
    c = model.config
    torch.manual_seed(0)
    reloads_within_quantization_error(model, CogVideoXImageToVideoPipeline if i2v else CogVideoXPipeline, model_dir,
                                      out, LAYER, hidden_states=torch.randn(2, 3, c.in_channels, 8, 8),
                                      encoder_hidden_states=torch.randn(2, c.max_text_seq_length, c.text_embed_dim),
                                      timestep=torch.tensor([100, 700]))


@pytest.fixture(scope="module")
def wan_model(tmp_path_factory):
    """``wan_model(variant)``: the tiny Wan pipeline of ``variant`` (fp32, 9 x 64 x 64), built once."""
    from dit_lora.families.wan.demo import build_tiny_wan_pipeline

    root, built = tmp_path_factory.mktemp("wan-fp8"), {}

    def model(variant: str):
        if variant not in built:
            built[variant] = build_tiny_wan_pipeline(root / variant, variant=variant)
        return built[variant]

    return model


def _wan_inputs(config) -> dict:
    """3 latent frames of 8 x 8 (9 x 64 x 64 through the VAE) and 16 text tokens of UMT5's width."""
    torch.manual_seed(0)
    return dict(hidden_states=torch.randn(2, config.in_channels, 3, 8, 8),
                encoder_hidden_states=torch.randn(2, 16, config.text_dim), timestep=torch.tensor([100, 700]))


@pytest.mark.slow
def test_wan_2_1_fp8_scaled_skips_a_nan_and_reloads(wan_model, clips, tmp_path):
    """Wan 2.1 T2V; its _keep_in_fp32_modules (the time embedder) stay unquantized, as the plan counts."""
    from diffusers import WanPipeline

    model_dir = wan_model("2.1-t2v")
    model, out = _trained(model_dir, clips, tmp_path, family="wan", **VIDEO)
    _all_converted(model)
    assert type(model.condition_embedder.time_embedder.linear_1) is torch.nn.Linear  # kept in fp32
    reloads_within_quantization_error(model, WanPipeline, model_dir, out, LAYER, **_wan_inputs(model.config))


@pytest.mark.slow
def test_wan_2_2_a14b_fp8_scaled_converts_both_experts_and_each_reloads_into_its_transformer(wan_model, clips,
                                                                                            tmp_path):
    """--wan_expert both: each expert converted at load; updates alternate (high, low, high, low), the drill skips
    the third; dit_lora.load_adapter puts each expert's file into its transformer of the fp32 pipeline."""
    import dit_lora
    from diffusers import WanPipeline

    model_dir = wan_model("2.2-t2v-a14b")
    model, out = _trained(model_dir, clips, tmp_path, family="wan", wan_expert="both", max_train_steps=4,
                          inject_faults="nan_loss@3", lr_warmup_steps=0, **VIDEO)  # high's one update at full rate
    pipe = WanPipeline.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    targets = {"high": pipe.transformer, "low": pipe.transformer_2}
    inputs = _wan_inputs(pipe.transformer.config)

    def run(m):
        with torch.no_grad():
            return m(**inputs).sample.float()

    base_unq = {label: run(t) for label, t in targets.items()}
    dit_lora.load_adapter(pipe, out)
    model = model.eval()
    trained_q = {label: run(model.expert(label)) for label in targets}
    model.disable_adapters()  # the LoRA of both experts hangs off WanExperts
    for label, target in targets.items():
        _all_converted(model.expert(label))
        assert_quantization_error_only(trained_q[label], run(target), run(model.expert(label)), base_unq[label])


@pytest.fixture(scope="module")
def video_llms(tmp_path_factory):
    """``video_llms(family)``: (its tiny model folder, 4 video QA samples), built by the family's own demo builder
    the first time it is asked for (LLaVA-NeXT-Video reads the VideoChat2 layout, the others the chat one)."""
    from dit_lora.families.videollm.spec import build_demo_model
    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    root, built = tmp_path_factory.mktemp("vlm-fp8"), {}

    def assets(family: str):
        if family not in built:
            layout = "videochat2" if family == "llava_next_video" else "chat"
            data = make_qa_dataset(root / f"{family}-qa", n=4, num_frames=8, layout=layout, seed=0)
            built[family] = build_demo_model(family, root / family), data
        return built[family]

    return assets


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llava_next_video", "qwen2_5_vl", "internvl", "qwen3_vl"])
def test_video_llm_fp8_scaled_language_model_skips_a_nan_and_reloads_with_peft(family, video_llms, tmp_path):
    """The language model is fp8 (its projections under LoRA); the vision tower, projector and output head stay as
    loaded (the family's skip list, as for nf4), so the projector trains in full; PEFT reloads onto fp32."""
    from peft import PeftModel

    from dit_lora.families.videollm.spec import architecture_spec
    from dit_lora.output.names import BACKBONE_FILE

    model_dir, annotation = video_llms(family)
    spec = architecture_spec(family)
    model, out = _trained(model_dir, annotation, tmp_path, family=family, num_frames=4, resolution=None,
                          center_crop=None, cache_dir=None, learning_rate=2e-3, backbone_learning_rate=1e-3)
    model = model.eval()
    fp8 = [n for n, m in model.named_modules() if isinstance(m, Fp8ScaledLinear)]
    assert fp8 and all(n.startswith(spec.language_model + ".") for n in fp8)
    assert any(n.endswith("q_proj.base_layer") for n in fp8)
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
    reloaded = PeftModel.from_pretrained(base, str(out)).eval()
    assert_quantization_error_only(trained_q, run(reloaded), base_q, base_unq)


class _Killed(BaseException):
    """The in-process stand-in for a crash point's SIGKILL (nothing after it runs)."""


def _die(code):
    raise _Killed(code)


@pytest.mark.slow
def test_fp8_scaled_killed_run_resumes_bit_for_bit(tiny_sana, shapes_data, tmp_path, monkeypatch):
    """A Sana run on an fp8_scaled base killed after micro-batch 3 resumes from checkpoint-2 (the base converted
    again from the same files, the same bits) and ends with the uninterrupted run's adapter and losses."""
    from dit_lora.training import drills as hooks

    opts = dict(FP8, inject_faults=None, resolution=32, max_train_steps=4, checkpointing_steps=2,
                lr_scheduler="cosine", lr_warmup_steps=1)
    ref, ref_out = train_in_process(tiny_sana, shapes_data, tmp_path / "ref", **opts)
    assert isinstance(ref, dict), ref
    monkeypatch.setenv(hooks.CRASH_VAR, "micro_batch:3")
    monkeypatch.setattr(hooks.os, "_exit", _die)
    with pytest.raises(_Killed):
        train_in_process(tiny_sana, shapes_data, tmp_path / "killed", **opts)
    monkeypatch.delenv(hooks.CRASH_VAR)
    resumed, out = train_in_process(tiny_sana, shapes_data, tmp_path / "killed", resume_from_checkpoint="latest",
                                    **opts)
    assert isinstance(resumed, dict), resumed
    assert resumed["steps_this_run"] == 2 and resumed["config"]["quantize_base"] == "fp8_scaled"
    a, b = (load_file(str(o / "pytorch_lora_weights.safetensors")) for o in (ref_out, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["loss_history"] == ref["loss_history"]
