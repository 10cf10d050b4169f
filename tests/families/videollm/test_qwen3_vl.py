"""families/videollm/qwen3_vl.py: Qwen3-VL's prompt is the processor's own with each patch's time from the decoded
frames, a clip at another rate moves the times and the positions, the M-RoPE positions are the model's own, the
pixels are the video processor's, the tower and DeepStack train only by the option, and Liger's Qwen3-VL patch."""

from __future__ import annotations

import ast
import json
import math
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.qwen3_vl import Qwen3VLSpec, patch_times, video_smart_resize
from videollm_tiny import QUESTION, tiny_fixtures

SPEC = Qwen3VLSpec()
_QWEN3_VL = Path(__import__("transformers").__file__).parent / "models" / "qwen3_vl"
tiny, model, processing = tiny_fixtures(SPEC, "demo_qwen3_vl:build_tiny_qwen3_vl", "tiny-qwen3-vl")


def _transformers_function(file: str, name: str, **namespace):
    """A function of transformers' Qwen3-VL video processor, its own source (the module imports torchvision, which
    dit-lora does not need), compiled here."""
    tree = ast.parse((_QWEN3_VL / file).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    scope = dict(namespace)
    exec(compile(ast.Module([node], []), file, "exec"), scope)  # noqa: S102 - transformers' own code
    return scope[name]


def _processor_text(processing, grid_t: int, indices: list[int], fps: float) -> str:
    """The prompt as transformers' Qwen3VLProcessor writes it: the template's rendering with ``<|video_pad|>``
    replaced (the only token ProcessorMixin.get_text_with_replacements replaces) by ``replace_video_token``."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.video_utils import VideoMetadata

    owner = types.SimpleNamespace(video_processor=types.SimpleNamespace(merge_size=2, temporal_patch_size=2),
                                  vision_start_token="<|vision_start|>", vision_end_token="<|vision_end|>",
                                  video_token="<|video_pad|>")
    owner._calculate_timestamps = types.MethodType(Qwen3VLProcessor._calculate_timestamps, owner)
    video = {"video_grid_thw": torch.tensor([[grid_t, 4, 4]]),
             "video_metadata": [VideoMetadata(total_num_frames=max(indices) + 1, fps=fps, frames_indices=indices)]}
    replacement = Qwen3VLProcessor.replace_video_token(owner, video, 0)
    parts = [{"type": "video"}, {"type": "text", "text": QUESTION[0]["content"]}]
    text = processing.tokenizer.apply_chat_template([{"role": "user", "content": parts}, QUESTION[1]], tokenize=False)
    assert text.count("<|video_pad|>") == 1
    return text.replace("<|video_pad|>", replacement)


def test_the_prompt_is_the_processors_own_tokens_with_the_decoders_times(processing):
    frames = np.zeros((4, 64, 64, 3), dtype=np.uint8)
    pixels, count = processing.frame_inputs(frames)
    assert pixels["video_grid_thw"].tolist() == [2, 4, 4] and count == 2 * 4
    indices, fps = [3, 10, 18, 25], 10.0  # four frames of a 10 fps stream
    example = processing.tokenize(QUESTION, count, None, [i / fps for i in indices])
    text = _processor_text(processing, 2, indices, fps)
    assert "<|vision_start|><0.7 seconds><|vision_start|><|video_pad|>" in text and "<2.1 seconds>" in text
    assert example["input_ids"].tolist() == processing.tokenizer(text, add_special_tokens=False)["input_ids"]
    labelled = processing.tokenizer.decode(example["input_ids"][example["labels"] != -100])
    assert labelled == "red<|im_end|>\n"  # the answer and its end of turn; times, frames and question masked
    assert int((example["input_ids"] == processing.model_config.video_token_id).sum()) == count
    with pytest.raises(UserError, match="states no frame rate"):
        processing.tokenize(QUESTION, count, None, None)  # transformers would assume 24 fps: refused instead
    assert patch_times([0.0, 1.0, 2.0], 2) == [0.5, 2.0]  # the last frame repeated up to a whole patch


def test_a_clip_at_another_rate_moves_the_times_and_the_positions(tmp_path, model, processing):
    """The same 16 frames at 1 and 16 fps: the same pixels, times 16 times apart in the prompt, and past the
    ten-second mark one more digit, so every later token's M-RoPE position moves by one."""
    from dit_lora.data.synthetic.clips import write_moving_square_clip
    from dit_lora.families.videollm.data import read_clip

    slow = read_clip(write_moving_square_clip(tmp_path / "a.mp4", num_frames=16, size=64, fps=1), 4)
    fast = read_clip(write_moving_square_clip(tmp_path / "b.mp4", num_frames=16, size=64, fps=16), 4)
    assert slow.times == (2.0, 6.0, 10.0, 14.0) and fast.times == tuple(t / 16 for t in slow.times)
    prompts = []
    for clip in (slow, fast):
        pixels, count = processing.frame_inputs(clip.frames, clip.fps)
        ids = processing.tokenize(QUESTION, count, None, clip.times)["input_ids"][None]
        positions, _ = model.model.get_rope_index(ids, SPEC.mm_token_type_ids(ids, model.config),
                                                  video_grid_thw=pixels["video_grid_thw"][None])
        prompts.append((processing.tokenizer.decode(ids[0]), positions))
    (slow_text, slow_pos), (fast_text, fast_pos) = prompts
    assert "<4.0 seconds>" in slow_text and "<12.0 seconds>" in slow_text
    assert "<0.2 seconds>" in fast_text and "<0.8 seconds>" in fast_text
    assert slow_pos.shape[-1] == fast_pos.shape[-1] + 1  # "12.0" is one token longer than "0.8"
    assert int(slow_pos[0, 0, -1]) == int(fast_pos[0, 0, -1]) + 1


def test_the_hook_gives_the_models_own_mrope_positions(model, processing):
    """transformers raises without mm_token_type_ids; the hook fills them as the processor does, and the forward
    equals one given the processor's types and the positions get_rope_index computes (one grid per patch)."""
    pixels, count = processing.frame_inputs(np.full((4, 64, 64, 3), 90, dtype=np.uint8))
    ids = processing.tokenize(QUESTION, count, None, [0.0, 0.5, 1.0, 1.5])["input_ids"][None]
    grid = pixels["video_grid_thw"][None]
    types_ = SPEC.mm_token_type_ids(ids, model.config)
    assert types_.tolist()[0] == [2 if t == model.config.video_token_id else 0 for t in ids[0].tolist()]
    positions, _ = model.model.get_rope_index(ids, types_, video_grid_thw=grid)
    video = (ids[0] == model.config.video_token_id).nonzero().flatten()
    first, second = video[:4], video[4:]
    assert positions[0, 0, first].unique().numel() == 1 and positions[0, 0, second].unique().numel() == 1
    assert positions[1, 0, first].tolist() == [int(positions[0, 0, first[0]])] * 2 + [int(positions[0, 0, first[0]]) + 1] * 2
    with torch.no_grad():
        hooked = model(input_ids=ids, **pixels | {"video_grid_thw": grid}).logits
        explicit = model(input_ids=ids, mm_token_type_ids=types_, pixel_values_videos=pixels["pixel_values_videos"],
                         video_grid_thw=grid, position_ids=positions).logits
    torch.testing.assert_close(hooked, explicit)


def test_pixels_and_sizes_are_the_video_processors(model, processing):
    resize = _transformers_function("video_processing_qwen3_vl.py", "smart_resize", math=math)
    for frames, h, w in [(8, 64, 64), (4, 480, 640), (9, 20, 300), (2, 1080, 1920)]:
        for budget in (4096, 32768, 786432):
            assert video_smart_resize(frames, h, w, 2, 32, 4096, budget) == resize(frames, h, w, 2, 32, 4096, budget)
    patchify = _transformers_function("video_processing_qwen3_vl.py", "patchify", torch=torch)
    clip = np.random.default_rng(0).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
    pixels, count = processing.frame_inputs(clip)
    video = (torch.from_numpy(clip).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5
    want, t, gh, gw = patchify(None, video[None], 16, 2, 2)
    torch.testing.assert_close(pixels["pixel_values_videos"], want[0])
    assert pixels["video_grid_thw"].tolist() == [t, gh, gw] == [2, 4, 4]
    with torch.no_grad():
        out = model.model.get_video_features(pixels["pixel_values_videos"], pixels["video_grid_thw"][None])
    assert out.pooler_output[0].shape[0] == count and len(out.deepstack_features) == 1  # DeepStack kept


def test_preprocessing_reads_the_published_keys(tmp_path):
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({
        "size": {"shortest_edge": 4096, "longest_edge": 25165824}, "patch_size": 16, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3, "cap_pixels_per_frame": True, "video_processor_type": "Qwen3VLVideoProcessor"}))
    prep = SPEC.load_preprocessing(tmp_path)
    assert (prep["min_pixels"], prep["max_pixels"], prep["patch_size"]) == (4096, 25165824, 16)
    assert prep["cap_pixels_per_frame"] and "fps" not in prep
    # capped (qwen-vl-utils): at most 768 x 32 x 32 pixels a frame, whatever the clip-wide budget allows; by hand:
    # 8 frames of 1088 x 1920 exceed 8 x 786432, scaled by sqrt(8 x 1080 x 1920 / 6291456) and floored to 32 px
    assert SPEC.resized_clip_size(8, 1080, 1920, prep) == (640, 1152) and 640 * 1152 <= 768 * 32 * 32
    prep["cap_pixels_per_frame"] = False
    assert SPEC.resized_clip_size(8, 1080, 1920, prep) == (1088, 1920)


def test_the_vision_tower_and_deepstack_train_only_on_request(model):
    import re

    from dit_lora.config import TrainConfig
    from dit_lora.families.videollm.loading import VideoLLMModel, VideoLLMTrainables

    names = [n for n, _ in model.named_parameters()]
    frozen, trained = (TrainConfig.for_family("qwen3_vl", train_vision_tower=v) for v in (False, True))
    trainables = VideoLLMTrainables(SPEC)
    assert trainables.extra_trainable(frozen.family_options) == []
    (_, patterns, _), = trainables.extra_trainable(trained.family_options)
    tower = [n for n in names if re.fullmatch(patterns[0], n)]
    assert any(".deepstack_merger_list." in n for n in tower) and any(".blocks." in n for n in tower)
    projector = [n for n in names if re.fullmatch(trainables.backbone_patterns(frozen.lora, frozen.family_options)[0], n)]
    assert projector and all(n.startswith("model.visual.merger.") for n in projector)
    targets = VideoLLMModel(SPEC).lora_targets(model, frozen.lora)
    assert targets and all(t.startswith("model.language_model.layers.") for t in targets)


def test_liger_takes_its_qwen3_vl_patch_on_the_language_model(model, monkeypatch):
    """The language model's model_type is qwen3_vl_text, Liger's patch is apply_liger_kernel_to_qwen3_vl (faked:
    Triton needs a CUDA GPU); it patches RMSNorm (q/k norms too) and RoPE, no MLP, so the note says so."""
    import sys

    from dit_lora.families.videollm import liger

    seen = {}
    fake = types.ModuleType("liger_kernel.transformers")
    fake.apply_liger_kernel_to_qwen3_vl = lambda **kw: seen.update(kw)  # type: ignore[attr-defined]
    fake.LigerFusedLinearCrossEntropyLoss = lambda ignore_index: "fused"  # type: ignore[attr-defined]
    package = types.ModuleType("liger_kernel")
    package.transformers = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", fake)
    monkeypatch.setattr(liger, "liger_unavailable_reason", lambda device: None)
    notes: list[str] = []
    assert model.config.text_config.model_type == "qwen3_vl_text"
    assert liger.apply_liger(SPEC, model, notes.append) is not None
    assert seen["model"] is model.model.language_model and seen["rms_norm"] and seen["rope"] and not seen["swiglu"]
    assert notes == ["Liger-Kernel applied to the qwen3_vl language model (RMSNorm, RoPE, fused linear cross-entropy)."]
