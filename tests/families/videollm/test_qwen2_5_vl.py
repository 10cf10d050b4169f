"""Qwen2.5-VL spec: our torchvision-free video preprocessing against the model's own expectations.

All on the tiny offline checkpoint (dit_lora.families.videollm.demo_qwen), CPU, fp32 for exact comparisons.
"""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dit_lora.families.videollm.demo_qwen import TINY_QWEN2_5_VL_VERSION, build_tiny_qwen2_5_vl
from dit_lora.families.videollm.prompts import IGNORE_INDEX, build_generation_prompt, build_training_example, pad_batch
from dit_lora.families.videollm.qwen2_5_vl import Qwen25VLSpec, smart_resize

LM_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("models") / "tiny-qwen2.5-vl", seed=0)


@pytest.fixture(scope="module")
def spec():
    return Qwen25VLSpec()


@pytest.fixture(scope="module")
def parts(tiny, spec):
    """(model fp32 eval, tokenizer, prep) as the family loads them."""
    model = spec.load_model(tiny, torch.float32).eval()
    return model, spec.load_tokenizer(tiny), spec.load_preprocessing(tiny)


def _lora_targets(model) -> set[str]:
    """The module names the family puts LoRA on (the language model's projections)."""
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family

    return set(get_family("qwen2_5_vl").model.lora_targets(model, TrainConfig(family="qwen2_5_vl").lora))


def _frames(n, height, width, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, height, width, 3), dtype=np.uint8)


def _example(spec, tok, model, frames, question, answer, prep):
    pixels = spec.frame_inputs(frames, prep)
    count = spec.video_token_count(pixels, model.config)
    messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    ex = build_training_example(tok, messages, video_placeholder=spec.video_placeholder,
                                video_token_id=model.config.video_token_id, video_token_count=count)
    return ex, pixels, count


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------
# The tiny checkpoint
# --------------------------------------------------------------------------------------
def test_tiny_checkpoint_layout_and_determinism(tiny, spec, tmp_path):
    again = build_tiny_qwen2_5_vl(tmp_path / "again", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "config.json", "preprocessor_config.json"):
        assert _sha(tiny / name) == _sha(again / name), name
    marker = json.loads((tiny / "dit_lora_tiny.json").read_text())
    assert marker["version"] == TINY_QWEN2_5_VL_VERSION and marker["kind"] == "qwen2_5_vl"
    assert build_tiny_qwen2_5_vl(tiny, seed=0) == tiny  # idempotent

    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["Qwen2_5_VLForConditionalGeneration"] and config["dtype"] == "bfloat16"
    text = config["text_config"]
    assert sum(text["rope_parameters"]["mrope_section"]) == text["hidden_size"] // text["num_attention_heads"] // 2
    assert config["vision_config"]["out_hidden_size"] == text["hidden_size"]

    tok = spec.load_tokenizer(tiny)
    assert config["video_token_id"] == tok.convert_tokens_to_ids(spec.video_token)
    assert config["vision_start_token_id"] == tok.convert_tokens_to_ids("<|vision_start|>")
    assert config["image_token_id"] == tok.convert_tokens_to_ids("<|image_pad|>")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    # The placeholder is three special tokens; demo words are single tokens; any text round-trips.
    assert len(tok(spec.video_placeholder, add_special_tokens=False)["input_ids"]) == 3
    assert len(tok(" square", add_special_tokens=False)["input_ids"]) == 1
    text_in = "Ünïcode ✓ and 12 spaces  \n\n tabs\t!"
    assert tok.decode(tok(text_in, add_special_tokens=False)["input_ids"]) == text_in
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Hi?"}]}],
        tokenize=False, add_generation_prompt=True)
    assert rendered == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                        "<|vision_start|><|video_pad|><|vision_end|>Hi?<|im_end|>\n<|im_start|>assistant\n")


def test_load_preprocessing_reads_qwen_keys(tiny, spec, tmp_path):
    prep = spec.load_preprocessing(tiny)
    assert (prep["min_pixels"], prep["max_pixels"]) == (56 * 56, 112 * 112)
    assert (prep["patch_size"], prep["temporal_patch_size"], prep["merge_size"]) == (14, 2, 2)
    assert prep["image_mean"] == pytest.approx((0.48145466, 0.4578275, 0.40821073))
    assert prep["resample"] == "bicubic"
    # A video processor config (newer layout: size in pixels) wins over preprocessor_config.json.
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 1, "max_pixels": 2, "patch_size": 16}))
    (folder / "video_preprocessor_config.json").write_text(
        json.dumps({"size": {"shortest_edge": 100352, "longest_edge": 602112}, "fps": 1.0}))
    prep = spec.load_preprocessing(folder)
    assert (prep["min_pixels"], prep["max_pixels"], prep["patch_size"], prep["fps"]) == (100352, 602112, 14, 1.0)


# --------------------------------------------------------------------------------------
# Module names and LoRA targets
# --------------------------------------------------------------------------------------
def test_module_paths_and_lora_targets(tiny, parts, spec):
    model, _, _ = parts
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m

    assert isinstance(spec.module(model, spec.vision_tower), m.Qwen2_5_VisionTransformerPretrainedModel)
    assert isinstance(spec.module(model, spec.projector), m.Qwen2_5_VLPatchMerger)
    assert isinstance(spec.module(model, spec.language_model), m.Qwen2_5_VLTextModel)

    targets = _lora_targets(model)
    names = [n for n, _ in model.named_modules()]
    matched = [n for n in names if n in targets]
    expected = [f"model.language_model.layers.{i}.{'self_attn' if p[0] in 'qkvo' else 'mlp'}.{p}"
                for i in range(2) for p in LM_PROJECTIONS]
    assert sorted(matched) == sorted(expected)
    # The vision tower really has same-named modules (its MLP), and none of them is matched.
    vision = [n for n in names if n.startswith("model.visual.")]
    assert any(n.endswith("mlp.gate_proj") for n in vision) and any(n.endswith("attn.qkv") for n in vision)
    assert not [n for n in vision if n in targets]

    from peft import LoraConfig, inject_adapter_in_model

    fresh = spec.load_model(tiny, torch.float32)
    inject_adapter_in_model(LoraConfig(r=2, lora_alpha=4, target_modules=sorted(targets)), fresh)
    lora = {n.rsplit(".lora_A", 1)[0] for n, _ in fresh.named_parameters() if ".lora_A." in n}
    assert sorted(lora) == sorted(expected)


# --------------------------------------------------------------------------------------
# Preprocessing
# --------------------------------------------------------------------------------------
def test_smart_resize_rule():
    assert smart_resize(64, 64, 28, 3136, 12544) == (56, 56)
    assert smart_resize(56, 84, 28, 3136, 12544) == (56, 84)  # already multiples: unchanged
    assert smart_resize(20, 20, 28, 3136, 12544) == (56, 56)  # too small: scaled up to min_pixels
    h, w = smart_resize(480, 640, 28, 3136, 12544)  # too large: scaled down, aspect kept
    assert h % 28 == w % 28 == 0 and h * w <= 12544 and (h, w) == (84, 112)
    # The real max_pixels: only rounding (854 / 28 = 30.5 rounds half to even, as in the processor).
    assert smart_resize(480, 854, 28, 3136, 28 * 28 * 16384) == (476, 840)
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2100, 28, 3136, 12544)
    # Same sizes as transformers' own rule (the PIL image processor's copy needs no torchvision).
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference

    rng = np.random.default_rng(0)
    for height, width in rng.integers(8, 2000, (300, 2)).tolist():
        for limits in ((3136, 12544), (3136, 28 * 28 * 16384), (128 * 28 * 28, 768 * 28 * 28)):
            assert smart_resize(height, width, 28, *limits) == reference(height, width, 28, *limits)


def test_frame_inputs_shapes_grid_and_values(parts, spec):
    model, _, prep = parts
    out = spec.frame_inputs(_frames(9, 64, 64), prep)  # 9 frames: padded to 10 -> t = 5; 64 px -> 56 px
    assert set(out) == {"pixel_values_videos", "video_grid_thw", "second_per_grid_ts"}
    assert out["video_grid_thw"].tolist() == [5, 4, 4] and out["video_grid_thw"].dtype == torch.long
    assert out["pixel_values_videos"].shape == (5 * 4 * 4, 3 * 2 * 14 * 14)
    assert out["pixel_values_videos"].dtype == torch.float32
    assert spec.video_token_count(out, model.config) == 5 * 4 * 4 // 4
    assert float(out["second_per_grid_ts"]) == 1.0  # 2 frames per temporal patch at 2 fps
    assert float(spec.frame_inputs(_frames(2, 64, 64), prep, fps=8)["second_per_grid_ts"]) == 0.25

    # Larger frames are scaled into max_pixels, keeping the aspect ratio; a single frame is one temporal patch.
    out = spec.frame_inputs(_frames(1, 240, 320), prep)
    assert out["video_grid_thw"].tolist() == [1, 6, 8]

    # Values: (x / 255 - mean) / std per channel, the channel being the slowest axis of a row.
    const = np.empty((2, 56, 56, 3), np.uint8)
    const[...] = (255, 128, 0)
    row = spec.frame_inputs(const, prep)["pixel_values_videos"][0].view(3, -1)
    for c, value in enumerate((255, 128, 0)):
        expected = (value / 255 - prep["image_mean"][c]) / prep["image_std"][c]
        assert torch.allclose(row[c], torch.full_like(row[c], expected), atol=1e-5)

    # Odd frame counts repeat the last frame: 3 frames == frames (0, 1, 2, 2).
    three = _frames(3, 56, 56, seed=3)
    assert torch.equal(spec.frame_inputs(three, prep)["pixel_values_videos"],
                       spec.frame_inputs(np.concatenate([three, three[-1:]]), prep)["pixel_values_videos"])


def test_flattening_matches_the_vision_tower(parts, spec):
    """Each row, embedded by the model's patch_embed, equals the model's Conv3d applied to the whole clip at
    the (t, h, w) the vision tower's own position ids assign to that row; 4 consecutive rows (one merger input)
    are one 2x2 block, and blocks follow the order of the LLM's video positions."""
    model, _, prep = parts
    frames = _frames(4, 56, 84, seed=1)  # no resize (multiples of 28); 4 distinct frames -> t = 2
    out = spec.frame_inputs(frames, prep)
    t, gh, gw = out["video_grid_thw"].tolist()
    assert (t, gh, gw) == (2, 4, 6)

    video = torch.from_numpy(frames).permute(3, 0, 1, 2).float()  # (C, F, H, W)
    mean = torch.tensor(prep["image_mean"]).view(3, 1, 1, 1)
    std = torch.tensor(prep["image_std"]).view(3, 1, 1, 1)
    video = (video / 255 - mean) / std
    visual = model.model.visual
    conv = visual.patch_embed.proj
    with torch.no_grad():
        reference = F.conv3d(video[None], conv.weight, stride=conv.stride)[0]  # (D, t, gh, gw)
        embedded = visual.patch_embed(out["pixel_values_videos"])  # (rows, D)

    from transformers.vision_utils import get_vision_position_ids

    merge = visual.spatial_merge_size
    hw = get_vision_position_ids(out["video_grid_thw"][None], merge)  # (rows, 2): what the ViT's RoPE uses
    ts = torch.arange(t).repeat_interleave(gh * gw)
    expected = reference[:, ts, hw[:, 0], hw[:, 1]].T
    torch.testing.assert_close(embedded, expected, atol=1e-4, rtol=1e-4)
    # Every position appears once.
    assert len({(int(a), int(b), int(c)) for a, (b, c) in zip(ts, hw)}) == t * gh * gw

    # Merger input k = rows 4k..4k+3 = one 2x2 block; block k sits where LLM video token k is placed.
    blocks = torch.stack([ts, hw[:, 0] // merge, hw[:, 1] // merge], dim=1).view(-1, merge * merge, 3)
    assert (blocks == blocks[:, :1]).all()
    llm = model.model.get_vision_position_ids(0, out["video_grid_thw"], 1, merge, time_interval=1)  # (3, tokens)
    torch.testing.assert_close(blocks[:, 0].T, llm)


def test_flattening_matches_transformers_image_processor(parts, spec):
    """A clip of two identical frames is what Qwen's image processor (PIL backend, no torchvision) makes of
    the frame: same grid, same rows (exact without resizing, within interpolation rounding with it)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    _, _, prep = parts
    processor = Qwen2VLImageProcessorPil(min_pixels=prep["min_pixels"], max_pixels=prep["max_pixels"],
                                         patch_size=14, temporal_patch_size=2, merge_size=2)
    yy, xx = np.mgrid[:100, :150]
    smooth = np.stack([yy * 2, xx, (xx + yy) % 256], -1).astype(np.uint8)
    for frame, atol in ((_frames(1, 56, 84)[0], 1e-5), (smooth, None)):
        ref = processor(images=[frame], return_tensors="pt")
        ours = spec.frame_inputs(np.stack([frame, frame]), prep)
        assert ref["image_grid_thw"][0].tolist() == ours["video_grid_thw"].tolist()
        diff = (ref["pixel_values"] - ours["pixel_values_videos"]).abs()
        if atol is not None:
            assert diff.max() < atol
        else:  # PIL's bicubic vs torch's antialiased bicubic: well under one uint8 level on average
            assert diff.mean() < 0.5 / 255 / min(prep["image_std"])


# --------------------------------------------------------------------------------------
# Model forward
# --------------------------------------------------------------------------------------
def test_forward_loss_backward_reaches_lora_targets(tiny, spec, parts):
    _, tok, prep = parts
    model = spec.load_model(tiny, torch.float32)
    model.requires_grad_(True)
    ex, pixels, _ = _example(spec, tok, model, _frames(6, 64, 64), "What colour is the square?",
                             "The square is red.", prep)
    batch = pad_batch([ex], tok.pad_token_id)
    batch.update(spec.collate_pixels([pixels]))
    loss = model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    wanted = _lora_targets(model)
    targets = {n: m for n, m in model.named_modules() if n in wanted}
    assert len(targets) == 14
    for name, module in targets.items():
        assert module.weight.grad is not None and module.weight.grad.abs().sum() > 0, name
    # The video features reach the loss (projector and vision tower get gradients).
    assert model.model.visual.merger.mlp[0].weight.grad.abs().sum() > 0
    assert model.model.visual.patch_embed.proj.weight.grad.abs().sum() > 0


def test_video_token_count_is_what_the_model_checks(parts, spec, monkeypatch):
    monkeypatch.delenv("TRANSFORMERS_DISABLE_TORCH_CHECK", raising=False)
    model, tok, prep = parts
    pixels = spec.frame_inputs(_frames(4, 64, 64), prep)
    count = spec.video_token_count(pixels, model.config)
    assert count == 2 * 4 * 4 // 4
    messages = [{"role": "user", "content": "What colour is the square?"}, {"role": "assistant", "content": "red"}]
    for n in (count - 1, count, count + 1):
        ex = build_training_example(tok, messages, video_placeholder=spec.video_placeholder,
                                    video_token_id=model.config.video_token_id, video_token_count=n)
        batch = pad_batch([ex], tok.pad_token_id)
        batch.update(spec.collate_pixels([pixels]))
        with torch.no_grad():
            if n == count:
                assert torch.isfinite(model(**batch).loss)
            else:
                with pytest.raises(ValueError, match="Video features and video tokens do not match"):
                    model(**batch)
    # Preprocessing that disagrees with the model's config is caught before the model sees it.
    bad = dict(prep, patch_size=16, min_pixels=64 * 64)
    with pytest.raises(ValueError, match="does not fit this model"):
        spec.video_token_count(spec.frame_inputs(_frames(2, 64, 64), bad), model.config)


def test_batch_of_different_clips_equals_each_alone(parts, spec):
    """Different frame counts and sizes (different grids, window layouts and lengths) in one right-padded batch."""
    model, tok, prep = parts
    a = _example(spec, tok, model, _frames(3, 64, 64, seed=4), "What colour is the square?",
                 "The square is green.", prep)
    b = _example(spec, tok, model, _frames(8, 112, 140, seed=5), "Which direction does the square move?",
                 "It moves from left to right.", prep)
    assert a[1]["video_grid_thw"].tolist() != b[1]["video_grid_thw"].tolist()
    assert a[0]["input_ids"].shape != b[0]["input_ids"].shape

    def run(examples):
        batch = pad_batch([e[0] for e in examples], tok.pad_token_id)
        batch.update(spec.collate_pixels([e[1] for e in examples]))
        with torch.no_grad():
            logits = model(**batch).logits
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch["labels"][:, 1:], reduction="none",
                                 ignore_index=IGNORE_INDEX).sum(1) / (batch["labels"][:, 1:] != IGNORE_INDEX).sum(1)
        return logits, losses

    logits_ab, losses_ab = run([a, b])
    for row, example in enumerate((a, b)):
        logits, loss = run([example])
        n = example[0]["input_ids"].shape[0]
        torch.testing.assert_close(logits_ab[row, :n], logits[0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(losses_ab[row], loss[0], atol=1e-5, rtol=1e-5)


def test_mrope_positions_are_three_dimensional(tiny, parts, spec):
    """load_model makes forward and generate use the processor's mm_token_type_ids (3-D M-RoPE for video
    tokens) when the batch lacks them: same results as passing them, different from 1-D positions."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    model, tok, prep = parts
    plain = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny, dtype=torch.float32).eval()
    ex, pixels, count = _example(spec, tok, model, _frames(4, 112, 112, seed=6), "What colour is the square?",
                                 "The square is blue.", prep)
    batch = pad_batch([ex], tok.pad_token_id)
    batch.update(spec.collate_pixels([pixels]))
    explicit = dict(batch, **spec.text_inputs(batch["input_ids"], model.config))
    assert explicit["mm_token_type_ids"].sum() == 2 * count
    with torch.no_grad():
        hooked, reference, one_d = model(**batch).logits, plain(**explicit).logits, plain(**batch).logits
        hidden = model.model(**{k: v for k, v in batch.items() if k != "labels"}).last_hidden_state
    torch.testing.assert_close(hooked, reference, atol=0, rtol=0)
    torch.testing.assert_close(model.lm_head(hidden), reference, atol=1e-5, rtol=1e-5)
    assert (hooked - one_d).abs().max() > 1e-4

    prompt = build_generation_prompt(tok, [{"role": "user", "content": "What colour is the square?"}],
                                     video_placeholder=spec.video_placeholder,
                                     video_token_id=model.config.video_token_id, video_token_count=count)
    inputs = {k: v[None] for k, v in prompt.items()}
    inputs.update(spec.collate_pixels([pixels]))
    kwargs = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True,
                  pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        ours = model.generate(**inputs, **kwargs)
        ref = plain.generate(**inputs, **spec.text_inputs(inputs["input_ids"], model.config), **kwargs)
    torch.testing.assert_close(torch.stack(ours.logits), torch.stack(ref.logits), atol=1e-5, rtol=1e-5)
    # The hooks survive copy.deepcopy and act on the copy (EMA / evaluation copies of the model).
    twin = copy.deepcopy(model)
    twin.model.rope_deltas = model.model.rope_deltas = None
    with torch.no_grad():
        copied = twin.generate(**inputs, **kwargs)
        twin.model.visual.merger.mlp[2].bias.add_(1.0)  # a copy, not an alias: only the copy changes
        changed = twin.generate(**inputs, **kwargs)
    torch.testing.assert_close(torch.stack(copied.logits), torch.stack(ref.logits), atol=1e-5, rtol=1e-5)
    assert model.model.rope_deltas is None and twin.model.rope_deltas is not None
    assert not torch.allclose(torch.stack(changed.logits), torch.stack(ref.logits))


# --------------------------------------------------------------------------------------
# Answer-only labels with the ChatML template
# --------------------------------------------------------------------------------------
def test_answer_only_masking_chatml(parts, spec):
    """Labels cover each answer plus "<|im_end|>" and the newline the template puts after it (the template's
    whole assistant-turn ending, as LLaMA-Factory's qwen template trains it); the tokens equal what
    Qwen2_5_VLProcessor makes of the rendered chat template (video token expanded in place)."""
    model, tok, prep = parts
    pixels = spec.frame_inputs(_frames(2, 64, 64), prep)
    count = spec.video_token_count(pixels, model.config)
    video_id = model.config.video_token_id
    messages = [
        {"role": "user", "content": "What colour is the square?"},
        {"role": "assistant", "content": "The square is yellow."},
        {"role": "user", "content": "Which direction does it move?"},
        {"role": "assistant", "content": "top to bottom"},
    ]
    ex = build_training_example(tok, messages, video_placeholder=spec.video_placeholder, video_token_id=video_id,
                                video_token_count=count)
    ids, labels = ex["input_ids"], ex["labels"]

    rendered = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": messages[0]["content"]}]},
         *messages[1:]], tokenize=False)
    expected = tok(rendered.replace(spec.video_token, spec.video_token * count), add_special_tokens=False)
    assert ids.tolist() == expected["input_ids"]
    assert (ids == video_id).sum() == count

    kept = labels != IGNORE_INDEX
    assert torch.equal(labels[kept], ids[kept])  # unmasked labels are the tokens themselves
    assert not kept[ids == video_id].any()
    # Token by token: the unmasked runs decode to answer + "<|im_end|>\n", in order.
    runs, current = [], []
    for token, keep in zip(ids.tolist(), kept.tolist()):
        if keep:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    assert [tok.decode(r) for r in runs] == ["The square is yellow.<|im_end|>\n", "top to bottom<|im_end|>\n"]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for run in runs:
        assert run[-2:] == [im_end, tok("\n", add_special_tokens=False)["input_ids"][0]]
    # Everything before the first answer (system, user turn, video, "<|im_start|>assistant\n") is masked.
    first = int(kept.nonzero()[0])
    assert tok.decode(ids[:first]).endswith("<|im_start|>assistant\n")


# --------------------------------------------------------------------------------------
# Time positions: the rate the frames were sampled at, in training, validation and the card
# --------------------------------------------------------------------------------------
def test_time_positions_follow_the_sampled_fps_in_training_validation_and_the_card(tiny, tmp_path, monkeypatch):
    """M-RoPE's time axis is second_per_grid_ts = temporal_patch_size / sampled fps, the sampled fps being
    num_frames / total_frames * stream fps (transformers' VideoMetadata.sampled_fps). 8 frames spread over a
    15 s clip are 0.533 fps (3.75 s per temporal patch), not the 2 fps (1 s) a fixed default assumes."""
    import transformers

    import dit_lora
    from dit_lora.config import TrainConfig
    from dit_lora.data.synthetic.clips import write_moving_square_clip
    from dit_lora.registry import get_family
    from dit_lora.families.videollm.data import QASample, read_clip
    from dit_lora.families.videollm.media import QADataset

    clips = {"long": write_moving_square_clip(tmp_path / "long.mp4", num_frames=60, fps=4),  # 15 s
             "short": write_moving_square_clip(tmp_path / "short.mp4", num_frames=16, fps=8)}  # 2 s
    seconds_per_patch = {"long": 2 / (8 / 60 * 4), "short": 2 / (8 / 16 * 8)}  # 3.75 and 0.5
    assert read_clip(clips["long"], 8).fps == pytest.approx(8 / 60 * 4)

    family = get_family("qwen2_5_vl")
    cfg = TrainConfig.for_family(family="qwen2_5_vl", pretrained_model_name_or_path=str(tiny), num_frames=8,
                      validation_prompt="What colour is the square?")
    processing = family.model.load_components(cfg, torch.device("cpu")).state.processing
    messages = [{"role": "user", "content": "What colour is the square?"}, {"role": "assistant", "content": "red"}]

    # Training: the dataset's items.
    samples = [QASample(name, path, messages) for name, path in clips.items()]
    dataset = QADataset(samples, processing, 8, None)
    for i, name in enumerate(clips):
        got = float(dataset[(i, False)]["pixels"]["second_per_grid_ts"])
        assert got == pytest.approx(seconds_per_patch[name], rel=1e-6), name

    # Validation: what the processing's answer hands to generate.
    seen = {}
    model = torch.nn.Linear(1, 1)
    model.generate = lambda **kw: seen.update(kw) or kw["input_ids"]
    processing.answer(model, "What colour is the square?", clips["long"], 8)
    assert seen["second_per_grid_ts"].tolist() == pytest.approx([seconds_per_patch["long"]], rel=1e-6)

    # The card's snippet, run as written on the tiny model (the adapter's loading stood in): dit_lora.answer_video
    # hands generate the frames training saw and the same seconds per temporal patch, without torchvision.
    calls = []
    model_class = getattr(transformers, family.model.arch.model_class)
    monkeypatch.setattr(model_class, "generate", lambda self, **kw: calls.append(kw) or kw["input_ids"])
    monkeypatch.setattr(dit_lora, "load_adapter", lambda *a, **k: None)
    (tmp_path / "card").mkdir()
    (tmp_path / "card" / "clip.mp4").write_bytes(clips["long"].read_bytes())
    monkeypatch.chdir(tmp_path / "card")
    snippet = family.card.usage_snippet(cfg, str(tmp_path / "out"))
    assert "AutoProcessor" not in snippet  # transformers' video processors need torchvision
    exec(compile(snippet, "snippet", "exec"), {})
    (call,) = calls
    assert call["second_per_grid_ts"].tolist() == pytest.approx([seconds_per_patch["long"]], rel=1e-6)
    assert torch.equal(call["pixel_values_videos"], seen["pixel_values_videos"])  # validation's frames, bit for bit
