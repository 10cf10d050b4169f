"""LLaVA-NeXT-Video spec: LoRA targets, loading, preprocessing, forward/backward (CPU, no downloads).

The chat prompts are tests/families/videollm/test_prompts.py's, the tiny model's folder test_demo_llava.py's.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from dit_lora.core.errors import UserError
from dit_lora.families.videollm.llava_next_video import LlavaNextVideoSpec
from dit_lora.families.videollm.prompts import (
    IGNORE_INDEX,
    build_training_example,
    pad_batch,
)

from conversations import MULTI, SINGLE

SPEC = LlavaNextVideoSpec()
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def prep(tiny_path):
    return SPEC.load_preprocessing(tiny_path)


def _frames(n: int = 4, height: int = 40, width: int = 48, seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (n, height, width, 3), dtype=np.uint8)


def _example(tokenizer, model, messages, count=16, **kwargs):
    return build_training_example(
        tokenizer,
        messages,
        video_placeholder=SPEC.video_placeholder,
        video_token_id=model.config.video_token_id,
        video_token_count=count,
        **kwargs,
    )


# --------------------------------------------------------------------------------------
# Spec: LoRA targets, loading, preprocessing
# --------------------------------------------------------------------------------------
def _lora_targets(model) -> set[str]:
    """The module names the family puts LoRA on (the language model's projections)."""
    from dit_lora.config import TrainConfig
    from dit_lora.registry import get_family

    return set(get_family("llava_next_video").model.lora_targets(model, TrainConfig(family="llava_next_video").lora))


def test_lora_targets_are_only_language_model_projections(model):
    targets = _lora_targets(model)
    names = [name for name, _ in model.named_modules()]
    matched = [name for name in names if name in targets]
    layers = model.config.text_config.num_hidden_layers
    expected = {
        f"model.language_model.layers.{i}.{block}.{proj}"
        for i in range(layers)
        for block, projs in (("self_attn", PROJECTIONS[:4]), ("mlp", PROJECTIONS[4:]))
        for proj in projs
    }
    assert set(matched) == expected and len(matched) == 7 * layers
    # The CLIP tower has q_proj/k_proj/v_proj too: none may match.
    vision_projs = [n for n in names if n.startswith(SPEC.vision_tower) and n.rsplit(".", 1)[-1] in PROJECTIONS]
    assert vision_projs and not any(n in targets for n in vision_projs)


def test_lora_targets_with_peft(tiny_path):
    from peft import LoraConfig, get_peft_model

    fresh = SPEC.load_model(tiny_path, torch.float32)
    peft_model = get_peft_model(fresh, LoraConfig(r=4, lora_alpha=4, target_modules=sorted(_lora_targets(fresh))))
    wrapped = {n for n, m in peft_model.named_modules() if hasattr(m, "lora_A")}
    assert len(wrapped) == 7 * fresh.config.text_config.num_hidden_layers
    assert all(".language_model.layers." in n for n in wrapped)


def test_load_model_and_tokenizer_need_local_folders(tiny_path, tmp_path):
    with pytest.raises(UserError, match="local"):
        SPEC.load_model("llava-hf/LLaVA-NeXT-Video-7B-hf", torch.float32)
    # A template only in the processor's chat_template.json is picked up.
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_path / name, folder / name)
    template = (tiny_path / "chat_template.jinja").read_text()
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": template}))
    assert SPEC.load_tokenizer(folder).chat_template == template
    (folder / "chat_template.json").unlink()
    with pytest.raises(UserError, match="no chat template"):
        SPEC.load_tokenizer(folder)


def test_load_preprocessing_reads_the_json(tiny_path, prep, tmp_path):
    raw = json.loads((tiny_path / "video_preprocessor_config.json").read_text())
    assert prep["image_mean"] == pytest.approx(raw["image_mean"])
    assert prep["image_std"] == pytest.approx(raw["image_std"])
    assert prep["shortest_edge"] == 32 and prep["crop_size"] == (32, 32)
    assert prep["rescale_factor"] == pytest.approx(1 / 255) and prep["resample"] == "bicubic"

    # The video processor's file wins over the image processor's; missing keys get defaults.
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.1, 0.2, 0.3], "crop_size": 20}))
    (tmp_path / "video_preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.5, 0.5, 0.5], "size": {"height": 24, "width": 30}}))
    custom = SPEC.load_preprocessing(tmp_path)
    assert custom["image_mean"] == (0.5, 0.5, 0.5) and custom["crop_size"] == (20, 20)
    assert custom["resize_to"] == (24, 30) and custom["shortest_edge"] is None
    assert custom["image_std"] == pytest.approx(SPEC.default_preprocessing["image_std"])
    assert SPEC.load_preprocessing(tmp_path / ".." / tmp_path.name)["crop_size"] == (20, 20)


def test_frame_inputs_normalise_and_crop(prep):
    frames = np.zeros((3, 40, 56, 3), dtype=np.uint8)
    frames[..., 0], frames[..., 1], frames[..., 2] = 255, 128, 0
    pixels = SPEC.frame_inputs(frames, prep)["pixel_values_videos"]
    assert pixels.shape == (3, 3, 32, 32) and pixels.dtype == torch.float32
    for c, value in enumerate((255, 128, 0)):  # a flat colour survives resize + crop exactly
        expected = (value / 255 - prep["image_mean"][c]) / prep["image_std"][c]
        assert torch.allclose(pixels[:, c], torch.full_like(pixels[:, c], expected), atol=1e-5)
    # Centre crop: a marker column in the middle of a wide frame stays in the middle.
    wide = np.zeros((1, 32, 64, 3), dtype=np.uint8)
    wide[:, :, 30:34] = 255
    out = SPEC.frame_inputs(wide, dict(prep, do_normalize=False))["pixel_values_videos"]
    assert out[0, 0, 0, 14:18].min() == pytest.approx(1.0) and out[0, 0, 0, :10].max() == 0.0
    with pytest.raises(ValueError, match="uint8"):
        SPEC.frame_inputs(frames.astype(np.float32), prep)


@pytest.mark.parametrize(
    "image_size,patch,stride,mode",
    [(32, 8, 2, "average"), (56, 8, 2, "max"), (40, 8, 3, "conv"), (56, 8, 4, "average")],
)
def test_video_token_count_matches_the_model(image_size, patch, stride, mode):
    """Odd grids (56 / 8 = 7) floor when pooled: 9 tokens a frame, not the processor's 49 // 4."""
    from transformers import CLIPVisionConfig, LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration, MistralConfig

    config = LlavaNextVideoConfig(
        vision_config=CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, image_size=image_size, patch_size=patch),
        text_config=MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  num_key_value_heads=1, head_dim=16, vocab_size=100),
        video_token_index=99, image_token_index=98, spatial_pool_mode=mode, spatial_pool_stride=stride,
    )
    torch.manual_seed(0)
    model = LlavaNextVideoForConditionalGeneration(config).eval()
    pixels = torch.randn(3, 3, image_size, image_size)
    count = SPEC.video_token_count({"pixel_values_videos": pixels}, config)
    assert count == 3 * ((image_size // patch) // stride) ** 2
    with torch.no_grad():
        for n in (count - 1, count, count + 1):
            ids = torch.tensor([[1] + [99] * n + [5, 6]])
            if n == count:
                model(input_ids=ids, pixel_values_videos=pixels[None])
            else:
                with pytest.raises(ValueError, match="do not match"):
                    model(input_ids=ids, pixel_values_videos=pixels[None])


def test_video_token_count_checks_the_frame_size(model):
    with pytest.raises(ValueError, match="vision tower takes 32x32"):
        SPEC.video_token_count({"pixel_values_videos": torch.zeros(2, 3, 48, 48)}, model.config)
    with pytest.raises(ValueError, match="equal shape"):
        SPEC.collate_pixels([{"pixel_values_videos": torch.zeros(2, 3, 32, 32)},
                             {"pixel_values_videos": torch.zeros(3, 3, 32, 32)}])


# --------------------------------------------------------------------------------------
# Forward / backward
# --------------------------------------------------------------------------------------
def _per_sample_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    losses = torch.nn.functional.cross_entropy(
        shift_logits.transpose(1, 2), shift_labels, ignore_index=IGNORE_INDEX, reduction="none")
    return losses.sum(1) / shift_labels.ne(IGNORE_INDEX).sum(1)


def test_forward_backward_and_padding(tiny_path, tokenizer, prep):
    model = SPEC.load_model(tiny_path, torch.float32)
    samples = []
    for seed, messages in ((0, SINGLE), (1, MULTI)):
        pixels = SPEC.frame_inputs(_frames(seed=seed), prep)
        count = SPEC.video_token_count(pixels, model.config)
        assert count == 4 * (32 // 8 // 2) ** 2
        samples.append((pixels, _example(tokenizer, model, messages, count=count)))

    out = model(**pad_batch([samples[0][1]], tokenizer.pad_token_id), **SPEC.collate_pixels([samples[0][0]]))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    lm_grad = SPEC.module(model, SPEC.language_model).layers[0].self_attn.q_proj.weight.grad
    vision_grad = next(SPEC.module(model, SPEC.projector).parameters()).grad
    assert lm_grad is not None and lm_grad.abs().sum() > 0 and vision_grad is not None
    model.zero_grad(set_to_none=True)

    model.eval()
    with torch.no_grad():
        batch = pad_batch([ex for _, ex in samples], tokenizer.pad_token_id)
        assert batch["input_ids"].shape[0] == 2 and batch["attention_mask"][0].eq(0).any()  # sample 0 is padded
        batched = model(**batch, **SPEC.collate_pixels([p for p, _ in samples])).logits
        batched_loss = _per_sample_loss(batched, batch["labels"])
        for row, (pixels, ex) in enumerate(samples):
            alone = model(**pad_batch([ex], tokenizer.pad_token_id), **SPEC.collate_pixels([pixels]))
            n = ex["input_ids"].shape[0]
            assert torch.allclose(batched[row, :n], alone.logits[0], atol=1e-4)
            assert torch.allclose(batched_loss[row], alone.loss, atol=1e-5)
