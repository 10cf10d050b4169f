"""The captioner, per video-LLM family: loaded as the family trains it, its batched captions equal to what the
model's own ``generate`` gives for each file's frames and prompt alone (greedy), images and clips alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dit_lora.captioning.captioner import captioner_config, captioners, check_adapter, load_captioner
from dit_lora.captioning.media import MediaFile, read_media
from dit_lora.core.errors import UserError
from dit_lora.data.synthetic.clips import write_moving_square_clip
from dit_lora.families.videollm.spec import ARCHITECTURES, build_demo_model
from dit_lora.families.videollm.prompts import build_generation_prompt

PROMPT = "Describe this in a few words."
NEW_TOKENS = 6


def test_every_video_llm_family_captions():
    assert set(captioners()) == set(ARCHITECTURES)


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> list[MediaFile]:
    from PIL import Image

    root = tmp_path_factory.mktemp("media")
    rng = np.random.default_rng(0)
    for name, size in (("wide.png", (40, 72)), ("tall.png", (70, 36))):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / name)
    write_moving_square_clip(root / "red.mp4", color="red", direction="left to right", num_frames=8, size=32)
    write_moving_square_clip(root / "blue.mp4", color="blue", direction="top to bottom", num_frames=12, size=48)
    return [MediaFile(name, root / name) for name in ("wide.png", "tall.png", "red.mp4", "blue.mp4")]


def _own_generate(model, processing, clip, prompt: str) -> str:
    """The model's own generate on one file: its prompt and pixels as the family's processing builds them (what the
    family's validation answers with), no padding, no batch."""
    spec, tok = processing.spec, processing.tokenizer
    pixels, count = processing.frame_inputs(clip.frames, clip.fps)
    tokens = build_generation_prompt(
        tok, [{"role": "user", "content": prompt}], video_placeholder=spec.video_placeholder,
        video_token_id=tok.convert_tokens_to_ids(spec.video_token), video_token_count=count,
        video_ids=spec.video_prompt_ids(tok, count, processing.model_config, clip.times))
    inputs = {k: v[None] for k, v in tokens.items()} | spec.collate_pixels([pixels])
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=processing.pad_token_id)
    return tok.decode(out[0, tokens["input_ids"].shape[0]:], skip_special_tokens=True).strip()


@pytest.mark.parametrize("family", list(ARCHITECTURES))
def test_batched_captions_equal_the_models_own_generate_per_file(family, media, tmp_path_factory):
    folder = build_demo_model(family, tmp_path_factory.mktemp(family) / "tiny")
    cfg = captioner_config(str(folder), family=None, quantize_base=None, mixed_precision="no", num_frames=4)
    assert cfg.model.family == family  # told by the folder
    captioner = load_captioner(cfg, torch.device("cpu"), None, NEW_TOKENS)
    assert not captioner.model.training and not any(p.requires_grad for p in captioner.model.parameters())
    clips = [read_media(item, 4) for item in media]
    for batch in (clips[:2], clips[2:]):  # images together, clips together (a batch is one kind)
        captions = captioner.caption(batch, [PROMPT] * len(batch))
        expected = [_own_generate(captioner.model, captioner.processing, clip, PROMPT) for clip in batch]
        assert [c.text for c in captions] == expected
        assert all(c.text for c in captions)


def test_a_diffusion_model_is_refused_as_a_captioner(tmp_path):
    from dit_lora.families.sana.demo import build_tiny_sana_pipeline

    folder = build_tiny_sana_pipeline(tmp_path / "sana")
    with pytest.raises(UserError, match="does not caption: the captioner is a video LLM"):
        captioner_config(str(folder), family=None, quantize_base=None, mixed_precision="no", num_frames=4)


def test_an_adapter_of_another_family_or_no_adapter_is_refused(tmp_path):
    with pytest.raises(UserError, match="no adapter here"):
        check_adapter(tmp_path, "qwen2_5_vl")
    (tmp_path / "train_summary.json").write_text('{"family": "internvl"}')
    with pytest.raises(UserError, match="trained on a internvl model, but the captioner"):
        check_adapter(tmp_path, "qwen2_5_vl")
    check_adapter(tmp_path, "internvl")
    (tmp_path / "train_summary.json").write_text('{"family": "wan"}')
    with pytest.raises(UserError, match="trained for wan, a model that makes images or clips, not captions"):
        check_adapter(tmp_path, "qwen2_5_vl")


def test_a_clip_that_qwen3_vl_cannot_time_fails_alone(tmp_path):
    """Qwen3-VL writes every frame's second; a clip without a frame rate cannot be prompted (one paragraph)."""
    from dit_lora.families.videollm.frames import SampledClip

    folder = build_demo_model("qwen3_vl", tmp_path / "tiny")
    cfg = captioner_config(str(folder), family=None, quantize_base=None, mixed_precision="no", num_frames=2)
    captioner = load_captioner(cfg, torch.device("cpu"), None, 2)
    untimed = SampledClip(np.zeros((2, 32, 32, 3), dtype=np.uint8), None, None)
    with pytest.raises(UserError, match="no frame rate"):
        captioner.prompt_inputs(untimed, PROMPT)
    assert Path(folder).is_dir()
