"""Recipes pointed at checkpoint folders laid out as the Hub has them (tests/support/real_layout.py: the
catalogue's configs, real widths and heads, the real tokenizer file sets, depth cut to one layer, random
weights; the diffusion models' text encoders at their model width with a narrow inside, ``narrow_text_encoder``):
with minimal flags they pick the catalogue's defaults and say so, train, and the adapter reloads in the stock
consumer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from real_layout import cogvideox_pipeline, dit_pipeline, llava_next_video_folder, qwen2_5_vl_folder, sana_pipeline, \
    wan_pipeline
from safetensors.torch import load_file

from helpers import read_summary, run_recipe

pytestmark = pytest.mark.slow


def _run(recipe: str, model: Path, data: Path, out: Path, *extra: str):
    """A data folder, a step count and where to write; ``--mixed_precision no`` because bf16 matmuls at these
    widths are 10x slower on a CPU (the CogVideoX run: 417 s in bf16, 34 s in fp32); other flags as the caller
    names them."""
    args = ["--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data), "--output_dir", str(out),
            "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no", *extra]
    proc = run_recipe(args, recipe=recipe, timeout=600, warm=True)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    return " ".join(proc.stdout.split()), read_summary(out)


def _lora_params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in module.named_parameters() if "lora_" in n}


def _stock(pipeline_class, model: Path, dtype: torch.dtype, **parts):
    """The stock pipeline of ``model`` as load_lora_weights needs it: without the text encoder the adapter never
    touches (Gemma-2's or T5-XXL's widths: its load was seconds of each reload) and its tokenizer; ``parts``: other
    components left out the same way."""
    return pipeline_class.from_pretrained(model, torch_dtype=dtype, text_encoder=None, tokenizer=None, **parts)


def test_sana_600m_layout(tmp_path):
    from diffusers import SanaPipeline

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    model = sana_pipeline(tmp_path / "models", narrow_text_encoder=True)
    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)
    text, summary = _run("sana", model, data, tmp_path / "out")
    assert "has the published config of Efficient-Large-Model/Sana_600M_1024px_diffusers" in text
    assert "except num_layers 1 (published: 28)" in text
    assert summary["defaults"]["applied"] == {"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, "train_batch_size": 1,
                                              "gradient_accumulation_steps": 4, "resolution": 1024}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["samples_seen"] == 4  # one update of batch 1 x accumulation 4 (the accelerator got the 4)
    pipe = _stock(SanaPipeline, model, torch.float32)
    pipe.load_lora_weights(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"))
    loaded = _lora_params(pipe.transformer)
    assert len(loaded) == len(saved) > 0 and pipe.transformer.peft_config["default_0"].r == 4
    assert all(torch.isfinite(p).all() for p in loaded.values())


def test_sana_1_5_1600m_layout(tmp_path):
    """SANA 1.5 1.6B (qk_norm across heads): the catalogue's entry and defaults are picked, one step trains, and the
    adapter loads into the stock SanaPipeline. ``--resolution 256`` is the one size flag (the 600M test above already
    trains at the catalogue's 1024; here 1024 took 25 s, 256 takes half); the catalogue's 1024 is still named. The
    4.8B shares these widths (60 layers): one layer of it is this same model, so its entry is checked at the
    catalogue level (tests/catalogue/test_catalogue.py: the depth tells it from the 1.6B)."""
    from diffusers import SanaPipeline

    from dit_lora.data.synthetic.shapes import make_shapes_dataset

    hub_id = "Efficient-Large-Model/SANA1.5_1.6B_1024px_diffusers"
    model = sana_pipeline(tmp_path / "models", hub_id, narrow_text_encoder=True)
    data = make_shapes_dataset(tmp_path / "data", n=4, size=64, seed=0)
    text, summary = _run("sana", model, data, tmp_path / "out", "--resolution", "256")
    assert f"has the published config of {hub_id}" in text and "except num_layers 1 (published: 20)" in text
    assert "--resolution 256 yours (the catalogue's: 1024)" in text
    assert summary["defaults"]["catalogue_entry"] == hub_id
    assert summary["defaults"]["applied"] == {"rank": 4, "lora_alpha": 4, "learning_rate": 1e-4, "train_batch_size": 1,
                                              "gradient_accumulation_steps": 4}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1 and summary["samples_seen"] == 4
    pipe = _stock(SanaPipeline, model, torch.float32)
    assert pipe.transformer.config.qk_norm == "rms_norm_across_heads"
    pipe.load_lora_weights(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"))
    loaded = _lora_params(pipe.transformer)
    assert len(loaded) == len(saved) > 0 and pipe.transformer.peft_config["default_0"].r == 4
    assert all(torch.isfinite(p).all() for p in loaded.values())


def test_cogvideox_5b_layout(tmp_path):
    """CPU cannot train 49 x 480 x 720 in a test: the size flags are the only extra ones; the defaults block, the
    trained size and the spiece.model-only tokenizer are the real ones. One clip: one update of batch 1 reads one
    (a second was its caption through T5-XXL's widths and the VAE for nothing)."""
    from diffusers import CogVideoXPipeline

    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    model = cogvideox_pipeline(tmp_path / "models", narrow_text_encoder=True)
    data = make_moving_square_dataset(tmp_path / "data", n=1, num_frames=9, size=64, seed=0)
    assert sorted(p.name for p in (model / "tokenizer").iterdir()) == [
        "added_tokens.json", "special_tokens_map.json", "spiece.model", "tokenizer_config.json"]
    text, summary = _run("cogvideox", model, data, tmp_path / "out", "--height", "64", "--width", "64",
                         "--max_num_frames", "9", "--allow_untrained_resolution", "true")
    assert "has the published config of THUDM/CogVideoX-5b" in text and "except num_layers 1 (published: 42)" in text
    assert "the checkpoint was trained at 49x480x720" in text
    assert summary["defaults"]["applied"] == {"rank": 128, "lora_alpha": 64, "learning_rate": 2e-5,
                                              "train_batch_size": 1}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    pipe = _stock(CogVideoXPipeline, model, torch.bfloat16)
    pipe.load_lora_weights(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors"))
    assert len(_lora_params(pipe.transformer)) == len(saved) > 0
    assert pipe.transformer.peft_config["default_0"].r == 128


def test_dit_xl_256_layout_with_imagenet_class_folders(tmp_path):
    """No --resolution, no --num_classes: 256 px from the catalogue, and wnid folders keep their ImageNet rows."""
    from diffusers import DiTPipeline

    import dit_lora

    model = dit_pipeline(tmp_path / "models", labels={"0": "tench, Tinca tinca", "1": "goldfish, Carassius auratus"})
    data = tmp_path / "data"
    for wnid, color in (("n01440764", (200, 40, 40)), ("n01443537", (240, 160, 20))):
        (data / wnid).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (64, 64), tuple(c - 30 * i for c in color)).save(data / wnid / f"{i}.png")
    text, summary = _run("dit_class", model, data, tmp_path / "out")
    assert "has the published config of facebook/DiT-XL-2-256" in text
    assert summary["defaults"]["applied"] == {"learning_rate": 1e-4, "resolution": 256}
    assert "keep their pretrained rows of the 1000-class embedding (no resize)" in text
    pipe = DiTPipeline.from_pretrained(model, torch_dtype=torch.float32)
    dit_lora.load_adapter(pipe, tmp_path / "out")
    assert int(pipe.transformer.config.num_embeds_ada_norm) == 1000
    assert pipe.get_label_ids(["tench", "n01443537", "goldfish"]) == [0, 1, 1]
    assert len(_lora_params(pipe.transformer)) > 0


def _video_llm_run(family: str, model: Path, data: Path, out: Path, *extra: str):
    """A data folder, a step count and where to write, plus what a CPU needs: ``--mixed_precision no`` (the model
    then loads in fp32: bf16 matmuls at 4096 wide run at 3.7 GFLOPS on the test machine's AVX2 cores, 16.6 in fp32)
    and ``--gradient_accumulation_steps 1`` (the catalogue's 8 would make a step 8 forward-backward passes). One
    update: it trains (lora_B leaves its zero start, _check_peft_reload) and the reload reads what it saved."""
    args = ["--family", family, "--pretrained_model_name_or_path", str(model), "--train_data_dir", str(data),
            "--output_dir", str(out), "--max_train_steps", "1", "--report_to", "none", "--mixed_precision", "no",
            "--gradient_accumulation_steps", "1", *extra]
    proc = run_recipe(args, recipe="videollm", timeout=600, warm=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return " ".join(proc.stdout.split()), read_summary(out)


def _check_video_llm_run(text: str, summary: dict, hub_id: str, published_layers: int, depth_key: str) -> None:
    import math

    assert f"has the published config of {hub_id}" in text
    assert f"except {depth_key} 1 (published: {published_layers})" in text
    assert "memory plan: predicted peak" in text
    assert "--gradient_accumulation_steps 1 yours (the catalogue's: 8)" in text
    assert summary["defaults"]["catalogue_entry"] == hub_id
    assert summary["defaults"]["applied"] == {"train_batch_size": 1, "rank": 8, "lora_alpha": 16,
                                              "learning_rate": 1e-4}
    assert summary["status"] == "completed" and summary["applied_updates"] == 1
    assert summary["loss_history"] and all(math.isfinite(loss) for _, loss in summary["loss_history"])


def _check_peft_reload(model_class, model: Path, out: Path) -> None:
    """The adapter loads with PEFT itself on a fresh copy of the checkpoint, every saved LoRA tensor landing."""
    from peft import PeftModel

    fresh = model_class.from_pretrained(model, dtype=torch.float32, local_files_only=True)
    peft_model = PeftModel.from_pretrained(fresh, str(out))
    saved = load_file(str(out / "adapter_model.safetensors"))
    loaded = {k: v for k, v in peft_model.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(saved) > 0
    assert peft_model.peft_config["default"].r == 8
    # Saved keys lack the adapter name ("...lora_A.weight" is "...lora_A.default.weight" once loaded).
    for key, value in saved.items():
        assert torch.equal(loaded[key.replace(".weight", ".default.weight")], value.to(torch.float32)), key
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained: B left zero


def test_llava_next_video_7b_layout(tmp_path):
    """llava-hf's layout (sharded safetensors, tokenizer.model + tokenizer.json, chat_template.json, CLIP 336 px
    preprocessor configs) at the 7B's widths, one language-model and one CLIP layer. ``--num_frames 1``: the tower
    crops every clip to 336 px, 144 video tokens a frame, and a 4096-wide step of 8 frames is minutes on a CPU."""
    from transformers import AutoTokenizer, LlavaNextVideoForConditionalGeneration

    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    hub_id = "llava-hf/LLaVA-NeXT-Video-7B-hf"
    model = llava_next_video_folder(tmp_path / "models", hub_id)
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert tokenizer.convert_tokens_to_ids(["<video>", "<image>"]) == [32000, 32001] and tokenizer.pad_token_id == 0
    data = make_qa_dataset(tmp_path / "data", n=2, num_frames=8, size=64, seed=0).parent
    text, summary = _video_llm_run("llava_next_video", model, data, tmp_path / "out", "--num_frames", "1")
    _check_video_llm_run(text, summary, hub_id, 32, "text_config.num_hidden_layers")
    _check_peft_reload(LlavaNextVideoForConditionalGeneration, model, tmp_path / "out")


def test_qwen2_5_vl_3b_layout(tmp_path):
    """The Qwen repos' layout (sharded safetensors, vocab.json + merges.txt + tokenizer.json, chat_template.json,
    the published preprocessor_config.json) at the 3B's widths and vocabulary, one language-model layer and one
    vision block; the default 8 frames (64 px clips: 4 video tokens per pair of frames)."""
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    from dit_lora.families.videollm.demo_clips import make_qa_dataset

    hub_id = "Qwen/Qwen2.5-VL-3B-Instruct"
    model = qwen2_5_vl_folder(tmp_path / "models", hub_id)
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = tokenizer.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>", "<|video_pad|>", "<|im_end|>"])
    assert ids == [151652, 151653, 151656, 151645] and tokenizer.pad_token_id == 151643
    data = make_qa_dataset(tmp_path / "data", n=2, num_frames=8, size=64, seed=0).parent
    text, summary = _video_llm_run("qwen2_5_vl", model, data, tmp_path / "out")
    _check_video_llm_run(text, summary, hub_id, 36, "num_hidden_layers")
    _check_peft_reload(Qwen2_5_VLForConditionalGeneration, model, tmp_path / "out")


# Wan: the catalogue's defaults (DiffSynth-Studio's rank 32, alpha 32, 1e-4, one clip per step) on every layout.
_WAN_DEFAULTS = {"train_batch_size": 1, "rank": 32, "lora_alpha": 32, "learning_rate": 1e-4}
#: what a CPU can train in seconds: 9 frames at 64 px (3 x 8 x 8 latents; 2 x 4 x 4 on TI2V's 16x VAE)
_WAN_SIZE = ("--height", "64", "--width", "64", "--max_num_frames", "9", "--allow_untrained_resolution", "true")
#: no memory plan (a trace at the real widths: ~5 s of CPU a run on the 14B layouts) where nothing here reads it:
#: every catalogued Wan checkpoint's plan at these widths is tests/plan/test_wan_plan.py's, a Wan folder's plan at
#: the start of a CPU run tests/conformance's (the demo configs, default flags)
_NO_PLAN = ("--ignore_memory_plan", "true")


def _wan_run(tmp_path: Path, hub_id: str, dtype: torch.dtype, *extra: str, steps: int = 1, layouts=None):
    """The Hub layout of ``hub_id`` (one block per transformer, stored in ``dtype``; from ``layouts``, the session's
    real_layouts cache, when tests share it), one clip (its caption is 512 UMT5 tokens through a 4096-wide layer: a
    second clip was seconds of CPU and proves nothing more), ``steps`` updates with minimal flags (the size flags, no
    plan);
    checks the defaults block names the entry, what the copy changed and the trained size, and that the summary
    recorded the catalogue's defaults. Returns (folder, text, summary)."""
    from dit_lora.catalogue import by_hub_id
    from dit_lora.data.synthetic.clips import make_moving_square_dataset

    entry = by_hub_id(hub_id)
    if layouts is None:
        model = wan_pipeline(tmp_path / "models", hub_id, layers=1, dtype=dtype, narrow_text_encoder=True)
    else:
        model = layouts(wan_pipeline, hub_id, layers=1, dtype=dtype, narrow_text_encoder=True)
    assert sorted(p.name for p in (model / "tokenizer").iterdir()) == sorted(entry.tokenizer_files)
    data = make_moving_square_dataset(tmp_path / "data", n=1, num_frames=9, size=64, seed=0)
    text, summary = _run("wan", model, data, tmp_path / "out", *_WAN_SIZE, *_NO_PLAN, "--max_train_steps",
                         str(steps), *extra)
    published = entry.configs["transformer/config.json"]["num_layers"]
    assert f"has the published config of {hub_id} ({entry.title}; trained at {entry.trained_text()}" in text
    assert f"num_layers 1 (published: {published})" in text
    assert summary["defaults"]["catalogue_entry"] == hub_id and summary["defaults"]["applied"] == _WAN_DEFAULTS
    assert summary["status"] == "completed" and summary["applied_updates"] == steps
    return model, text, summary


def _check_wan_lora(transformer: torch.nn.Module, saved: dict[str, torch.Tensor], adapter: str) -> None:
    """Every saved tensor (``transformer.<module>.lora_A.weight``) landed in ``transformer`` under ``adapter`` with
    its saved values, no other LoRA weight exists there, rank 32, and training moved lora_B off its zero start."""
    loaded = {n: p for n, p in transformer.named_parameters() if f".{adapter}." in n}
    expected = {k.removeprefix("transformer.").replace(".weight", f".{adapter}.weight"): v for k, v in saved.items()}
    # A 2.1 I2V transformer: diffusers pads an adapter without image K/V LoRA with zero LoRA on add_k_proj/add_v_proj
    # (WanLoraLoaderMixin._maybe_expand_t2v_lora_for_i2v), which leaves the image branch as it was.
    padded = {n for n in set(loaded) - set(expected) if ".add_k_proj." in n or ".add_v_proj." in n}
    assert all(not loaded[n].any() for n in padded if ".lora_B." in n)
    assert set(loaded) - padded == set(expected) and len(loaded) > 0
    for name, value in expected.items():
        assert torch.equal(loaded[name].detach(), value.to(loaded[name].dtype)), name
    assert transformer.peft_config[adapter].r == 32
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)
    # the default targets: q, k, v, out of self- and cross-attention, and the feed-forward's two linears
    modules = {k.split(".lora_")[0].removeprefix("transformer.blocks.0.") for k in saved}
    assert {"attn1.to_q", "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2"} <= modules


def _stock_wan(pipeline_class, model: Path, dtype: torch.dtype, **parts):
    """:func:`_stock` with the transformer(s) in the dtype they are stored in (converting a 14B-wide bf16 expert to
    fp32 was most of the reload); UMT5-XXL is the text encoder left out."""
    return _stock(pipeline_class, model, dtype, **parts)


# The layouts the Wan catalogue's fixture test (tests/families/wan/test_catalogue.py) reads too: each built once a
# session (the real_layouts fixture), its tests on one worker.
T2V_1_3B_GROUP = pytest.mark.xdist_group("layout-Wan2.1-T2V-1.3B")
TI2V_5B_GROUP = pytest.mark.xdist_group("layout-Wan2.2-TI2V-5B")


@T2V_1_3B_GROUP
def test_wan2_1_t2v_1_3b_layout(tmp_path, real_layouts):
    """fp32 as published; the stock WanPipeline loads the adapter with load_lora_weights."""
    from diffusers import WanPipeline

    model, _, _ = _wan_run(tmp_path, "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", torch.float32, layouts=real_layouts)
    pipe = _stock_wan(WanPipeline, model, torch.float32)
    pipe.load_lora_weights(tmp_path / "out")
    _check_wan_lora(pipe.transformer, load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors")),
                    "default_0")


@TI2V_5B_GROUP
@pytest.mark.parametrize("family, image_share", [("wan", "0%"), ("wan_i2v", "100%")])
def test_wan2_2_ti2v_5b_layout(tmp_path, real_layouts, family, image_share):
    """TI2V-5B (48-channel 16x VAE, expand_timesteps), one catalogue entry for both families: under --family wan
    in text-to-video mode, under wan_i2v in image-to-video mode, the same defaults either way; its 24 fps."""
    from diffusers import WanPipeline

    model, text, _ = _wan_run(tmp_path, "Wan-AI/Wan2.2-TI2V-5B-Diffusers", torch.float32, "--family", family,
                              layouts=real_layouts)
    assert f"TI2V-5B: {image_share} of samples in image-to-video mode" in text and "at 24 fps" in text
    pipe = _stock_wan(WanPipeline, model, torch.float32)
    pipe.load_lora_weights(tmp_path / "out")
    _check_wan_lora(pipe.transformer, load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors")),
                    "default_0")


def test_wan2_1_i2v_14b_480p_layout(tmp_path):
    """The 14B-wide I2V transformer (CLIP branch: image_dim 1280, added K/V) with the repo's CLIP ViT-H/14 image
    encoder and image processor; bf16 on disk keeps the folder small (the run loads it in fp32:
    --mixed_precision no). The conditioning image is each clip's first frame."""
    from diffusers import WanImageToVideoPipeline

    model, text, _ = _wan_run(tmp_path, "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", torch.bfloat16,
                              "--family", "wan_i2v")
    assert "CLIP image embedding" in text
    pipe = _stock_wan(WanImageToVideoPipeline, model, torch.bfloat16, image_encoder=None, image_processor=None)
    pipe.load_lora_weights(tmp_path / "out")
    _check_wan_lora(pipe.transformer, load_file(str(tmp_path / "out" / "pytorch_lora_weights.safetensors")),
                    "default_0")


def test_wan2_2_t2v_a14b_layout_both_experts(tmp_path):
    """Two 14B-wide experts of one block each (bf16 on disk), --wan_expert both over two updates (high, then low);
    the adapter index says how the stock WanPipeline loads each file, and each expert gets its own LoRA."""
    import json

    from diffusers import WanPipeline

    hub_id = "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
    model, text, _ = _wan_run(tmp_path, hub_id, torch.bfloat16, "--wan_expert", "both", steps=2)
    assert "training both experts, alternating steps" in text
    out = tmp_path / "out"
    index = json.loads((out / "dit_lora_adapter_files.json").read_text())["files"]
    assert [(f["label"], f["load_kwargs"]) for f in index] == [("high", {}), ("low", {"load_into_transformer_2": True})]
    pipe = _stock_wan(WanPipeline, model, torch.bfloat16)
    for f, name in zip(index, ("high", "low")):  # what a user does with the index: one call per file
        pipe.load_lora_weights(out, weight_name=f["file"], adapter_name=name, **f["load_kwargs"])
    high, low = (load_file(str(out / f["file"])) for f in index)
    _check_wan_lora(pipe.transformer, high, "high")
    _check_wan_lora(pipe.transformer_2, low, "low")
    assert not any("lora_" in n for n, _ in pipe.transformer.named_parameters() if ".low." in n)
    assert any(not torch.equal(high[k], low[k]) for k in high if "lora_B" in k)  # each trained on its own step
