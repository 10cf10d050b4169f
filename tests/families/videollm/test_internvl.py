"""families/videollm/internvl.py: InternVL3.5's prompt is the processor's own, frames are sampled and timed by the
decoder's real rate, the token count is the model's, the vision tower is frozen or trained by the option, and the
placeholder mask reads no count from the device."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.internvl import IMAGENET_MEAN, InternVLSpec, frame_times
from videollm_tiny import QUESTION, tiny_fixtures

SPEC = InternVLSpec()
tiny, model, processing = tiny_fixtures(SPEC, "demo_internvl:build_tiny_internvl", "tiny-internvl")


def _processor_text(processing, frames: int) -> str:
    """The prompt as transformers' InternVLProcessor writes it: the template's rendering with its ``<video>``
    replaced by ``InternVLProcessor.replace_video_token`` (the processor's own code, called on its attributes)."""
    from transformers.models.internvl.processing_internvl import InternVLProcessor

    tok = processing.tokenizer
    owner = types.SimpleNamespace(start_image_token=tok.start_image_token, end_image_token=tok.end_image_token,
                                  image_token=tok.context_image_token,
                                  image_seq_length=SPEC.tokens_per_frame(processing.model_config))
    video = {"pixel_values_videos": [torch.zeros(frames, 3, 1, 1)]}
    replacement = InternVLProcessor.replace_video_token(owner, video, 0)
    parts = [{"type": "video"}, {"type": "text", "text": QUESTION[0]["content"]}]
    text = tok.apply_chat_template([{"role": "user", "content": parts}, QUESTION[1]], tokenize=False)
    assert text.count("<video>") == 1
    return text.replace("<video>", replacement)


def test_the_prompt_is_the_processors_own_tokens_and_only_answers_are_labelled(processing):
    frames = np.zeros((3, 40, 56, 3), dtype=np.uint8)
    pixels, count = processing.frame_inputs(frames, fps=4.0)
    assert pixels["pixel_values"].shape == (3, 3, 32, 32) and count == 3 * 4  # 4 tokens a frame in the tiny model
    example = processing.tokenize(QUESTION, count, None)
    text = _processor_text(processing, 3)
    assert "Frame1: <img>" in text and "</img>\nFrame2: <img>" in text and "</img>\nWhat colour" in text
    want = processing.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert example["input_ids"].tolist() == want  # InternVLProcessor's prompt, token for token
    labelled = processing.tokenizer.decode(example["input_ids"][example["labels"] != -100])
    assert labelled == "red<|im_end|>\n"  # the answer and its end of turn; frames, tags and question masked
    context = processing.model_config.image_token_id
    assert int((example["input_ids"] == context).sum()) == count
    from dit_lora.families.videollm.demo_qwen import build_tiny_qwen_tokenizer

    with pytest.raises(UserError, match="no <img>, </img>, <IMG_CONTEXT> token"):
        SPEC.video_prompt_ids(build_tiny_qwen_tokenizer(), count, processing.model_config)


def test_the_token_count_is_what_the_vision_tower_produces(model, processing):
    pixels, count = processing.frame_inputs(np.full((2, 32, 32, 3), 128, dtype=np.uint8))
    with torch.no_grad():
        features = model.model.get_image_features(pixel_values=pixels["pixel_values"]).pooler_output
    assert features.shape[:2] == (2, 4) and features.shape[0] * features.shape[1] == count
    assert SPEC.tokens_per_frame(types.SimpleNamespace(
        downsample_ratio=0.5, vision_config=types.SimpleNamespace(image_size=[448, 448], patch_size=[14, 14]))) == 256
    with pytest.raises(ValueError, match="cannot shuffle evenly"):
        SPEC.tokens_per_frame(model.config, 24)  # a 3 x 3 patch grid


def test_frames_and_times_follow_the_decoders_rate_never_an_assumed_one(tmp_path, processing):
    """Clips of the same 8 frames at 8 and 16 fps, and of 16 frames at 16 fps (the first clip's length): the frames
    are the centres of equal segments of what decodes (InternVL's get_index; transformers' InternVLVideoProcessor
    ``sample_frames`` with ``initial_shift=True``: ``arange(T / N / 2, T, T / N).int()``), their times come from
    the stream's own rate, and the prompt holds no time (InternVL3.5's has none)."""
    from dit_lora.data.synthetic.clips import write_moving_square_clip
    from dit_lora.families.videollm.data import read_clip, sample_frame_indices

    slow = read_clip(write_moving_square_clip(tmp_path / "a.mp4", num_frames=8, size=32, fps=8), 4)
    fast = read_clip(write_moving_square_clip(tmp_path / "b.mp4", num_frames=8, size=32, fps=16), 4)
    long = read_clip(write_moving_square_clip(tmp_path / "c.mp4", num_frames=16, size=32, fps=16), 4)
    def differ(a, b) -> float:
        return float(np.abs(a.frames.astype(int) - b.frames.astype(int)).mean())

    # the same frames (up to the encoder's noise, ~0.4/255): sampling is by the decoded count, not by time;
    # a square moving the other way differs by ~9/255
    assert differ(slow, fast) < 1.0
    assert (slow.fps, fast.fps, long.fps) == (4.0, 8.0, 4.0)  # 4 of 8 frames at 8 fps: a frame every 0.25 s
    assert frame_times(4, slow.fps) == [0.125, 0.375, 0.625, 0.875]
    assert frame_times(4, fast.fps) == [t / 2 for t in frame_times(4, slow.fps)]  # twice the rate: half the times
    assert frame_times(4, long.fps) == frame_times(4, slow.fps)  # twice the frames over the same second
    for total in (8, 16, 30, 97):
        want = torch.arange(total / 4 / 2, total, total / 4).int().tolist()
        assert sample_frame_indices(total, 4) == want
    assert frame_times(4, None) is None
    prompts = [processing.tokenize(QUESTION, processing.frame_inputs(c.frames, c.fps)[1], None)["input_ids"]
               for c in (slow, fast)]
    assert torch.equal(*prompts)


def test_preprocessing_reads_the_published_keys_and_refuses_a_size_it_cannot_use(tmp_path):
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({
        "size": {"height": 448, "width": 448}, "image_mean": list(IMAGENET_MEAN), "image_std": [0.229, 0.224, 0.225],
        "crop_size": None, "do_center_crop": None, "resample": 3, "video_processor_type": "InternVLVideoProcessor"}))
    prep = SPEC.load_preprocessing(tmp_path)
    assert prep["resize_to"] == (448, 448) and prep["crop_size"] is None and not prep["do_center_crop"]
    frames = SPEC.frame_inputs(np.zeros((2, 30, 50, 3), dtype=np.uint8), prep)["pixel_values"]
    assert frames.shape == (2, 3, 448, 448)  # every frame resized to the tile, the aspect ratio not kept
    assert torch.allclose(frames[0, :, 0, 0], -torch.tensor(IMAGENET_MEAN) / torch.tensor([0.229, 0.224, 0.225]))
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({"size": {"longest_edge": 448}}))
    with pytest.raises(UserError, match="InternVL needs"):
        SPEC.load_preprocessing(tmp_path)


def test_the_vision_tower_trains_only_on_request_and_lora_stays_in_the_language_model(model):
    from dit_lora.config import TrainConfig
    from dit_lora.families.videollm.loading import VideoLLMModel, VideoLLMTrainables

    names = [n for n, _ in model.named_parameters()]
    frozen, trained = (TrainConfig.for_family("internvl", train_vision_tower=v) for v in (False, True))
    trainables = VideoLLMTrainables(SPEC)
    assert trainables.extra_trainable(frozen.family_options) == []
    (_, patterns, _), = trainables.extra_trainable(trained.family_options)
    import re

    tower = [n for n in names if re.fullmatch(patterns[0], n)]
    assert tower and all(n.startswith("model.vision_tower.") for n in tower)
    projector = [n for n in names if re.fullmatch(trainables.backbone_patterns(frozen.lora, frozen.family_options)[0], n)]
    assert {n.rsplit(".", 2)[-2] for n in projector} == {"layer_norm", "linear_1", "linear_2"}
    targets = VideoLLMModel(SPEC).lora_targets(model, frozen.lora)
    assert targets and all(t.startswith("model.language_model.layers.") for t in targets)


def test_the_placeholder_mask_is_the_token_comparison_alone(model, processing):
    """transformers' get_placeholder_mask checks the count through the device; ours compares the ids only, and the
    loading wrapper that drops the features (loading.skip_placeholder_count_check) still works with it."""
    from dit_lora.families.videollm.loading import skip_placeholder_count_check

    skip_placeholder_count_check(model)
    ids = torch.tensor([[1, model.config.image_token_id, 2]])
    embeds = torch.zeros(1, 3, 8)
    mask = model.model.get_placeholder_mask(ids, inputs_embeds=embeds, image_features=torch.zeros(5, 8))
    assert mask.shape == (1, 3, 1) and mask[0, :, 0].tolist() == [False, True, False]  # 5 features: never checked
    assert SPEC.prepare_model(model) is model  # once per model


def test_liger_patches_the_qwen3_language_model(model, monkeypatch):
    """The language model's model_type is qwen3: --use_liger_kernel takes Liger's Qwen3 patch (faked here: Liger's
    Triton kernels need a CUDA GPU) on the language model only, and the fused linear cross-entropy."""
    import sys

    from dit_lora.families.videollm import liger

    seen = {}
    fake = types.ModuleType("liger_kernel.transformers")
    fake.apply_liger_kernel_to_qwen3 = lambda **kw: seen.update(kw)  # type: ignore[attr-defined]
    fake.LigerFusedLinearCrossEntropyLoss = lambda ignore_index: "fused"  # type: ignore[attr-defined]
    package = types.ModuleType("liger_kernel")
    package.transformers = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "liger_kernel", package)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", fake)
    monkeypatch.setattr(liger, "liger_unavailable_reason", lambda device: None)
    notes: list[str] = []
    assert liger.apply_liger(SPEC, model, notes.append) is not None
    assert seen["model"] is model.model.language_model and seen["rms_norm"] and seen["swiglu"] and seen["rope"]
    assert "qwen3 language model" in notes[0]
